"""Who owns what in the wavefront kernel: which CTAs run which layer, which gate rows and
columns a lane holds, which (batch row, unit) pairs a thread updates. Plain Python on ints or TIR
expressions, as `persistent/layout.py`:

    L, H, G     layers, hidden units, gates          NT, NG  threads and warps per CTA
    RPG[l]      gate rows a warp owns in layer l      TW[l]   units a CTA of layer l owns
    CPL[l]      CTAs of layer l                       FIRST[l] its first CTA
    KPL[l]      columns a lane holds a row (layer 0: H / 32; above it 2H / 32, W's then R's)
    XK[l]       of those, W's (the input part; 0 for layer 0)
    BC          batch rows per chunk                  NCTA    CTAs of the launch
    PARTS[l]    dot-product sums a row keeps: 1 (layer 0), 2 above it (input and recurrent apart)
"""
from __future__ import annotations

from ..persistent.layout import both
from ..spec import CellSpec
from .plan import LANES, StackConfig


class StackLayout:
    """The constants and index maps of one (stack, config); `emulate`: the CPU twin's (no fast math)."""

    def __init__(self, specs: list[CellSpec], cfg: StackConfig, emulate: bool = False):
        self.specs, self.cfg, self.emulate = specs, cfg, emulate
        spec = specs[0]
        self.L, self.H, self.G = len(specs), spec.hidden_size, spec.num_gates
        self.lstm = spec.cell == "lstm"
        self.NT, self.NG, self.BC = cfg.threads, cfg.threads // LANES, cfg.batch_chunk
        self.RPG = tuple(cfg.rows_per_group)
        self.TW = tuple(self.NG * r // self.G for r in self.RPG)
        self.CPL = tuple(self.H // tw for tw in self.TW)
        self.FIRST = tuple(sum(self.CPL[:layer]) for layer in range(self.L))
        self.NCTA = sum(self.CPL)
        self.XK = tuple(0 if layer == 0 else self.H // LANES for layer in range(self.L))
        self.KPL = tuple(self.XK[layer] + self.H // LANES for layer in range(self.L))
        self.PARTS = tuple(1 if layer == 0 else 2 for layer in range(self.L))
        self.FAST = not emulate
        self.TW_MAX = max(self.TW)
        self.WREG_MAX = max(r * k for r, k in zip(self.RPG, self.KPL))  # the CPU twin's register rows
        self.PAIRS_MAX = max(self.pairs(layer) for layer in range(self.L))

    def owns_cta(self, layer, cta):
        """Whether `cta` runs `layer` (CTAs go to the layers in order)."""
        return both(self.FIRST[layer] <= cta, cta < self.FIRST[layer] + self.CPL[layer])

    def active(self, layer, s, n_t):
        """Whether `layer` computes at wavefront step s (its time step s - layer exists)."""
        return both(layer <= s, s < n_t + layer)

    def row(self, layer, c, tx, q):
        """Row of layer's gate matrices (gate-major, G * H rows) of warp tx // 32's q-th row, in
        the layer's c-th CTA: a CTA's rows are its TW units' G gates, gate-major."""
        local = (tx // LANES) * self.RPG[layer] + q
        return (local // self.TW[layer]) * self.H + c * self.TW[layer] + local % self.TW[layer]

    def col(self, lane, i):
        """Column (of [h below ; h] for layers above the first) of a lane's i-th weight: stride 32,
        so a warp's loads of h from shared memory hit 32 banks."""
        return lane + LANES * i

    def state_slots(self, layer, n_b):
        """Slots per thread when setting up or reading out the CTA's states (all batch rows)."""
        return (n_b * self.TW[layer] + self.NT - 1) // self.NT

    def state_row(self, layer, tx, e):
        """Batch row of thread tx's e-th slot when setting up or reading out states."""
        return (e * self.NT + tx) // self.TW[layer]

    def state_unit(self, layer, c, tx, e):
        """Unit of thread tx's e-th slot when setting up or reading out states (CTA c of the layer)."""
        return c * self.TW[layer] + (e * self.NT + tx) % self.TW[layer]

    def pair(self, layer, c, tx, e):
        """(row within the chunk, unit) of thread tx's e-th (batch row, unit) pair."""
        q = e * self.NT + tx
        return q // self.TW[layer], c * self.TW[layer] + q % self.TW[layer]

    def pairs(self, layer):
        """Pair slots per thread (each covers NT of the chunk's BC * TW pairs)."""
        return (self.BC * self.TW[layer] + self.NT - 1) // self.NT

    def owns_pair(self, layer, tx, e):
        return e * self.NT + tx < self.BC * self.TW[layer]

    def chunks(self, n_b):
        return (n_b + self.BC - 1) // self.BC

    def gate_slot(self, layer, g, c_unit):
        """Where gate g of the CTA's unit c_unit (0 .. TW-1) sits in the dot results."""
        return g * self.TW[layer] + c_unit

    def LANES_K(self, layer):
        """Columns of the layer's shared copy of h: [h below ; h] above the first layer, else h."""
        return self.KPL[layer] * LANES
