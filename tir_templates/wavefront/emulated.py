"""The wavefront kernel's CPU twin: the same step macros (`steps.py`) with CTAs and threads as
serial loops, wavefront steps outermost and every barrier a phase boundary, runnable on llvm. It
reads every weight where the kernel's loads put it, and counts barrier arrivals the way the GPU's
counter would, flagging a target that would not match (`BARRIER_FLAG_WORD`).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..persistent.exchange import BARRIER_FLAG_WORD
from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec
from .layout import StackLayout
from .plan import LANES, StackConfig, check_stack
from .signature import stack_func
from .steps import Regs, final_states, for_each_layer, init_states, load_hs, load_weights, prefetch, update


@T.macro
def emulated_dot(S, layer, cta, wreg, hs, gs):
    """`dot_and_reduce` of one CTA in the CPU twin: each row's sums as the shuffle would add its
    lanes, from the weights where `load_weights` put them."""
    for warp, q, bi in T.grid(S.NG, S.RPG[layer], S.BC):
        for part in range(S.PARTS[layer]):
            gs[part * S.BC + bi, warp * S.RPG[layer] + q] = T.float32(0)
        for lane in range(LANES):
            if S.XK[layer] > 0:
                for i in range(S.XK[layer]):
                    gs[bi, warp * S.RPG[layer] + q] = gs[bi, warp * S.RPG[layer] + q] + wreg[
                        cta * S.NT + warp * LANES + lane, q * S.KPL[layer] + i] * hs[bi, S.col(lane, i)]
            for i in range(S.H // LANES):
                gs[(S.PARTS[layer] - 1) * S.BC + bi, warp * S.RPG[layer] + q] = gs[
                    (S.PARTS[layer] - 1) * S.BC + bi, warp * S.RPG[layer] + q] + wreg[
                    cta * S.NT + warp * LANES + lane, q * S.KPL[layer] + S.XK[layer] + i] * hs[
                    bi, S.XK[layer] * LANES + S.col(lane, i)]


@T.macro
def emulated_layer_step(S, a, regs, s, layer):
    """Wavefront step s of every CTA of `layer` (if it is active then)."""
    if S.active(layer, s, a.n_t):
        for c in range(S.CPL[layer]):
            for ch in range(S.chunks(a.n_b)):
                hs = T.alloc_buffer((S.BC, 2 * S.H), "float32")
                gs = T.alloc_buffer((2 * S.BC, S.G * S.TW_MAX), "float32")
                for tx in range(S.NT):
                    prefetch(S, a, layer, c, tx, regs, (S.FIRST[layer] + c) * S.NT + tx, s - layer, ch)
                    load_hs(S, a, layer, tx, hs, s - layer, ch)
                emulated_dot(S, layer, S.FIRST[layer] + c, regs.wreg, hs, gs)
                for tx in range(S.NT):
                    update(S, a, layer, c, tx, hs, gs, regs, (S.FIRST[layer] + c) * S.NT + tx, s - layer, ch)


@T.macro
def emulated_barrier(S, a, index):
    """Every CTA arrives once, as on the GPU's counter; a count other than index * NCTA would
    hang or pass early on the GPU: flag it."""
    a.ws[0] = a.ws[0] + T.uint32(S.NCTA)
    if a.ws[0] != T.Cast("uint32", index * S.NCTA):
        a.ws[BARRIER_FLAG_WORD] = T.uint32(1)


@T.macro
def emulated_layer_setup(S, a, regs, layer):
    """Weights and states of every CTA and thread of `layer`."""
    for c, tx in T.grid(S.CPL[layer], S.NT):
        load_weights(S, a, layer, c, tx, regs.wreg, (S.FIRST[layer] + c) * S.NT + tx)
        init_states(S, a, layer, c, tx)


@T.macro
def emulated_layer_finish(S, a, layer):
    """Final states of every CTA and thread of `layer`."""
    for c, tx in T.grid(S.CPL[layer], S.NT):
        final_states(S, a, layer, c, tx)


@T.macro
def emulated_stack(S, a):
    """Every CTA's program, CTAs and threads as serial loops, wavefront steps outermost."""
    wreg = T.alloc_buffer((S.NCTA * S.NT, S.WREG_MAX), "float32")
    xin = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS_MAX * (S.G + 1)), "float32")
    nv = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS_MAX), "int64")
    hn = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS_MAX), "float32")
    regs = T.meta_var(Regs(wreg, xin, nv, hn))
    for i in range(WORKSPACE_WORDS):
        a.ws[i] = T.uint32(0)
    for_each_layer(S, emulated_layer_setup, a, regs)
    emulated_barrier(S, a, 1)
    for s in range(a.n_t + S.L - 1):
        for_each_layer(S, emulated_layer_step, a, regs, s)
        emulated_barrier(S, a, s + 2)
    for_each_layer(S, emulated_layer_finish, a)


def emulated_stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm): for tests."""
    check_stack(specs)
    S = StackLayout(specs, cfg, emulate=True)

    @T.macro
    def body(a):
        emulated_stack(S, a)

    return stack_func(specs, body)
