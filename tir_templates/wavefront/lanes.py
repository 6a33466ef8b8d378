"""Lane updates in the wavefront kernel (`StackConfig.lane_updates`): a warp's lanes take its
rows' sums straight from the transposing shuffle (`dots.shuffle_sums`) and update the warp's
units themselves. The sums never meet in shared memory, and a step keeps two __syncthreads of
three: before its dot products, and before the cluster's exchange (`kernel.exchange`).
`gather_sums` fetches each lane's pair's gate sums (each part's) from the lanes that hold them.

Every lane of a pair computes it (32 / P lanes a pair: the warp's instructions cost the same) and
one stores it. Sending each pair's h(t) from its lanes' registers, 4 bytes a store, with no
__syncthreads before the exchange, measured slower on the H100 than the 16-byte exchange after one
(3 x LSTM H=128, B=1: 0.1377 against 0.1203 ms; docs/design.md, *What we tried*): the peers'
mbarriers count four times the stores.

A lane's sums sit in `acc`: the dot's first (`layout.held_sums`), then the gathered ones
(`layout.gathered`), which the update reads. GPU only: the CPU twin meets in `gs` as before.
"""
from __future__ import annotations

from tvm.script import tirx as T

from .dots import shfl


@T.macro
def gather_sums(S, layer, tx, acc):
    """The lane's pair's sums of every gate (each part), from the lanes that hold them, into
    acc[gathered(part, g)]."""
    for part in T.unroll(S.PARTS[layer]):
        for g in T.unroll(S.G):
            acc[S.gathered(layer, part, g)] = shfl(acc[0], S.sum_lane(layer, S.sum_index(
                layer, part, S.lane_pair(tx)[1] * S.G + g, S.lane_pair(tx)[0])))
