"""A wavefront step's dot products and their sums over the warp. A lane holds its rows' stride-32
columns of [W_l | R_l] (`layout.col`), so each gate row's sum is spread over the warp's 32 lanes:

    zero_sums       a lane's sums set to zero
    input_dot       the input part, W_l h_{l-1}(t): it needs only the layer below's h, so where a
                    lane keeps every batch row's sums at once (`layout.live`) it runs before the
                    wait for the peers' h(t-1), off the recurrence's path (`kernel.one_step`)
    recurrent_dot   the recurrent part, R_l h_l(t-1)
    shuffle_sums    a transposing shuffle-sum: each round a lane keeps half of its sums and adds
                    its partner's of that half, so 2^k sums take 2^k - 1 + 5 - k shuffles, not
                    5 x 2^k; lane l ends with the whole sum l // (32 / 2^k)
    sums_to_gs      the lanes that hold whole sums write them into `gs`, where the pairs' updates
                    meet them (lane updates gather them by shuffles instead: `lanes.py`)
    dot_row_by_row  a batch too big for every row's sums to stay live: each batch row's dot,
                    shuffle and store in turn

A lane's sums sit in acc[0 .. held_sums) at `layout.sum_index`, zeros padding them to a power of two.
"""
from __future__ import annotations

from tvm.script import tirx as T

from .plan import LANES

# one helper a source: the code generator emits each call's source once, under the callee's name
SHUFFLE_XOR = r"""
__device__ __forceinline__ float prnn_shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
"""


SHUFFLE_FROM = r"""
__device__ __forceinline__ float prnn_shfl(float v, int lane) {
  return __shfl_sync(0xffffffffu, v, lane);
}
"""


def shfl_xor(v, mask):
    return T.cuda.func_call("prnn_shfl_xor", v, mask, source_code=SHUFFLE_XOR, return_type="float32")


def shfl(v, lane):
    """Lane `lane`'s v (lane updates gather their pair's sums with it: `lanes.gather_sums`)."""
    return T.cuda.func_call("prnn_shfl", v, lane, source_code=SHUFFLE_FROM, return_type="float32")


@T.macro
def zero_sums(S, layer, acc):
    """Every sum the lane holds (the padding included) set to zero."""
    for n in T.unroll(S.held_sums(layer)):
        acc[n] = T.float32(0)


@T.macro
def input_dot(S, layer, tx, wreg, hs, acc, t, bi):
    """Batch row bi's input part: the lane's W_l columns against step t's h_{l-1}(t) in hs."""
    for i in T.unroll(S.XK[layer]):
        for q in T.unroll(S.RPG):
            acc[S.sum_index(layer, 0, q, bi)] = acc[S.sum_index(layer, 0, q, bi)] + wreg[0, q * S.KPL[layer] + i] * hs[
                S.hs_row(t, bi), S.col(tx % LANES, i)]


@T.macro
def recurrent_dot(S, layer, tx, wreg, hs, acc, t, bi):
    """Batch row bi's recurrent part: the lane's R_l columns against h_l(t-1) in hs (GRU above the
    first layer into its own sums, every other layer onto the input part's)."""
    for i in T.unroll(S.H // LANES):
        for q in T.unroll(S.RPG):
            acc[S.sum_index(layer, S.PARTS[layer] - 1, q, bi)] = acc[S.sum_index(layer, S.PARTS[layer] - 1, q, bi)] + wreg[
                0, q * S.KPL[layer] + S.XK[layer] + i] * hs[S.hs_row(t, bi), S.XK[layer] * LANES + S.col(tx % LANES, i)]


@T.macro
def input_dots(S, layer, tx, wreg, hs, acc, t):
    """Every batch row's input part (layers above the first)."""
    if S.XK[layer] > 0:
        for bi in T.unroll(S.BC):
            input_dot(S, layer, tx, wreg, hs, acc, t, bi)


@T.macro
def recurrent_dots(S, layer, tx, wreg, hs, acc, t):
    """Every batch row's recurrent part."""
    for bi in T.unroll(S.BC):
        recurrent_dot(S, layer, tx, wreg, hs, acc, t, bi)


@T.macro
def shuffle_round(S, layer, tx, acc, r):
    """Round r (lanes 16 >> r apart): while a lane has more than one sum, it keeps the half its
    lane bit picks (the upper half if set) and adds its partner's of it; then it adds its
    partner's one sum."""
    if S.held_sums(layer) >> r > 1:
        for j in T.unroll(S.held_sums(layer) >> (r + 1)):
            acc[j] = T.Select(T.bitwise_and(tx, 16 >> r) != 0, acc[j + (S.held_sums(layer) >> (r + 1))], acc[j]) + shfl_xor(
                T.Select(T.bitwise_and(tx, 16 >> r) != 0, acc[j], acc[j + (S.held_sums(layer) >> (r + 1))]), 16 >> r)
    else:
        acc[0] = acc[0] + shfl_xor(acc[0], 16 >> r)


@T.macro
def shuffle_sums(S, layer, tx, acc):
    """The warp's sums, transposed: lane l ends with sum l // (32 / held_sums) in acc[0]."""
    shuffle_round(S, layer, tx, acc, 0)
    shuffle_round(S, layer, tx, acc, 1)
    shuffle_round(S, layer, tx, acc, 2)
    shuffle_round(S, layer, tx, acc, 3)
    shuffle_round(S, layer, tx, acc, 4)


@T.macro
def sums_to_gs(S, layer, tx, gs, acc, t, bi):
    """After `shuffle_sums`: the first lane holding each sum writes it to its gate row's place in
    gs (with every batch row live, the sum's own batch row; else batch row bi's)."""
    if tx % (LANES // S.held_sums(layer)) == 0:
        if S.held_sum(layer, tx) < S.PARTS[layer] * S.RPG * S.live_rows(layer):
            gs[S.gs_row(t, S.sum_part(layer, S.held_sum(layer, tx)), S.sum_row(layer, S.held_sum(layer, tx), bi)),
               (tx // LANES) * S.RPG + S.sum_gate_row(layer, S.held_sum(layer, tx))] = acc[0]


@T.macro
def dot_row_by_row(S, layer, tx, wreg, hs, gs, acc, t):
    """Step t's dot products of a batch too big for every row's sums to stay live: batch row by
    batch row, its sums (input part, then recurrent), shuffled and written into gs."""
    for bi in T.unroll(S.BC):
        zero_sums(S, layer, acc)
        if S.XK[layer] > 0:
            input_dot(S, layer, tx, wreg, hs, acc, t, bi)
        recurrent_dot(S, layer, tx, wreg, hs, acc, t, bi)
        shuffle_sums(S, layer, tx, acc)
        sums_to_gs(S, layer, tx, gs, acc, t, bi)
