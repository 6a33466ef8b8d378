"""Lane updates in the wavefront kernel (`StackConfig.lane_updates`): a warp's lanes take its
rows' sums straight from the shuffle and update the warp's units themselves. The sums never meet
in shared memory, and a step keeps two __syncthreads of three: before its dot products, and
before the cluster's exchange (`kernel.exchange`):

    dot_lane        each lane's partial sums of every (part, row, batch row) of the warp
    shuffle_sums    a transposing shuffle-sum: each round a lane keeps half of its sums and adds
                    its partner's of that half, so 2^k sums take 2^k - 1 + 5 - k shuffles, not
                    5 x 2^k; lane l ends with the whole sum l // (32 / 2^k)
    gather_sums     each lane fetches its pair's gate sums (each part's) from the lanes that hold them

Every lane of a pair computes it (32 / P lanes a pair: the warp's instructions cost the same) and
one stores it. Sending each pair's h(t) from its lanes' registers, 4 bytes a store, with no
__syncthreads before the exchange, measured slower on the H100 than the 16-byte exchange after one
(3 x LSTM H=128, B=1: 0.1377 against 0.1203 ms; docs/benchmarks.md, session 34): the peers'
mbarriers count four times the stores.

A lane's sums sit in `acc`: the dot's first (`layout.lane_sums`), then the gathered ones
(`layout.gathered`), which the update reads. GPU only: the CPU twin meets in `gs` as before.
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
    return T.cuda.func_call("prnn_shfl", v, lane, source_code=SHUFFLE_FROM, return_type="float32")


@T.macro
def dot_lane(S, layer, tx, wreg, hs, acc, t):
    """The lane's partial dot products of step t's [h below ; h] (input part, then recurrent
    part) with its weights, every row and batch row at once."""
    for n in T.unroll(S.lane_sums(layer)):
        acc[n] = T.float32(0)
    for bi in T.unroll(S.BC):
        if S.XK[layer] > 0:
            for i in T.unroll(S.XK[layer]):
                for q in T.unroll(S.RPG):
                    acc[S.sum_index(0, q, bi)] = acc[S.sum_index(0, q, bi)] + wreg[0, q * S.KPL[layer] + i] * hs[
                        S.hs_row(t, bi), S.col(tx % LANES, i)]
        for i in T.unroll(S.H // LANES):
            for q in T.unroll(S.RPG):
                acc[S.sum_index(S.PARTS[layer] - 1, q, bi)] = acc[S.sum_index(S.PARTS[layer] - 1, q, bi)] + wreg[
                    0, q * S.KPL[layer] + S.XK[layer] + i] * hs[S.hs_row(t, bi), S.XK[layer] * LANES + S.col(tx % LANES, i)]


@T.macro
def shuffle_round(S, layer, tx, acc, r):
    """Round r (lanes 16 >> r apart): while a lane has more than one sum, it keeps the half its
    lane bit picks (the upper half if set) and adds its partner's of it; then it adds its
    partner's one sum."""
    if S.lane_sums(layer) >> r > 1:
        for j in T.unroll(S.lane_sums(layer) >> (r + 1)):
            acc[j] = T.Select(T.bitwise_and(tx, 16 >> r) != 0, acc[j + (S.lane_sums(layer) >> (r + 1))], acc[j]) + shfl_xor(
                T.Select(T.bitwise_and(tx, 16 >> r) != 0, acc[j], acc[j + (S.lane_sums(layer) >> (r + 1))]), 16 >> r)
    else:
        acc[0] = acc[0] + shfl_xor(acc[0], 16 >> r)


@T.macro
def shuffle_sums(S, layer, tx, acc):
    """The warp's sums, transposed: lane l ends with sum l // (32 / lane_sums) in acc[0]."""
    shuffle_round(S, layer, tx, acc, 0)
    shuffle_round(S, layer, tx, acc, 1)
    shuffle_round(S, layer, tx, acc, 2)
    shuffle_round(S, layer, tx, acc, 3)
    shuffle_round(S, layer, tx, acc, 4)


@T.macro
def gather_sums(S, layer, tx, acc):
    """The lane's pair's sums of every gate (each part), from the lanes that hold them, into
    acc[gathered(part, g)]."""
    for part in T.unroll(S.PARTS[layer]):
        for g in T.unroll(S.G):
            acc[S.gathered(layer, part, g)] = shfl(acc[0], S.sum_lane(layer, S.sum_index(
                part, S.lane_pair(tx)[1] * S.G + g, S.lane_pair(tx)[0])))


@T.macro
def lane_sums(S, layer, tx, wreg, hs, acc, t):
    """Step t's dot products, summed over the warp and gathered: every lane holds its pair's gate
    sums."""
    dot_lane(S, layer, tx, wreg, hs, acc, t)
    shuffle_sums(S, layer, tx, acc)
    gather_sums(S, layer, tx, acc)

