"""Bad models and bad inputs: a PersistRNNError naming the node, attribute or input, and what is
expected; never an internal TVM error."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import persist_rnn
from persist_rnn import PersistRNNError
from persist_rnn.bench.layer_models import LayerCase, make_model


def _model(**kw):
    return make_model(LayerCase(**kw))


def _set_attr(model, name, value):
    node = model.graph.node[0]
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    if value is not None:
        node.attribute.append(onnx.helper.make_attribute(name, value))
    return model


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not protobuf \x00\x01\x02")
    with pytest.raises(PersistRNNError, match="not a readable ONNX model"):
        persist_rnn.compile(str(bad))


def test_graph_reading_an_undefined_tensor():
    model, _ = _model()
    model.graph.node[0].input[1] = "nowhere"
    with pytest.raises(PersistRNNError, match="'nowhere'.*no graph input, initializer or earlier node"):
        persist_rnn.compile(model)


def test_missing_hidden_size():
    model, _ = _model()
    with pytest.raises(PersistRNNError, match=r"node 'rnn' \(LSTM\): attribute 'hidden_size': is missing"):
        persist_rnn.compile(_set_attr(model, "hidden_size", None))


@pytest.mark.parametrize("name,value,expect", [
    ("direction", "sideways", "attribute 'direction'.*forward / reverse / bidirectional"),
    ("layout", 2, "attribute 'layout'.*0 or 1"),
    ("activations", ["Sigmoid", "Tanh", "Swish"], "unknown activation 'Swish'.*one of Relu"),
    ("activations", ["Sigmoid", "Tanh"], "attribute 'activations': has 2 entries; expected 3"),
    ("clip", -1.0, "attribute 'clip'.*positive"),
    ("input_forget", 3, "attribute 'input_forget'.*0 or 1"),
])
def test_bad_attributes(name, value, expect):
    model, _ = _model()
    with pytest.raises(PersistRNNError, match=expect):
        persist_rnn.compile(_set_attr(model, name, value))


def test_linear_before_reset_on_lstm():
    model, _ = _model()
    with pytest.raises(PersistRNNError, match="linear_before_reset.*on GRU only"):
        persist_rnn.compile(_set_attr(model, "linear_before_reset", 1))


@pytest.mark.parametrize("name,shape", [("W", (1, 16, 5)), ("R", (1, 24, 5)), ("B", (1, 40))])
def test_weight_shapes_that_disagree(name, shape):
    model, _ = _model(op="LSTM")  # hidden 6, input 4: W (1, 24, 4), R (1, 24, 6), B (1, 48)
    for init in model.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(np.zeros(shape, "float32"), name))
    with pytest.raises(PersistRNNError, match=f"node 'rnn' \\(LSTM\\): input '{name}': has shape"):
        persist_rnn.compile(model)


def test_sequence_lens_constant_out_of_range():
    model, _ = _model(op="GRU")
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, 9, 1], "int32"), "lens"))
    node = model.graph.node[0]
    node.input.extend([""] * (5 - len(node.input)))
    node.input[4] = "lens"
    with pytest.raises(PersistRNNError, match=r"input 'sequence_lens': is \[2, 9, 1\]; expected values in \[0, 5\]"):
        persist_rnn.compile(model)


@pytest.fixture(scope="module")
def compiled_with_lengths():
    model, feeds = make_model(LayerCase(op="RNN", seq_lens=[3, 2, 5], dynamic=True))
    return persist_rnn.compile(model, "llvm"), feeds


@pytest.mark.parametrize("change,expect", [
    (lambda f: {k: v for k, v in f.items() if k != "X"}, r"missing \['X'\]"),
    (lambda f: {**f, "Z": f["X"]}, r"unknown \['Z'\]"),
    (lambda f: {**f, "X": f["X"].astype("float64")}, "input 'X': dtype float64, expected float32"),
    (lambda f: {**f, "X": f["X"][0]}, r"input 'X': shape \(3, 4\), expected rank 3"),
    (lambda f: {**f, "X": np.zeros((5, 3, 7), "float32")}, r"input 'X': shape \(5, 3, 7\), expected \('T', 'N', 4\)"),
    (lambda f: {**f, "sequence_lens": np.array([3, 2], "int32")}, "dimension 'N'.*is 2, but 'X' gave it 3"),
    (lambda f: {**f, "sequence_lens": np.array([3, -1, 2], "int32")}, r"sequence_lens.*\[3, -1, 2\]; expected values in \[0, 5\]"),
    (lambda f: {**f, "sequence_lens": np.array([3, 6, 2], "int32")}, r"expected values in \[0, 5\]"),
])
def test_bad_run_inputs(compiled_with_lengths, change, expect):
    compiled, feeds = compiled_with_lengths
    with pytest.raises(PersistRNNError, match=expect):
        compiled.run(change(feeds))


@pytest.mark.parametrize("target,expect", [
    ("foo", "target 'foo': Target kind \"foo\" is not defined"),
    ({"kind": "cuda", "bogus": 1}, "Unknown config option 'bogus'"),
    ("{not json", "target '{not json'"),
    (42, "not int"),
    ({"kind": "cuda", "arch": "sm_75"}, "target arch sm_75: persist_rnn's CUDA kernels need sm_80 or newer"),
])
def test_bad_targets(target, expect):
    model, _ = _model()
    with pytest.raises(PersistRNNError, match=expect):
        persist_rnn.compile(model, target)


def test_an_op_no_converter_takes_is_named_with_its_node():
    """TVM's importer stops on such an op with OpNotImplemented and no node; the error names the
    node and its domain."""
    model, _ = _model()
    model.graph.node[0].domain = "com.microsoft"
    model.graph.node[0].op_type = "AttnLSTM"
    model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(PersistRNNError, match=r"node '.*' \(com.microsoft.AttnLSTM\): not supported: TVM's ONNX "
                                              r"importer has no converter"):
        persist_rnn.compile(model)
    model, _ = _model()
    model.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(PersistRNNError, match=r"node '.*' \(NoSuchOp\): not supported: TVM's ONNX importer has no converter"):
        persist_rnn.compile(model)
