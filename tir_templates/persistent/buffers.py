"""The buffers a persistent kernel's macros share, grouped by role so that a macro takes a few
names: `Args` (the kernel's signature), `Thread` (who runs: CTA, thread, and the registers it
holds), `Shared` (a CTA's shared memory). TVMScript passes any Python object into a macro
(`T.meta_var`), and reads its attributes as the buffers they hold.

A macro that names a value computed from the thread's indices (`d = L.dir_of(cta)`) first
binds `cta, tx = t.cta, t.tx`: TVMScript gives a known variable a local copy under the new
name, but renames one it has not seen in the macro (a hygienic macro sees only its parameters),
which would rename the loop variable itself when the value is the bare index.

The allocating functions run while the kernel is parsed, in the order (and under the names) the
template always allocated them, so the generated code does not change with the grouping.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder

from .layout import Layout


@dataclasses.dataclass(frozen=True)
class Args:
    """The recurrence signature's tensors (`signature.py`) and the runtime extents T and B."""
    xw: Any
    r: Any
    rb: Any
    lens: Any
    h0: Any
    c0: Any
    p: Any
    y: Any
    yh: Any
    yc: Any
    hb: Any
    ws: Any
    n_t: Any
    n_b: Any


@dataclasses.dataclass(frozen=True)
class Registers:
    """What a thread keeps in registers: its weights (`wreg`, int8 ones as packed words and each
    row's scale; the runs that did not fit live in shared memory, `wsm`), each pair's inputs (`xr`, and step s+1's in `xn`), recurrent biases,
    sequence lengths and h(t) (with 16-bit exchange also the fp32 h(t-1), `hp`; with stamped halves h(t)'s 16 bits, `hh`); the partial-sum GRU's rows of R_z, R_r (`wp`); scratch for the dot
    products. On the GPU each is the thread's own (row 0); in the CPU twin one row per (CTA, thread)."""
    wreg: Any
    wsm: Any
    xr: Any
    xn: Any
    rbr: Any
    nv: Any
    hn: Any
    wp: Any
    sacc: Any
    wt: Any = None
    acc: Any = None
    hv: Any = None
    bv: Any = None
    wq: Any = None
    hq: Any = None
    hp: Any = None
    hh: Any = None

    def swapped(self) -> Registers:
        """The two input register sets exchanged (a resident CTA alternates them by step parity)."""
        return dataclasses.replace(self, xr=self.xn, xn=self.xr)


@dataclasses.dataclass(frozen=True)
class Thread:
    """One thread of one CTA: `row` is its row of the register buffers, `block` its CTA's block of
    the shared-memory weights (both 0 on the GPU)."""
    regs: Registers
    cta: Any
    tx: Any
    row: Any = 0
    block: Any = 0

    def __getattr__(self, name):  # t.xr: the thread's registers by name
        if name == "regs":
            raise AttributeError(name)
        return getattr(self.regs, name)

    def swapped(self) -> Thread:
        return dataclasses.replace(self, regs=self.regs.swapped())


@dataclasses.dataclass(frozen=True)
class Shared:
    """A CTA's shared memory: h(t-1) (`hs`; a resident CTA's second copy `hs2`), the dot results
    (`gs`), the partial-sum GRU's r * h(t-1) (`rs`) and its tile of h (`hm`), and a dsmem
    cluster's mbarriers, one per copy of h (`bar`)."""
    hs: Any
    hs2: Any
    gs: Any
    rs: Any
    hm: Any
    bar: Any = None


def _alloc(name, shape, dtype, scope=None):
    buf = T.alloc_buffer(shape, dtype) if scope is None else T.alloc_buffer(shape, dtype, scope=scope)
    IRBuilder.name(name, buf)
    return buf


def cta_buffers(L: Layout, cta, tx) -> tuple[Thread, Shared]:
    """A CUDA thread's registers and its CTA's shared memory."""
    # the two copies of h of a resident CTA (or a dsmem cluster) stay in static shared memory: TVM
    # merges dynamic shared allocations into one buffer, and its sync planner would then see the
    # copies overlap
    hs = _alloc("hs", L.HS_SHAPE, L.HS_DTYPE, "shared" if L.h_on_chip else L.SMEM)
    hs2 = _alloc("hs2", L.HS_SHAPE if L.h_on_chip else (1, 1), "float32", "shared")
    gs = _alloc("gs", (1, 1) if L.LANE else (L.KS * L.BC, L.GTW), "float32", "shared")
    # no register array where every weight lives off registers: TVM compacts an array nothing
    # reads to zero elements, which its CUDA codegen cannot allocate
    weight_regs = L.cfg.weight_regs(L.spec)
    wreg = _alloc("wreg", (1, weight_regs), "uint32" if L.F16 or L.INT8 else L.WDT, "local") if weight_regs else None
    if L.SK:  # a warp's last SK k-tiles of A fragments: word j of k-tile i at [0, 4 i + j, tx]
        wsm = _alloc("wsm", (1, 4 * L.SK, L.NT), "uint32", L.SMEM)
    else:
        wsm = _alloc("wsm", (1, L.SR * L.RPG * L.DV, L.NT) if L.SR > 0 else (1, 1, 1), L.WDT,
                     L.SMEM if L.SR > 0 else "local")
    wt = _alloc("wt", (L.RPG * L.DV if L.SR > 0 or L.GR > 0 else 1,), L.WDT, "local")
    acc = _alloc("acc", (max(L.RPG * L.BC, L.NTL * 4 * L.ACC_SETS),), "float32", "local")
    hv = _alloc("hv", (L.DV,), "float32", "local")
    bv = _alloc("bv", (2,), "float32", "local")
    xr = _alloc("xr", (1, L.UPT * L.XR), "float32", "local")
    xn = _alloc("xn", (1, L.UPT * L.XR), "float32", "local")
    rbr = _alloc("rbr", (1, L.UPT * L.G), "float32", "local")
    nv = _alloc("nv", (1, L.UPT), "int64", "local")
    hn = _alloc("hn", (1, L.UPT), "float32", "local")
    rs = _alloc("rs", (L.BC, L.H) if L.partial_sums else (1, 1), "float32", L.SMEM)
    hm = _alloc("hm", (L.BC, L.TW) if L.partial_sums else (1, 1), "float32", "shared")
    wp = _alloc("wp", (1, max(L.PR * L.TW, 1)), L.WDT, "local")
    sacc = _alloc("sacc", (1, 1), "float32", "local")
    bar = _alloc("bar", (2,), "uint64", "shared") if L.dsmem else None
    # int8 weights: a packed word's four floats, and h(t-1)'s columns of a run for each batch row
    wq = _alloc("wq", (4,), "uint32", "local") if L.INT8 else None
    hq = _alloc("hq", (L.BC * L.DV,), "float32", "local") if L.INT8 else None
    hp = _alloc("hp", (1, L.UPT), "float32", "local") if L.H16 else None
    hh = _alloc("hh", (1, L.UPT), "uint32", "local") if L.HALVES else None
    regs = Registers(wreg, wsm, xr, xn, rbr, nv, hn, wp, sacc, wt, acc, hv, bv, wq, hq, hp, hh)
    return Thread(regs, cta, tx), Shared(hs, hs2, gs, rs, hm, bar)


def emulated_registers(L: Layout, n_b) -> Registers:
    """Every thread's registers in the CPU twin, one row per (CTA, thread)."""
    rows = L.grid_size(n_b) * L.NT
    xr = _alloc("xr", (rows, L.UPT * L.XR), "float32")
    xn = _alloc("xn", (rows, L.UPT * L.XR), "float32")
    nv = _alloc("nv", (rows, L.UPT), "int64")
    hn = _alloc("hn", (rows, L.UPT), "float32")
    wp = _alloc("wp", (rows, max(L.PR * L.TW, 1)), L.WDT)
    sacc = _alloc("sacc", (rows, 1), "float32")
    rbr = _alloc("rbr", (rows, L.UPT * L.G), "float32")
    wreg = _alloc("wreg", (rows, max(L.cfg.weight_regs(L.spec), 1)), "uint32" if L.F16 or L.INT8 else L.WDT)
    if L.SK:
        wsm = _alloc("wsm", (L.grid_size(n_b), 4 * L.SK, L.NT), "uint32")
    else:
        wsm = _alloc("wsm", (L.grid_size(n_b), max(L.SR * L.RPG * L.DV, 1), L.NT), L.WDT)
    hp = _alloc("hp", (rows, L.UPT), "float32") if L.H16 else None
    return Registers(wreg, wsm, xr, xn, rbr, nv, hn, wp, sacc, hp=hp)


def emulated_thread(L: Layout, regs: Registers, cta, tx) -> Thread:
    """Thread tx of CTA `cta` in the CPU twin: its row of every register buffer."""
    return Thread(regs, cta, tx, row=cta * L.NT + tx, block=cta)
