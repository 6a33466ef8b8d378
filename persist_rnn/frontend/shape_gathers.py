"""Gathers of gathered shapes, composed into one: `Gather(Gather(Shape(x), [2, 0, 1]), 0)` becomes
`Gather(Shape(x), 2)`.

torch's exporters permute a shape and then pick one extent from it (pyannote's segmentation
model builds its LSTM states this way: ConstantOfShape of the batch extent). TVM 0.27's importer
keeps `Shape(x)` as a shape and a scalar Gather of it as a symbolic extent, but a Gather by a 1-D
index becomes a run-time tensor, and the extent picked from that is lost: the states had no
static shape and the model did not build. Composed, the pick reads the shape directly. Rewritten
in the ONNX graph (top level) before folding; the 1-D Gather is left for its other readers.
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from .graph_values import constant_values


def compose_shape_gathers(model: onnx.ModelProto) -> int:
    """Rewrites `model` in place; returns how many Gathers now read a Shape directly."""
    graph = model.graph
    constants = constant_values(graph)
    producer = {out: node for node in graph.node for out in node.output}
    composed = 0
    for node in graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[1] not in constants:
            continue
        inner = producer.get(node.input[0])
        if inner is None or inner.op_type != "Gather" or inner.input[1] not in constants:
            continue
        source = producer.get(inner.input[0])
        if source is None or source.op_type != "Shape":
            continue
        outer_index, inner_index = constants[node.input[1]], constants[inner.input[1]]
        if outer_index.ndim != 0 or inner_index.ndim != 1:
            continue
        picked = inner_index[int(outer_index) % len(inner_index)]
        name = f"{node.name or node.output[0]}_composed_index"
        graph.initializer.append(numpy_helper.from_array(picked.astype(inner_index.dtype).reshape(()), name))
        node.input[0], node.input[1] = inner.input[0], name
        composed += 1
    return composed
