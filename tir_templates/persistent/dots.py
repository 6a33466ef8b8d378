"""The CTA's gate rows times h(t-1): on the tensor cores (`dot_mma.py`) or on the FMA units
(`dot_fma.py`), chosen by `Config.mma_k_split`. A new way to compute the step's dot products
(the HMMA step) goes in a file of its own and is chosen here."""
from __future__ import annotations

from tvm.script import tirx as T

from .dot_fma import dot_and_reduce, emulated_dot, load_weights
from .dot_mma import emulated_mma_dot, mma_dot, mma_load_weights


@T.macro
def weights_in(L, a, t):
    """The thread's weights, as mma fragments or as the FMA units' runs of columns."""
    if L.MMA:
        mma_load_weights(L, a, t)
    else:
        load_weights(L, a, t)


@T.macro
def dot_products(L, a, t, hs, gs, phase):
    """The CTA's gate rows times h(t-1) into `gs` (or, with lane updates, the lanes' registers)."""
    if L.MMA:
        mma_dot(L, a, t, hs, gs)
    else:
        dot_and_reduce(L, a, t, hs, gs, phase)


@T.macro
def emulated_dot_products(L, a, regs, hs, gs, cta, phase):
    """`dot_products` of one CTA in the CPU twin."""
    if L.MMA:
        emulated_mma_dot(L, a, regs, hs, gs, cta)
    else:
        emulated_dot(L, a, regs, hs, gs, cta, phase)
