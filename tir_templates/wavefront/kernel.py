"""The layer wavefront: a stack of L recurrent layers in one persistent launch (issue 21).

Each layer has CTAs of its own (`plan.py`), its weights in registers for the whole sequence. At
wavefront step s, layer l computes its time step t = s - l:

    [h_{l-1}(t) ; h_l(t-1)] into shared memory -> the dot products with [W_l | R_l] (layer 0: R_0)
    -> the cell update -> publish h_l(t)
    -> one grid barrier across every CTA of the launch

so a stack runs T + L - 1 barrier-separated steps instead of L x T, and one launch (plus layer
0's input GEMM) instead of 2L. The exchange buffer holds each layer's h by step parity: layer l
writes h_l(t) into slot (t + 1) % 2 at step s, which both layer l (its h(t-1) at step s + 1) and
layer l + 1 (its input at step s + 1) read, while layer l writes its next h into the other slot.
Layers above the first keep their input and recurrent sums apart (GRU's candidate needs them so;
the cells take them as ONNX names them, `cells.py`).

Read `cta_layer` top to bottom; the thread-level parts are `steps.py`; `emulated.py` is its CPU twin (CTAs and threads as serial
loops, barriers as phase boundaries), for tests without a GPU.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..persistent.exchange import GRID_BARRIER
from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec
from .layout import StackLayout
from .plan import LANES, StackConfig, check_stack
from .signature import stack_func
from .steps import Regs, final_states, for_each_layer, init_states, load_hs, load_weights, prefetch, update


@T.macro
def dot_and_reduce(S, layer, tx, wreg, hs, gs, acc):
    """The lane's partial dot products (input part, then recurrent part), a shuffle-sum over the
    warp, and lane 0 writes each row's sums into `gs` (part-major: input sums, then recurrent)."""
    for k in T.unroll(S.PARTS[layer] * S.RPG[layer] * S.BC):
        acc[k] = T.float32(0)
    for bi in T.unroll(S.BC):
        if S.XK[layer] > 0:
            for i in T.unroll(S.XK[layer]):
                for q in T.unroll(S.RPG[layer]):
                    acc[q * S.BC + bi] = acc[q * S.BC + bi] + wreg[0, q * S.KPL[layer] + i] * hs[bi, S.col(tx % LANES, i)]
        for i in T.unroll(S.H // LANES):
            for q in T.unroll(S.RPG[layer]):
                acc[((S.PARTS[layer] - 1) * S.RPG[layer] + q) * S.BC + bi] = (
                    acc[((S.PARTS[layer] - 1) * S.RPG[layer] + q) * S.BC + bi]
                    + wreg[0, q * S.KPL[layer] + S.XK[layer] + i] * hs[bi, S.XK[layer] * LANES + S.col(tx % LANES, i)])
    for part in T.unroll(S.PARTS[layer]):
        for q in T.unroll(S.RPG[layer]):
            for bi in T.unroll(S.BC):
                acc[(part * S.RPG[layer] + q) * S.BC + bi] = T.cuda.warp_sum(acc[(part * S.RPG[layer] + q) * S.BC + bi], LANES)
                if tx % LANES == 0:
                    gs[part * S.BC + bi, (tx // LANES) * S.RPG[layer] + q] = acc[(part * S.RPG[layer] + q) * S.BC + bi]


@T.macro
def grid_barrier(S, a, index):
    """Every CTA of the launch meets (barrier `index`: each has arrived `index` times). It starts
    with the CTA's own __syncthreads."""
    T.tvm_storage_sync("shared")
    T.cuda.func_call("prnn_grid_barrier", T.address_of(a.ws[0]), T.Cast("uint32", index * S.NCTA),
                     source_code=GRID_BARRIER)


@T.macro
def cta_layer(S, a, layer, cta, tx, hs, gs):
    """One CTA of `layer`, thread tx's view: weights in, states set up, then every wavefront step
    (active while 0 <= s - layer < T), one grid barrier each, then the final states."""
    wreg = T.alloc_buffer((1, S.RPG[layer] * S.KPL[layer]), "float32", scope="local")
    acc = T.alloc_buffer((S.PARTS[layer] * S.RPG[layer] * S.BC,), "float32", scope="local")
    xin = T.alloc_buffer((1, S.pairs(layer) * (S.G + 1)), "float32", scope="local")
    nv = T.alloc_buffer((1, S.pairs(layer)), "int64", scope="local")
    hn = T.alloc_buffer((1, S.pairs(layer)), "float32", scope="local")
    regs = T.meta_var(Regs(wreg, xin, nv, hn))
    load_weights(S, a, layer, cta - S.FIRST[layer], tx, wreg, 0)
    init_states(S, a, layer, cta - S.FIRST[layer], tx)
    grid_barrier(S, a, 1)
    for s in range(a.n_t + S.L - 1):
        if S.active(layer, s, a.n_t):
            for ch in range(S.chunks(a.n_b)):
                prefetch(S, a, layer, cta - S.FIRST[layer], tx, regs, 0, s - layer, ch)
                load_hs(S, a, layer, tx, hs, s - layer, ch)
                T.tvm_storage_sync("shared")
                dot_and_reduce(S, layer, tx, wreg, hs, gs, acc)
                T.tvm_storage_sync("shared")
                update(S, a, layer, cta - S.FIRST[layer], tx, hs, gs, regs, 0, s - layer, ch)
                T.tvm_storage_sync("shared")  # the next chunk overwrites hs and gs
        grid_barrier(S, a, s + 2)
    final_states(S, a, layer, cta - S.FIRST[layer], tx)


@T.macro
def cta_if_owned(S, a, cta, tx, hs, gs, layer):
    """`cta_layer` if `layer` owns `cta`."""
    if S.owns_cta(layer, cta):
        cta_layer(S, a, layer, cta, tx, hs, gs)


@T.macro
def cuda_stack(S, a):
    """The CUDA kernels: the barrier counter zeroed, then every CTA's layer."""
    for _zb in T.thread_binding(1, thread="blockIdx.x"):
        for zt in T.thread_binding(WORKSPACE_WORDS, thread="threadIdx.x"):
            a.ws[zt] = T.uint32(0)
    for cta in T.thread_binding(S.NCTA, thread="blockIdx.x"):
        for tx in T.thread_binding(S.NT, thread="threadIdx.x"):
            hs = T.alloc_buffer((S.BC, 2 * S.H), "float32", scope="shared")
            gs = T.alloc_buffer((2 * S.BC, S.G * S.TW_MAX), "float32", scope="shared")
            for_each_layer(S, cta_if_owned, a, cta, tx, hs, gs)


def stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The CUDA wavefront kernel of the stack `specs` (lowest layer first) under `cfg`."""
    check_stack(specs)
    S = StackLayout(specs, cfg)

    @T.macro
    def body(a):
        cuda_stack(S, a)

    return stack_func(specs, body)
