"""The persistent recurrence kernel: one launch for the whole sequence, weights held on chip.

Read `cta_program` top to bottom. Each CTA loads its slice of the weights once, then per step:
    inputs (step s+1's in flight) -> h(t-1) . R -> gates and state update -> publish h(t)
    -> one barrier across the direction's CTAs (or, in a dsmem cluster, h(t) sent into the
       peers' shared memory and theirs awaited; with stamped words no barrier: the next step's
       reads wait on each word's stamp)
and finally writes the final states. Who owns which units and rows is `layout.py`; the dot
products are `dots.py`; the updates `update.py` (and GRU linear_before_reset=0's two kernels);
the barriers and the exchange of h `exchange.py`. `emulated.py` runs the same macros on the CPU.

Every CTA loads its weights and biases before `griddepcontrol.wait` and touches nothing else
before it, so the kernel may be launched while the projection GEMM still runs (`early_launch.py`).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..built_once import built_once
from ..config import Config
from ..early_launch import allow_next_kernel, wait_for_previous_kernel
from ..signature import WORKSPACE_WORDS, recurrence_func
from ..spec import CellSpec
from .buffers import Args, cta_buffers
from .checks import check
from .dot_fma import dot_and_reduce
from .dot_mma import pack_streamed_fragments
from .dots import dot_products, weights_in
from .exchange import (dsmem_exchange, dsmem_init, end_of_step, final_state, h_into_shared, init_state, load_h,
                       resident_states_out, step_barrier)
from .h16_exchange import keep_h_prev, own_h_prev
from .gru_partial_sums import load_partial_weights, partial_update, publish_partials, reset_from_partials, tile_state
from .gru_two_phase import candidate_phase, reset_phase
from .inputs import advance, chunk_ahead_inputs, chunk_inputs, fetch, fetch_valid, load_biases, load_lengths
from .layout import Layout
from .update import update


@T.macro
def one_step(L, a, t, sm, hs, hs_next, s):
    """Step s when the CTA's batch rows are one chunk. With h on chip (`hs_next` not None: a
    resident CTA, or a dsmem cluster) it reads h(t-1) from `hs` and writes h(t) to `hs_next`;
    otherwise h(t-1) comes from the exchange buffer."""
    # step s+1's inputs (in flight all step; after the dot where `L.FETCH_AFTER_DOT`), h(t-1) into
    # shared memory (a resident CTA has it there)
    if hs_next is None:
        if not L.FETCH_AFTER_DOT:
            fetch(L, a, t, t.xn, s + 1, L.first_chunk(t.cta), False)
        h_into_shared(L, a, t, hs, s, s % 2, L.first_chunk(t.cta))
        if L.H16:
            keep_h_prev(L, t)
        T.tvm_storage_sync("shared")
    else:
        fetch_valid(L, a, t, t.xn, s + 1)
    dot_products(L, a, t, hs, sm.gs, 0)
    if not L.LANE:
        T.tvm_storage_sync("shared")
    if hs_next is None and L.FETCH_AFTER_DOT:
        fetch(L, a, t, t.xn, s + 1, L.first_chunk(t.cta), False)
    update(L, a, t, hs, sm.gs, s, L.first_chunk(t.cta), hs_next)
    advance(L, t, hs_next is not None)
    # one barrier per step (it starts with a __syncthreads; a resident CTA needs only that)
    if hs_next is not None and L.dsmem:
        dsmem_exchange(L, a, t, hs_next, sm.bar, s)
    elif hs_next is not None:
        T.tvm_storage_sync("shared")
    else:
        end_of_step(L, a, t.cta, L.barrier_index(s, 1))


@T.macro
def one_chunk_steps(L, a, t, sm):
    """The CTA's batch rows are one chunk: step s+1's inputs are fetched while step s computes."""
    load_lengths(L, a, t, L.first_chunk(t.cta))
    fetch(L, a, t, t.xr, 0, L.first_chunk(t.cta), True)
    if L.h_on_chip:  # h in shared memory for the whole sequence: steps in pairs, hs -> hs2 -> hs
        load_h(L, a, t, sm.hs, 0, L.first_chunk(t.cta))
        T.tvm_storage_sync("shared")
        for s2 in range((a.n_t + 1) // 2):
            one_step(L, a, t, sm, sm.hs, sm.hs2, 2 * s2)
            if 2 * s2 + 1 < a.n_t:
                one_step(L, a, t.swapped(), sm, sm.hs2, sm.hs, 2 * s2 + 1)
        resident_states_out(L, a, t)
        T.tvm_storage_sync("shared")  # final_state reads other threads' states
    else:
        if L.H16:  # the owners' h0, which `keep_h_prev` carries from step to step
            own_h_prev(L, a, t, t.hn, 0, L.first_chunk(t.cta))
        for s in range(a.n_t):
            one_step(L, a, t, sm, sm.hs, None, s)


@T.macro
def chunked_steps(L, a, t, sm):
    """One phase a step, the batch in chunks: each chunk reloads its lengths, C(t-1) and h(t-1),
    while the next chunk's input projections are in flight (`chunk_ahead_inputs`)."""
    fetch(L, a, t, t.xr, 0, 0, False, False)
    for s in range(a.n_t):
        for ch in range(L.chunks(a.n_b)):
            chunk_ahead_inputs(L, a, t, sm.hs, s, ch)
            T.tvm_storage_sync("shared")
            dot_products(L, a, t, sm.hs, sm.gs, 0)
            if not L.LANE:
                T.tvm_storage_sync("shared")
            update(L, a, t, sm.hs, sm.gs, s, ch, None)
            advance(L, t, False)
            T.tvm_storage_sync("shared")
        end_of_step(L, a, t.cta, L.barrier_index(s, 1))


@T.macro
def chunked_phase(L, a, t, sm, s, phase):
    """Step s's `phase` when the batch spans chunks (each chunk reloads its lengths, inputs and
    C(t-1)), then the phase's barrier. Phase 0 is the cell's only phase; 1 and 2 are the
    two-phase GRU's: z and r * h(t-1), then the candidate and h(t) (FMA units only)."""
    for ch in range(L.chunks(a.n_b)):
        chunk_inputs(L, a, t, sm.hs, s, ch, L.phase_slot(phase, s), phase == 0)
        T.tvm_storage_sync("shared")
        dot_products(L, a, t, sm.hs, sm.gs, phase)
        if not L.LANE:
            T.tvm_storage_sync("shared")
        if phase == 0:
            update(L, a, t, sm.hs, sm.gs, s, ch, None)
        elif phase == 1:
            reset_phase(L, a, t, sm.hs, sm.gs, s, ch)
        else:
            candidate_phase(L, a, t, sm.gs, s, ch)
        T.tvm_storage_sync("shared")
    end_of_step(L, a, t.cta, L.barrier_index(s, max(phase, 1)))


@T.macro
def partial_sum_steps(L, a, t, sm):
    """GRU, linear_before_reset=0, one barrier a step: r from every CTA's partials, the
    candidate, h(t), this CTA's partials for the next step."""
    for s in range(a.n_t):
        for ch in range(L.chunks(a.n_b)):
            chunk_inputs(L, a, t, sm.hs, s, ch, s % 2, False)
            T.tvm_storage_sync("shared")
            reset_from_partials(L, a, t, sm.hs, sm.rs, s, ch)
            T.tvm_storage_sync("shared")
            dot_and_reduce(L, a, t, sm.rs, sm.gs, 0)
            T.tvm_storage_sync("shared")
            partial_update(L, a, t, sm.hs, sm.gs, sm.hm, s, ch)
            T.tvm_storage_sync("shared")
            publish_partials(L, a, t, sm.hm, (s + 1) % 2, ch)
            T.tvm_storage_sync("shared")
        step_barrier(L, a, t.cta, L.barrier_index(s, 1))


@T.macro
def cta_program(L, a, cta, tx):
    """One CTA's whole sequence, thread tx's view (the CUDA kernel's body)."""
    t, sm = T.meta_var(cta_buffers(L, cta, tx))
    # this lane's slice of its work group's gate rows, in registers for the whole sequence
    weights_in(L, a, t)
    load_biases(L, a, t)
    T.evaluate(wait_for_previous_kernel())  # launched early (PDL): the kernel before has now finished
    if L.GK > 0:  # the A fragments read each step, packed into this call's workspace
        pack_streamed_fragments(L, a, t)
    init_state(L, a, t)
    if L.partial_sums:  # ... and the CTA's columns of R_z, R_r, with step 0's partial sums
        load_partial_weights(L, a, t)
        for ch in range(L.chunks(a.n_b)):
            tile_state(L, a, t, sm.hm, ch)
            T.tvm_storage_sync("shared")
            publish_partials(L, a, t, sm.hm, 0, ch)
            T.tvm_storage_sync("shared")
    if L.dsmem:
        dsmem_init(L, sm.bar)
    step_barrier(L, a, cta, 1)
    if L.partial_sums:
        partial_sum_steps(L, a, t, sm)
    elif L.one_chunk(a.n_b) and L.phases == 1:
        one_chunk_steps(L, a, t, sm)
    elif L.phases == 1 and L.CHUNKS_AHEAD:  # the batch spans chunks
        chunked_steps(L, a, t, sm)
    else:  # ... without inputs a chunk ahead, or the step has two phases (GRU, linear_before_reset=0)
        for s in range(a.n_t):
            if L.phases == 1:
                chunked_phase(L, a, t, sm, s, 0)
            else:
                chunked_phase(L, a, t, sm, s, 1)
                chunked_phase(L, a, t, sm, s, 2)
    final_state(L, a, t)


@T.macro
def cuda_kernel(L, a):
    """The CUDA kernel: per-call counters zeroed, then every CTA's `cta_program`."""
    if L.grid:
        for _zb in T.thread_binding(1, thread="blockIdx.x"):  # per-call barrier counters start at 0
            for zt in T.thread_binding(WORKSPACE_WORDS, thread="threadIdx.x"):
                # launched early (the pass asks only for kernels without a grid barrier, but the
                # template stays correct): the main kernel may start, and its wait covers the GEMM
                T.evaluate(allow_next_kernel())
                T.evaluate(wait_for_previous_kernel())
                a.ws[zt] = T.uint32(0)
    if L.cluster:  # each direction is one thread-block cluster, co-scheduled by the hardware
        for cta in T.thread_binding(L.grid_size(a.n_b), thread="blockIdx.x"):
            for _rank in T.thread_binding(L.CPD, thread="clusterCtaIdx.x"):
                for tx in T.thread_binding(L.NT, thread="threadIdx.x"):
                    cta_program(L, a, cta, tx)
    else:
        for cta in T.thread_binding(L.grid_size(a.n_b), thread="blockIdx.x"):
            for tx in T.thread_binding(L.NT, thread="threadIdx.x"):
                cta_program(L, a, cta, tx)


@built_once
def persistent_kernel(spec: CellSpec, cfg: Config) -> tvm.tirx.PrimFunc:
    """The CUDA persistent kernel of `spec` under `cfg` (raises UnsupportedLayer)."""
    check(spec, cfg)
    L = Layout(spec, cfg)

    @T.macro
    def body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        a = T.meta_var(Args(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b))
        cuda_kernel(L, a)

    # final_state writes Y_h once; C's home between steps is not Y_c (cell_state.py)
    return recurrence_func(spec, body, L.SLOTS, yh_written_only=True, yc_written_only=L.C_SLOT is not None,
                           workspace_words=L.WS_WORDS)
