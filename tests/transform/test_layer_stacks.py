"""Stacks of recurrent layers (transform/layer_stacks.py): which chains the layer wavefront could
run as one kernel, found in the imported model and named in report()."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.report import layer_report
from persist_rnn.transform import PersistentRNN
from persist_rnn.transform.layer_stacks import find_stacks

H, T_, B = 16, 5, 3


def stacked_model(directions=("forward", "forward"), between=(), lens=None, op="LSTM") -> onnx.ModelProto:
    """Recurrent layers of hidden size H one on another: layer l's Y (T, D, B, H) squeezed on D
    (through `between`'s extra nodes, applied in turn) is layer l+1's X. `lens`: each layer's
    sequence_lens input ("" none; "L" the graph input; "L2" another graph input)."""
    rng = np.random.default_rng(0)
    lens = lens or ("",) * len(directions)
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    nodes, inits, x = [], [], "X"
    for l, direction in enumerate(directions):
        D = 2 if direction == "bidirectional" else 1
        inits += [numpy_helper.from_array((rng.standard_normal((D, G * H, H)) * 0.3).astype("float32"), f"W{l}"),
                  numpy_helper.from_array((rng.standard_normal((D, G * H, H)) * 0.3).astype("float32"), f"R{l}")]
        nodes.append(helper.make_node(op, [x, f"W{l}", f"R{l}", "", lens[l]], [f"Y{l}"], name=f"layer{l}",
                                      hidden_size=H, direction=direction))
        if l + 1 < len(directions):
            if D == 2:  # (T, 2, B, H) -> (T, B, 2H) is not an input of hidden size H: keep one direction
                nodes.append(helper.make_node("Slice", [f"Y{l}", "zero", "one", "one"], [f"S{l}"]))
                y = f"S{l}"
            else:
                y = f"Y{l}"
            nodes.append(helper.make_node("Squeeze", [y, "one"], [f"X{l + 1}"]))
            x = f"X{l + 1}"
            for k, make in enumerate(between):
                nodes.append(make(x, f"{x}_{k}"))
                x = f"{x}_{k}"
    inits += [numpy_helper.from_array(np.array([0], "int64"), "zero"), numpy_helper.from_array(np.array([1], "int64"), "one")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T_, B, H])]
    inputs += [helper.make_tensor_value_info(name, TensorProto.INT32, [B]) for name in sorted(set(lens) - {""})]
    graph = helper.make_graph(nodes, "stack", inputs, [helper.make_tensor_value_info(f"Y{len(directions) - 1}",
                                                                                     TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def stacks(model) -> list[int]:
    return [len(s) for s in find_stacks(from_onnx(model))]


def test_a_chain_of_forward_layers_is_one_stack():
    assert stacks(stacked_model(("forward",) * 4)) == [4]
    assert stacks(stacked_model(("reverse", "reverse"), op="GRU")) == [2]


def test_dropout_and_reshapes_between_layers_keep_the_stack():
    dropout = lambda x, y: helper.make_node("Dropout", [x], [y])
    flatten = lambda x, y: helper.make_node("Reshape", [x, "flat"], [y])
    back = lambda x, y: helper.make_node("Reshape", [x, "shape"], [y])
    model = stacked_model(between=(dropout, flatten, back))
    model.graph.initializer.extend([numpy_helper.from_array(np.array([T_ * B, H], "int64"), "flat"),
                                    numpy_helper.from_array(np.array([T_, B, H], "int64"), "shape")])
    assert stacks(model) == [2]


@pytest.mark.parametrize("directions", [("forward", "reverse"), ("bidirectional", "forward"), ("forward", "bidirectional")])
def test_layers_walking_time_differently_are_not_stacked(directions):
    """A wavefront step is one time step of every layer: a reverse or bidirectional layer on a
    forward one needs the whole sequence below it."""
    assert stacks(stacked_model(directions)) == []


def test_a_transposed_y_or_other_lengths_break_the_stack():
    swap = lambda x, y: helper.make_node("Transpose", [x], [y], perm=[1, 0, 2])
    back = lambda x, y: helper.make_node("Transpose", [x], [y], perm=[1, 0, 2])
    assert stacks(stacked_model(between=(swap, back))) == []  # a view that reorders elements
    as_bt = lambda x, y: helper.make_node("Reshape", [x, "bt"], [y])  # (T, B, H) read as (B, T, H)
    model = stacked_model(between=(as_bt,))
    model.graph.initializer.append(numpy_helper.from_array(np.array([B, T_, H], "int64"), "bt"))
    assert stacks(model) == []
    assert stacks(stacked_model(lens=("L", "L"))) == [2]
    assert stacks(stacked_model(lens=("L", "L2"))) == []  # each layer its own lengths


def test_report_names_each_layers_stack():
    lines = [r.line() for r in persist_rnn.compile(stacked_model(("forward",) * 3), "llvm").report()]
    assert [line.split(", ")[-1].split(" (")[0] for line in lines] == [
        "layer 1 of 3 stacked", "layer 2 of 3 stacked", "layer 3 of 3 stacked"]
    assert persist_rnn.compile(stacked_model(("forward",) * 3), "llvm").report()[0].stack == ["layer0", "layer1", "layer2"]
    cuda = PersistentRNN(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), measure=False)  # tiled projections
    assert [r.stack for r in layer_report(cuda(from_onnx(stacked_model(("forward",) * 2), target_kind="cuda")))] == [
        ["layer0", "layer1"]] * 2


def test_shipped_examples_are_stacks():
    """char-RNN: 3 x LSTM H=128; speech: 2 x GRU H=256; text classifier: 2 x LSTM H=256 (issue 21)."""
    found = {name: stacks(onnx.load(f"examples/{name}.onnx")) for name in ("char_rnn", "speech_gru", "text_classifier")}
    assert found == {"char_rnn": [3], "speech_gru": [2], "text_classifier": [2]}
