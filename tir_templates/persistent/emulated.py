"""The CPU twin of `kernel.py`: the same macros with CTAs and threads as serial loops and every
barrier a phase boundary (steps outermost), runnable on llvm. It checks the tiling and index
arithmetic numerically on a machine without a GPU: it reads every weight where the kernel's
loads put it, and counts barrier arrivals the way the GPU's counter would, flagging a target
that would not match (`exchange.BARRIER_FLAG_WORD`).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..built_once import built_once
from ..config import Config
from ..signature import WORKSPACE_WORDS, recurrence_func
from ..spec import CellSpec
from .buffers import Args, emulated_registers, emulated_thread
from .checks import check
from .dot_fma import emulated_dot
from .dot_mma import pack_streamed_fragments
from .dots import emulated_dot_products, weights_in
from .exchange import (emulated_barrier, emulated_dsmem_exchange, emulated_end_of_step, final_state, h_into_shared, init_state,
                       load_h, resident_states_out)
from .h16_exchange import keep_h_prev, own_h_prev
from .gru_partial_sums import load_partial_weights, partial_update, publish_partials, reset_from_partials, tile_state
from .gru_two_phase import candidate_phase, reset_phase
from .inputs import advance, chunk_ahead_inputs, chunk_inputs, fetch, fetch_valid, load_biases, load_lengths
from .layout import Layout
from .update import update


@T.macro
def emulated_step(L, a, regs, hs, hs_next, cta, s):
    """`kernel.one_step` of one CTA (the one-chunk path), h(t-1) already in `hs`."""
    gs = T.alloc_buffer((L.KS * L.BC, L.GTW), "float32")
    emulated_dot_products(L, a, regs, hs, gs, cta, 0)
    for tx in range(L.NT):
        t = T.meta_var(emulated_thread(L, regs, cta, tx))
        if hs_next is None:
            fetch(L, a, t, t.xn, s + 1, L.first_chunk(cta), False)
            if L.H16:
                keep_h_prev(L, t)
        else:
            fetch_valid(L, a, t, t.xn, s + 1)
        update(L, a, t, hs, gs, s, L.first_chunk(cta), hs_next)
        advance(L, t, hs_next is not None)


@T.macro
def emulated_chunked_step(L, a, regs, s):
    """Step s of `kernel.chunked_steps` for every CTA and chunk: the chunk's inputs (the next
    chunk's projections into `xn`), dot products, update, the projections moved up."""
    for cta in range(L.grid_size(a.n_b)):
        for ch in range(L.chunks(a.n_b)):
            hs = T.alloc_buffer(L.TWIN_HS_SHAPE, L.HS_DTYPE)
            gs = T.alloc_buffer((L.KS * L.BC, L.GTW), "float32")
            for tx in range(L.NT):
                chunk_ahead_inputs(L, a, emulated_thread(L, regs, cta, tx), hs, s, ch)
            emulated_dot_products(L, a, regs, hs, gs, cta, 0)
            for tx in range(L.NT):
                t = T.meta_var(emulated_thread(L, regs, cta, tx))
                update(L, a, t, hs, gs, s, ch, None)
                advance(L, t, False)


@T.macro
def emulated_phase(L, a, regs, s, phase):
    """Step s's `phase` for every CTA and chunk (the chunked paths): inputs, dot products, then
    the phase's update (0: the cell's only phase; 1, 2: the two-phase GRU's)."""
    for cta in range(L.grid_size(a.n_b)):
        for ch in range(L.chunks(a.n_b)):
            hs = T.alloc_buffer(L.TWIN_HS_SHAPE, L.HS_DTYPE)
            gs = T.alloc_buffer((L.KS * L.BC, L.GTW), "float32")
            for tx in range(L.NT):
                chunk_inputs(L, a, emulated_thread(L, regs, cta, tx), hs, s, ch, L.phase_slot(phase, s), phase == 0)
            emulated_dot_products(L, a, regs, hs, gs, cta, phase)
            for tx in range(L.NT):
                t = T.meta_var(emulated_thread(L, regs, cta, tx))
                if phase == 0:
                    update(L, a, t, hs, gs, s, ch, None)
                elif phase == 1:
                    reset_phase(L, a, t, hs, gs, s, ch)
                else:
                    candidate_phase(L, a, t, gs, s, ch)


@T.macro
def emulated_partial_sum_steps(L, a, regs):
    """`kernel.partial_sum_steps` for every CTA and chunk."""
    for s in range(a.n_t):
        for cta in range(L.grid_size(a.n_b)):
            for ch in range(L.chunks(a.n_b)):
                hs = T.alloc_buffer((L.BC, L.H), "float32")
                rs = T.alloc_buffer((L.BC, L.H), "float32")
                gs = T.alloc_buffer((L.BC, L.GTW), "float32")
                hm = T.alloc_buffer((L.BC, L.TW), "float32")
                for tx in range(L.NT):
                    chunk_inputs(L, a, emulated_thread(L, regs, cta, tx), hs, s, ch, s % 2, False)
                for tx in range(L.NT):
                    reset_from_partials(L, a, emulated_thread(L, regs, cta, tx), hs, rs, s, ch)
                emulated_dot(L, a, regs, rs, gs, cta, 0)
                for tx in range(L.NT):
                    partial_update(L, a, emulated_thread(L, regs, cta, tx), hs, gs, hm, s, ch)
                for tx in range(L.NT):
                    publish_partials(L, a, emulated_thread(L, regs, cta, tx), hm, (s + 1) % 2, ch)
        emulated_barrier(L, a, L.barrier_index(s, 1))


@T.macro
def emulated_dsmem_steps(L, a, regs):
    """`kernel.one_chunk_steps` of a dsmem cluster: every CTA's step in pairs (hs -> hs2 -> hs,
    each CTA's copies a view of one buffer), then the exchange between the CTAs' copies."""
    hs_all = T.alloc_buffer((L.grid_size(a.n_b), L.BC, L.H), "float32")
    hs2_all = T.alloc_buffer((L.grid_size(a.n_b), L.BC, L.H), "float32")
    for cta in range(L.grid_size(a.n_b)):
        hs = T.decl_buffer((L.BC, L.H), "float32", data=hs_all.data, elem_offset=cta * L.BC * L.H)
        for tx in range(L.NT):
            load_h(L, a, emulated_thread(L, regs, cta, tx), hs, 0, L.first_chunk(cta))
    for s2 in range((a.n_t + 1) // 2):
        for cta in range(L.grid_size(a.n_b)):
            hs = T.decl_buffer((L.BC, L.H), "float32", data=hs_all.data, elem_offset=cta * L.BC * L.H)
            hs2 = T.decl_buffer((L.BC, L.H), "float32", data=hs2_all.data, elem_offset=cta * L.BC * L.H)
            emulated_step(L, a, regs, hs, hs2, cta, 2 * s2)
        emulated_dsmem_exchange(L, a, hs2_all, 2 * s2)
        if 2 * s2 + 1 < a.n_t:
            for cta in range(L.grid_size(a.n_b)):
                hs = T.decl_buffer((L.BC, L.H), "float32", data=hs_all.data, elem_offset=cta * L.BC * L.H)
                hs2 = T.decl_buffer((L.BC, L.H), "float32", data=hs2_all.data, elem_offset=cta * L.BC * L.H)
                emulated_step(L, a, regs.swapped(), hs2, hs, cta, 2 * s2 + 1)
            emulated_dsmem_exchange(L, a, hs_all, 2 * s2 + 1)
    for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
        resident_states_out(L, a, emulated_thread(L, regs, cta, tx))


@T.macro
def emulated_one_chunk_steps(L, a, regs):
    """`kernel.one_chunk_steps`: a resident CTA runs its steps in pairs, h kept in its two
    copies (CTAs never meet); otherwise a grid barrier sits between two steps."""
    for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
        t = T.meta_var(emulated_thread(L, regs, cta, tx))
        load_lengths(L, a, t, L.first_chunk(cta))
        fetch(L, a, t, t.xr, 0, L.first_chunk(cta), True)
    if L.resident:
        for cta in range(L.grid_size(a.n_b)):
            hs = T.alloc_buffer((L.BC, L.H), "float32")
            hs2 = T.alloc_buffer((L.BC, L.H), "float32")
            for tx in range(L.NT):
                load_h(L, a, emulated_thread(L, regs, cta, tx), hs, 0, L.first_chunk(cta))
            for s2 in range((a.n_t + 1) // 2):
                emulated_step(L, a, regs, hs, hs2, cta, 2 * s2)
                if 2 * s2 + 1 < a.n_t:
                    emulated_step(L, a, regs.swapped(), hs2, hs, cta, 2 * s2 + 1)
            for tx in range(L.NT):
                resident_states_out(L, a, emulated_thread(L, regs, cta, tx))
    elif L.dsmem:
        emulated_dsmem_steps(L, a, regs)
    else:
        if L.H16:
            for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
                t = T.meta_var(emulated_thread(L, regs, cta, tx))
                own_h_prev(L, a, t, t.hn, 0, L.first_chunk(cta))
        for s in range(a.n_t):
            for cta in range(L.grid_size(a.n_b)):
                hs = T.alloc_buffer(L.TWIN_HS_SHAPE, L.HS_DTYPE)
                for tx in range(L.NT):
                    h_into_shared(L, a, emulated_thread(L, regs, cta, tx), hs, s, s % 2, L.first_chunk(cta))
                emulated_step(L, a, regs, hs, None, cta, s)
            emulated_end_of_step(L, a, L.barrier_index(s, 1))


@T.macro
def emulated_kernel(L, a):
    """Every CTA's program, CTAs and threads as serial loops, barriers as phase boundaries."""
    regs = T.meta_var(emulated_registers(L, a.n_b))
    for i in range(WORKSPACE_WORDS):
        a.ws[i] = T.uint32(0)
    for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
        t = T.meta_var(emulated_thread(L, regs, cta, tx))
        weights_in(L, a, t)
        load_biases(L, a, t)
        if L.GK > 0:
            pack_streamed_fragments(L, a, t)
        init_state(L, a, t)
    if L.partial_sums:
        for cta in range(L.grid_size(a.n_b)):
            for tx in range(L.NT):
                load_partial_weights(L, a, emulated_thread(L, regs, cta, tx))
            for ch in range(L.chunks(a.n_b)):
                hm = T.alloc_buffer((L.BC, L.TW), "float32")
                for tx in range(L.NT):
                    tile_state(L, a, emulated_thread(L, regs, cta, tx), hm, ch)
                for tx in range(L.NT):
                    publish_partials(L, a, emulated_thread(L, regs, cta, tx), hm, 0, ch)
    emulated_barrier(L, a, 1)
    if L.partial_sums:
        emulated_partial_sum_steps(L, a, regs)
    elif L.one_chunk(a.n_b) and L.phases == 1:
        emulated_one_chunk_steps(L, a, regs)
    elif L.phases == 1 and L.CHUNKS_AHEAD:
        for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
            t = T.meta_var(emulated_thread(L, regs, cta, tx))
            fetch(L, a, t, t.xr, 0, 0, False, False)
        for s in range(a.n_t):
            emulated_chunked_step(L, a, regs, s)
            emulated_end_of_step(L, a, L.barrier_index(s, 1))
    elif L.phases == 1:
        for s in range(a.n_t):
            emulated_phase(L, a, regs, s, 0)
            emulated_end_of_step(L, a, L.barrier_index(s, 1))
    else:
        for s in range(a.n_t):
            emulated_phase(L, a, regs, s, 1)
            emulated_barrier(L, a, L.barrier_index(s, 1))
            emulated_phase(L, a, regs, s, 2)
            emulated_barrier(L, a, L.barrier_index(s, 2))
    for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
        final_state(L, a, emulated_thread(L, regs, cta, tx))


@built_once
def emulated_persistent_kernel(spec: CellSpec, cfg: Config) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm), barriers as phase boundaries: for tests."""
    check(spec, cfg)
    L = Layout(spec, cfg, emulate=True)

    @T.macro
    def body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        a = T.meta_var(Args(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b))
        emulated_kernel(L, a)

    # final_state writes Y_h once; C's home between steps is not Y_c (cell_state.py)
    return recurrence_func(spec, body, L.SLOTS, yh_written_only=True, yc_written_only=L.C_SLOT is not None,
                           workspace_words=L.WS_WORDS)
