"""What each thread of a wavefront CTA does in a step, shared by the CUDA kernel (`kernel.py`) and
its CPU twin (`emulated.py`): its weights in, the states set up, a step's inputs into registers,
the chunk's [h below ; h] into shared memory, each owned (batch row, unit) pair's cell update, the
final states. Every macro takes the layout `S`, the kernel's arguments `a` and the layer (a Python
int: each layer's code has its own constants); `row` is the thread's row of the register buffers
(0 on the GPU, one per (CTA, thread) in the twin).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tvm.script import tirx as T

from .. import cells
from ..signature import batch_row, time_index
from .plan import LANES


@dataclasses.dataclass(frozen=True)
class Regs:
    """A thread's registers: weights, each pair's inputs and C (`xin`), length (`nv`) and h(t)
    (`hn`). On the GPU each is the thread's own (row 0); in the CPU twin one row per (CTA, thread)."""
    wreg: Any
    xin: Any
    nv: Any
    hn: Any


@T.macro
def for_each_layer(S, body, *args):
    """body(S, *args, layer) for each layer, lowest first: one branch per layer, each with its
    layer's constants (TVMScript unrolls Python-level conditions, and a macro cannot call itself;
    plan.MAX_LAYERS of them)."""
    if S.L > 0:
        body(S, *args, 0)
    if S.L > 1:
        body(S, *args, 1)
    if S.L > 2:
        body(S, *args, 2)
    if S.L > 3:
        body(S, *args, 3)


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
    for e in range(S.state_slots(layer, a.n_b)):
        if T.Cast("int64", S.state_row(layer, tx, e)) < a.n_b:
            a.hb[layer][0, 0, S.state_row(layer, tx, e), S.state_unit(layer, c, tx, e)] = a.h0[layer][
                0, batch_row(S.specs[layer], "h0", S.state_row(layer, tx, e)), S.state_unit(layer, c, tx, e)]
            if S.lstm:
                a.yc[layer][0, S.state_row(layer, tx, e), S.state_unit(layer, c, tx, e)] = a.c0[layer][
                    0, batch_row(S.specs[layer], "c0", S.state_row(layer, tx, e)), S.state_unit(layer, c, tx, e)]


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
                        regs.xin[row, e * (S.G + 1) + g] = a.xw[T.max(T.min(time_index(S.specs[0], 0, t, regs.nv[row, e]), a.n_t - 1), T.int64(0)),
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
    for e in range(S.state_slots(layer, a.n_b)):
        if T.Cast("int64", S.state_row(layer, tx, e)) < a.n_b:
            a.yh[layer][0, S.state_row(layer, tx, e), S.state_unit(layer, c, tx, e)] = T.if_then_else(
                a.lens[batch_row(S.specs[0], "lens", S.state_row(layer, tx, e))] > 0,
                a.hb[layer][a.n_t % 2, 0, S.state_row(layer, tx, e), S.state_unit(layer, c, tx, e)], T.float32(0))
            if S.lstm:
                if a.lens[batch_row(S.specs[0], "lens", S.state_row(layer, tx, e))] <= 0:
                    a.yc[layer][0, S.state_row(layer, tx, e), S.state_unit(layer, c, tx, e)] = T.float32(0)
