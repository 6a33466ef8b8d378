"""Who owns what in a persistent kernel: which CTA, thread and lane hold which units, gate rows
and batch rows.

Plain Python on `CellSpec` and `Config`, no TVMScript: every method builds the same arithmetic on
ints (the tests) and on TIR expressions (the kernels' thread indices). The upper-case attributes
are the kernel's compile-time constants, named as in the template's comments (like Triton's
BLOCK_M):

    H, D, G   hidden units, directions, gates        TW   units per CTA (`tile_units`)
    WS        lanes per work group (`group_size`)     RPG  gate rows per work group
    BC        batch rows per chunk                    TH   batch rows per tile (0: no tiles)
    CPD       CTAs per direction                      NCTA CTAs of one batch tile
    NT        threads per CTA                         NG   work groups (lanes past NG * WS pad)
    GTW       gate rows per CTA in the work groups    GATE0 the first of them (2: partial sums)
    KPL       columns per lane                        DV   a lane's columns come in runs of DV
    SR, RR    runs in shared memory, in registers     KR   register-held columns per row
    GR, GU    runs read from global memory; how many of them a loop turn unrolls (GU = GR: all)
    UG        units per work group (lane updates)     UPT  (batch row, unit) pairs per thread
    XR        registers per pair: G inputs, C(t-1)    VEC  width of h's vector copies
    KS, RT, KPW, NTL  tensor cores: column splits, 16-row tiles, k-tiles per warp, 8-row n-tiles
    SK, KREG          tensor cores: a warp's SK k-tiles after the first KREG (in registers) in shared memory
    GK, GKU           16-bit tensor cores: the warp's last GK k-tiles' A fragments read each step from the
                      workspace (packed there once a call); how many of them a loop turn unrolls
    ACC_SETS          tensor cores: sets of C fragments a warp alternates between by k-tile (Config.acc_sets)
    TF32              tensor cores at TF32 precision: one mma of rounded operands (else 3xTF32)
    F16               tensor cores on 16-bit weights: m16n8k16, two halves a fragment register
    CHUNKS_AHEAD      a step in chunks fetches each next chunk's inputs while one computes
    FETCH_AFTER_DOT   a one-chunk step fetches step s+1's inputs after its dot products, not at its top
    INT8, WPR         weights held as int8 (int8_rows.py): a run of 4 a register; words a row holds (RR + scale)
    PACKED_R          R arrives packed for another bucket's int8 weights: read each weight back as q * s
    BF16              ... those weights bf16 (else fp16)
    H16, H16_SLOT     16-bit mma: h(t-1) exchanged in 16 bits (`hs` holds pairs); the exchange slot of them
    HALVES            ... as stamped words of two halves (no barrier a step)
    SENDS, RECV_BYTES  dsmem: 16-byte stores a CTA sends a step, bytes each CTA receives
    WORDS             stamped: words of h(t-1) a thread loads a step
"""
from __future__ import annotations

import tvm

from ..config import STATIC_SHARED_BYTES, Config, two_phase
from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec


#: FMAs of the global runs a kernel unrolls whole; past it, a loop over turns of GLOBAL_TURN_FMAS
#: (an LSTM H=4096 B=16 step unrolled all 59 of its runs: 15,104 FMAs, which nvcc took longer than
#: 5 minutes to compile, where every layer measured so far unrolls at most 5,376)
GLOBAL_UNROLL_FMAS, GLOBAL_TURN_FMAS = 8192, 4096


#: k-tiles of A fragments read each step that a loop turn of `dot_mma.streamed_fragments` unrolls:
#: more loads in flight. Kernels alone on the H200, 13 configs of 7 layers past the chip, turns of
#: 16 against 4 ran 0.96-1.21x as fast, geomean 1.05x (LSTM H=3072 B=32 fp16 35.2 -> 31.1 us a step),
#: 8 in between; ptxas spilled nothing more (docs/data/streamed-fragments-h200.jsonl, run C)
STREAMED_TILES_A_TURN = 16


def global_runs_unrolled(global_runs: int, run_fmas: int) -> int:
    """Global runs per turn of their loop: all of them within GLOBAL_UNROLL_FMAS, else as many as
    GLOBAL_TURN_FMAS holds (at least one); each turn's loads stay in flight together."""
    if global_runs * run_fmas <= GLOBAL_UNROLL_FMAS:
        return global_runs
    return max(1, GLOBAL_TURN_FMAS // run_fmas)


def both(a, b):
    """`a and b` on Python truth values, a TIR And once either is an expression."""
    if isinstance(a, bool | int) and isinstance(b, bool | int):
        return bool(a) and bool(b)
    return tvm.tirx.And(a, b)


class Layout:
    """The constants and index maps of one (spec, config); `emulate`: the CPU twin's mapping
    (shared memory in global buffers, no fast math); `packed_r`: R comes packed (int8_rows.py)."""

    def __init__(self, spec: CellSpec, cfg: Config, emulate: bool = False, packed_r: bool = False):
        self.spec, self.cfg, self.emulate = spec, cfg, emulate
        self.H, self.D, self.G = spec.hidden_size, spec.num_directions, spec.num_gates
        self.TW, self.WS, self.RPG, self.BC = cfg.tile_units, cfg.group_size, cfg.rows_per_group, cfg.batch_chunk
        self.partial_sums = cfg.partial_sums(spec)  # GRNN's one-barrier GRU (config.py)
        self.TH = cfg.batch_tile
        self.tiled = self.TH > 0
        self.GATE0 = 2 if self.partial_sums else 0
        self.GTW = cfg.row_gates(spec) * self.TW
        self.SLOTS = cfg.exchange_slots(spec)
        self.C_SLOT = cfg.cell_state_slot(spec)  # None: C lives in yc between steps
        self.PR = cfg.partial_rows(spec)  # rows of R_z, R_r per thread (partial sums)
        self.CPD = cfg.ctas_per_direction(spec)
        self.NCTA = self.D * self.CPD
        self.NT = cfg.threads(spec)
        self.NG = cfg.groups(spec)
        self.KPL = self.H // self.WS
        self.DV = cfg.column_run(spec)
        self.SR = 0 if cfg.tensor_cores() else cfg.smem_runs
        self.GR = 0 if cfg.tensor_cores() else cfg.global_runs  # runs read from R in global memory each step, after the SR runs
        self.RR = self.KPL // self.DV - self.SR - self.GR
        self.GU = global_runs_unrolled(self.GR, self.RPG * cfg.batch_chunk * self.DV)
        self.KR = self.RR * self.DV
        self.WDT = cfg.weight_dtype
        self.INT8 = cfg.int8_weights()
        self.WPR = self.RR + 1 if self.INT8 else 0
        self.PACKED_R = packed_r and not self.INT8
        if self.PACKED_R and self.GR:
            raise ValueError("weights read from global memory each step cannot come from a packed R")
        self.lstm = spec.cell == "lstm"
        self.phases = 2 if two_phase(spec) and not self.partial_sums else 1
        self.grid = cfg.barrier(spec) == "grid"  # a direction's CTAs meet at a counter in global memory
        self.cluster = cfg.barrier(spec) == "cluster"  # ... or at the cluster's hardware barrier
        self.stamped = bool(cfg.stamped)  # ... only once: then h(t-1) comes as stamped words (stamped_exchange.py)
        self.WORDS = cfg.stamped_words(spec)
        self.VEC = 4 if self.H % 4 == 0 else 1
        self.resident = cfg.resident(spec)  # one CTA holds the direction: h stays in shared memory
        self.dsmem = bool(cfg.h_on_chip(spec) and self.cluster)  # ... or a cluster's CTAs send it to each other
        self.h_on_chip = cfg.h_on_chip(spec)
        self.SENDS = (self.CPD - 1) * self.BC * self.TW // 4 if self.dsmem else 0
        self.RECV_BYTES = 16 * self.SENDS
        # past 48 KiB, h(t-1) goes to dynamic shared memory (TVM's runtime raises the kernel's limit)
        self.SMEM = "global" if emulate else ("shared.dyn" if cfg.shared_bytes(spec) > STATIC_SHARED_BYTES
                                              else "shared")
        self.LANE = cfg.lane_updates(spec)  # lanes update their units from their own sums
        self.UG = self.RPG // self.G if self.LANE else 0
        self.UPT = cfg.updates_per_thread(spec)
        self.FAST = not emulate  # CUDA's fast sigmoid (the llvm twin keeps expf and division)
        self.XR = self.G + 1
        self.MMA = cfg.tensor_cores()
        self.TF32 = cfg.tf32()  # one mma of TF32-rounded operands (else 3xTF32)
        self.F16 = cfg.f16_mma()  # a 16-bit layer's mma: its weights, h(t-1) rounded to its dtype, K = 16
        # a chunked step fetches the next chunk's inputs while a chunk computes (kernel.chunked_steps),
        # but not with fp32 A fragments: with the next inputs live, LSTM H=1024 B=20 (3xTF32, 4
        # column splits) went from 200 registers to 255 and 20 bytes of spills
        self.CHUNKS_AHEAD = not (self.MMA and not self.F16)
        self.BF16 = self.F16 and cfg.weight_dtype == "bfloat16"  # ... the layer is bf16
        self.KS = cfg.k_splits()
        self.RT = cfg.row_tiles(spec) if self.MMA else 0
        self.KPW = cfg.k_tiles_per_warp(spec) if self.MMA else 0
        self.SK = cfg.smem_runs if self.MMA else 0  # SK k-tiles of A fragments in shared memory, after the KREG
        self.GK = cfg.global_runs if self.MMA else 0  # ... and the GK after them read each step,
        self.GKU = min(self.GK, STREAMED_TILES_A_TURN)  # GKU k-tiles a loop turn
        self.WS_WORDS = cfg.workspace_words(spec)
        self.KREG = self.KPW - self.SK - self.GK  # ... the first KREG in registers
        self.NTL = cfg.n_tiles() if self.MMA else 0
        # a tensor-core step in batch tiles of a grid, of one n-tile (8 batch rows), fetches step
        # s+1's input projections after its mma, not at its top, where they held up the loads of
        # h(t-1) issued after them. Kernel alone on the H200, 48 such picks ran 0.94-1.26x, geomean
        # 1.10x (LSTM H=768 B=32 fp16 2.60 -> 2.22 us a step); 11 of two n-tiles 0.87-1.01x, and
        # elsewhere (one or two batch rows a CTA) the loads' latency lands on the step instead
        # (GRU H=1024 B=1 0.93x): docs/data/fetch-after-dot-h200.jsonl
        self.FETCH_AFTER_DOT = self.MMA and self.tiled and self.grid and self.NTL == 1
        self.ACC_SETS = cfg.acc_sets() if self.MMA else 1  # C fragments a warp alternates between by k-tile
        self.H16 = cfg.h16_exchange(spec)  # h(t-1) exchanged in 16 bits, held in `hs` as pairs (h16_exchange.py)
        self.H16_SLOT = cfg.h16_slot(spec)
        self.HALVES = cfg.stamped_halves(spec)  # ... as stamped words of two halves (stamped_exchange.py)
        self.HSW = cfg.h_stride(spec)
        self.HS_DTYPE = "uint32" if self.H16 else "float32"
        # the shared copy of h (rows padded with tensor cores); with 16-bit pairs flat, rows HSW words
        # apart (TVM compacts a 2-d buffer to the columns it sees read, padding and all)
        self.HS_SHAPE = (cfg.h_rows() * self.HSW,) if self.H16 else (cfg.h_rows(), self.HSW)
        self.TWIN_HS_SHAPE = (self.BC * self.HSW,) if self.H16 else (self.BC, self.H)  # the CPU twin's

    # --- the launch: CTAs, directions, batch tiles ---------------------------------------------

    def grid_size(self, n_b):
        """CTAs of the launch: a direction's tiles of units, times the batch tiles (if any)."""
        return self.NCTA * ((n_b + self.TH - 1) // self.TH) if self.tiled else self.NCTA

    def dir_of(self, cta):
        """Direction of a CTA: CTA = (batch tile * D + direction) * CPD + its tile of units."""
        return (cta // self.CPD) % self.D if self.tiled else cta // self.CPD

    def counter_of(self, cta):
        """The grid barrier's counter (a word of `ws`) a CTA arrives at: its direction's, or with
        batch tiles its tile's and direction's (CTA // CPD either way), so that tiles never wait
        for each other."""
        return cta // self.CPD

    def first_chunk(self, cta):
        """The chunk of batch rows a batch-tiled CTA owns (its whole tile); else 0."""
        return cta // self.NCTA if self.tiled else 0

    def one_chunk(self, n_b):
        """Whether each CTA's batch rows fit one chunk (then the next step's inputs are prefetched)."""
        return True if self.tiled else n_b <= self.BC

    def chunks(self, n_b):
        """Chunks of batch rows a CTA walks through per step."""
        return (n_b + self.BC - 1) // self.BC

    # --- the states a CTA sets up and reads out --------------------------------------------------

    def own_rows(self, n_b):
        """How many batch rows (at most) a CTA sets up and reads out the states of."""
        return self.TH if self.tiled else n_b

    def state_row(self, cta, tx, e):
        """Batch row of thread tx's e-th (row, unit) slot when setting up or reading out states."""
        return (e * self.NT + tx) // self.TW + (self.first_chunk(cta) * self.BC if self.tiled else 0)

    def state_unit(self, cta, tx, e):
        """Unit of thread tx's e-th slot when setting up or reading out states."""
        return (cta % self.CPD) * self.TW + (e * self.NT + tx) % self.TW

    def owns_state(self, cta, tx, e, n_b):
        if self.tiled:
            return both(e * self.NT + tx < self.TH * self.TW, self.state_row(cta, tx, e) < n_b)
        return e * self.NT + tx < n_b * self.TW

    # --- the (batch row, unit) pairs a thread updates each step ---------------------------------

    def pair(self, cta, tx, e, ch):
        """(batch row, unit) that thread tx updates in its e-th slot of chunk ch."""
        if self.LANE:
            return (ch * self.BC + self.chunk_row(tx, e),
                    (cta % self.CPD) * self.TW + (tx // self.WS) * self.UG + tx % self.WS % self.UG)
        q = e * self.NT + tx
        return ch * self.BC + q // self.TW, (cta % self.CPD) * self.TW + q % self.TW

    def chunk_row(self, tx, e):
        """The batch row (within its chunk) of thread tx's e-th pair."""
        return tx % self.WS // self.UG if self.LANE else (e * self.NT + tx) // self.TW

    def owns_unit(self, tx, e):
        """Whether thread tx's e-th slot is a pair of some batch row (its unit exists)."""
        if self.LANE:
            return both(tx // self.WS < self.NG, tx % self.WS < self.UG * self.BC)
        return e * self.NT + tx < self.BC * self.TW

    def owns(self, cta, tx, e, ch, n_b):
        """Whether thread tx's e-th slot is a pair of chunk ch whose batch row exists."""
        return both(self.owns_unit(tx, e), self.pair(cta, tx, e, ch)[0] < n_b)

    # --- the gate rows a lane holds (FMA units) --------------------------------------------------

    def weight_row(self, cta, tx, q):
        """Row of R (within direction) that register row q of thread tx holds: the group's rows
        are gate-major, or (lane updates) unit-major, each unit's G gates together."""
        if self.LANE:
            gate, unit = q % self.G, (tx // self.WS) * self.UG + q // self.G
        else:
            gate, unit = ((tx // self.WS) * self.RPG + q) // self.TW, ((tx // self.WS) * self.RPG + q) % self.TW
        return (self.GATE0 + gate) * self.H + (cta % self.CPD) * self.TW + unit

    def gate_pos(self, g, jl):
        """Where gate g of the CTA's unit jl sits in the dot results (`gs`, in work-group order)."""
        return (jl // self.UG) * self.RPG + (jl % self.UG) * self.G + g if self.LANE else g * self.TW + jl

    def col(self, lane, i, v):
        """Column of R (and unit of h) that lane `lane` multiplies in its i-th run, element v."""
        return self.DV * (lane + self.WS * i) + v

    def group_active(self, group_first_row, phase):
        """Whether a work group computes in `phase`: in the two-phase GRU, groups whose rows are all
        z/r rows (phase 1) or all candidate rows (phase 2) skip the other phase; mixed groups never do."""
        if phase == 0 or self.TW % self.RPG:
            return True
        return group_first_row // self.TW < 2 if phase == 1 else group_first_row // self.TW >= 2

    # --- the gate rows a warp holds (tensor cores) -----------------------------------------------

    def mma_row_in_tile(self, tx, j):
        """The CTA's gate row (gate-major) of A-fragment register j of thread tx: its warp's row
        tile (warps cycle over row tiles first), fragment row lane / 4, +8 for registers 1 and 3."""
        return (tx // 32 % self.RT) * 16 + tx % 32 // 4 + 8 * (j % 2)

    def mma_row(self, cta, tx, j):
        """Row of R (within direction) of A-fragment register j of thread tx."""
        lr = self.mma_row_in_tile(tx, j)
        return (lr // self.TW) * self.H + (cta % self.CPD) * self.TW + lr % self.TW

    def mma_col(self, tx, i, j):
        """Column of R of A-fragment register j in the warp's i-th k-tile: lane % 4, +4 for 2 and 3."""
        return ((tx // 32 // self.RT) * self.KPW + i) * 8 + tx % 4 + 4 * (j // 2)

    def streamed_word(self, cta, tx, i, j):
        """The workspace word that holds A-fragment register j of thread tx's i-th k-tile read
        each step (of its last GK): after the barrier's words, by the CTA's place in its batch
        tile, k-tile and register, then thread, so that a warp reads 32 consecutive words (every
        batch tile's CTA of the same units writes the same pairs)."""
        return WORKSPACE_WORDS + (((cta % self.NCTA) * self.GK + i) * 4 + j) * self.NT + tx

    def mma_col_f16(self, tx, i, j, e):
        """fp16 (m16n8k16): column of R of half e of A-fragment register j in the warp's i-th
        k-tile: 2 * (lane % 4) + e, +8 for registers 2 and 3 (B fragments: the same k, j < 2)."""
        return ((tx // 32 // self.RT) * self.KPW + i) * 16 + 2 * (tx % 4) + e + 8 * (j // 2)

    # --- h through distributed shared memory (dsmem) --------------------------------------------

    def dsmem_store(self, cta, tx, e):
        """(peer rank, batch row within the chunk, first unit) of thread tx's e-th 16-byte store of
        its CTA's units of h(t): store q = e * NT + tx goes to the q // (BC * TW / 4) + 1-th rank
        after the CTA's own, so that each peer receives every row of the CTA's TW units once."""
        per_peer, per_row = self.BC * self.TW // 4, self.TW // 4
        q = e * self.NT + tx
        rank = cta % self.CPD
        return ((rank + q // per_peer + 1) % self.CPD, q % per_peer // per_row,
                rank * self.TW + q % per_row * 4)

    def sends(self, tx, e):
        """Whether thread tx's e-th store exists."""
        return e * self.NT + tx < self.SENDS

    # --- steps, barriers and the exchange buffer's slots ----------------------------------------

    def barrier_index(self, s, phase):
        """Barrier k (k CTAs of a direction have arrived k times) ending `phase` of step s; 1 is init's."""
        return self.phases * s + phase + 1

    def phase_slot(self, phase, s):
        """The exchange slot a phase reads: r * h(t-1) in the two-phase GRU's second, else h(t-1)."""
        return 2 if phase == 2 else s % 2

    def partial_slot(self, parity, gate, cta):
        """Exchange slot of one CTA's partial sums of gate z (0) or r (1), by step parity."""
        return 3 + (parity * 2 + gate) * self.CPD + cta % self.CPD
