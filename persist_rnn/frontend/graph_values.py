"""The values an ONNX graph holds as constants: its initializers and its Constant nodes' `value`
tensors, by name. Read by the loop rewrite (frontend.loops), the shape-gather composition
(frontend.shape_gathers), the quantized-LSTM rewrite (frontend.quantized) and the torch capture's
check for sorts of runtime counts (pytorch.capture)."""
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


def constant_names(graph: onnx.GraphProto) -> set:
    """The names `constant_values` holds, without reading the tensors."""
    return {t.name for t in graph.initializer} | {node.output[0] for node in graph.node if node.op_type == "Constant"
                                                  and any(a.name == "value" for a in node.attribute)}
