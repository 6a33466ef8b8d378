"""Lane updates in the wavefront kernel (`plan.lane_updates`): a warp's lanes take its rows' sums
straight from the shuffle and update the warp's units themselves. The sums never meet in shared
memory, and a step keeps one __syncthreads, the one before its dot products:

    dot_lane        each lane's partial sums of every (part, row, batch row) of the warp
    shuffle_sums    a transposing shuffle-sum: each round a lane keeps half of its sums and adds
                    its partner's of that half, so 2^k sums take 2^k - 1 + 5 - k shuffles, not
                    5 x 2^k; lane l ends with the whole sum l // (32 / 2^k)
    gather_sums     each lane fetches its pair's gate sums (each part's) from the lanes that hold them
    send_to_peers   after the update, each lane stores its pair's h(t) into its share of the
                    peers' next copy of hs (4 bytes a store, counted by their mbarriers), straight
                    from its register

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
DSMEM_SEND_WORD = r"""
__device__ __forceinline__ void prnn_dsmem_send_word(void* at, float value, unsigned int peer, void* bar) {
  // 4 bytes of this CTA's h(t) to the same address in cluster CTA `peer`, counted by its `bar`
  unsigned int to, to_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"((unsigned int)__cvta_generic_to_shared(at)),
               "r"(peer));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to_bar) : "r"((unsigned int)__cvta_generic_to_shared(bar)),
               "r"(peer));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
               :: "r"(to), "f"(value), "r"(to_bar) : "memory");
}
"""

#: shuffle rounds of a warp-wide sum
ROUNDS = 5


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


@T.macro
def send_to_peers(S, layer, c, tx, hs, bar, hn, t):
    """The end of step t: the lane's pair's h(t), `hn`, into its share of the peers' copy of hs
    for step t + 1, each peer counting the bytes on its mbarrier (t + 1) % 2. The peers cannot
    still read that copy: their step t - 1 ended before this CTA's step t began."""
    for k in T.unroll(S.LANE_SENDS):
        if S.lane_send(c, tx, k)[0]:
            T.cuda.func_call("prnn_dsmem_send_word", T.address_of(hs[S.hs_row(t + 1, S.pair(c, tx, 0)[0]),
                                                                      S.XK[layer] * LANES + S.pair(c, tx, 0)[1]]),
                             hn, T.Cast("uint32", S.lane_send(c, tx, k)[1]), T.address_of(bar[(t + 1) % 2]),
                             source_code=DSMEM_SEND_WORD)
