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

The nodes so rewritten, and LSTM / GRU / RNN nodes whose R is a DequantizeLinear of int8 (the QDQ
form, which onnxslim folds into fp32 weights), are named in a model property (INT8_NODES) that the
import reads into their CellSpec (`int8_weights`): the planner may then hold their recurrent
weights in fp16, which rounds a value (q - zero_point) * scale, |q - zero_point| <= 255, by at
most an eighth of the int8 step `scale`, and halves what the chip must hold (an H=2048 LSTM's 64
MiB of fp32 weights, which fit on no chip, become 32 MiB, which fit on an H100).

Numerics: the dequantized weights are exactly the values the int8 weights stand for, so the
result is the float LSTM with those weights (checked against ONNX Runtime running that LSTM at the
fp32 bound). ONNX Runtime's own kernel also quantizes the activations (x and h, to 8 bits with a
scale per tensor, every step) and so differs from it by that rounding (docs/design.md,
*Quantized models*).
"""
from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import PersistRNNError
from .graph_values import constant_names, constant_values

#: the contrib op's inputs after the standard LSTM's eight
_QUANT_INPUTS = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")
#: the model property naming the recurrent nodes whose recurrent weights are int8 values times
#: scales (a JSON list), which the import reads into each layer's CellSpec (`int8_weights`)
INT8_NODES = "persist_rnn.int8_weight_nodes"


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
    with its weights dequantized; a note for each. Those LSTMs, and the LSTM / GRU / RNN nodes whose
    R a DequantizeLinear of int8 gives, are named in the model's INT8_NODES property."""
    graph, notes, marked = model.graph, [], []
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
        name = node.name or f"DynamicQuantizeLSTM_{k}"
        lstm = helper.make_node("LSTM", [inputs[0], w_name, r_name, *inputs[3:8]], list(node.output), name=name)
        lstm.attribute.extend(node.attribute)
        while lstm.input and not lstm.input[-1]:
            lstm.input.pop()
        per = "per channel" if values[inputs[8]].ndim == 2 else "per tensor"
        notes.append(f"node {name!r}: DynamicQuantizeLSTM's {values[inputs[1]].dtype} weights ({per} scales) "
                     "dequantized; it runs as an LSTM of fp32 activations, its recurrent weights held in fp16 "
                     "where the planner picks it (docs/design.md, *Quantized models*)")
        graph.node[k].CopyFrom(lstm)
        marked.append(name)
    if notes and not any(n.op_type == "DynamicQuantizeLSTM" for n in graph.node):
        _drop_unused_initializers(graph)
    _mark_int8_weights(model, marked + _dequantize_linear_fed(graph))
    return notes


def _dequantize_linear_fed(graph: onnx.GraphProto) -> list[str]:
    """The LSTM / GRU / RNN nodes whose R is a DequantizeLinear of an int8 or uint8 constant (the
    QDQ form of static quantization), before onnxslim folds that into fp32 weights."""
    names = constant_names(graph)
    int8 = {t.name for t in graph.initializer if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)}
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int8
                   and all(i in names for i in n.input[1:] if i)}
    return [n.name for n in graph.node if n.op_type in ("LSTM", "GRU", "RNN") and n.name and len(n.input) > 2
            and n.input[2] in dequantized]


def _mark_int8_weights(model: onnx.ModelProto, nodes: list[str]) -> None:
    """Name `nodes` in the model's INT8_NODES property (the import reads it: `int8_weight_nodes`)."""
    if nodes:
        names = sorted(set(nodes) | int8_weight_nodes(model))
        others = [prop for prop in model.metadata_props if prop.key != INT8_NODES]
        del model.metadata_props[:]
        model.metadata_props.extend(others)
        model.metadata_props.add(key=INT8_NODES, value=json.dumps(names))


def int8_weight_nodes(model: onnx.ModelProto) -> set[str]:
    """The recurrent nodes that `dequantize_lstms` found holding int8 weights."""
    return {name for prop in model.metadata_props if prop.key == INT8_NODES for name in json.loads(prop.value)}


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """The quantized weights, scales and zero points no node reads any more."""
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for attribute_graph in (a.g for n in graph.node for a in n.attribute if a.HasField("g")):
        read |= {i for n in attribute_graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
