"""ONNX `Loop` and `Scan` over time, rewritten before the import (TVM 0.27's importer has neither).

Scripted torch loops (`for t in range(x.size(0))`) export as a `Loop` whose trip count is
computed from x's shape. The step reads `x[t]` with a `Gather`, and the per-step outputs are
collected in a sequence (`SequenceInsert`, then `ConcatFromSequence` after the loop). Keras models
converted with tf2onnx, and hand-written graphs, use `Scan`. The loop-invariant part of the body
(torch re-slices its weights every step) is hoisted out first. Then, in order of preference:
1. the body is one LSTM / GRU / RNN node run for one step (torch's `LSTMCell`): the loop becomes
   that node over the whole sequence, and a symbolic T stays symbolic;
2. the trip count is known (after pinning and folding): the body is unrolled, T copies. MatchCells
   makes a chain of primitive-op cells persistent, and anything else runs as the body says;
3. otherwise the loop is refused, with the node named and the way out (pin the sequence length).
A loop whose exit condition depends on data, or whose body holds its own subgraphs, is refused.
"""
from __future__ import annotations

import onnx

from .describe import OuterGraph, describe, loop_error
from .nodes import hoist, remove_dead_nodes
from .one_layer import as_one_layer
from .unroll import unrolled


def rewrite_loops(model: onnx.ModelProto) -> list[str]:
    """Rewrite every top-level Loop and Scan in `model` (in place); notes on what became of each."""
    g = OuterGraph(model)
    notes, nodes, dropped = [], [], set()
    for node in model.graph.node:
        if node.op_type not in ("Loop", "Scan"):
            nodes.append(node)
            continue
        loop = describe(node, g)
        prefix = f"{node.name or node.op_type}/"
        hoisted, renamed = hoist(loop, prefix)
        whole = as_one_layer(loop, g, renamed, prefix)
        if whole is not None:
            nodes += hoisted + whole[0]
            notes.append(f"{node.op_type} {node.name!r}: one {whole[1]} step per iteration, made one {whole[1]} "
                         "node over the whole sequence")
        elif loop.steps is not None:
            nodes += hoisted + unrolled(loop, g, renamed, prefix)
            notes.append(f"{node.op_type} {node.name!r}: unrolled, {loop.steps} steps (cells among them are "
                         "matched as one recurrence)")
        else:
            raise loop_error(node, "its number of steps is known only at run time and its body is not a single "
                               "LSTM/GRU/RNN node; pin the sequence length (shapes={input: (T, ...)}, CLI "
                               "--shape) so that it can be unrolled")
        dropped.update(id(n) for n in loop.dropped)
    del model.graph.node[:]
    model.graph.node.extend(n for n in nodes if id(n) not in dropped)
    if notes:
        remove_dead_nodes(model.graph)
    return notes
