"""The GEMM scan: a layer whose recurrent weights fit on no chip, at a batch where a step is work
enough for the tensor cores, as a GEMM and an update a step (cuDNN's STANDARD algorithm does the
same, with cuBLAS).

A persistent kernel that reads part of its weights from global memory each step multiplies them
on the FMA units (Config.global_runs); at fp32 LSTM H=1280 B=128 its step took 89 us on the H200,
and cuDNN's whole layer ran 1.15x faster than ours. Here each step is projection_mma's
tensor-core GEMM (3xTF32 for fp32: fp32 accuracy), every SM reading the weights from L2: 65 us.

Read top to bottom:
    start      R^T of each direction into the exchange buffer (the GEMM's w_t, (H, G*H) row-major,
               32 x 32 tiles through shared memory); h(-1) into slot 0 and the final states'
               start (scan_states.py);
    the steps  a host loop over t launching, per step, the GEMM of each direction,
               gates = h(t-1) R^T + Rb (M = B rows, K = H, N = G*H; STEP_PLAN, in the
               CTA tiles that the planner gives, gemm_scan_cost.step_plan),
               then one update launch, a thread per (direction, batch row, unit): the cell
               equations from the gates and xw(t); h(t) over h(t-1), whose GEMM has finished;
               Y(t), Y_h, Y_c (zero Y and a kept state past a row's length, as streamed.py).
The exchange buffer holds, in float words: h (D, B, H) in slot 0, the gates (D, B, G*H) after
it, then R^T (D, H, G*H): `gemm_scan_slots` slots of D*B*H words.

A 16-bit layer built for sm_90a runs the step's GEMM on the wgmma tensor cores instead (`wgmma`,
gemm_scan_cost.wgmma_step): the start packs R into 16-bit pairs after the states' start (R, (G*H,
H), is the GEMM's w_t transposed, as the wgmma GEMM reads it), the GEMM (projection_wgmma's
`split_k_launch`) writes each split of K's partial sums to a place of its own, and the update, a
thread per pair of units, adds them in order and writes h(t) in 16-bit pairs too. Its exchange
buffer holds h, each split's gates (D, splits * B, G*H), h(t-1) and R in pairs.

GRU with linear_before_reset=0 multiplies r * h(t-1) by R_h, a second GEMM after the reset gate's
update; the scan does not take it (`gemm_scan_problem`). `emulate=True` is the CPU twin: launches
as serial loops, the GEMM's products as the mma defines them (projection_mma's twin).
"""
from __future__ import annotations

import math

import tvm
from tvm.script import tirx as T

from . import cells, scan_states
from .early_launch import EARLY_LAUNCH, after_previous_kernel
from .persistent.dot_mma import f16_pair
from .projection_mma import gemm_launch
from .projection_wgmma import WGMMA_PLAN, split_k_launch, split_k_problem
from .signature import recurrence_func, time_index
from .spec import CellSpec

#: lowering name in the layer's report
GEMM_SCAN = "gemm_scan"
#: threads per CTA of the update
UPDATE_THREADS = 256
#: the transpose's tile (TILE x TILE values, TILE x ROWS threads)
TILE, ROWS = 32, 8
#: the GEMM's precision for a layer's dtype (fp32: 3xTF32, fp32 accuracy; "tf32" builds: TF32)
GEMM_PRECISIONS = {"float32": "3xtf32", "float16": "f16", "bfloat16": "bf16"}


def gemm_scan_problem(spec: CellSpec, batch: int | None) -> str:
    """Why the GEMM scan cannot run `spec` at `batch` (empty when it can)."""
    if spec.cell == "gru" and not spec.linear_before_reset:
        return "GRU with linear_before_reset=0 needs r * h(t-1) before its candidate's GEMM"
    if batch is None:
        return "the batch is known only at run time (the exchange buffer holds R^T in slots of B rows)"
    if spec.hidden_size % 4:
        return f"hidden_size {spec.hidden_size} is not a multiple of 4 (the GEMM's 16-byte loads)"
    return ""


def gemm_scan_slots(spec: CellSpec, batch: int, wgmma: dict | None = None) -> int:
    """Slots of D*B*H words the scan's exchange buffer needs: h, the gates, R^T; with the `wgmma`
    step: h, each split's gates, h(t-1) and R in 16-bit pairs."""
    G, H = spec.num_gates, spec.hidden_size
    if wgmma:
        return 1 + wgmma["splits"] * G + math.ceil((batch + G * H) / (2 * batch))
    return 1 + G + math.ceil(G * H / batch)


def wgmma_step_problem(spec: CellSpec, wgmma: dict) -> str:
    """Why the wgmma step GEMM (`wgmma`: {"bm", "tile_n", "splits"} and optionally "stages", its
    ring's k-tiles, else WGMMA_PLAN's; projection_wgmma's `split_k_launch`) cannot run `spec`'s
    steps (empty when it can): 16-bit layers only, whose R is 16-bit values already and whose
    persistent steps round h(t-1) to the same 16 bits."""
    if spec.dtype not in ("float16", "bfloat16"):
        return f"the wgmma step takes fp16 and bf16 layers, not {spec.dtype}"
    H, GH = spec.hidden_size, spec.num_gates * spec.hidden_size
    if H % 8:
        return f"hidden_size {H} is not a multiple of 8 (h(t-1)'s rows are copied in 16-byte chunks)"
    return split_k_problem(H, GH, wgmma["bm"], wgmma["tile_n"], wgmma["splits"], ring_stages(wgmma))


def ring_stages(wgmma: dict) -> int:
    """The k-tiles the ring of the wgmma step plan `wgmma` holds: its "stages", else WGMMA_PLAN's."""
    return wgmma.get("stages", WGMMA_PLAN["stages"])


def gemm_precision(spec: CellSpec, precision: str = "fp32") -> str:
    """projection_mma's precision for the step's GEMM: the layer's 16 bits (h(t-1) rounded to
    them, as the persistent kernels' 16-bit mma rounds it), else 3xTF32 (TF32 in a "tf32" build)."""
    if spec.dtype == "float32" and precision == "tf32":
        return "tf32"
    return GEMM_PRECISIONS[spec.dtype]


#: the step GEMM's plan: 64 x 64 tiles (wider where that fills one wave: gemm_scan_cost.step_plan)
#: of 64-column k-tiles, each shared by two groups of 4 warps. Kernels alone on the H200
#: (docs/data/gemm-scan-h200.jsonl, run B), against `gemm_plan`'s for B rows: LSTM H=1280 B=128
#: fp32 65.3 against 74.0 us a step, bf16 LSTM H=4096 B=16 94.9 against 141.4, the same elsewhere
#: (its rule for one wave); within 1.12x of the best of 9 plans on 8 layers
STEP_PLAN = {"bk": 64, "k_groups": 2, "stages": 0}


def gemm_scan(spec: CellSpec, batch: int, precision: str = "fp32", emulate: bool = False,
              plan: dict | None = None, early_launch: bool = False, wgmma: dict | None = None) -> tvm.tirx.PrimFunc:
    """The GEMM scan of `spec` at `batch` rows (its serial CPU twin: `emulate`), the GEMM at
    `gemm_precision(spec, precision)` in `plan` (projection_mma's plan dict; default STEP_PLAN),
    or, for a 16-bit layer on sm_90a, on the wgmma tensor cores (`wgmma`: {"bm", "tile_n",
    "splits"}, gemm_scan_cost.wgmma_step; `wgmma_step_problem`). Each of its kernels lets the next
    start and then waits for the one before, touching nothing until then; `early_launch` (sm_90
    on) asks TVM's runtime to launch them so (early_launch.py), each CTA placed while the kernel
    ahead finishes."""
    problem = gemm_scan_problem(spec, batch) or (wgmma_step_problem(spec, wgmma) if wgmma else "")
    if problem:
        raise ValueError(f"the GEMM scan cannot run this layer: {problem}")
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    GH = G * H
    lstm = spec.cell == "lstm"
    mma = gemm_precision(spec, precision)
    on_wgmma = bool(wgmma)
    splits = wgmma["splits"] if on_wgmma else 1
    if on_wgmma:
        gemm = split_k_launch(H, GH, mma, wgmma["bm"], wgmma["tile_n"], splits, emulate, early=True,
                              stages=ring_stages(wgmma))
    else:
        gemm = gemm_launch(H, GH, mma, plan or STEP_PLAN, emulate, early=True)
    start = scan_states.initial_states(spec, emulate, early=True)
    bf16 = spec.dtype == "bfloat16"

    def gates_at(n_b):
        """The first word of the gates (after h)."""
        return D * n_b * H

    def weights_at(n_b):
        """The first word of R^T (after the gates)."""
        return (1 + G) * D * n_b * H

    def h16_at(n_b):
        """wgmma: the first word of h(t-1) in 16-bit pairs (after each split's gates)."""
        return (1 + splits * G) * D * n_b * H

    def r16_at(n_b):
        """wgmma: the first word of R in 16-bit pairs (after h(t-1)'s)."""
        return h16_at(n_b) + D * n_b * H // 2

    def packed_words(n_b):
        """wgmma: the words of R and of h(-1) that the start packs into 16-bit pairs."""
        return D * GH * (H // 2) + D * n_b * (H // 2)

    def update_threads(n_b):
        """The update's threads: one a (direction, batch row, unit), a pair of units on wgmma."""
        return D * n_b * H // 2 if on_wgmma else D * n_b * H

    def gate_sum(hf, n_b, dd, b, g, j):
        """The step's gate g of direction dd at (batch row b, unit j): its splits' partial sums."""
        if splits == 1:
            return hf[gates_at(n_b) + (dd * n_b + b) * GH + g * H + j]
        at = gates_at(n_b) + (dd * splits * n_b + b) * GH + g * H + j
        total = hf[at]
        for split in range(1, splits):
            total = total + hf[at + split * n_b * GH]
        return total

    @T.macro
    def transpose_tile(r, hf, n_b, dd, k0, n0, ty, tx, tile):
        """R[dd]'s 32 x 32 tile at (gate row n0, column k0) into R^T: read along k, written along n."""
        for q in T.unroll(TILE // ROWS):
            if T.And(n0 + ty + q * ROWS < GH, k0 + tx < H):
                tile[ty + q * ROWS, tx] = r[dd, n0 + ty + q * ROWS, k0 + tx]
        T.tvm_storage_sync("shared")
        for q in T.unroll(TILE // ROWS):
            if T.And(k0 + ty + q * ROWS < H, n0 + tx < GH):
                hf[weights_at(n_b) + (dd * H + k0 + ty + q * ROWS) * GH + n0 + tx] = tile[tx, ty + q * ROWS]

    @T.macro
    def transpose(r, hf, n_b):
        """R^T of every direction into its place in the exchange buffer."""
        if emulate:
            for dd, k, n in T.grid(D, H, GH):
                hf[weights_at(n_b) + (dd * H + k) * GH + n] = r[dd, n, k]
        else:
            for blk in T.thread_binding(D * ((H + TILE - 1) // TILE) * ((GH + TILE - 1) // TILE), thread="blockIdx.x"):
                for tx in T.thread_binding(TILE, thread="threadIdx.x"):
                    for ty in T.thread_binding(ROWS, thread="threadIdx.y"):
                        after_previous_kernel()
                        tile = T.alloc_buffer((TILE, TILE + 1), "float32", scope="shared")  # +1: no bank conflicts
                        n_tiles = (GH + TILE - 1) // TILE
                        k_tiles = (H + TILE - 1) // TILE
                        transpose_tile(r, hf, n_b, blk // (k_tiles * n_tiles), blk // n_tiles % k_tiles * TILE,
                                       blk % n_tiles * TILE, ty, tx, tile)

    @T.macro
    def pack_word(r, hb, hf, n_b, i):
        """wgmma: word i of R in 16-bit pairs ((D, G*H, H / 2), the step GEMM's w as it lies: R is
        w_t transposed), then of h(t-1)'s ((D, B, H / 2), from slot 0)."""
        if i < D * GH * (H // 2):
            dd = i // (GH * (H // 2))
            n = i // (H // 2) % GH
            k = i % (H // 2) * 2
            hf[r16_at(n_b) + i] = T.reinterpret("float32", f16_pair(r[dd, n, k], r[dd, n, k + 1], bf16))
        elif i < packed_words(n_b):
            w = i - D * GH * (H // 2)
            dd = w // (n_b * (H // 2))
            b = w // (H // 2) % n_b
            k = w % (H // 2) * 2
            hf[h16_at(n_b) + w] = T.reinterpret("float32", f16_pair(hb[0, dd, b, k], hb[0, dd, b, k + 1], bf16))

    @T.macro
    def pack(r, hb, hf, n_b):
        """wgmma: R and h(-1) in 16-bit pairs into their places in the exchange buffer."""
        if emulate:
            for i in range(packed_words(n_b)):
                pack_word(r, hb, hf, n_b, i)
        else:
            for blk in T.thread_binding((packed_words(n_b) + UPDATE_THREADS - 1) // UPDATE_THREADS, thread="blockIdx.x"):
                for tx in T.thread_binding(UPDATE_THREADS, thread="threadIdx.x"):
                    after_previous_kernel()
                    pack_word(r, hb, hf, n_b, blk * UPDATE_THREADS + tx)

    @T.macro
    def step_gemm(rb, hb, n_b, dd):
        """gates[dd] = h(t-1)[dd] R[dd]^T + Rb[dd] on the tensor cores (wgmma: each split's
        partial sums of them)."""
        if on_wgmma:
            x = T.decl_buffer((n_b, H // 2), "float32", data=hb.data, elem_offset=h16_at(n_b) + dd * n_b * (H // 2))
            w = T.decl_buffer((GH, H // 2), "float32", data=hb.data, elem_offset=r16_at(n_b) + dd * GH * (H // 2))
            b = T.decl_buffer((GH,), "float32", data=rb.data, elem_offset=dd * GH)
            out = T.decl_buffer((splits * n_b, GH), "float32", data=hb.data,
                                elem_offset=gates_at(n_b) + dd * splits * n_b * GH)
            gemm(x, w, b, out, n_b)
        else:
            x = T.decl_buffer((n_b, H), "float32", data=hb.data, elem_offset=dd * n_b * H)
            w = T.decl_buffer((H, GH), "float32", data=hb.data, elem_offset=weights_at(n_b) + dd * H * GH)
            b = T.decl_buffer((GH,), "float32", data=rb.data, elem_offset=dd * GH)
            out = T.decl_buffer((n_b, GH), "float32", data=hb.data, elem_offset=gates_at(n_b) + dd * n_b * GH)
            gemm(x, w, b, out, n_b)

    @T.macro
    def update(xw, lens, p, y, yh, yc, hb, hf, dd, b, j, s, n_t, n_b):
        """Unit j of direction dd's batch row b: the cell equations at step s."""
        n_valid = scan_states.valid_steps(spec, lens, b, n_t)
        if s < n_valid:
            t = time_index(spec, dd, s, n_valid)
            rec = [gate_sum(hf, n_b, dd, b, g, j) for g in range(G)]
            if lstm:
                yc[dd, b, j] = cells.lstm_cell_state(spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G), rec,
                                                     yc[dd, b, j], cells.gate_slice(p, (dd,), j, H, 3))
            yh[dd, b, j] = cells.hidden(spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G), rec, hb[0, dd, b, j],
                                        yc[dd, b, j], cells.gate_slice(p, (dd,), j, H, 3))
            y[t, dd, b, j] = yh[dd, b, j]
            hb[0, dd, b, j] = yh[dd, b, j]
        else:  # past the row's length: Y is zero there and the state stays
            y[s, dd, b, j] = T.float32(0)

    @T.macro
    def update_element(xw, lens, p, y, yh, yc, hb, hf, i, s, n_t, n_b):
        """Element i of (direction, batch row, unit); wgmma: of (direction, batch row, pair of
        units), and the pair's h(t) in 16 bits for the next step's GEMM."""
        if on_wgmma:
            if i < update_threads(n_b):
                dd = i // (n_b * (H // 2))
                b = i // (H // 2) % n_b
                k = i % (H // 2) * 2
                update(xw, lens, p, y, yh, yc, hb, hf, dd, b, k, s, n_t, n_b)
                update(xw, lens, p, y, yh, yc, hb, hf, dd, b, k + 1, s, n_t, n_b)
                hf[h16_at(n_b) + i] = T.reinterpret("float32", f16_pair(hb[0, dd, b, k], hb[0, dd, b, k + 1], bf16))
        elif i < update_threads(n_b):
            dd = i // (n_b * H)
            b = i // H % n_b
            j = i % H
            update(xw, lens, p, y, yh, yc, hb, hf, dd, b, j, s, n_t, n_b)

    @T.macro
    def step_update(xw, lens, p, y, yh, yc, hb, hf, s, n_t, n_b):
        if emulate:
            for i in range(update_threads(n_b)):
                update_element(xw, lens, p, y, yh, yc, hb, hf, i, s, n_t, n_b)
        else:
            for blk in T.thread_binding((update_threads(n_b) + UPDATE_THREADS - 1) // UPDATE_THREADS, thread="blockIdx.x"):
                for tx in T.thread_binding(UPDATE_THREADS, thread="threadIdx.x"):
                    after_previous_kernel()
                    update_element(xw, lens, p, y, yh, yc, hb, hf, blk * UPDATE_THREADS + tx, s, n_t, n_b)

    @T.macro
    def scan(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        assert n_b == batch, "the GEMM scan was built for another batch size"
        hf = T.decl_buffer((hb.shape[0] * D * n_b * H,), "float32", data=hb.data)
        if on_wgmma:
            start(lens, h0, c0, yh, yc, hb, n_t, n_b)
            pack(r, hb, hf, n_b)
        else:
            transpose(r, hf, n_b)
            start(lens, h0, c0, yh, yc, hb, n_t, n_b)
        for s in range(n_t):  # on the host: the GEMM of each direction, then the update, a step
            step_gemm(rb, hb, n_b, 0)
            if D == 2:
                step_gemm(rb, hb, n_b, 1)
            step_update(xw, lens, p, y, yh, yc, hb, hf, s, n_t, n_b)

    func = recurrence_func(spec, scan, slots=gemm_scan_slots(spec, batch, wgmma)).with_attr("persist_rnn.lowering", GEMM_SCAN)
    return func.with_attr(*EARLY_LAUNCH) if early_launch else func
