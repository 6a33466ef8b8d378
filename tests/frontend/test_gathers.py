"""Gather (frontend.gathers): torch's `h_n[-1]` over a symbolic batch is imported as a plain take,
not as run-time index arithmetic on shape_of (three kernels a call), and over a Concat it reads the
part that holds it; run-time indices (token ids) wrap in the take kernel instead of a `where` of
their own; an index outside the axis is refused, naming the node; other Gathers go to TVM."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.errors import PersistRNNError
from persist_rnn.frontend import from_onnx
from persist_rnn.bench.layer_models import ort_run


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


def _embedding(dims=(7, 3), index_dims=(4, "B")):
    """y = Gather(table, ids) with a constant table and int64 ids given at run time."""
    rng = np.random.default_rng(0)
    table = helper.make_tensor("table", TensorProto.FLOAT, dims, rng.standard_normal(dims).ravel().tolist())
    node = helper.make_node("Gather", ["table", "ids"], ["y"], name="embed")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, list(index_dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def test_run_time_indices_wrap_in_the_take_itself():
    """Negative ids name rows from the end, as in ONNX, with no `where` kernel before the take."""
    model = _embedding()
    text = str(from_onnx(model)["main"])
    assert 'mode="wrap"' in text and "R.where" not in text and "shape_to_tensor" not in text
    compiled = persist_rnn.compile(model, "llvm")
    ids = np.array([[0, -1, 6, -7], [3, 2, -4, 5]], dtype="int64").T  # (4, B=2), every row once
    np.testing.assert_array_equal(compiled.run({"ids": ids})[0], ort_run(model, {"ids": ids})[0])
    with pytest.raises(PersistRNNError, match="embed.*ids"):  # out of range on the host: refused
        compiled.run({"ids": np.full((4, 2), 7, dtype="int64")})


def _last_of_concat(index, extents=(1, 1, 2)):
    """y = Gather(Concat(a, b, c, axis=0), index, axis=0): torch's `h_n[-1]` of stacked layers."""
    names = ["a", "b", "c"][:len(extents)]
    init = [helper.make_tensor("i", TensorProto.INT64, np.shape(index), np.ravel(index).tolist())]
    nodes = [helper.make_node("Concat", names, ["all"], axis=0, name="stack"),
             helper.make_node("Gather", ["all", "i"], ["y"], axis=0, name="pick")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [e, "B", 4]) for n, e in zip(names, extents)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("index", [-1, -3, 1, [2, 3], [0, 2]], ids=["last", "one-part", "second", "in-last-part",
                                                                  "across-parts"])
def test_constant_index_into_a_concat_reads_one_part(index):
    model = _last_of_concat(index)
    text = str(from_onnx(model)["main"])
    inside_one_part = np.ndim(index) == 0 or index == [2, 3]
    assert ("R.concat" not in text) == inside_one_part
    compiled = persist_rnn.compile(model, "llvm")
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((e, 3, 4)).astype("float32") for n, e in zip("abc", (1, 1, 2))}
    np.testing.assert_array_equal(compiled.run(feeds)[0], ort_run(model, feeds)[0])
