"""The persistent recurrence kernel: one launch for the whole sequence, weights held on chip.

Read `cta_program` top to bottom: load this CTA's weight slice once (registers, and shared
memory for the runs of columns that do not fit: `Config.smem_runs`), then per time step
    load h(t-1) -> partial dot products -> warp-shuffle reduction -> gates and state update
    -> store this CTA's slice of h(t) -> one barrier across the direction's CTAs
(a counter in global memory, or the thread-block cluster's barrier; none when one CTA holds the
direction). The batch may also be split into independent tiles (`Config.batch_tile`), one CTA
or one cluster of CTAs each: batch rows never interact, so tiles never wait for each other.
A CTA that holds its direction (resident) keeps h in shared memory, two copies by step parity,
so that h(t) can be written while others still read h(t-1); it writes h(t) and C(t) to global
memory only for Y and after its last step, and its next step's inputs land in the register set
of that step's parity (a copy between sets would wait for the loads at the top of the step). With
`Config.lane_updates` the lanes that summed a unit's gate rows update it from their registers;
otherwise the sums meet in shared memory (`gs`) and the CTA's threads share the updates out.
Step s+1's input projections are fetched at the top of step s, and the recurrent biases of a
thread's units live in registers. With tensor cores (`Config.mma_k_split`) the dot products
are 3xTF32 `mma.sync` instead (`mma_dot`), and the partial sums of a row tile's column splits
meet in shared memory.

GRU with linear_before_reset=0 needs r * h(t-1) of *every* unit before the candidate's GEMV.
Either its step has two phases, each ending in a barrier (GRNN Fig. 7a): (1) the z and r rows'
dot products with h(t-1), z kept, r * h(t-1) published; (2) the candidate rows' dot products
with r * h(t-1), then h(t). Or (`Config.gru_barriers == 1`, GRNN Fig. 7b) one barrier: after
h(t), each CTA publishes partial sums R_z[:, tile] h(t)[tile] and R_r[:, tile] h(t)[tile] for
every unit; after the barrier every CTA sums all CTAs' partials into r of every unit (and z of
its own), forms r * h(t-1) and runs the candidate rows' dot products.

The phases are TIR macros shared with `emulated_kernel`, an llvm-runnable twin in which every
barrier becomes a phase boundary (steps outermost, CTAs and threads as serial loops), so the
tiling and index arithmetic are checked numerically on a machine without a GPU; it reads every
weight where `load_weights` put it, and counts barrier arrivals the way the GPU's counter would,
flagging a target that would not match.

Signature: `signature.py`. The exchange buffer `hbuf` carries h between CTAs (slots 0/1 by step
parity; slot 2 holds r * h(t-1) of the two-phase GRU; the partial sums' slots follow,
`Config.exchange_slots`); `ws` holds one barrier counter per direction, zeroed by a one-warp
kernel before each launch, so concurrent launches never share a counter. Every CTA loads its
weights and biases before `griddepcontrol.wait` and touches nothing else before it, so the
kernel may be launched while the projection GEMM still runs (`early_launch.py`). `yc` (unused
by GRU) keeps the two-phase GRU's z between its phases.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from . import cells, signature
from .config import STATIC_SHARED_BYTES, Config, tensor_core_problems, two_phase
from .early_launch import allow_next_kernel, wait_for_previous_kernel
from .signature import WORKSPACE_WORDS, recurrence_func
from .spec import CellSpec

GRID_BARRIER = r"""
__device__ __forceinline__ void prnn_grid_barrier(unsigned int* counter, unsigned int target) {
  // Monotonic counter: one release-add per CTA, spin on acquire loads until every CTA arrived.
  // The caller has just run __syncthreads (a TIR storage sync, which TVM's sync planner sees).
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
    unsigned int seen;
    long long start = clock64();
    while (true) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= target) break;
      if (clock64() - start > (1LL << 36)) __trap();  // ~30 s: a CTA never arrived; fail, never hang
    }
  }
  __syncthreads();
}
"""


#: the tensor cores' instruction: D = A B + C, m16n8k8, TF32 operands, fp32 accumulators
MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


class UnsupportedLayer(Exception):
    """The persistent template cannot build this layer; the message is the report's reason."""


#: where the barrier-check flag lives in the emulated kernel's workspace
BARRIER_FLAG_WORD = WORKSPACE_WORDS - 1


def unverified_reason(spec: CellSpec, cfg: Config) -> str:
    """Why the planner does not pick this config for `spec` on its own (empty when it may): a
    variant that passes the CPU emulation and nvcc but has not run on a GPU. `unverified=True` or
    a config forced by the caller still builds it. Batch tiles, clusters, both
    GRU linear_before_reset=0 kernels and fp32 shared-memory weights passed on the H100
    (docs/data/gpu_variants.log), tensor cores with whole row tiles too
    (docs/data/gpu-v4-tensor-cores.log); fp16 weights in shared memory (which spill registers) and
    tensor cores with a padded row tile have not."""
    if cfg.smem_runs and spec.dtype != "float32":
        return ("fp16/bf16 weights partly in shared memory: pass the CPU emulation and nvcc but have not yet "
                "been run on a GPU; compile with unverified=True to use them")
    if cfg.tensor_cores() and (cfg.row_gates(spec) * cfg.tile_units) % 16:
        return ("tensor cores with a padded row tile (the CTA's gate rows are not whole 16-row tiles): pass the "
                "CPU emulation and nvcc but have not yet been run on a GPU; compile with unverified=True to use them")
    return ""


def _check(spec: CellSpec, cfg: Config) -> None:
    if cfg.tensor_cores():
        bad = tensor_core_problems(spec, cfg)
        if spec.hidden_size % cfg.tile_units or bad:
            raise UnsupportedLayer(f"config {cfg.as_dict()} cannot use the tensor cores for hidden_size "
                                   f"{spec.hidden_size}: " + "; ".join(bad or ["tile_units does not divide it"]))
        return
    if spec.hidden_size % cfg.tile_units or spec.hidden_size % cfg.group_size:
        raise UnsupportedLayer(f"config {cfg.as_dict()} does not tile hidden_size {spec.hidden_size}")
    if (cfg.row_gates(spec) * cfg.tile_units) % cfg.rows_per_group or cfg.gru_barriers not in (1, 2):
        raise UnsupportedLayer(f"config {cfg.as_dict()} does not map the CTA's gate rows onto work groups")
    if not 0 <= cfg.smem_runs <= cfg.cols_per_lane(spec) // cfg.column_run(spec):
        raise UnsupportedLayer(f"config {cfg.as_dict()}: smem_runs exceeds a lane's runs of columns")


def _build(spec: CellSpec, cfg: Config, emulate: bool) -> tvm.tirx.PrimFunc:
    _check(spec, cfg)
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    TW, WS, RPG, BC = cfg.tile_units, cfg.group_size, cfg.rows_per_group, cfg.batch_chunk
    partial_sums = cfg.partial_sums(spec)  # GRNN's one-barrier GRU (config.py)
    TH = cfg.batch_tile  # > 0: a direction's CTAs (one, or a cluster) per tile of TH batch rows
    tiled = TH > 0
    GATE0 = 2 if partial_sums else 0  # the first gate whose rows the work groups hold
    GTW = cfg.row_gates(spec) * TW  # gate rows per CTA in the work groups
    SLOTS = cfg.exchange_slots(spec)
    PR = cfg.partial_rows(spec)  # rows of R_z, R_r per thread (partial sums)
    CPD = cfg.ctas_per_direction(spec)
    NCTA = D * CPD
    NT = cfg.threads(spec)
    NG = cfg.groups(spec)  # work groups; lanes of groups >= NG only pad the last warp
    KPL = H // WS  # columns per lane
    DV = cfg.column_run(spec)  # a lane's columns come in runs of DV: one float4 shared load each
    SR = cfg.smem_runs  # the lane's last SR runs live in shared memory (what registers cannot hold)
    RR = KPL // DV - SR  # runs in registers
    KR = RR * DV  # register-held columns per row
    WDT = cfg.weight_dtype
    lstm = spec.cell == "lstm"
    phases = 2 if two_phase(spec) and not partial_sums else 1
    grid = cfg.barrier(spec) == "grid"  # CTAs of a direction meet at a counter in global memory
    cluster = cfg.barrier(spec) == "cluster"  # ... or at the thread-block cluster's hardware barrier
    VEC = 4 if H % 4 == 0 else 1  # float4 copies of h
    # one CTA holds the whole direction: h stays in shared memory, two copies by step parity
    resident = cfg.resident(spec)
    # past 48 KiB, h(t-1) goes to dynamic shared memory (TVM's runtime raises the kernel's limit)
    SMEM = "global" if emulate else ("shared.dyn" if cfg.shared_bytes(spec) > STATIC_SHARED_BYTES else "shared")
    LANE = cfg.lane_updates(spec)  # lanes update their units from their own sums
    UG = RPG // G if LANE else 0  # units per work group (lane updates)
    UPT = cfg.updates_per_thread(spec)  # (batch row, unit) pairs each thread updates per chunk
    FAST = not emulate  # CUDA's fast sigmoid (the llvm twin keeps expf and division)
    XR = G + 1  # per pair, in registers: the gates' input projections and C(t-1)
    MMA = cfg.tensor_cores()  # 3xTF32 mma dot products (config.py); else FMA units and shuffles
    KS = cfg.k_splits()  # warps splitting a row tile's columns; their partial sums meet in `gs`
    RT = cfg.row_tiles(spec) if MMA else 0  # 16-row tiles of the CTA's gate rows (the last one padded)
    KPW = cfg.k_tiles_per_warp(spec) if MMA else 0  # 8-column k-tiles of R per warp
    NTL = cfg.n_tiles() if MMA else 0  # 8-row tiles of the batch chunk (the mma's N)
    HS_SHAPE = (cfg.h_rows(), cfg.h_stride(spec))  # the shared copy of h (padded with tensor cores)

    def time_index(d, s, n_valid):
        return signature.time_index(spec, d, s, n_valid)

    def weight_row(cta, tx, q):
        """Row of R (within direction) that register row q of thread tx holds: the group's rows
        are gate-major, or (lane updates) unit-major, each unit's G gates together."""
        if LANE:
            gate, unit = q % G, (tx // WS) * UG + q // G
        else:
            gate, unit = ((tx // WS) * RPG + q) // TW, ((tx // WS) * RPG + q) % TW
        return (GATE0 + gate) * H + (cta % CPD) * TW + unit

    def gate_pos(g, jl):
        """Where gate g of the CTA's unit jl sits in the dot results (`gs`, in work-group order)."""
        return (jl // UG) * RPG + (jl % UG) * G + g if LANE else g * TW + jl

    def col(lane, i, v):
        """Column of R (and unit of h) that lane `lane` multiplies in its i-th run, element v."""
        return DV * (lane + WS * i) + v

    def recurrent_parts(gs, acc, rbr, row, tx, e, bi, jl):
        """A pair's gate sums plus its recurrent biases. Lane updates on the GPU read the lane's
        own accumulators (every lane holds the group's sums after the shuffle), picked by lane."""
        if LANE and not emulate:
            sums = []
            for g in range(G):
                v = acc[g * BC]
                for p in range(1, UG * BC):  # lane p owns unit p % UG of batch row p // UG
                    v = T.Select(tx % WS == p, acc[((p % UG) * G + g) * BC + p // UG], v)
                sums.append(v)
        else:  # with tensor cores, the column split's partial sums
            sums = [gs[bi, gate_pos(g, jl)] for g in range(G)]
            for k in range(1, KS):
                sums = [sums[g] + gs[k * BC + bi, gate_pos(g, jl)] for g in range(G)]
        return [sums[g] + rbr[row, e * G + g] for g in range(G)]

    def grid_size(n_b):
        """CTAs of the launch: a direction's tiles of units, times the batch tiles (if any)."""
        return NCTA * ((n_b + TH - 1) // TH) if tiled else NCTA

    def dir_of(cta):
        """Direction of a CTA: CTA = (batch tile * D + direction) * CPD + its tile of units."""
        return (cta // CPD) % D if tiled else cta // CPD

    def first_chunk(cta):
        """The chunk of batch rows a batch-tiled CTA owns (its whole tile); else 0."""
        return cta // NCTA if tiled else 0

    def one_chunk(n_b):
        """Whether each CTA's batch rows fit one chunk (then the next step's inputs are prefetched)."""
        return True if tiled else n_b <= BC

    def own_rows(n_b):
        """How many batch rows (at most) a CTA sets up and reads out the states of."""
        return TH if tiled else n_b

    def state_row(cta, tx, e):
        """Batch row of thread tx's e-th (row, unit) slot when setting up or reading out states."""
        return (e * NT + tx) // TW + (first_chunk(cta) * BC if tiled else 0)

    def owns_state(cta, tx, e, n_b):
        if tiled:
            return T.And(e * NT + tx < TH * TW, state_row(cta, tx, e) < n_b)
        return e * NT + tx < n_b * TW

    def pair(cta, tx, e, ch):
        """(batch row, unit) that thread tx updates in its e-th slot of chunk ch."""
        if LANE:
            return ch * BC + chunk_row(tx, e), (cta % CPD) * TW + (tx // WS) * UG + tx % WS % UG
        q = e * NT + tx
        return ch * BC + q // TW, (cta % CPD) * TW + q % TW

    def chunk_row(tx, e):
        """The batch row (within its chunk) of thread tx's e-th pair."""
        return tx % WS // UG if LANE else (e * NT + tx) // TW

    def owns_unit(tx, e):
        """Whether thread tx's e-th slot is a pair of some batch row (its unit exists)."""
        if LANE:
            return T.And(tx // WS < NG, tx % WS < UG * BC)
        return e * NT + tx < BC * TW

    def owns(cta, tx, e, ch, n_b):
        """Whether thread tx's e-th slot is a pair of chunk ch whose batch row exists."""
        return T.And(owns_unit(tx, e), pair(cta, tx, e, ch)[0] < n_b)

    def valid_steps(lens, b, n_t):
        """Batch row b's sequence length, clamped to [0, T]."""
        return T.max(T.min(T.Cast("int64", lens[b]), n_t), T.int64(0))

    def barrier_index(s, phase):
        """Barrier k (k CTAs of a direction have arrived k times) ending `phase` of step s; 1 is init's."""
        return phases * s + phase + 1

    def group_active(group_first_row, phase):
        """Whether a work group computes in `phase`: in the two-phase GRU, groups whose rows are all
        z/r rows (phase 1) or all candidate rows (phase 2) skip the other phase; mixed groups never do."""
        if phase == 0 or TW % RPG:
            return True
        return group_first_row // TW < 2 if phase == 1 else group_first_row // TW >= 2

    @T.macro
    def init_state(hb, h0, yc, c0, cta, tx, n_b):
        """Each CTA copies its units (and batch rows) of h0 into slot 0 of hbuf and of c0 into yc."""
        for e in range((own_rows(n_b) * TW + NT - 1) // NT):
            if owns_state(cta, tx, e, n_b):
                hb[0, dir_of(cta), state_row(cta, tx, e), (cta % CPD) * TW + (e * NT + tx) % TW] = h0[
                    dir_of(cta), state_row(cta, tx, e), (cta % CPD) * TW + (e * NT + tx) % TW]
                if lstm:
                    yc[dir_of(cta), state_row(cta, tx, e), (cta % CPD) * TW + (e * NT + tx) % TW] = c0[
                        dir_of(cta), state_row(cta, tx, e), (cta % CPD) * TW + (e * NT + tx) % TW]

    @T.macro
    def load_h(hs, hb, cta, tx, slot, ch, n_b):
        """Exchange-buffer `slot` (h(t-1), or r * h(t-1)) of batch rows ch*BC .. ch*BC+BC-1 (all H
        units) into shared memory, VEC-wide. Through `hb` itself, never a second view of it: nvcc
        turns loads through a pointer the kernel never stores to into non-coherent (ld.global.nc)
        loads, which may return what another thread or CTA overwrote earlier in the launch."""
        for e in range((BC * H // VEC + NT - 1) // NT):
            if T.Cast("int64", (e * NT + tx) * VEC) < T.min(n_b - ch * BC, T.int64(BC)) * H:
                for v in T.vectorized(VEC):
                    hs[(e * NT + tx) * VEC // H, (e * NT + tx) * VEC % H + v] = hb[
                        slot, dir_of(cta), ch * BC + (e * NT + tx) * VEC // H, (e * NT + tx) * VEC % H + v]

    @T.macro
    def load_biases(rb, rbr, row, cta, tx):
        """The recurrent biases of each pair's unit into registers, for the whole sequence."""
        for e in T.unroll(UPT):
            if owns_unit(tx, e):
                for g in T.unroll(G):
                    rbr[row, e * G + g] = rb[dir_of(cta), g * H + pair(cta, tx, e, 0)[1]]

    @T.macro
    def load_lengths(lens, nv, row, cta, tx, ch, n_t, n_b):
        """Each owned pair's sequence length (clamped to [0, T]) into a register."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                nv[row, e] = valid_steps(lens, pair(cta, tx, e, ch)[0], n_t)

    def input_at(xw, cta, tx, e, g, ch, t):
        """Gate g's input projection of thread tx's e-th pair of chunk ch at time index t."""
        return xw[t, pair(cta, tx, e, ch)[0], dir_of(cta), g * H + pair(cta, tx, e, ch)[1]]

    @T.macro
    def fetch(xw, yc, xr, nv, row, cta, tx, s, ch, n_t, n_b, with_c):
        """Load step s's input projection of each owned pair (and C(t-1) when `with_c`) into
        registers. Unguarded, with the time index clamped, so the loads issue at once."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                for g in T.unroll(G):
                    xr[row, e * XR + g] = input_at(xw, cta, tx, e, g, ch, T.max(
                        T.min(time_index(dir_of(cta), s, nv[row, e]), n_t - 1), T.int64(0)))
                if lstm and with_c:
                    xr[row, e * XR + G] = yc[dir_of(cta), pair(cta, tx, e, ch)[0], pair(cta, tx, e, ch)[1]]

    @T.macro
    def fetch_valid(xw, xr, nv, row, cta, tx, s, n_b):
        """`fetch` for a resident CTA: only the pairs whose sequence reaches step s load, so the
        time index needs no clamp (fewer instructions on a step that is all latency)."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, first_chunk(cta), n_b):
                if s < nv[row, e]:
                    for g in T.unroll(G):
                        xr[row, e * XR + g] = input_at(xw, cta, tx, e, g, first_chunk(cta),
                                                       time_index(dir_of(cta), s, nv[row, e]))

    @T.macro
    def chunk_inputs(xw, yc, lens, hb, hs, xr, nv, row, cta, tx, s, ch, slot, n_t, n_b, with_c):
        """A chunk's lengths and step-s inputs into registers, exchange `slot` into `hs`."""
        load_lengths(lens, nv, row, cta, tx, ch, n_t, n_b)
        fetch(xw, yc, xr, nv, row, cta, tx, s, ch, n_t, n_b, with_c)
        load_h(hs, hb, cta, tx, slot, ch, n_b)

    @T.macro
    def update(rbr, p, y, yc, hb, hs, gs, acc, xr, hn, nv, row, cta, tx, s, ch, n_b, hs_next):
        """Each (batch row, unit) of the chunk has one owner thread: it applies the cell, keeps
        C(t) in its register and stores h(t) into Y and `hn`; then into the exchange buffer (and
        C(t) into yc), or, when `hs_next` is not None (a resident CTA, which needs neither until
        its last step: `resident_states_out`), into that shared copy of h."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                b, j = pair(cta, tx, e, ch)
                bi = chunk_row(tx, e)
                d = dir_of(cta)
                if s < nv[row, e]:
                    if lstm:
                        xr[row, e * XR + G] = cells.lstm_cell_state(
                            spec, d, cells.gate_slice(xr, (row,), e * XR, 1, G),
                            recurrent_parts(gs, acc, rbr, row, tx, e, bi, j % TW), xr[row, e * XR + G],
                            cells.gate_slice(p, (d,), j, H, 3), FAST)
                        if hs_next is None:
                            yc[d, b, j] = xr[row, e * XR + G]
                    hn[row, e] = cells.hidden(
                        spec, d, cells.gate_slice(xr, (row,), e * XR, 1, G),
                        recurrent_parts(gs, acc, rbr, row, tx, e, bi, j % TW), hs[bi, j], xr[row, e * XR + G],
                        cells.gate_slice(p, (d,), j, H, 3), FAST)
                    y[time_index(d, s, nv[row, e]), d, b, j] = hn[row, e]
                else:  # past this sequence's end: state carried, output zero
                    hn[row, e] = hs[bi, j]
                    y[s, d, b, j] = T.float32(0)
                if hs_next is None:
                    hb[(s + 1) % 2, d, b, j] = hn[row, e]
                else:
                    hs_next[bi, j] = hn[row, e]

    @T.macro
    def resident_states_out(yc, hb, xr, hn, row, cta, tx, n_t, n_b):
        """A resident CTA after its last step: each owner's h(t) into the exchange slot that
        `final_state` reads, and C(t) into yc (steps left both on chip)."""
        if n_t > 0:
            for e in T.unroll(UPT):
                if owns(cta, tx, e, first_chunk(cta), n_b):
                    b, j = pair(cta, tx, e, first_chunk(cta))
                    hb[n_t % 2, dir_of(cta), b, j] = hn[row, e]
                    if lstm:
                        yc[dir_of(cta), b, j] = xr[row, e * XR + G]

    @T.macro
    def reset_phase(rb, yc, hb, hs, gs, xr, nv, row, cta, tx, s, ch, n_b):
        """Two-phase GRU, phase 1: each owned pair's z goes to yc (its owner reads it back in
        phase 2) and r * h(t-1) to exchange slot 2, for every CTA's candidate GEMV."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                b, j = pair(cta, tx, e, ch)
                bi = (e * NT + tx) // TW
                d = dir_of(cta)
                if s < nv[row, e]:
                    yc[d, b, j] = cells.gru_gate(spec, d, xr[row, e * XR], gs[bi, j % TW] + rb[d, j])
                    hb[2, d, b, j] = cells.gru_gate(spec, d, xr[row, e * XR + 1], gs[bi, TW + j % TW] + rb[d, H + j]) * hs[bi, j]
                else:
                    hb[2, d, b, j] = T.float32(0)

    @T.macro
    def candidate_phase(rb, y, yc, hb, gs, xr, hn, nv, row, cta, tx, s, ch, n_b):
        """Two-phase GRU, phase 2: the candidate from R_h (r * h(t-1)), then h(t) as in `update`;
        h(t-1) of the pair is read back from the exchange buffer (its owner wrote it)."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                b, j = pair(cta, tx, e, ch)
                bi = (e * NT + tx) // TW
                d = dir_of(cta)
                if s < nv[row, e]:
                    hn[row, e] = cells.gru_blend(spec, d, yc[d, b, j], xr[row, e * XR + 2],
                                                 gs[bi, 2 * TW + j % TW] + rb[d, 2 * H + j], hb[s % 2, d, b, j])
                    y[time_index(d, s, nv[row, e]), d, b, j] = hn[row, e]
                else:
                    hn[row, e] = hb[s % 2, d, b, j]
                    y[s, d, b, j] = T.float32(0)
                hb[(s + 1) % 2, d, b, j] = hn[row, e]

    def partial_slot(parity, gate, cta):
        """Exchange slot of one CTA's partial sums of gate z (0) or r (1), by step parity."""
        return 3 + (parity * 2 + gate) * CPD + cta % CPD

    @T.macro
    def load_partial_weights(r, wp, row, cta, tx):
        """Partial sums: thread tx holds rows tx, tx + NT, ... of R_z and R_r, at the CTA's columns."""
        for k in T.unroll(PR):
            for u in T.unroll(TW):
                wp[row, k * TW + u] = T.Cast(WDT, T.if_then_else(
                    k * NT + tx < 2 * H, r[dir_of(cta), k * NT + tx, (cta % CPD) * TW + u], T.float32(0)))

    @T.macro
    def tile_state(hm, h0, cta, tx, ch, n_b):
        """Partial sums: h0 of the CTA's units into `hm`, for the partial sums of step 0."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                hm[(e * NT + tx) // TW, (e * NT + tx) % TW] = h0[dir_of(cta), pair(cta, tx, e, ch)[0], pair(cta, tx, e, ch)[1]]

    @T.macro
    def publish_partials(hb, hm, wp, sacc, row, cta, tx, parity, ch, n_b):
        """Partial sums: the tile's h (`hm`) times the CTA's columns of R_z and R_r, one partial
        pre-activation per (batch row, z/r row), into this CTA's slots for every CTA to sum."""
        for k in T.unroll(PR):
            if k * NT + tx < 2 * H:
                for bi in T.unroll(BC):
                    if ch * BC + bi < n_b:
                        sacc[row, 0] = T.float32(0)
                        for u in T.unroll(TW):
                            sacc[row, 0] = sacc[row, 0] + T.Cast("float32", wp[row, k * TW + u]) * hm[bi, u]
                        hb[partial_slot(parity, (k * NT + tx) // H, cta), dir_of(cta), ch * BC + bi,
                           (k * NT + tx) % H] = sacc[row, 0]

    @T.macro
    def reset_from_partials(xw, rb, lens, hb, hs, rs, sacc, row, cta, tx, s, ch, n_t, n_b):
        """Partial sums, after the barrier: every CTA's partials of r summed, for every unit, and
        r * h(t-1) into `rs` (zero past a sequence's end) for the candidate rows' dot products."""
        for e in range((BC * H + NT - 1) // NT):
            if e * NT + tx < BC * H:
                if ch * BC + (e * NT + tx) // H < n_b:
                    sacc[row, 0] = T.float32(0)
                    for c in range(CPD):
                        sacc[row, 0] = sacc[row, 0] + hb[partial_slot(s % 2, 1, c), dir_of(cta),
                                                         ch * BC + (e * NT + tx) // H, (e * NT + tx) % H]
                    rs[(e * NT + tx) // H, (e * NT + tx) % H] = T.if_then_else(
                        s < valid_steps(lens, ch * BC + (e * NT + tx) // H, n_t),
                        cells.gru_gate(spec, dir_of(cta), xw[T.max(T.min(time_index(
                            dir_of(cta), s, valid_steps(lens, ch * BC + (e * NT + tx) // H, n_t)), n_t - 1),
                            T.int64(0)), ch * BC + (e * NT + tx) // H, dir_of(cta), H + (e * NT + tx) % H],
                            sacc[row, 0] + rb[dir_of(cta), H + (e * NT + tx) % H]) * hs[(e * NT + tx) // H, (e * NT + tx) % H],
                        T.float32(0))

    @T.macro
    def partial_update(rb, y, hb, hs, gs, hm, xr, hn, nv, row, cta, tx, s, ch, n_b):
        """Partial sums: z of each owned pair from the summed partials, the candidate from the
        work groups' dot products with r * h(t-1), then h(t) as in `update`, also into `hm`."""
        for e in T.unroll(UPT):
            if owns(cta, tx, e, ch, n_b):
                b, j = pair(cta, tx, e, ch)
                bi = (e * NT + tx) // TW
                d = dir_of(cta)
                xr[row, e * XR + G] = T.float32(0)  # the z partials' sum (GRU has no C(t) here)
                for c in range(CPD):
                    xr[row, e * XR + G] = xr[row, e * XR + G] + hb[partial_slot(s % 2, 0, c), d, b, j]
                if s < nv[row, e]:
                    hn[row, e] = cells.gru_blend(spec, d, cells.gru_gate(spec, d, xr[row, e * XR], xr[row, e * XR + G] + rb[d, j]),
                                                 xr[row, e * XR + 2], gs[bi, j % TW] + rb[d, 2 * H + j], hs[bi, j])
                    y[time_index(d, s, nv[row, e]), d, b, j] = hn[row, e]
                else:
                    hn[row, e] = hs[bi, j]
                    y[s, d, b, j] = T.float32(0)
                hb[(s + 1) % 2, d, b, j] = hn[row, e]
                hm[bi, j % TW] = hn[row, e]

    @T.macro
    def advance(xr, xn, row, resident_step):
        """Next step's prefetched input projections become this step's (C(t) stays). A resident
        CTA swaps the two register sets by step parity instead (no copy, which would wait for
        the loads at the next step's top): only C(t) moves."""
        for e in T.unroll(UPT):
            if resident_step:
                if lstm:
                    xn[row, e * XR + G] = xr[row, e * XR + G]
            else:
                for g in T.unroll(G):
                    xr[row, e * XR + g] = xn[row, e * XR + g]

    @T.macro
    def load_weights(r, wreg, wsm, row, wc, cta, tx):
        """This lane's slice of its work group's gate rows, for the whole sequence: the first RR
        runs of columns into registers (`wreg` row `row`), the last SR into shared memory (`wsm`
        block `wc`, thread-contiguous so that a warp's loads hit distinct banks)."""
        for q in T.unroll(RPG):
            for i in T.unroll(RR):
                for v in (T.vectorized if SR == 0 else T.unroll)(DV):  # a run: one 16-byte load (spilled with SR)
                    wreg[row, q * KR + i * DV + v] = T.Cast(WDT, T.if_then_else(
                        tx // WS < NG, r[dir_of(cta), weight_row(cta, tx, q), col(tx % WS, i, v)], T.float32(0)))
            if SR > 0:
                for i in T.unroll(SR):
                    for v in T.unroll(DV):
                        wsm[wc, (i * RPG + q) * DV + v, tx] = T.Cast(WDT, T.if_then_else(
                            tx // WS < NG, r[dir_of(cta), weight_row(cta, tx, q), col(tx % WS, RR + i, v)], T.float32(0)))

    @T.macro
    def dot_and_reduce(hs, gs, wreg, wsm, acc, hv, wt, tx, phase):
        """Partial dot products of the lane's weights (registers, then shared memory) with its
        columns of h(t-1) (float4 shared loads), then a shuffle-sum over the
        work group's lanes (outside any branch: every lane reaches it; every lane gets the sums),
        into `gs` unless the lanes update their units themselves."""
        for a in T.unroll(RPG * BC):
            acc[a] = T.float32(0)
        if group_active((tx // WS) * RPG, phase):
            for i in T.unroll(RR):
                for bi in T.unroll(BC):
                    for v in T.vectorized(DV):
                        hv[v] = hs[bi, col(tx % WS, i, v)]
                    for q in T.unroll(RPG):
                        for v in T.unroll(DV):
                            acc[q * BC + bi] = acc[q * BC + bi] + T.Cast("float32", wreg[0, q * KR + i * DV + v]) * hv[v]
            if SR > 0:
                for i in T.unroll(SR):
                    for q in T.unroll(RPG):
                        for v in T.unroll(DV):
                            wt[q * DV + v] = wsm[0, (i * RPG + q) * DV + v, tx]
                    for bi in T.unroll(BC):
                        for v in T.vectorized(DV):
                            hv[v] = hs[bi, col(tx % WS, RR + i, v)]
                        for q in T.unroll(RPG):
                            for v in T.unroll(DV):
                                acc[q * BC + bi] = acc[q * BC + bi] + T.Cast("float32", wt[q * DV + v]) * hv[v]
        for q in T.unroll(RPG):
            for bi in T.unroll(BC):
                if WS > 1:
                    acc[q * BC + bi] = T.cuda.warp_sum(acc[q * BC + bi], WS)
                if not LANE and tx % WS == 0 and tx // WS < NG:
                    gs[bi, (tx // WS) * RPG + q] = acc[q * BC + bi]

    @T.macro
    def emulated_dot(hs, gs, wreg, wsm, cta, phase):
        """The work groups' dot products as the shuffle would sum them, lane by lane, from the
        lanes' weights where `load_weights` put them; a group that skips this phase leaves NaN,
        so reading its rows would show."""
        for grp, q, bi in T.grid(NG, RPG, BC):
            gs[bi, grp * RPG + q] = T.float32(float("nan"))
            if group_active(grp * RPG, phase):
                gs[bi, grp * RPG + q] = T.float32(0)
                for lane, i, v in T.grid(WS, RR, DV):
                    gs[bi, grp * RPG + q] = gs[bi, grp * RPG + q] + T.Cast(
                        "float32", wreg[cta * NT + grp * WS + lane, q * KR + i * DV + v]) * hs[bi, col(lane, i, v)]
                if SR > 0:
                    for lane, i, v in T.grid(WS, SR, DV):
                        gs[bi, grp * RPG + q] = gs[bi, grp * RPG + q] + T.Cast(
                            "float32", wsm[cta, (i * RPG + q) * DV + v, grp * WS + lane]) * hs[bi, col(lane, RR + i, v)]

    @T.macro
    def tf32_split(hi, lo, j, x):
        """x as TF32 `hi[j]` (rounded to nearest; a volatile cvt, so that the compiler cannot hoist
        the weights' splits out of the time loop and hold twice the registers) and the fp32 `lo[j]`
        = x - hi (exact), whose TF32 bits the mma reads."""
        T.ptx.cvt.rna.tf32.f32(hi[j], x)
        lo[j] = x - T.reinterpret("float32", hi[j])

    def mma_row_in_tile(tx, j):
        """The CTA's gate row (gate-major) of A-fragment register j of thread tx: its warp's row
        tile (warps cycle over row tiles first), fragment row lane / 4, +8 for registers 1 and 3."""
        return (tx // 32 % RT) * 16 + tx % 32 // 4 + 8 * (j % 2)

    def mma_rows(cta, tx, j):
        """Row of R (within direction) of A-fragment register j of thread tx."""
        lr = mma_row_in_tile(tx, j)
        return (lr // TW) * H + (cta % CPD) * TW + lr % TW

    def mma_col(tx, i, j):
        """Column of R of A-fragment register j in the warp's i-th k-tile: lane % 4, +4 for 2 and 3."""
        return ((tx // 32 // RT) * KPW + i) * 8 + tx % 4 + 4 * (j // 2)

    @T.macro
    def mma_load_weights(r, wreg, row, cta, tx):
        """Tensor cores: the warp's row tile over its k-tiles, as mma A fragments in registers."""
        for i in T.unroll(KPW):
            for j in T.unroll(4):
                wreg[row, i * 4 + j] = T.if_then_else(mma_row_in_tile(tx, j) < GTW,
                                                      r[dir_of(cta), mma_rows(cta, tx, j), mma_col(tx, i, j)],
                                                      T.float32(0))  # a padded tile's zero rows

    @T.macro
    def mma(acc, nt, a, b):
        """acc's n-tile nt += a b on the tensor cores (operands: TF32 bits in 32-bit registers)."""
        T.ptx[MMA_TF32](acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3], *a, *b,
                        acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3])

    @T.macro
    def mma_dot(hs, gs, wreg, acc, bv, tx):
        """Tensor cores: each warp's row tile times h(t-1) over its k-tiles, 3xTF32 (the high parts'
        product plus both cross products, fp32 accumulation), then its C fragments into `gs` block
        `tx // 32 // RT` (the warp's column split) for the updating threads to add."""
        ah = T.alloc_buffer((4,), "uint32", scope="local")  # one k-tile's A fragment, split
        al = T.alloc_buffer((4,), "float32", scope="local")
        bh = T.alloc_buffer((2,), "uint32", scope="local")  # ... and one n-tile's B fragment
        bl = T.alloc_buffer((2,), "float32", scope="local")
        for a in T.unroll(NTL * 4):
            acc[a] = T.float32(0)
        for i in T.unroll(KPW):
            for nt in T.unroll(NTL):
                for j in T.unroll(2):  # B fragment: batch row lane / 4, column lane % 4 (+4)
                    bv[j] = hs[nt * 8 + tx % 32 // 4, ((tx // 32 // RT) * KPW + i) * 8 + tx % 4 + 4 * j]
                for j in T.unroll(4):
                    tf32_split(ah, al, j, wreg[0, i * 4 + j])
                for j in T.unroll(2):
                    tf32_split(bh, bl, j, bv[j])
                a_hi = [ah[j] for j in range(4)]
                b_hi = [bh[j] for j in range(2)]
                a_lo = [T.reinterpret("uint32", al[j]) for j in range(4)]
                b_lo = [T.reinterpret("uint32", bl[j]) for j in range(2)]
                mma(acc, nt, a_lo, b_hi)  # the small terms first
                mma(acc, nt, a_hi, b_lo)
                mma(acc, nt, a_hi, b_hi)
        for nt in T.unroll(NTL):
            for j in T.unroll(4):  # C fragment: row lane / 4 (+8 for 2, 3), batch row 2 * (lane % 4) (+1 for 1, 3)
                if nt * 8 + tx % 4 * 2 + j % 2 < BC and mma_row_in_tile(tx, j // 2) < GTW:
                    gs[(tx // 32 // RT) * BC + nt * 8 + tx % 4 * 2 + j % 2,
                       (tx // 32 % RT) * 16 + tx % 32 // 4 + 8 * (j // 2)] = acc[nt * 4 + j]

    @T.macro
    def emulated_mma_dot(hs, gs, wreg, cta):
        """The mma's product as PTX defines it (C[m, n] = sum over k of A[m, k] B[k, n]), with A
        read back from where `mma_load_weights` put it: element (m, k) of a warp's 16 x 8 tile sits
        in lane 4 * (m % 8) + k % 4, register m // 8 + 2 * (k // 4)."""
        for w, nt, m, nn in T.grid(RT * KS, NTL, 16, 8):
            if nt * 8 + nn < BC and (w % RT) * 16 + m < GTW:
                gs[(w // RT) * BC + nt * 8 + nn, (w % RT) * 16 + m] = T.float32(0)
                for i, k in T.grid(KPW, 8):
                    gs[(w // RT) * BC + nt * 8 + nn, (w % RT) * 16 + m] = (
                        gs[(w // RT) * BC + nt * 8 + nn, (w % RT) * 16 + m]
                        + wreg[cta * NT + w * 32 + 4 * (m % 8) + k % 4, i * 4 + m // 8 + 2 * (k // 4)]
                        * hs[nt * 8 + nn, ((w // RT) * KPW + i) * 8 + k])

    @T.macro
    def weights_in(r, wreg, wsm, row, wc, cta, tx):
        """Step 1: the thread's weights, as mma fragments or as the FMA units' runs of columns."""
        if MMA:
            mma_load_weights(r, wreg, row, cta, tx)
        else:
            load_weights(r, wreg, wsm, row, wc, cta, tx)

    @T.macro
    def dot_products(hs, gs, wreg, wsm, acc, hv, wt, bv, tx, phase):
        """Step 3-4: the CTA's gate rows times h(t-1), on the tensor cores or the FMA units."""
        if MMA:
            mma_dot(hs, gs, wreg, acc, bv, tx)
        else:
            dot_and_reduce(hs, gs, wreg, wsm, acc, hv, wt, tx, phase)

    @T.macro
    def emulated_dot_products(hs, gs, wreg, wsm, cta, phase):
        """`dot_products` of one CTA in the CPU twin."""
        if MMA:
            emulated_mma_dot(hs, gs, wreg, cta)
        else:
            emulated_dot(hs, gs, wreg, wsm, cta, phase)

    @T.macro
    def final_state(yh, yc, hb, lens, cta, tx, n_t, n_b):
        """Y_h from the exchange buffer; an empty sequence has zero final states (as ONNX Runtime)."""
        for e in range((own_rows(n_b) * TW + NT - 1) // NT):
            if owns_state(cta, tx, e, n_b):
                b = state_row(cta, tx, e)
                j = (cta % CPD) * TW + (e * NT + tx) % TW
                yh[dir_of(cta), b, j] = T.if_then_else(lens[b] > 0, hb[n_t % 2, dir_of(cta), b, j], T.float32(0))
                if lstm:
                    if lens[b] <= 0:
                        yc[dir_of(cta), b, j] = T.float32(0)

    @T.macro
    def step_barrier(ws, cta, k):
        """The one synchronisation per step: CTAs of one direction wait for each other. It starts
        with the CTA's own __syncthreads: every thread's h(t) is written, and every read of shared
        memory done, before the next step overwrites it."""
        T.tvm_storage_sync("shared")
        if grid:
            T.cuda.func_call("prnn_grid_barrier", T.address_of(ws[dir_of(cta)]),
                             T.Cast("uint32", k * CPD), source_code=GRID_BARRIER)
        elif cluster:  # barrier.cluster arrive (release) + wait (acquire): h(t) in global memory is visible
            T.cuda.cluster_sync()

    @T.macro
    def emulated_barrier(ws, k):
        """Every CTA arrives once, as on the GPU's counter; after barrier k the count of a direction
        must be k * CTAs per direction, else the GPU would wait forever or pass early: flag it."""
        if grid:
            for cta in range(NCTA):
                ws[dir_of(cta)] = ws[dir_of(cta)] + T.uint32(1)
            for dd in range(D):
                if ws[dd] != T.Cast("uint32", k * CPD):
                    ws[BARRIER_FLAG_WORD] = T.uint32(1)

    def phase_slot(phase, s):
        """The exchange slot a phase reads: r * h(t-1) in the two-phase GRU's second, else h(t-1)."""
        return 2 if phase == 2 else s % 2

    @T.macro
    def emulated_step(xw, wreg, wsm, rbr, p, y, yc, hb, hs, hs_next, xr, xn, hn, nv, cta, s, n_t, n_b):
        """`one_step` of one CTA (the one-chunk path), h(t-1) already in `hs`."""
        gs = T.alloc_buffer((KS * BC, GTW), "float32")
        emulated_dot_products(hs, gs, wreg, wsm, cta, 0)
        for tx in range(NT):
            if hs_next is None:
                fetch(xw, None, xn, nv, cta * NT + tx, cta, tx, s + 1, first_chunk(cta), n_t, n_b, False)
            else:
                fetch_valid(xw, xn, nv, cta * NT + tx, cta, tx, s + 1, n_b)
            update(rbr, p, y, yc, hb, hs, gs, None, xr, hn, nv, cta * NT + tx, cta, tx, s, first_chunk(cta), n_b,
                   hs_next)
            advance(xr, xn, cta * NT + tx, hs_next is not None)

    @T.macro
    def emulated_phase(xw, wreg, wsm, rb, rbr, p, lens, y, yc, hb, xr, hn, nv, s, phase, n_t, n_b):
        """Step s's `phase` for every CTA and chunk (the chunked paths): inputs, dot products, then
        the phase's update (0: the cell's only phase; 1, 2: the two-phase GRU's)."""
        for cta in range(grid_size(n_b)):
            for ch in range((n_b + BC - 1) // BC):
                hs = T.alloc_buffer((BC, H), "float32")
                gs = T.alloc_buffer((KS * BC, GTW), "float32")
                for tx in range(NT):
                    chunk_inputs(xw, yc, lens, hb, hs, xr, nv, cta * NT + tx, cta, tx, s, ch, phase_slot(phase, s),
                                 n_t, n_b, phase == 0)
                emulated_dot_products(hs, gs, wreg, wsm, cta, phase)
                for tx in range(NT):
                    if phase == 0:
                        update(rbr, p, y, yc, hb, hs, gs, None, xr, hn, nv, cta * NT + tx, cta, tx, s, ch, n_b, None)
                    elif phase == 1:
                        reset_phase(rb, yc, hb, hs, gs, xr, nv, cta * NT + tx, cta, tx, s, ch, n_b)
                    else:
                        candidate_phase(rb, y, yc, hb, gs, xr, hn, nv, cta * NT + tx, cta, tx, s, ch, n_b)

    @T.macro
    def one_step(xw, rbr, p, y, yc, hb, ws, hs, hs_next, gs, wreg, wsm, acc, hv, wt, bv, xr, xn, hn, nv,
                 cta, tx, s, n_t, n_b):
        """Step s when the CTA's batch rows are one chunk. A resident CTA (`hs_next` not None) reads
        h(t-1) from `hs` and writes h(t) to `hs_next`; otherwise h(t-1) comes from the exchange buffer."""
        # 2. step s+1's inputs (in flight all step), h(t-1) into shared memory (a resident CTA has it there)
        if hs_next is None:
            fetch(xw, None, xn, nv, 0, cta, tx, s + 1, first_chunk(cta), n_t, n_b, False)
            load_h(hs, hb, cta, tx, s % 2, first_chunk(cta), n_b)
            T.tvm_storage_sync("shared")
        else:
            fetch_valid(xw, xn, nv, 0, cta, tx, s + 1, n_b)
        # 3. partial dot products from registers, 4. shuffle reduction within the group
        dot_products(hs, gs, wreg, wsm, acc, hv, wt, bv, tx, 0)
        if not LANE:
            T.tvm_storage_sync("shared")
        # 5. gates and state update, h(t) of this CTA's units to the exchange buffer
        update(rbr, p, y, yc, hb, hs, gs, acc, xr, hn, nv, 0, cta, tx, s, first_chunk(cta), n_b, hs_next)
        advance(xr, xn, 0, hs_next is not None)
        # 6. one barrier per step (it starts with a __syncthreads; a resident CTA needs only that)
        if hs_next is not None:
            T.tvm_storage_sync("shared")
        else:
            step_barrier(ws, cta, barrier_index(s, 1))

    @T.macro
    def cta_program(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b, cta, tx):
        """One CTA's whole sequence, thread tx's view (the CUDA kernel's body)."""
        # a resident CTA's two copies of h stay in static shared memory: TVM merges dynamic shared
        # allocations into one buffer, and its sync planner would then see the copies overlap
        hs = T.alloc_buffer(HS_SHAPE, "float32", scope="shared" if resident else SMEM)
        hs2 = T.alloc_buffer(HS_SHAPE if resident else (1, 1), "float32", scope="shared")
        gs = T.alloc_buffer((1, 1) if LANE else (KS * BC, GTW), "float32", scope="shared")
        wreg = T.alloc_buffer((1, max(cfg.weight_regs(spec), 1)), WDT, scope="local")
        wsm = T.alloc_buffer((1, SR * RPG * DV, NT) if SR > 0 else (1, 1, 1), WDT, scope=SMEM if SR > 0 else "local")
        wt = T.alloc_buffer((RPG * DV if SR > 0 else 1,), WDT, scope="local")
        acc = T.alloc_buffer((max(RPG * BC, NTL * 4),), "float32", scope="local")
        hv = T.alloc_buffer((DV,), "float32", scope="local")
        bv = T.alloc_buffer((2,), "float32", scope="local")
        xr = T.alloc_buffer((1, UPT * XR), "float32", scope="local")
        xn = T.alloc_buffer((1, UPT * XR), "float32", scope="local")
        rbr = T.alloc_buffer((1, UPT * G), "float32", scope="local")
        nv = T.alloc_buffer((1, UPT), "int64", scope="local")
        hn = T.alloc_buffer((1, UPT), "float32", scope="local")
        rs = T.alloc_buffer((BC, H) if partial_sums else (1, 1), "float32", scope=SMEM)
        hm = T.alloc_buffer((BC, TW) if partial_sums else (1, 1), "float32", scope="shared")
        wp = T.alloc_buffer((1, max(PR * TW, 1)), WDT, scope="local")
        sacc = T.alloc_buffer((1, 1), "float32", scope="local")
        # 1. this lane's slice of its work group's gate rows, in registers for the whole sequence
        weights_in(r, wreg, wsm, 0, 0, cta, tx)
        load_biases(rb, rbr, 0, cta, tx)
        if not emulate:  # launched early (PDL): the kernel before this one has now finished
            T.evaluate(wait_for_previous_kernel())
        init_state(hb, h0, yc, c0, cta, tx, n_b)
        if partial_sums:  # ... and the CTA's columns of R_z, R_r, with step 0's partial sums
            load_partial_weights(r, wp, 0, cta, tx)
            for ch in range((n_b + BC - 1) // BC):
                tile_state(hm, h0, cta, tx, ch, n_b)
                T.tvm_storage_sync("shared")
                publish_partials(hb, hm, wp, sacc, 0, cta, tx, 0, ch, n_b)
                T.tvm_storage_sync("shared")
        step_barrier(ws, cta, 1)
        if partial_sums:  # one barrier a step: r from every CTA's partials, candidate, h(t), partials
            for s in range(n_t):
                for ch in range((n_b + BC - 1) // BC):
                    chunk_inputs(xw, yc, lens, hb, hs, xr, nv, 0, cta, tx, s, ch, s % 2, n_t, n_b, False)
                    T.tvm_storage_sync("shared")
                    reset_from_partials(xw, rb, lens, hb, hs, rs, sacc, 0, cta, tx, s, ch, n_t, n_b)
                    T.tvm_storage_sync("shared")
                    dot_and_reduce(rs, gs, wreg, wsm, acc, hv, wt, tx, 0)
                    T.tvm_storage_sync("shared")
                    partial_update(rb, y, hb, hs, gs, hm, xr, hn, nv, 0, cta, tx, s, ch, n_b)
                    T.tvm_storage_sync("shared")
                    publish_partials(hb, hm, wp, sacc, 0, cta, tx, (s + 1) % 2, ch, n_b)
                    T.tvm_storage_sync("shared")
                step_barrier(ws, cta, barrier_index(s, 1))
        elif one_chunk(n_b) and phases == 1:  # one chunk: step s+1's inputs are fetched while step s computes
            load_lengths(lens, nv, 0, cta, tx, first_chunk(cta), n_t, n_b)
            fetch(xw, yc, xr, nv, 0, cta, tx, 0, first_chunk(cta), n_t, n_b, True)
            if resident:  # h in shared memory for the whole sequence: steps in pairs, hs -> hs2 -> hs
                load_h(hs, hb, cta, tx, 0, first_chunk(cta), n_b)
                T.tvm_storage_sync("shared")
                for s2 in range((n_t + 1) // 2):
                    one_step(xw, rbr, p, y, yc, hb, ws, hs, hs2, gs, wreg, wsm, acc, hv, wt, bv, xr, xn, hn, nv,
                             cta, tx, 2 * s2, n_t, n_b)
                    if 2 * s2 + 1 < n_t:
                        one_step(xw, rbr, p, y, yc, hb, ws, hs2, hs, gs, wreg, wsm, acc, hv, wt, bv, xn, xr, hn, nv,
                                 cta, tx, 2 * s2 + 1, n_t, n_b)
                resident_states_out(yc, hb, xr, hn, 0, cta, tx, n_t, n_b)
                T.tvm_storage_sync("shared")  # final_state reads other threads' states
            else:
                for s in range(n_t):
                    one_step(xw, rbr, p, y, yc, hb, ws, hs, None, gs, wreg, wsm, acc, hv, wt, bv, xr, xn, hn, nv,
                             cta, tx, s, n_t, n_b)
        elif phases == 1:  # the batch spans chunks: each chunk reloads its lengths, inputs and C(t-1)
            for s in range(n_t):
                for ch in range((n_b + BC - 1) // BC):
                    chunk_inputs(xw, yc, lens, hb, hs, xr, nv, 0, cta, tx, s, ch, s % 2, n_t, n_b, True)
                    T.tvm_storage_sync("shared")
                    dot_products(hs, gs, wreg, wsm, acc, hv, wt, bv, tx, 0)
                    if not LANE:
                        T.tvm_storage_sync("shared")
                    update(rbr, p, y, yc, hb, hs, gs, acc, xr, hn, nv, 0, cta, tx, s, ch, n_b, None)
                    T.tvm_storage_sync("shared")
                step_barrier(ws, cta, barrier_index(s, 1))
        else:  # two-phase GRU: z, r * h(t-1) -> barrier -> candidate, h(t) -> barrier
            for s in range(n_t):
                for ch in range((n_b + BC - 1) // BC):
                    chunk_inputs(xw, yc, lens, hb, hs, xr, nv, 0, cta, tx, s, ch, s % 2, n_t, n_b, False)
                    T.tvm_storage_sync("shared")
                    dot_and_reduce(hs, gs, wreg, wsm, acc, hv, wt, tx, 1)
                    T.tvm_storage_sync("shared")
                    reset_phase(rb, yc, hb, hs, gs, xr, nv, 0, cta, tx, s, ch, n_b)
                    T.tvm_storage_sync("shared")
                step_barrier(ws, cta, barrier_index(s, 1))
                for ch in range((n_b + BC - 1) // BC):
                    chunk_inputs(xw, yc, lens, hb, hs, xr, nv, 0, cta, tx, s, ch, 2, n_t, n_b, False)
                    T.tvm_storage_sync("shared")
                    dot_and_reduce(hs, gs, wreg, wsm, acc, hv, wt, tx, 2)
                    T.tvm_storage_sync("shared")
                    candidate_phase(rb, y, yc, hb, gs, xr, hn, nv, 0, cta, tx, s, ch, n_b)
                    T.tvm_storage_sync("shared")
                step_barrier(ws, cta, barrier_index(s, 2))
        final_state(yh, yc, hb, lens, cta, tx, n_t, n_b)


    @T.macro
    def cuda_kernel(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        """The CUDA kernel: per-call counters zeroed, then every CTA's `cta_program`."""
        if grid:
            for _zb in T.thread_binding(1, thread="blockIdx.x"):  # per-call barrier counters start at 0
                for zt in T.thread_binding(WORKSPACE_WORDS, thread="threadIdx.x"):
                    # launched early (the pass asks only for kernels without a grid barrier, but the
                    # template stays correct): the main kernel may start, and its wait covers the GEMM
                    T.evaluate(allow_next_kernel())
                    T.evaluate(wait_for_previous_kernel())
                    ws[zt] = T.uint32(0)
        if cluster:  # each direction is one thread-block cluster, co-scheduled by the hardware
            for cta in T.thread_binding(grid_size(n_b), thread="blockIdx.x"):
                for _rank in T.thread_binding(CPD, thread="clusterCtaIdx.x"):
                    for tx in T.thread_binding(NT, thread="threadIdx.x"):
                        cta_program(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b, cta, tx)
        else:
            for cta in T.thread_binding(grid_size(n_b), thread="blockIdx.x"):
                for tx in T.thread_binding(NT, thread="threadIdx.x"):
                    cta_program(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b, cta, tx)

    @T.macro
    def emulated_kernel(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        """The llvm-runnable twin: CTAs and threads as serial loops, barriers as phase boundaries."""
        # every thread's registers, one row per (CTA, thread)
        xr = T.alloc_buffer((grid_size(n_b) * NT, UPT * XR), "float32")
        xn = T.alloc_buffer((grid_size(n_b) * NT, UPT * XR), "float32")
        nv = T.alloc_buffer((grid_size(n_b) * NT, UPT), "int64")
        hn = T.alloc_buffer((grid_size(n_b) * NT, UPT), "float32")
        wp = T.alloc_buffer((grid_size(n_b) * NT, max(PR * TW, 1)), WDT)
        sacc = T.alloc_buffer((grid_size(n_b) * NT, 1), "float32")
        rbr = T.alloc_buffer((grid_size(n_b) * NT, UPT * G), "float32")
        wreg = T.alloc_buffer((grid_size(n_b) * NT, max(cfg.weight_regs(spec), 1)), WDT)
        wsm = T.alloc_buffer((grid_size(n_b), max(SR * RPG * DV, 1), NT), WDT)
        for i in range(WORKSPACE_WORDS):
            ws[i] = T.uint32(0)
        for cta, tx in T.grid(grid_size(n_b), NT):
            weights_in(r, wreg, wsm, cta * NT + tx, cta, cta, tx)
            load_biases(rb, rbr, cta * NT + tx, cta, tx)
            init_state(hb, h0, yc, c0, cta, tx, n_b)
        if partial_sums:
            for cta in range(grid_size(n_b)):
                for tx in range(NT):
                    load_partial_weights(r, wp, cta * NT + tx, cta, tx)
                for ch in range((n_b + BC - 1) // BC):
                    hm = T.alloc_buffer((BC, TW), "float32")
                    for tx in range(NT):
                        tile_state(hm, h0, cta, tx, ch, n_b)
                    for tx in range(NT):
                        publish_partials(hb, hm, wp, sacc, cta * NT + tx, cta, tx, 0, ch, n_b)
        emulated_barrier(ws, 1)
        if partial_sums:
            for s in range(n_t):
                for cta in range(grid_size(n_b)):
                    for ch in range((n_b + BC - 1) // BC):
                        hs = T.alloc_buffer((BC, H), "float32")
                        rs = T.alloc_buffer((BC, H), "float32")
                        gs = T.alloc_buffer((BC, GTW), "float32")
                        hm = T.alloc_buffer((BC, TW), "float32")
                        for tx in range(NT):
                            chunk_inputs(xw, yc, lens, hb, hs, xr, nv, cta * NT + tx, cta, tx, s, ch, s % 2, n_t, n_b, False)
                        for tx in range(NT):
                            reset_from_partials(xw, rb, lens, hb, hs, rs, sacc, cta * NT + tx, cta, tx, s, ch, n_t, n_b)
                        emulated_dot(rs, gs, wreg, wsm, cta, 0)
                        for tx in range(NT):
                            partial_update(rb, y, hb, hs, gs, hm, xr, hn, nv, cta * NT + tx, cta, tx, s, ch, n_b)
                        for tx in range(NT):
                            publish_partials(hb, hm, wp, sacc, cta * NT + tx, cta, tx, (s + 1) % 2, ch, n_b)
                emulated_barrier(ws, barrier_index(s, 1))
        elif one_chunk(n_b) and phases == 1:
            for cta, tx in T.grid(grid_size(n_b), NT):
                load_lengths(lens, nv, cta * NT + tx, cta, tx, first_chunk(cta), n_t, n_b)
                fetch(xw, yc, xr, nv, cta * NT + tx, cta, tx, 0, first_chunk(cta), n_t, n_b, True)
            if resident:  # CTAs never meet: each runs its steps in pairs, h kept in its two copies
                for cta in range(grid_size(n_b)):
                    hs = T.alloc_buffer((BC, H), "float32")
                    hs2 = T.alloc_buffer((BC, H), "float32")
                    for tx in range(NT):
                        load_h(hs, hb, cta, tx, 0, first_chunk(cta), n_b)
                    for s2 in range((n_t + 1) // 2):
                        emulated_step(xw, wreg, wsm, rbr, p, y, yc, hb, hs, hs2, xr, xn, hn, nv, cta, 2 * s2, n_t, n_b)
                        if 2 * s2 + 1 < n_t:
                            emulated_step(xw, wreg, wsm, rbr, p, y, yc, hb, hs2, hs, xn, xr, hn, nv, cta, 2 * s2 + 1,
                                          n_t, n_b)
                    for tx in range(NT):
                        resident_states_out(yc, hb, xr, hn, cta * NT + tx, cta, tx, n_t, n_b)
            else:
                for s in range(n_t):  # a grid barrier sits between two iterations of this loop
                    for cta in range(grid_size(n_b)):
                        hs = T.alloc_buffer((BC, H), "float32")
                        for tx in range(NT):
                            load_h(hs, hb, cta, tx, s % 2, first_chunk(cta), n_b)
                        emulated_step(xw, wreg, wsm, rbr, p, y, yc, hb, hs, None, xr, xn, hn, nv, cta, s, n_t, n_b)
                    emulated_barrier(ws, barrier_index(s, 1))
        elif phases == 1:
            for s in range(n_t):
                emulated_phase(xw, wreg, wsm, rb, rbr, p, lens, y, yc, hb, xr, hn, nv, s, 0, n_t, n_b)
                emulated_barrier(ws, barrier_index(s, 1))
        else:
            for s in range(n_t):
                emulated_phase(xw, wreg, wsm, rb, rbr, p, lens, y, yc, hb, xr, hn, nv, s, 1, n_t, n_b)
                emulated_barrier(ws, barrier_index(s, 1))
                emulated_phase(xw, wreg, wsm, rb, rbr, p, lens, y, yc, hb, xr, hn, nv, s, 2, n_t, n_b)
                emulated_barrier(ws, barrier_index(s, 2))
        for cta, tx in T.grid(grid_size(n_b), NT):
            final_state(yh, yc, hb, lens, cta, tx, n_t, n_b)

    return recurrence_func(spec, emulated_kernel if emulate else cuda_kernel, SLOTS)


def persistent_kernel(spec: CellSpec, cfg: Config) -> tvm.tirx.PrimFunc:
    """The CUDA persistent kernel of `spec` under `cfg` (raises UnsupportedLayer)."""
    return _build(spec, cfg, emulate=False)


def emulated_persistent_kernel(spec: CellSpec, cfg: Config) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm), barriers as phase boundaries: for tests."""
    return _build(spec, cfg, emulate=True)
