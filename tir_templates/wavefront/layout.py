"""Who owns what in the wavefront kernel: which cluster runs which layer, which gate rows and
columns a lane holds, which (batch row, unit) pairs a thread updates. Plain Python on ints or TIR
expressions, as `persistent/layout.py`:

    L, H, G     layers, hidden units, gates          NT, NG  threads and warps per CTA
    C           CTAs of a layer (one cluster)         TW      units a CTA owns (H / C, every layer)
    RPG         gate rows a warp owns
    KPL[l]      columns a lane holds a row (layer 0: H / 32; above it 2H / 32, W's then R's)
    XK[l]       of those, W's (the input part; 0 for layer 0)
    BC          batch rows a tile                     TILES   batch tiles (each its own L clusters)
    NCTA        CTAs of the launch (TILES x L clusters)
    PARTS[l]    dot-product sums a row keeps (GRU above layer 0: input and recurrent apart)

Shared memory holds two copies, by step parity, of [h_{l-1}(t) ; h_l(t-1)] (`hs`; layer 0:
h_0(t-1)) and of the dot products' sums (`gs`), so that step t+1's loads need not wait for step
t's update.

With lane updates (`StackConfig.lane_updates`; a warp owns whole units, all their gates) a warp's rows
are its UG units' gates, unit-major; its lanes hold the sums after the shuffle and update the
warp's P = UG x BC (batch row, unit) pairs themselves, lane l the pair l % P (32 / P lanes a
pair, each computing it; lanes l < P store it). `gs` is then unused on the GPU (the CPU
twin still meets there).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..spec import CellSpec
from .plan import LANES, StackConfig, lanes_fit, padded_sums, parts


class StackLayout:
    """The constants and index maps of one (stack, config); `emulate`: the CPU twin's (no fast math)."""

    def __init__(self, specs: list[CellSpec], cfg: StackConfig, emulate: bool = False):
        self.specs, self.cfg, self.emulate = specs, cfg, emulate
        spec = specs[0]
        self.L, self.H, self.G = len(specs), spec.hidden_size, spec.num_gates
        self.lstm = spec.cell == "lstm"
        self.NT, self.NG, self.BC = cfg.threads, cfg.threads // LANES, cfg.batch_chunk
        self.C, self.RPG = cfg.cluster, cfg.rows_per_group
        self.TW = self.H // self.C
        self.TILES = cfg.batch_tiles
        self.NCTA = self.TILES * self.L * self.C
        self.XK = tuple(0 if layer == 0 else self.H // LANES for layer in range(self.L))
        self.KPL = tuple(self.XK[layer] + self.H // LANES for layer in range(self.L))
        self.PARTS = tuple(parts(spec, layer) for layer in range(self.L))
        self.FAST = not emulate
        self.WREG_MAX = max(self.RPG * k for k in self.KPL)  # the CPU twin's register rows
        self.LANE = cfg.lane_updates
        assert not self.LANE or lanes_fit(spec, cfg), f"{cfg}: lane updates need whole units a warp and 32 sums a lane"
        self.UG = self.RPG // self.G if self.LANE else 0  # units a warp owns (lane updates)
        self.P = self.UG * self.BC  # (batch row, unit) pairs a warp updates (lane updates)
        self.PAIRS = 1 if self.LANE else (self.BC * self.TW + self.NT - 1) // self.NT
        # the layer's h(t) between a cluster's CTAs: 16-byte stores into every peer's shared memory
        self.SENDS = (self.C - 1) * self.BC * self.TW // 4
        self.RECV_BYTES = 16 * self.SENDS
        # both copies of [h below ; h] and of the sums in static shared memory up to 44 KiB (48 KiB
        # is the static limit), else [h below ; h] in dynamic shared memory
        self.HS_SCOPE = "shared" if (2 * self.BC * 2 * self.H + 4 * self.BC * self.G * self.TW) * 4 <= 44 * 1024 \
            else "shared.dyn"

    def glob(self, a, b):
        """Row of the whole batch (global memory's) of the tile's batch row b: the tile's first
        row is `a.b0` (one tile: b itself, no arithmetic)."""
        return b if self.TILES == 1 else a.b0 + b

    def in_batch(self, a, b):
        """Whether the tile's batch row b is a row of the batch (the last tile may hold fewer)."""
        in_whole_batch = T.Cast("int64", self.glob(a, b)) < a.n_b
        return in_whole_batch if self.TILES == 1 else tvm.tirx.all(b < self.BC, in_whole_batch)

    def tile_rows(self, a):
        """Batch rows a tile walks when it sets up or reads out the states (one tile: the batch)."""
        return a.n_b if self.TILES == 1 else self.BC

    def row(self, layer, c, tx, q):
        """Row of layer's gate matrices (gate-major, G * H rows) of warp tx // 32's q-th row, in
        the layer's c-th CTA: a CTA's rows are its TW units' G gates, gate-major (lane updates:
        the warp's units' gates, unit-major)."""
        if self.LANE:
            return q % self.G * self.H + c * self.TW + (tx // LANES) * self.UG + q // self.G
        local = (tx // LANES) * self.RPG + q
        return (local // self.TW) * self.H + c * self.TW + local % self.TW

    def col(self, lane, i):
        """Column (of [h below ; h] for layers above the first) of a lane's i-th weight: stride 32,
        so a warp's loads of h from shared memory hit 32 banks."""
        return lane + LANES * i

    def hs_row(self, t, bi):
        """Row of `hs` holding batch row bi of step t's [h below ; h]."""
        return t % 2 * self.BC + bi

    def gs_row(self, t, part, bi):
        """Row of `gs` holding batch row bi's sums of dot-product part `part` at step t."""
        return (t % 2 * 2 + part) * self.BC + bi

    def input_words(self):
        """Stamped words per thread of a step's input h_{l-1}(t) (the whole batch)."""
        return (self.BC * self.H + self.NT - 1) // self.NT

    def input_word(self, tx, e):
        """(batch row, unit) of thread tx's e-th word of the step's input."""
        return (e * self.NT + tx) // self.H, (e * self.NT + tx) % self.H

    def state_slots(self, n_b):
        """Slots per compute thread when setting up or reading out the CTA's states (all batch rows)."""
        return (n_b * self.TW + self.NT - 1) // self.NT

    def state_row(self, tx, e):
        """Batch row of thread tx's e-th slot when setting up or reading out states."""
        return (e * self.NT + tx) // self.TW

    def state_unit(self, c, tx, e):
        """Unit of thread tx's e-th slot when setting up or reading out states (CTA c of the layer)."""
        return c * self.TW + (e * self.NT + tx) % self.TW

    def pair(self, c, tx, e):
        """(batch row, unit) of thread tx's e-th (batch row, unit) pair (lane updates: its
        lane's, l % P, of the warp's units)."""
        if self.LANE:
            b, u = self.lane_pair(tx)
            return b, c * self.TW + (tx // LANES) * self.UG + u
        q = e * self.NT + tx
        return q // self.TW, c * self.TW + q % self.TW

    def owns_pair(self, tx, e):
        """Whether thread tx computes its e-th pair (lane updates: every lane on the GPU, each
        pair 32 / P times over; in the CPU twin lanes l < P alone)."""
        if self.LANE:
            return self.writes_pair(tx) if self.emulate else True
        return e * self.NT + tx < self.BC * self.TW

    def writes_pair(self, tx):
        """Whether thread tx stores the pairs it computes (lane updates: lanes l < P)."""
        return tx % LANES < self.P if self.LANE else True

    def send(self, layer, c, tx, k):
        """(peer rank, batch row, column of hs) of thread tx's k-th 16-byte store of CTA c's units
        of layer's h(t): store q = k * NT + tx goes to the q // (BC * TW / 4) + 1-th rank after c, so that
        each peer receives every row of c's TW units once, where c keeps them (the own part)."""
        per_peer, per_row = self.BC * self.TW // 4, self.TW // 4
        q = k * self.NT + tx
        return ((c + q // per_peer + 1) % self.C, q % per_peer // per_row,
                self.XK[layer] * LANES + c * self.TW + q % per_row * 4)

    def sends(self, tx, k):
        """Whether thread tx has a k-th store a step."""
        return k * self.NT + tx < self.SENDS

    def gate_slot(self, g, c_unit):
        """Where gate g of the CTA's unit c_unit (0 .. TW-1) sits in the dot results (the CTA's
        local row, `row`)."""
        if self.LANE:
            return (c_unit // self.UG) * self.RPG + (c_unit % self.UG) * self.G + g
        return g * self.TW + c_unit

    def lane_pair(self, tx):
        """(batch row, unit of the warp's) of the pair lane tx % 32 computes (lane updates)."""
        p = tx % LANES % self.P
        return p // self.UG, p % self.UG

    def live(self, layer):
        """Whether a lane keeps every batch row's sums at once (`dots.py`): always with lane
        updates, else while they number at most 32, padded (then the input part of the dot runs
        before the wait for the peers)."""
        return self.LANE or padded_sums(self.PARTS[layer] * self.RPG * self.BC) <= LANES

    def live_rows(self, layer):
        """Batch rows whose sums a lane keeps at once: all of them, or one at a time."""
        return self.BC if self.live(layer) else 1

    def held_sums(self, layer):
        """Sums a lane keeps between the dot and the shuffle: each part's, each row's, each live
        batch row's, padded to a power of two."""
        return padded_sums(self.PARTS[layer] * self.RPG * self.live_rows(layer))

    def acc_size(self, layer):
        """A thread's sums (`acc`): the held ones; with lane updates then the gathered gate sums
        of its pair."""
        if self.LANE:
            return self.held_sums(layer) + self.PARTS[layer] * self.G
        return self.held_sums(layer)

    def gathered(self, layer, part, g):
        """Where the lane's pair's sum of gate g, dot part `part`, sits in `acc` (lane updates)."""
        return self.held_sums(layer) + part * self.G + g

    def sum_index(self, layer, part, q, bi):
        """Where the sum of dot part `part`, warp row q, batch row bi sits among a lane's sums
        (one batch row at a time: bi is left out)."""
        return (part * self.RPG + q) * self.live_rows(layer) + (bi if self.live(layer) else 0)

    def sum_part(self, layer, n):
        """The dot part of the lane's n-th sum (`sum_index` undone)."""
        return n // (self.RPG * self.live_rows(layer))

    def sum_gate_row(self, layer, n):
        """The warp row of the lane's n-th sum."""
        return n // self.live_rows(layer) % self.RPG

    def sum_row(self, layer, n, bi):
        """The batch row of the lane's n-th sum (one batch row at a time: bi)."""
        return n % self.BC if self.live(layer) else bi

    def sum_lane(self, layer, n):
        """The first lane that holds sum n after the transposing shuffle (`dots.shuffle_sums`): lane l
        ends with sum l // (32 / held_sums)."""
        return n * (LANES // self.held_sums(layer))

    def held_sum(self, layer, tx):
        """The sum thread tx's lane holds after the transposing shuffle (`sum_lane` undone)."""
        return tx % LANES // (LANES // self.held_sums(layer))
