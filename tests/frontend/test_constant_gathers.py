"""Gather by a constant index (frontend.constant_gathers): torch's `h_n[-1]` over a symbolic batch
is imported as a plain take, not as run-time index arithmetic on shape_of (three kernels a call);
an index outside the axis is refused, naming the node; other Gathers go to TVM's converter."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.errors import PersistRNNError
from persist_rnn.frontend import from_onnx
from persist_rnn.testing import ort_run


def _gather(index, axis=0, dims=(3, "B", 4)):
    """y = Gather(x, index, axis) with x of `dims` (a name is a symbolic extent)."""
    init = [helper.make_tensor("i", TensorProto.INT64, np.shape(index), np.ravel(index).tolist())]
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis, name="pick_last")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("index", [-1, [2, -3, 0]], ids=["scalar", "vector"])
def test_constant_index_on_a_static_axis_is_a_plain_take(index):
    model = _gather(index)
    text = str(from_onnx(model)["main"])
    assert "shape_to_tensor" not in text and "R.where" not in text
    compiled = persist_rnn.compile(model, "llvm")
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((3, batch, 4)).astype("float32")
        np.testing.assert_array_equal(compiled.run({"x": x})[0], ort_run(model, {"x": x})[0])


def test_constant_index_outside_the_axis_is_refused_by_name():
    with pytest.raises(PersistRNNError, match=r"pick_last.*Gather.*indices.*\[-3, 2\]"):
        from_onnx(_gather(3))


def test_other_gathers_go_to_tvm():
    """Along the symbolic axis the extent is known only at run time: TVM's converter normalises it."""
    model = _gather(-1, axis=1)
    assert "shape_to_tensor" in str(from_onnx(model)["main"])
    x = np.random.default_rng(0).standard_normal((3, 4, 4)).astype("float32")
    np.testing.assert_array_equal(persist_rnn.compile(model, "llvm").run({"x": x})[0], ort_run(model, {"x": x})[0])
