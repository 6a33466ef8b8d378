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

Read `cta_layer` top to bottom; `emulated_stack` is its CPU twin (CTAs and threads as serial
loops, barriers as phase boundaries), for tests without a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import tvm
from tvm.script import tirx as T

from .. import cells
from ..persistent.exchange import BARRIER_FLAG_WORD, GRID_BARRIER
from ..signature import WORKSPACE_WORDS, batch_row, time_index
from ..spec import CellSpec
from .layout import StackLayout
from .plan import LANES, StackConfig, UnsupportedStack, stack_problems

#: the attribute that marks a wavefront kernel: {"layers": [each layer's CellSpec JSON], "config": ...}
STACK_KERNEL_ATTR = "persist_rnn.stack_kernel"
#: exchange slots of a layer's buffer: the per-layer signature's three (the wavefront uses two, by step parity)
STACK_SLOTS = 3


@dataclasses.dataclass(frozen=True)
class Regs:
    """A thread's registers: weights, each pair's inputs and C (`xin`), length (`nv`) and h(t)
    (`hn`). On the GPU each is the thread's own (row 0); in the CPU twin one row per (CTA, thread)."""
    wreg: Any
    xin: Any
    nv: Any
    hn: Any


@dataclasses.dataclass(frozen=True)
class StackArgs:
    """The stack kernel's tensors (`stack_func`) and the runtime extents T and B."""
    xw: Any
    r: Any
    rb: Any
    w: Any
    wb: Any
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


def _spec(S, layer) -> CellSpec:
    return S.specs[layer]


def valid_steps(S, a, b):
    """Batch row b's sequence length, clamped to [0, T] (every layer of a stack has the same)."""
    return T.max(T.min(T.Cast("int64", a.lens[batch_row(S.specs[0], "lens", b)]), a.n_t), T.int64(0))


@T.macro
def load_weights(S, a, layer, c, tx, wreg, row):
    """Warp tx // 32's rows of the layer, lane tx % 32's stride-32 columns, into registers for the
    whole sequence: W_l's first (the input part, layers above the first), then R_l's."""
    for q in T.unroll(S.RPG[layer]):
        if S.XK[layer] > 0:
            for i in T.unroll(S.XK[layer]):
                wreg[row, q * S.KPL[layer] + i] = a.w[layer][S.col(tx % LANES, i), S.row(layer, c, tx, q)]
        for i in T.unroll(S.H // LANES):
            wreg[row, q * S.KPL[layer] + S.XK[layer] + i] = a.r[layer][0, S.row(layer, c, tx, q), S.col(tx % LANES, i)]


@T.macro
def init_states(S, a, layer, c, tx):
    """The CTA's units of h0 into exchange slot 0, of c0 into yc (the cell state's home)."""
    for e in range((a.n_b * S.TW[layer] + S.NT - 1) // S.NT):
        if T.Cast("int64", (e * S.NT + tx) // S.TW[layer]) < a.n_b:
            a.hb[layer][0, 0, (e * S.NT + tx) // S.TW[layer], c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]] = a.h0[layer][
                0, batch_row(_spec(S, layer), "h0", (e * S.NT + tx) // S.TW[layer]),
                c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]]
            if S.lstm:
                a.yc[layer][0, (e * S.NT + tx) // S.TW[layer], c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]] = a.c0[layer][
                    0, batch_row(_spec(S, layer), "c0", (e * S.NT + tx) // S.TW[layer]),
                    c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]]


@T.macro
def prefetch(S, a, layer, c, tx, regs, row, t, ch):
    """Each owned pair's length, its gates' input parts (layer 0: the input GEMM's row; above it
    the input bias, the dot adds W_l h_{l-1}(t)) and C(t-1) into registers, before the dot."""
    for e in T.unroll(S.pairs(layer)):
        if S.owns_pair(layer, tx, e):
            if ch * S.BC + S.pair(layer, c, tx, e)[0] < a.n_b:
                regs.nv[row, e] = valid_steps(S, a, ch * S.BC + S.pair(layer, c, tx, e)[0])
                for g in T.unroll(S.G):
                    if layer == 0:
                        regs.xin[row, e * (S.G + 1) + g] = a.xw[T.max(T.min(time_index(_spec(S, 0), 0, t, regs.nv[row, e]), a.n_t - 1), T.int64(0)),
                                                           ch * S.BC + S.pair(layer, c, tx, e)[0], 0,
                                                           g * S.H + S.pair(layer, c, tx, e)[1]]
                    else:
                        regs.xin[row, e * (S.G + 1) + g] = a.wb[layer][g * S.H + S.pair(layer, c, tx, e)[1]]
                if S.lstm:
                    regs.xin[row, e * (S.G + 1) + S.G] = a.yc[layer][0, ch * S.BC + S.pair(layer, c, tx, e)[0],
                                                         S.pair(layer, c, tx, e)[1]]


@T.macro
def load_hs(S, a, layer, tx, hs, t, ch):
    """The chunk's rows of [h_{l-1}(t) ; h_l(t-1)] (layer 0: h_0(t-1)) into shared memory, from
    the exchange buffer itself (never a read-only view: nvcc would load it non-coherently)."""
    for e in range((S.BC * S.LANES_K(layer) + S.NT - 1) // S.NT):
        if T.Cast("int64", (e * S.NT + tx) // S.LANES_K(layer)) < T.min(a.n_b - ch * S.BC, T.int64(S.BC)):
            if layer == 0:
                hs[(e * S.NT + tx) // S.H, (e * S.NT + tx) % S.H] = a.hb[0][
                    t % 2, 0, ch * S.BC + (e * S.NT + tx) // S.H, (e * S.NT + tx) % S.H]
            elif (e * S.NT + tx) % (2 * S.H) < S.H:
                hs[(e * S.NT + tx) // (2 * S.H), (e * S.NT + tx) % (2 * S.H)] = a.hb[layer - 1][
                    (t + 1) % 2, 0, ch * S.BC + (e * S.NT + tx) // (2 * S.H), (e * S.NT + tx) % (2 * S.H)]
            else:
                hs[(e * S.NT + tx) // (2 * S.H), (e * S.NT + tx) % (2 * S.H)] = a.hb[layer][
                    t % 2, 0, ch * S.BC + (e * S.NT + tx) // (2 * S.H), (e * S.NT + tx) % (2 * S.H) - S.H]


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


def _sums(S, a, layer, gs, xin, row, e, bi, j):
    """A pair's gate inputs (x) and recurrent parts (rec, with R's bias), as `cells.py` takes them."""
    jl = j % S.TW[layer]
    x = [xin[row, e * (S.G + 1) + g] for g in range(S.G)]
    if layer > 0:
        x = [x[g] + gs[bi, S.gate_slot(layer, g, jl)] for g in range(S.G)]
    rec = [gs[(S.PARTS[layer] - 1) * S.BC + bi, S.gate_slot(layer, g, jl)] + a.rb[layer][0, g * S.H + j] for g in range(S.G)]
    return x, rec


def cell_state(S, a, layer, gs, xin, row, e, bi, j):
    """LSTM's C(t) of the pair (C(t-1) in its register)."""
    x, rec = _sums(S, a, layer, gs, xin, row, e, bi, j)
    return cells.lstm_cell_state(S.specs[layer], 0, x, rec, xin[row, e * (S.G + 1) + S.G],
                                 cells.gate_slice(a.p[layer], (0,), j, S.H, 3), S.FAST)


def hidden(S, a, layer, hs, gs, xin, row, e, bi, j):
    """The pair's h(t) (LSTM: from C(t), already in its register)."""
    x, rec = _sums(S, a, layer, gs, xin, row, e, bi, j)
    return cells.hidden(S.specs[layer], 0, x, rec, hs[bi, S.XK[layer] * LANES + j], xin[row, e * (S.G + 1) + S.G],
                        cells.gate_slice(a.p[layer], (0,), j, S.H, 3), S.FAST)


@T.macro
def update(S, a, layer, c, tx, hs, gs, regs, row, t, ch):
    """Each owned pair's cell update: C(t) into yc, h(t) into Y and the exchange slot the layer
    above and the next step read; past its sequence's end a row carries its state, Y is zero."""
    for e in T.unroll(S.pairs(layer)):
        if S.owns_pair(layer, tx, e):
            if ch * S.BC + S.pair(layer, c, tx, e)[0] < a.n_b:
                if t < regs.nv[row, e]:
                    if S.lstm:
                        regs.xin[row, e * (S.G + 1) + S.G] = cell_state(S, a, layer, gs, regs.xin, row, e, S.pair(layer, c, tx, e)[0],
                                                                        S.pair(layer, c, tx, e)[1])
                        a.yc[layer][0, ch * S.BC + S.pair(layer, c, tx, e)[0], S.pair(layer, c, tx, e)[1]] = regs.xin[
                            row, e * (S.G + 1) + S.G]
                    regs.hn[row, e] = hidden(S, a, layer, hs, gs, regs.xin, row, e, S.pair(layer, c, tx, e)[0],
                                             S.pair(layer, c, tx, e)[1])
                    a.y[layer][time_index(S.specs[layer], 0, t, regs.nv[row, e]), 0, ch * S.BC + S.pair(layer, c, tx, e)[0],
                        S.pair(layer, c, tx, e)[1]] = regs.hn[row, e]
                else:
                    regs.hn[row, e] = hs[S.pair(layer, c, tx, e)[0], S.XK[layer] * LANES + S.pair(layer, c, tx, e)[1]]
                    a.y[layer][t, 0, ch * S.BC + S.pair(layer, c, tx, e)[0], S.pair(layer, c, tx, e)[1]] = T.float32(0)
                a.hb[layer][(t + 1) % 2, 0, ch * S.BC + S.pair(layer, c, tx, e)[0], S.pair(layer, c, tx, e)[1]] = regs.hn[row, e]


@T.macro
def final_states(S, a, layer, c, tx):
    """Y_h from the exchange buffer; an empty sequence has zero final states (as ONNX Runtime)."""
    for e in range((a.n_b * S.TW[layer] + S.NT - 1) // S.NT):
        if T.Cast("int64", (e * S.NT + tx) // S.TW[layer]) < a.n_b:
            a.yh[layer][0, (e * S.NT + tx) // S.TW[layer], c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]] = T.if_then_else(
                a.lens[batch_row(S.specs[0], "lens", (e * S.NT + tx) // S.TW[layer])] > 0,
                a.hb[layer][a.n_t % 2, 0, (e * S.NT + tx) // S.TW[layer], c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]],
                T.float32(0))
            if S.lstm:
                if a.lens[batch_row(S.specs[0], "lens", (e * S.NT + tx) // S.TW[layer])] <= 0:
                    a.yc[layer][0, (e * S.NT + tx) // S.TW[layer], c * S.TW[layer] + (e * S.NT + tx) % S.TW[layer]] = T.float32(0)


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
def each_layer(S, a, cta, tx, hs, gs):
    """`cta_layer` of the layer that owns `cta`: one branch per layer, each with its layer's
    constants (TVMScript unrolls Python-level conditions; plan.MAX_LAYERS of them)."""
    if S.L > 0:
        if S.owns_cta(0, cta):
            cta_layer(S, a, 0, cta, tx, hs, gs)
    if S.L > 1:
        if S.owns_cta(1, cta):
            cta_layer(S, a, 1, cta, tx, hs, gs)
    if S.L > 2:
        if S.owns_cta(2, cta):
            cta_layer(S, a, 2, cta, tx, hs, gs)
    if S.L > 3:
        if S.owns_cta(3, cta):
            cta_layer(S, a, 3, cta, tx, hs, gs)


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
            each_layer(S, a, cta, tx, hs, gs)


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
def emulated_layer_step(S, a, regs, layer, s):
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
def emulated_steps(S, a, regs, s):
    """`emulated_layer_step` of every layer, lowest first."""
    if S.L > 0:
        emulated_layer_step(S, a, regs, 0, s)
    if S.L > 1:
        emulated_layer_step(S, a, regs, 1, s)
    if S.L > 2:
        emulated_layer_step(S, a, regs, 2, s)
    if S.L > 3:
        emulated_layer_step(S, a, regs, 3, s)


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
    if S.L > 0:
        emulated_layer_setup(S, a, regs, 0)
    if S.L > 1:
        emulated_layer_setup(S, a, regs, 1)
    if S.L > 2:
        emulated_layer_setup(S, a, regs, 2)
    if S.L > 3:
        emulated_layer_setup(S, a, regs, 3)
    emulated_barrier(S, a, 1)
    for s in range(a.n_t + S.L - 1):
        emulated_steps(S, a, regs, s)
        emulated_barrier(S, a, s + 2)
    if S.L > 0:
        emulated_layer_finish(S, a, 0)
    if S.L > 1:
        emulated_layer_finish(S, a, 1)
    if S.L > 2:
        emulated_layer_finish(S, a, 2)
    if S.L > 3:
        emulated_layer_finish(S, a, 3)


def _signature_source(specs: list[CellSpec]) -> str:
    """The TVMScript of the stack kernel's PrimFunc for len(specs) layers (`stack_func`)."""
    spec, n_l = specs[0], len(specs)
    H, GH = spec.hidden_size, spec.num_gates * spec.hidden_size
    lens_b, h0_b, c0_b = (("1" if name in spec.batch_broadcast else "n_b") for name in ("lens", "h0", "c0"))
    params, shapes = ["xw_h: T.handle", "lens_h: T.handle"], {"xw": "(n_t, n_b, 1, GH)", "lens": f"({lens_b},)"}
    for l in range(n_l):
        params += [f"r{l}: T.Buffer((1, {GH}, {H}), 'float32')", f"rb{l}: T.Buffer((1, {GH}), 'float32')",
                   f"h0{l}_h: T.handle", f"c0{l}_h: T.handle", f"p{l}: T.Buffer((1, {3 * H}), 'float32')"]
        shapes.update({f"h0{l}": f"(1, {h0_b}, {H})", f"c0{l}": f"(1, {c0_b}, {H})"})
        if l > 0:
            params += [f"w{l}: T.Buffer(({H}, {GH}), 'float32')", f"wb{l}: T.Buffer(({GH},), 'float32')"]
    for l in range(n_l):
        params += [f"y{l}_h: T.handle", f"yh{l}_h: T.handle", f"yc{l}_h: T.handle", f"hb{l}_h: T.handle"]
        shapes.update({f"y{l}": f"(n_t, 1, n_b, {H})", f"yh{l}": f"(1, n_b, {H})", f"yc{l}": f"(1, n_b, {H})",
                       f"hb{l}": f"({STACK_SLOTS}, 1, n_b, {H})"})
    params.append(f"ws: T.Buffer(({WORKSPACE_WORDS},), 'uint32')")
    shapes["xw"] = f"(n_t, n_b, 1, {GH})"
    lines = [f"    {name} = T.match_buffer({name}_h, {shape}, {'int32' if name == 'lens' else 'float32'!r})"
             for name, shape in shapes.items()]
    per_layer = lambda name, first=0: "[" + ", ".join(["None"] * first + [f"{name}{l}" for l in range(first, n_l)]) + "]"
    args = ", ".join(["xw", per_layer("r"), per_layer("rb"), per_layer("w", 1), per_layer("wb", 1), "lens",
                      per_layer("h0"), per_layer("c0"), per_layer("p"), per_layer("y"), per_layer("yh"), per_layer("yc"),
                      per_layer("hb"), "ws", "n_t", "n_b"])
    return "\n".join(["@T.prim_func(private=True)", f"def wavefront({', '.join(params)}):",
                      '    T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True, "op_pattern": 8})',
                      "    n_t = T.int64()", "    n_b = T.int64()", *lines, f"    body(StackArgs({args}))", ""])


def stack_func(specs: list[CellSpec], body) -> tvm.tirx.PrimFunc:
    """The wavefront's PrimFunc: each layer's operands and results as its own kernel's
    (`signature.py`), in one signature, so that the pass passes the layers' own tensors in and
    hands each layer's results on unchanged:
        xw (T, B, 1, G*H)  layer 0's input projection    lens (B,) int32 (all layers')
        per layer l: r_l (1, G*H, H), rb_l (1, G*H), h0_l, c0_l (1, B, H), p_l (1, 3*H),
                     and above the first w_l (H, G*H), wb_l (G*H,) (its projection's operands)
        -> per layer: y_l (T, 1, B, H), yh_l, yc_l (1, B, H), hb_l (3, 1, B, H); then ws
    (lens, h0, c0 of batch extent 1 where the specs broadcast them). TVMScript has no parameter
    lists of variable length, so the signature is written out for len(specs) layers and parsed;
    the macros index the per-layer lists with Python ints."""
    return tvm.script.from_source(_signature_source(specs), extra_vars={"T": T, "body": body, "StackArgs": StackArgs})


def _checked(specs, cfg):
    bad = stack_problems(specs)
    if bad:
        raise UnsupportedStack("; ".join(bad))


def stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The CUDA wavefront kernel of the stack `specs` (lowest layer first) under `cfg`."""
    _checked(specs, cfg)
    S = StackLayout(specs, cfg)

    @T.macro
    def body(a):
        cuda_stack(S, a)

    return stack_func(specs, body)


def emulated_stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm): for tests."""
    _checked(specs, cfg)
    S = StackLayout(specs, cfg, emulate=True)

    @T.macro
    def body(a):
        emulated_stack(S, a)

    return stack_func(specs, body)
