"""The streamed scan: a kernel a step, its weights streamed from L2/HBM, for layers whose recurrent
weights fit on no chip (fp32 LSTM H=2048: 64 MiB a direction; the H100 has 33 MiB of registers).

Read top to bottom:
    init       one kernel: h(-1) = h0 into the exchange buffer's slot 0, Y_h and Y_c from h0, c0
               (zero for an empty sequence, ONNX Runtime's convention);
    the steps  a host loop over t launching, per step, one kernel of WARPS warps a CTA: each warp
               owns one hidden unit j of one direction. Its lanes read the unit's gate rows of R
               side by side (consecutive k's: a warp's load is contiguous; float4 loads where H is
               a multiple of 128) and multiply them with h(t-1) of up to BATCH_TILE batch rows at
               once, so a weight is read once per tile of rows; a shuffle sums the lanes; lane i
               then updates batch row i of the tile (the cell equations of cells.py) and writes
               h(t) into the other slot. The kernel's end is the step's barrier. GRU with
               linear_before_reset=0 runs two kernels a step: the reset gate's r * h(t-1)
               (slot 2) first, then z and the candidate.
The reference scan gives a (direction, batch row) pair one CTA, whose step reads every weight
through one SM (about 10 ms a step at H=2048); here a step's weights are read by every SM at once,
as cuDNN's per-step GEMMs read them, with one launch a step.

Signature: signature.py (hbuf's slots 0 and 1 hold h(t-1) and h(t) in turn; ws is unused).
`emulate=True` is the CPU twin: CTAs, warps and lanes as serial loops, the shuffle's sum added in
lane order, for numerical tests on llvm.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from . import cells, scan_states
from .signature import recurrence_func, time_index
from .spec import CellSpec

#: hidden units per CTA: one warp each
WARPS = 4
#: batch rows whose dot products share one read of a unit's weights (a lane updates one row each)
BATCH_TILE = 16
#: the tile of a batch of 2 to 4 rows: fewer wasted multiplications than BATCH_TILE's
SMALL_TILE = 4
#: the slot of the exchange buffer that holds r * h(t-1) (GRU with linear_before_reset=0)
RESET_SLOT = 2
#: lowering name in the layer's report
STREAMED = "streamed"


def streamed_scan(spec: CellSpec, emulate: bool = False) -> tvm.tirx.PrimFunc:
    """The streamed scan of `spec` for CUDA (its serial CPU twin: `emulate`)."""
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    lstm = spec.cell == "lstm"
    two_phase = spec.cell == "gru" and not spec.linear_before_reset
    V = 4 if H % 128 == 0 else 1  # consecutive k's a lane loads at once (a float4)
    KV = (H + 32 * V - 1) // (32 * V)  # loads per lane and gate row
    UNROLL = 4 if KV % 4 == 0 else 1  # loads in flight per gate row and lane
    UNIT_CTAS = D * ((H + WARPS - 1) // WARPS)
    LANES = 32
    SCOPE = "global" if emulate else "local"  # the CPU twin's lanes are loops: no registers
    start = scan_states.initial_states(spec, emulate)

    def reads(g, phase):
        """Whether gate g's dot product is computed in `phase` (a TIR expression of the unrolled g)."""
        if phase == 1:
            return g == 1  # GRU's reset gate alone
        if two_phase:
            return g != 1  # z over h(t-1), the candidate over r * h(t-1)
        return True

    def first_k(n0, n1, lane):
        """The first of the V consecutive k's of a lane's load (n0 * UNROLL + n1), written out where it is
        used: a let-bound k turns the vectorized load into a gather."""
        return ((n0 * UNROLL + n1) * LANES + lane) * V

    def source(g, phase):
        """Row of the lane's h registers gate g multiplies: 1 for GRU's candidate (r * h(t-1))."""
        return T.Select(g == 2, 1, 0) if two_phase and phase == 2 else 0

    @T.macro
    def lane_dots(r, hb, acc, w, h, lane_row, dd, j, b0, n_b, lane, s, phase, rows):
        """acc[lane_row, g, i] = this lane's part of R[gate g row of unit j] . h(t-1)[b0 + i], over
        its k's (V consecutive ones from (n * 32 + lane) * V, n = 0, 1, ...), for the gates `phase`
        needs and i < rows. Each weight is loaded once for all rows, each h once for all gates."""
        for g in T.unroll(G):
            for i in T.unroll(rows):
                acc[lane_row, g, i] = T.float32(0)
        for n0 in range(KV // UNROLL):
            for n1 in T.unroll(UNROLL):
                if first_k(n0, n1, lane) < H:
                    for g in T.unroll(G):
                        if reads(g, phase):
                            for v in T.vectorized(V):
                                w[g, v] = r[dd, g * H + j, first_k(n0, n1, lane) + v]
                    for i in T.unroll(rows):
                        for v in T.vectorized(V):
                            h[0, v] = hb[s % 2, dd, T.min(b0 + i, n_b - 1), first_k(n0, n1, lane) + v]
                        if two_phase and phase == 2:
                            for v in T.vectorized(V):
                                h[1, v] = hb[RESET_SLOT, dd, T.min(b0 + i, n_b - 1), first_k(n0, n1, lane) + v]
                        for g in T.unroll(G):
                            if reads(g, phase):
                                for v in T.unroll(V):
                                    acc[lane_row, g, i] = acc[lane_row, g, i] + w[g, v] * h[source(g, phase), v]

    @T.macro
    def update(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b, i, s, n_t):
        """Batch row b (row i of the tile) of unit j: the cell equations from the summed dots."""
        cur = s % 2
        n_valid = scan_states.valid_steps(spec, lens, b, n_t)
        h_prev = hb[cur, dd, b, j]
        if s < n_valid:
            t = time_index(spec, dd, s, n_valid)
            if two_phase:  # the candidate's part is R_h (r * h(t-1)) + Rb_h; the reset gate's is not read
                rec[0] = acc[0, 0, i] + rb[dd, j]
                rec[1] = T.float32(0)
                rec[2] = acc[0, 2, i] + rb[dd, 2 * H + j]
            else:
                for g in T.unroll(G):
                    rec[g] = acc[0, g, i] + rb[dd, g * H + j]
            if lstm:
                yc[dd, b, j] = cells.lstm_cell_state(spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G),
                                                     cells.gate_slice(rec, (), 0, 1, G), yc[dd, b, j],
                                                     cells.gate_slice(p, (dd,), j, H, 3))
            yh[dd, b, j] = cells.hidden(spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G),
                                        cells.gate_slice(rec, (), 0, 1, G), h_prev, yc[dd, b, j],
                                        cells.gate_slice(p, (dd,), j, H, 3))
            y[t, dd, b, j] = yh[dd, b, j]
            hb[1 - cur, dd, b, j] = yh[dd, b, j]
        else:  # past the row's length: Y is zero there and the state stays
            y[s, dd, b, j] = T.float32(0)
            hb[1 - cur, dd, b, j] = h_prev

    @T.macro
    def reset_update(xw, rb, lens, hb, acc, dd, j, b, i, s, n_t):
        """GRU's first phase for batch row b: r * h(t-1) of unit j into RESET_SLOT."""
        n_valid = scan_states.valid_steps(spec, lens, b, n_t)
        if s < n_valid:
            t = time_index(spec, dd, s, n_valid)
            gate = cells.gru_gate(spec, dd, xw[t, b, dd, H + j], acc[0, 1, i] + rb[dd, H + j])
            hb[RESET_SLOT, dd, b, j] = gate * hb[s % 2, dd, b, j]

    @T.macro
    def row_update(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b, i, s, n_t, phase):
        if phase == 1:
            reset_update(xw, rb, lens, hb, acc, dd, j, b, i, s, n_t)
        else:
            update(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b, i, s, n_t)

    @T.macro
    def tile_updates(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b0, n_b, s, n_t, phase, rows, lane):
        """The tile's rows updated, row i by lane i (on the CPU twin, one after another)."""
        for i in T.unroll(rows):
            if emulate:
                if b0 + i < n_b:
                    row_update(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b0 + i, i, s, n_t, phase)
            else:
                if b0 + i < n_b and lane == i:
                    row_update(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b0 + i, i, s, n_t, phase)

    @T.macro
    def unit_tile(xw, r, rb, lens, p, y, yh, yc, hb, acc, w, h, rec, dd, j, b0, n_b, lane, s, n_t, phase, rows):
        """One warp's work on one tile of batch rows: dots, the shuffle's sums, the updates."""
        if emulate:  # every lane's parts, then their sum in lane order into row 0
            for ln in range(LANES):
                lane_dots(r, hb, acc, w, h, ln + 1, dd, j, b0, n_b, ln, s, phase, rows)
            for g in range(G):
                for i in range(rows):
                    acc[0, g, i] = T.float32(0)
                    for ln in range(LANES):
                        acc[0, g, i] = acc[0, g, i] + acc[ln + 1, g, i]
            tile_updates(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b0, n_b, s, n_t, phase, rows, 0)
        else:
            lane_dots(r, hb, acc, w, h, 0, dd, j, b0, n_b, lane, s, phase, rows)
            for g in T.unroll(G):
                for i in T.unroll(rows):
                    acc[0, g, i] = T.cuda.warp_sum(acc[0, g, i], 32)  # every lane holds the sums
            tile_updates(xw, rb, lens, p, y, yh, yc, hb, acc, rec, dd, j, b0, n_b, s, n_t, phase, rows, lane)

    @T.macro
    def unit_program(xw, r, rb, lens, p, y, yh, yc, hb, blk, warp, lane, s, n_t, n_b, phase):
        """Warp `warp` of CTA `blk`: its unit over the batch, in one tile of 1 or SMALL_TILE rows, else
        in tiles of BATCH_TILE (rows past the batch read its last row, and are not updated)."""
        acc = T.alloc_buffer((LANES + 1 if emulate else 1, G, BATCH_TILE), "float32", scope=SCOPE)
        w = T.alloc_buffer((G, V), "float32", scope=SCOPE)  # the lane's k's of each gate row
        h = T.alloc_buffer((2, V), "float32", scope=SCOPE)  # the same k's of h(t-1) (and of r * h(t-1))
        rec = T.alloc_buffer((G,), "float32", scope=SCOPE)
        units = (H + WARPS - 1) // WARPS
        dd = blk // units
        j = (blk % units) * WARPS + warp
        if j < H:
            if n_b == 1:
                unit_tile(xw, r, rb, lens, p, y, yh, yc, hb, acc, w, h, rec, dd, j, T.int64(0), n_b, lane, s, n_t,
                          phase, 1)
            elif n_b <= SMALL_TILE:
                unit_tile(xw, r, rb, lens, p, y, yh, yc, hb, acc, w, h, rec, dd, j, T.int64(0), n_b, lane, s, n_t,
                          phase, SMALL_TILE)
            else:
                for tile in range((n_b + BATCH_TILE - 1) // BATCH_TILE):
                    unit_tile(xw, r, rb, lens, p, y, yh, yc, hb, acc, w, h, rec, dd, j, tile * BATCH_TILE, n_b,
                              lane, s, n_t, phase, BATCH_TILE)

    @T.macro
    def step_kernel(xw, r, rb, lens, p, y, yh, yc, hb, s, n_t, n_b, phase):
        """One launch: every unit of every direction, for step s (`phase` 1: GRU's reset gate)."""
        if emulate:
            for blk in range(UNIT_CTAS):
                for warp in range(WARPS):
                    unit_program(xw, r, rb, lens, p, y, yh, yc, hb, blk, warp, 0, s, n_t, n_b, phase)
        else:
            for blk in T.thread_binding(UNIT_CTAS, thread="blockIdx.x"):
                for tx in T.thread_binding(WARPS * LANES, thread="threadIdx.x"):
                    unit_program(xw, r, rb, lens, p, y, yh, yc, hb, blk, tx // LANES, tx % LANES, s, n_t, n_b,
                                 phase)

    @T.macro
    def scan(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        start(lens, h0, c0, yh, yc, hb, n_t, n_b)
        for s in range(n_t):  # on the host: a launch (two for GRU's two phases) a step
            if two_phase:
                step_kernel(xw, r, rb, lens, p, y, yh, yc, hb, s, n_t, n_b, 1)
            step_kernel(xw, r, rb, lens, p, y, yh, yc, hb, s, n_t, n_b, 2)

    return recurrence_func(spec, scan).with_attr("persist_rnn.lowering", STREAMED)
