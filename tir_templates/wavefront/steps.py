"""What each thread of a wavefront CTA does, shared by the CUDA kernel (`kernel.py`) and its CPU
twin (`emulated.py`): its weights and constants in, the states set up, a step's h(t-1) (compute
threads) and the layer below's h(t) (the communication warp; in a 16-bit stack rounded to the
dtype, as the layer's input) into shared memory, each owned (batch row, unit) pair's cell
update, the final states. Every macro takes the layout `S`, the
kernel's arguments `a` and the layer (a Python int: each layer's code has its own constants);
`row` is the thread's row of the register buffers (0 on the GPU, one per (CTA, thread) in the twin).
Batch rows are the tile's (shared memory and registers); global memory takes them through
`layout.glob` and guards them with `layout.in_batch`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tvm.script import tirx as T

from .. import cells
from ..signature import batch_row, time_index
from . import stamped
from .plan import LANES


@dataclasses.dataclass(frozen=True)
class Regs:
    """A thread's registers: weights, each pair's inputs and C (`xin`), recurrent biases (`rb`),
    length (`nv`) and h(t) (`hn`), and the length of each input word's batch row (`in_len`). On the
    GPU each is the thread's own (row 0); in the CPU twin one row per (CTA, thread). Nothing a step
    reads comes from global memory but the layer below's h and layer 0's projection."""
    wreg: Any
    xin: Any
    rb: Any
    nv: Any
    hn: Any
    in_len: Any
    sums: Any = None  # with lane updates on the GPU, `acc`: the pair's gathered gate sums (`lanes.py`)


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
    return T.max(T.min(T.Cast("int64", a.lens[batch_row(S.specs[0], "lens", S.glob(a, b))]), a.n_t), T.int64(0))


@T.macro
def load_weights(S, a, layer, c, tx, wreg, row):
    """Warp tx // 32's rows of the layer, lane tx % 32's stride-32 columns, into registers for the
    whole sequence: W_l's first (the input part, layers above the first), then R_l's."""
    for q in T.unroll(S.RPG):
        if S.XK[layer] > 0:
            for i in T.unroll(S.XK[layer]):
                wreg[row, q * S.KPL[layer] + i] = a.w[layer][S.col(tx % LANES, i), S.row(layer, c, tx, q)]
        for i in T.unroll(S.H // LANES):
            wreg[row, q * S.KPL[layer] + S.XK[layer] + i] = a.r[layer][0, S.row(layer, c, tx, q), S.col(tx % LANES, i)]


@T.macro
def init_states(S, a, layer, c, tx):
    """The CTA's units of c0 into yc, C's home in memory (zero for an empty sequence)."""
    if S.lstm:
        for e in range(S.state_slots(S.tile_rows(a))):
            if S.in_batch(a, S.state_row(tx, e)):
                a.yc[layer][0, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e)] = T.if_then_else(
                    a.lens[batch_row(S.specs[0], "lens", S.glob(a, S.state_row(tx, e)))] > 0, a.c0[layer][
                        0, batch_row(S.specs[layer], "c0", S.glob(a, S.state_row(tx, e))), S.state_unit(c, tx, e)], T.float32(0))


@T.macro
def load_constants(S, a, layer, c, tx, regs, row):
    """What an owned pair keeps in registers for the whole sequence: its length, its recurrent
    biases, its layer's input bias (above the first layer; the dot adds W_l h_{l-1}(t)) and, LSTM,
    C (c0 here); and the length of each input word's batch row (above the first layer)."""
    if layer > 0:
        for e in T.unroll(S.input_words()):
            if S.in_batch(a, S.input_word(tx, e)[0]):
                regs.in_len[row, e] = valid_steps(S, a, S.input_word(tx, e)[0])
    for e in T.unroll(S.PAIRS):
        if S.owns_pair(tx, e):
            if S.in_batch(a, S.pair(c, tx, e)[0]):
                regs.nv[row, e] = valid_steps(S, a, S.pair(c, tx, e)[0])
                for g in T.unroll(S.G):
                    regs.rb[row, e * S.G + g] = a.rb[layer][0, g * S.H + S.pair(c, tx, e)[1]]
                if layer > 0:
                    for g in T.unroll(S.G):
                        regs.xin[row, e * (S.G + 1) + g] = a.wb[layer][g * S.H + S.pair(c, tx, e)[1]]
                if S.lstm:
                    regs.xin[row, e * (S.G + 1) + S.G] = a.c0[layer][0, batch_row(S.specs[layer], "c0", S.glob(a, S.pair(c, tx, e)[0])),
                                                                      S.pair(c, tx, e)[1]]


@T.macro
def load_projection(S, a, c, tx, regs, row, t):
    """Layer 0: each owned pair's row of the input GEMM at its step t's position."""
    for e in T.unroll(S.PAIRS):
        if S.owns_pair(tx, e):
            if S.in_batch(a, S.pair(c, tx, e)[0]):
                for g in T.unroll(S.G):
                    regs.xin[row, e * (S.G + 1) + g] = a.xw[T.max(T.min(time_index(S.specs[0], 0, t, regs.nv[row, e]), a.n_t - 1), T.int64(0)),
                                                           S.glob(a, S.pair(c, tx, e)[0]), 0, g * S.H + S.pair(c, tx, e)[1]]


def as_layer_input(S, h):
    """h_{l-1}(t) as the layer above takes it: in a 16-bit stack rounded to the dtype, as the
    layer below's Y, stored in it, reaches the next layer when each layer has its own kernel."""
    dtype = S.specs[0].dtype
    return h if dtype == "float32" else T.Cast("float32", T.Cast(dtype, h))


@T.macro
def issue_input(S, a, layer, tx, raw, e, t, issue):
    """`issue` (stamped.issue or .reissue) of thread tx's e-th word of h_{l-1}(t), the layer
    below's h at step t (the input part of hs), whatever the row's length (TVM's simplifier once
    dropped a load guarded by t): a word that is not needed is loaded and left."""
    if S.in_batch(a, S.input_word(tx, e)[0]):
        issue(S, a, layer - 1, t, S.glob(a, S.input_word(tx, e)[0]), S.input_word(tx, e)[1], raw, e)


@T.macro
def issue_inputs(S, a, layer, tx, raw, t):
    """Every word of h_{l-1}(t) this thread loads, issued into `raw`."""
    for e in T.unroll(S.input_words()):
        issue_input(S, a, layer, tx, raw, e, t, stamped.issue)


@T.macro
def reissue_inputs(S, a, layer, tx, raw, t):
    """The words of h_{l-1}(t) issued two steps before that came back early, issued again, before
    the step waits for its peers: the trip to L2 overlaps that wait (`stamped.reissue`)."""
    for e in T.unroll(S.input_words()):
        issue_input(S, a, layer, tx, raw, e, t, stamped.reissue)


@T.macro
def settle_input(S, a, layer, tx, hs, raw, regs, row, t):
    """h_{l-1}(t) for the whole batch into step t's copy of hs, each word settled on its stamp
    (`stamped.py`; reissued first if early, `reissue_inputs`); a row past its length takes zeros,
    which its update does not read."""
    for e in T.unroll(S.input_words()):
        if S.in_batch(a, S.input_word(tx, e)[0]):
            if t < regs.in_len[row, e]:
                stamped.check(S, a, layer - 1, t, S.glob(a, S.input_word(tx, e)[0]), S.input_word(tx, e)[1])
                hs[S.hs_row(t, S.input_word(tx, e)[0]), S.input_word(tx, e)[1]] = as_layer_input(S, stamped.settled(
                    S, a, layer - 1, t, S.glob(a, S.input_word(tx, e)[0]), S.input_word(tx, e)[1], raw, e))
            else:
                hs[S.hs_row(t, S.input_word(tx, e)[0]), S.input_word(tx, e)[1]] = T.float32(0)


@T.macro
def load_h0(S, a, layer, tx, hs):
    """h0 of the whole batch (every unit) into step 0's copy of hs, the layer's own part."""
    for e in range((S.BC * S.H + S.NT - 1) // S.NT):
        if S.in_batch(a, (e * S.NT + tx) // S.H):
            hs[S.hs_row(0, (e * S.NT + tx) // S.H), S.XK[layer] * LANES + (e * S.NT + tx) % S.H] = a.h0[layer][
                0, batch_row(S.specs[layer], "h0", S.glob(a, (e * S.NT + tx) // S.H)), (e * S.NT + tx) % S.H]


@T.macro
def load_own_stamped(S, a, layer, tx, hs, t):
    """The CPU twin's h_l(t-1) (t >= 1): every CTA's units from the stamped words, where the GPU's
    cluster sends them into shared memory (`kernel.py`, `layout.send`)."""
    for e in range((S.BC * S.H + S.NT - 1) // S.NT):
        if S.in_batch(a, (e * S.NT + tx) // S.H):
            stamped.check(S, a, layer, t - 1, S.glob(a, (e * S.NT + tx) // S.H), (e * S.NT + tx) % S.H)
            hs[S.hs_row(t, (e * S.NT + tx) // S.H), S.XK[layer] * LANES + (e * S.NT + tx) % S.H] = a.hb[layer][
                t - 1, 0, S.glob(a, (e * S.NT + tx) // S.H), 2 * ((e * S.NT + tx) % S.H)]


def _sums(S, layer, gs, regs, row, e, t, bi, j):
    """A pair's gate inputs (x) and recurrent parts (rec, with R's bias), as `cells.py` takes them
    (above the first layer with one part, x is the input bias and rec holds both dot products).
    The dot's sums come from `gs`, or with lane updates on the GPU from the lane's own registers."""
    jl = j % S.TW
    if S.LANE and not S.emulate:
        part_sum = lambda part, g: regs.sums[S.gathered(layer, part, g)]
    else:
        part_sum = lambda part, g: gs[S.gs_row(t, part, bi), S.gate_slot(g, jl)]
    x = [regs.xin[row, e * (S.G + 1) + g] for g in range(S.G)]
    if S.PARTS[layer] == 2:
        x = [x[g] + part_sum(0, g) for g in range(S.G)]
    rec = [part_sum(S.PARTS[layer] - 1, g) + regs.rb[row, e * S.G + g] for g in range(S.G)]
    return x, rec


def cell_state(S, a, layer, gs, regs, row, e, t, bi, j):
    """LSTM's C(t) of the pair (C(t-1) in its register)."""
    x, rec = _sums(S, layer, gs, regs, row, e, t, bi, j)
    return cells.lstm_cell_state(S.specs[layer], 0, x, rec, regs.xin[row, e * (S.G + 1) + S.G],
                                 cells.gate_slice(a.p[layer], (0,), j, S.H, 3), S.FAST)


def hidden(S, a, layer, hs, gs, regs, row, e, t, bi, j):
    """The pair's h(t) (LSTM: from C(t), already in its register)."""
    x, rec = _sums(S, layer, gs, regs, row, e, t, bi, j)
    return cells.hidden(S.specs[layer], 0, x, rec, hs[S.hs_row(t, bi), S.XK[layer] * LANES + j],
                        regs.xin[row, e * (S.G + 1) + S.G], cells.gate_slice(a.p[layer], (0,), j, S.H, 3), S.FAST)


STORE_SHARED = r"""
__device__ __forceinline__ void prnn_store_shared(float* at, float value) {
  *at = value;
}
"""


@T.macro
def keep_for_next_step(S, hs, r, col, value):
    """hs[r, col] = value, for the next step's copy. On the GPU through a helper: TVM's sync planner
    cannot tell the two copies apart and would ask for a barrier inside the update; the kernel's
    own __syncthreads after the update orders it."""
    if S.emulate:
        hs[r, col] = value
    else:
        T.cuda.func_call("prnn_store_shared", T.address_of(hs[r, col]), value, source_code=STORE_SHARED)


@T.macro
def update(S, a, layer, c, tx, hs, gs, regs, row, t):
    """Each owned pair's cell update: C(t) stays in its register (and yc), h(t) into Y, stamped
    into hb for the layer above, and into the next step's copy of hs (the cluster then sends it
    to the peers); past its sequence's end a row carries its state, Y is zero. With lane updates
    each pair's lanes all compute it and one stores it (`layout.writes_pair`)."""
    for e in T.unroll(S.PAIRS):
        if S.owns_pair(tx, e):
            if S.in_batch(a, S.pair(c, tx, e)[0]):
                if t < regs.nv[row, e]:
                    if S.lstm:
                        regs.xin[row, e * (S.G + 1) + S.G] = cell_state(S, a, layer, gs, regs, row, e, t,
                                                                        S.pair(c, tx, e)[0], S.pair(c, tx, e)[1])
                        if S.writes_pair(tx):
                            a.yc[layer][0, S.glob(a, S.pair(c, tx, e)[0]), S.pair(c, tx, e)[1]] = regs.xin[row, e * (S.G + 1) + S.G]
                    regs.hn[row, e] = hidden(S, a, layer, hs, gs, regs, row, e, t, S.pair(c, tx, e)[0],
                                             S.pair(c, tx, e)[1])
                    if S.writes_pair(tx):
                        a.y[layer][time_index(S.specs[layer], 0, t, regs.nv[row, e]), 0, S.glob(a, S.pair(c, tx, e)[0]),
                                   S.pair(c, tx, e)[1]] = regs.hn[row, e]
                else:
                    regs.hn[row, e] = hs[S.hs_row(t, S.pair(c, tx, e)[0]), S.XK[layer] * LANES + S.pair(c, tx, e)[1]]
                    if S.writes_pair(tx):
                        a.y[layer][t, 0, S.glob(a, S.pair(c, tx, e)[0]), S.pair(c, tx, e)[1]] = T.float32(0)
                if S.writes_pair(tx):
                    stamped.store(S, a, layer, t, S.glob(a, S.pair(c, tx, e)[0]), S.pair(c, tx, e)[1], regs.hn[row, e])
                    keep_for_next_step(S, hs, S.hs_row(t + 1, S.pair(c, tx, e)[0]),
                                       S.XK[layer] * LANES + S.pair(c, tx, e)[1], regs.hn[row, e])


@T.macro
def final_states(S, a, layer, c, tx, raw):
    """Y_h: h after the last step (zero for an empty sequence, as ONNX Runtime)."""
    for e in range(S.state_slots(S.tile_rows(a))):
        if S.in_batch(a, S.state_row(tx, e)):
            if a.n_t > 0:
                stamped.issue(S, a, layer, a.n_t - 1, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e), raw, 0)
                stamped.check(S, a, layer, a.n_t - 1, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e))
                a.yh[layer][0, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e)] = T.if_then_else(
                    a.lens[batch_row(S.specs[0], "lens", S.glob(a, S.state_row(tx, e)))] > 0,
                    stamped.settled(S, a, layer, a.n_t - 1, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e), raw, 0),
                    T.float32(0))
            else:
                a.yh[layer][0, S.glob(a, S.state_row(tx, e)), S.state_unit(c, tx, e)] = T.float32(0)
