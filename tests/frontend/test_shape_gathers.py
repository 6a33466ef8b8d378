"""LSTM states built from Shape arithmetic on a symbolic batch (frontend.shape_gathers,
frontend.layer): pyannote's segmentation model permutes Shape(x) with a 1-D Gather, picks the
batch with a scalar Gather, and builds zeros with ConstantOfShape. TVM lost the extents on the
way and the model did not build; composed, the states keep (D, B, H)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.frontend.shape_gathers import compose_shape_gathers
from persist_rnn.bench.layer_models import max_rel_error, ort_run

I, H = 5, 8


def _lstm_with_states_from_shape(state_input=False):
    """x (T, B, I); initial_h = initial_c = zeros(1, B, H) from Gather(Gather(Shape(x), [1, 0, 2]), 0),
    or (state_input) a graph input `h0` declared without a shape."""
    rng = np.random.default_rng(0)
    init = [helper.make_tensor("W", TensorProto.FLOAT, [1, 4 * H, I], rng.standard_normal(4 * H * I).astype("float32") * 0.3),
            helper.make_tensor("R", TensorProto.FLOAT, [1, 4 * H, H], rng.standard_normal(4 * H * H).astype("float32") * 0.3),
            helper.make_tensor("perm", TensorProto.INT64, [3], [1, 0, 2]),
            helper.make_tensor("first", TensorProto.INT64, [], [0]),
            helper.make_tensor("zero_axis", TensorProto.INT64, [1], [0]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("hidden", TensorProto.INT64, [1], [H])]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "perm"], ["permuted"], name="permute_shape"),
             helper.make_node("Gather", ["permuted", "first"], ["batch"], name="pick_batch"),
             helper.make_node("Unsqueeze", ["batch", "zero_axis"], ["batch_1d"]),
             helper.make_node("Concat", ["one", "batch_1d", "hidden"], ["state_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
             helper.make_node("LSTM", ["x", "W", "R", "", "", "h0" if state_input else "zeros", "zeros"],
                              ["y", "y_h"], hidden_size=H, name="the_lstm")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", I])]
    if state_input:
        inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y_h", TensorProto.FLOAT, None)], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_picked_extent_reads_the_shape_directly():
    model = _lstm_with_states_from_shape()
    assert compose_shape_gathers(model) == 1
    [pick] = [n for n in model.graph.node if n.name == "pick_batch"]
    assert pick.input[0] == "shape"


@pytest.mark.parametrize("state_input", [False, True])
def test_states_from_shape_arithmetic_match_onnx_runtime(state_input):
    model = _lstm_with_states_from_shape(state_input)
    compiled = persist_rnn.compile(model, "llvm", simplify=False)
    for t, b in ((4, 1), (3, 5)):
        rng = np.random.default_rng(b)
        feeds = {"x": rng.standard_normal((t, b, I)).astype("float32")}
        if state_input:
            feeds["h0"] = rng.standard_normal((1, b, H)).astype("float32")
        assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-5


def test_a_state_of_the_wrong_shape_is_refused_per_call():
    """The cast to (D, B, H) of a state whose extents were unknown is checked by the VM."""
    compiled = persist_rnn.compile(_lstm_with_states_from_shape(True), "llvm", simplify=False)
    x = np.zeros((3, 2, I), "float32")
    with pytest.raises(Exception, match="match_cast"):
        compiled.run({"x": x, "h0": np.zeros((1, 3, H), "float32")})
