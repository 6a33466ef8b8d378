"""ONNX node plumbing for the loop rewrites: hoisting the loop-invariant body, renamed copies,
constants, (un)squeezes, and pruning what nothing reads."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .describe import TimeLoop, loop_error

_NOT_INVARIANT = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                  "Bernoulli", "Dropout"}


def hoist(loop: TimeLoop, prefix: str) -> tuple[list, dict]:
    """Body nodes that compute the same value every step, as outer nodes (renamed under `prefix`),
    and the body value -> outer name map for their outputs."""
    varying = {i.name for i in loop.body.input}
    hoisted, renamed = [], {}
    for init in loop.body.initializer:  # a body's own initializers (onnxslim makes some) are constants too
        value = numpy_helper.to_array(init)
        renamed[init.name] = f"{prefix}{init.name}"
        hoisted.append(constant_node(renamed[init.name], value))
    for n in loop.body.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise loop_error(loop.node, f"its body holds a subgraph (node {n.name!r}, {n.op_type}); not supported")
        if n.op_type in _NOT_INVARIANT or any(i in varying for i in n.input if i):
            varying.update(n.output)
            continue
        hoisted.append(renamed_copy(n, prefix, renamed))
    return hoisted, renamed


def renamed_copy(n, prefix, names: dict) -> onnx.NodeProto:
    """`n` with its name and outputs under `prefix`, its inputs looked up in `names` (which
    learns the outputs' new names)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(n)
    copy.name = f"{prefix}{n.name}"
    copy.input[:] = [names.get(i, i) for i in n.input]
    for k, out in enumerate(n.output):
        if out:
            names[out] = copy.output[k] = f"{prefix}{out}"
    return copy


def remove_dead_nodes(graph):
    """Drop nodes nothing reads (the lists' SequenceEmpty); a kept node's subgraphs read the
    outer values they name, so those stay live too."""
    live = {o.name for o in graph.output}
    keep = []
    for n in reversed(graph.node):
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(n.input)
            live.update(_names_read_in_subgraphs(n))
    del graph.node[:]
    graph.node.extend(reversed(keep))


def _names_read_in_subgraphs(node) -> set:
    out = set()
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                out.update(n.input)
                out.update(_names_read_in_subgraphs(n))
    return out


def constant_node(name, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(value), name))


def unsqueeze(g, inp, out, axis, name) -> list:
    return _axis_op("Unsqueeze", g, inp, out, axis, name)


def squeeze(g, inp, out, axis, name) -> list:
    return _axis_op("Squeeze", g, inp, out, axis, name)


def _axis_op(op, g, inp, out, axis, name) -> list:
    """`op` (Squeeze or Unsqueeze) of one axis: nodes for `g`'s opset (axes an input from 13 on)."""
    if g.opset >= 13:
        return [constant_node(f"{out}/axes", np.array([axis], "int64")),
                helper.make_node(op, [inp, f"{out}/axes"], [out], name=name)]
    return [helper.make_node(op, [inp], [out], name=name, axes=[axis])]
