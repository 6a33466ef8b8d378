"""The wavefront kernel's CPU twin: the same thread-level macros (`steps.py`) with CTAs and threads
as serial loops, runnable on llvm. Layers run one after another (a schedule the pipeline allows:
a layer only ever waits for the one below), each layer's steps in order, every CTA's step before
the next step, batch tile after batch tile. It reads every weight where the kernel's loads put
it, and every h where the stamps say, flagging a read whose stamp is not there (on the GPU it
would spin: `BARRIER_FLAG_WORD`). A layer's own h(t-1) comes from the stamped words here, where the GPU's
cluster sends it between its CTAs' shared memory (that map is tested in `layout.send`'s test).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..built_once import built_once
from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec
from .layout import StackLayout
from .plan import LANES, StackConfig, check_stack
from .signature import stack_func
from .steps import (Regs, final_states, for_each_layer, init_states, load_constants, load_h0, load_own_stamped,
                    load_projection, load_weights, settle_input, update)


@T.macro
def emulated_dot(S, layer, cta, wreg, hs, gs, t):
    """`dot_and_reduce` of one CTA in the CPU twin: each row's sums as the shuffle would add its
    lanes, from the weights where `load_weights` put them."""
    for warp, q, bi in T.grid(S.NG, S.RPG, S.BC):
        for part in range(S.PARTS[layer]):
            gs[S.gs_row(t, part, bi), warp * S.RPG + q] = T.float32(0)
        for lane in range(LANES):
            if S.XK[layer] > 0:
                for i in range(S.XK[layer]):
                    gs[S.gs_row(t, 0, bi), warp * S.RPG + q] = gs[S.gs_row(t, 0, bi), warp * S.RPG + q] + wreg[
                        cta * S.NT + warp * LANES + lane, q * S.KPL[layer] + i] * hs[S.hs_row(t, bi), S.col(lane, i)]
            for i in range(S.H // LANES):
                gs[S.gs_row(t, S.PARTS[layer] - 1, bi), warp * S.RPG + q] = gs[
                    S.gs_row(t, S.PARTS[layer] - 1, bi), warp * S.RPG + q] + wreg[
                    cta * S.NT + warp * LANES + lane, q * S.KPL[layer] + S.XK[layer] + i] * hs[
                    S.hs_row(t, bi), S.XK[layer] * LANES + S.col(lane, i)]


@T.macro
def emulated_layer(S, a, regs, layer):
    """Every CTA and thread of `layer`'s cluster: set-up, steps, final states."""
    raw = T.alloc_buffer((1,), "uint64")  # the GPU's issued loads; the twin reads at settle time
    for c, tx in T.grid(S.C, S.NT):
        load_weights(S, a, layer, c, tx, regs.wreg, (layer * S.C + c) * S.NT + tx)
        init_states(S, a, layer, c, tx)
        load_constants(S, a, layer, c, tx, regs, (layer * S.C + c) * S.NT + tx)
    for t in range(a.n_t):
        for c in range(S.C):
            hs = T.alloc_buffer((2 * S.BC, 2 * S.H), "float32")
            gs = T.alloc_buffer((4 * S.BC, S.G * S.TW), "float32")
            for tx in range(S.NT):
                if t == 0:
                    load_h0(S, a, layer, tx, hs)
                else:
                    load_own_stamped(S, a, layer, tx, hs, t)
                if layer > 0:
                    settle_input(S, a, layer, tx, hs, raw, regs, (layer * S.C + c) * S.NT + tx, t)
                else:
                    load_projection(S, a, c, tx, regs, (layer * S.C + c) * S.NT + tx, t)
            emulated_dot(S, layer, layer * S.C + c, regs.wreg, hs, gs, t)
            for tx in range(S.NT):
                update(S, a, layer, c, tx, hs, gs, regs, (layer * S.C + c) * S.NT + tx, t)
    for c, tx in T.grid(S.C, S.NT):
        final_states(S, a, layer, c, tx, raw)


@T.macro
def emulated_tiles(S, a, regs, layer):
    """`emulated_layer` for each batch tile in turn (one tile: the whole batch)."""
    if S.TILES == 1:
        emulated_layer(S, a, regs, layer)
    else:
        for tile in range(S.TILES):
            tile_args = T.meta_var(a.tile(tile * S.BC))
            emulated_layer(S, tile_args, regs, layer)


@T.macro
def emulated_stack(S, a):
    """Every cluster's program, layer after layer, CTAs and threads as serial loops."""
    wreg = T.alloc_buffer((S.NCTA * S.NT, S.WREG_MAX), "float32")
    xin = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS * (S.G + 1)), "float32")
    rb = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS * S.G), "float32")
    nv = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS), "int64")
    hn = T.alloc_buffer((S.NCTA * S.NT, S.PAIRS), "float32")
    in_len = T.alloc_buffer((S.NCTA * S.NT, max(S.input_words(), 1)), "int64")
    regs = T.meta_var(Regs(wreg, xin, rb, nv, hn, in_len))
    for i in range(WORKSPACE_WORDS):
        a.ws[i] = T.uint32(0)
    for_each_layer(S, emulated_tiles, a, regs)


@built_once
def emulated_stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm): for tests."""
    check_stack(specs)
    S = StackLayout(specs, cfg, emulate=True)

    @T.macro
    def body(a):
        emulated_stack(S, a)

    return stack_func(specs, body)
