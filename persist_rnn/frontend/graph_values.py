"""The values an ONNX graph holds as constants: its initializers and its Constant nodes' `value`
tensors, by name. Read by the loop rewrite (frontend.loops) and the shape-gather composition
(frontend.shape_gathers)."""
from __future__ import annotations

import onnx
from onnx import helper, numpy_helper


def constant_values(graph: onnx.GraphProto) -> dict:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        value = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None:
            values[node.output[0]] = numpy_helper.to_array(value)
    return values
