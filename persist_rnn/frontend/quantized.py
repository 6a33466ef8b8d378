"""ONNX Runtime's quantized LSTM (`com.microsoft.DynamicQuantizeLSTM`, what
`onnxruntime.quantization.quantize_dynamic` writes for every LSTM) as the standard LSTM whose
weights its int8 weights stand for.

The contrib op holds W as int8 or uint8 [directions, input, 4 * hidden] and R as
[directions, hidden, 4 * hidden] (the standard LSTM's transposed), each with a scale and zero point
per direction (per tensor) or per direction and gate row (per channel). Its weights are
constants, so they are dequantized here, once: W = (W_q - zero_point) * scale, transposed into the
standard LSTM's [directions, 4 * hidden, input]. The node becomes an `LSTM` with every other input
and attribute unchanged (direction, clip, input_forget, activations, sequence_lens, initial
states, peepholes), which every lowering takes: the persistent kernel on CUDA, the reference scan.

Numerics: the dequantized weights are exactly the values the int8 weights stand for, so the
result is the float LSTM with those weights (checked against ONNX Runtime running that LSTM at the
fp32 bound). ONNX Runtime's own kernel also quantizes the activations (x and h, to 8 bits with a
scale per tensor, every step) and so differs from it by that rounding (docs/design.md,
*Quantized models*).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import PersistRNNError
from .graph_values import constant_values

#: the contrib op's inputs after the standard LSTM's eight
_QUANT_INPUTS = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")


def _dequantized(node, values: dict, name: str, weight: str, scale: str, zero_point: str, hidden: int) -> np.ndarray:
    """One of W, R dequantized and transposed to the standard LSTM's [directions, 4 * hidden, K]."""
    q, s, z = (values.get(n) for n in (weight, scale, zero_point))
    for input_name, value, what in ((weight, q, name), (scale, s, f"{name}_scale"), (zero_point, z, f"{name}_zero_point")):
        if value is None:
            raise PersistRNNError(f"node {node.name!r} (DynamicQuantizeLSTM): input {what} ({input_name!r}) is not a "
                                  "constant; persist_rnn takes quantized weights, scales and zero points stored in the model")
    if q.dtype not in (np.int8, np.uint8) or q.ndim != 3 or q.shape[2] != 4 * hidden:
        raise PersistRNNError(f"node {node.name!r} (DynamicQuantizeLSTM): input {name} has dtype {q.dtype} and shape "
                              f"{q.shape}; expected int8 or uint8 [directions, K, {4 * hidden}]")
    directions = q.shape[0]
    if s.shape not in ((directions,), (directions, 4 * hidden)) or z.shape != s.shape:
        raise PersistRNNError(f"node {node.name!r} (DynamicQuantizeLSTM): {name}_scale {s.shape} and {name}_zero_point "
                              f"{z.shape}; expected both ({directions},) (per tensor) or ({directions}, {4 * hidden}) "
                              "(per channel)")
    s = s.astype(np.float32).reshape(directions, 1, -1)
    z = z.astype(np.float32).reshape(directions, 1, -1)
    return np.ascontiguousarray(((q.astype(np.float32) - z) * s).transpose(0, 2, 1))


def dequantize_lstms(model: onnx.ModelProto) -> list[str]:
    """Rewrite every DynamicQuantizeLSTM of the top-level graph of `model` (in place) into an LSTM
    with its weights dequantized; a note for each."""
    graph, notes = model.graph, []
    values = None
    for k, node in enumerate(graph.node):
        if node.op_type != "DynamicQuantizeLSTM" or node.domain != "com.microsoft":
            continue
        values = constant_values(graph) if values is None else values
        inputs = list(node.input) + [""] * (12 - len(node.input))
        hidden = next((a.i for a in node.attribute if a.name == "hidden_size"), 0)
        if hidden <= 0:
            raise PersistRNNError(f"node {node.name!r} (DynamicQuantizeLSTM): attribute hidden_size missing or not "
                                  "positive")
        w = _dequantized(node, values, "W", inputs[1], inputs[8], inputs[9], hidden)
        r = _dequantized(node, values, "R", inputs[2], inputs[10], inputs[11], hidden)
        w_name, r_name = f"{node.name or k}_W_dequantized", f"{node.name or k}_R_dequantized"
        graph.initializer.extend([numpy_helper.from_array(w, w_name), numpy_helper.from_array(r, r_name)])
        lstm = helper.make_node("LSTM", [inputs[0], w_name, r_name, *inputs[3:8]], list(node.output), name=node.name)
        lstm.attribute.extend(node.attribute)
        while lstm.input and not lstm.input[-1]:
            lstm.input.pop()
        graph.node[k].CopyFrom(lstm)
        per = "per channel" if values[inputs[8]].ndim == 2 else "per tensor"
        notes.append(f"node {node.name!r}: DynamicQuantizeLSTM's {values[inputs[1]].dtype} weights ({per} scales) "
                     "dequantized to fp32; it runs as an fp32 LSTM")
    if notes and not any(n.op_type == "DynamicQuantizeLSTM" for n in graph.node):
        _drop_unused_initializers(graph)
    return notes


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """The quantized weights, scales and zero points no node reads any more."""
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for attribute_graph in (a.g for n in graph.node for a in n.attribute if a.HasField("g")):
        read |= {i for n in attribute_graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
