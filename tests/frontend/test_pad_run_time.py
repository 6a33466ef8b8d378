"""Pad whose pads are computed from a symbolic length (op_fixes.Pad; TVM: "Dynamic pads are not
supported yet"): pad the time axis of (1, 3, T) by 2 (or crop 1) before and up to a multiple of 4
after, every mode, against ONNX Runtime for several T through one compiled model."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import persist_rnn
from persist_rnn.bench.layer_models import ort_run


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, "int64"), name))


def pad_to_multiple(mode, before=2, hop=4):
    nodes = [_const("zeros", [0, 0]), _const("axis", [2]), _const("hop", [hop]), _const("before", [before]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "axis"], ["T"]),
             helper.make_node("Mod", ["T", "hop"], ["rest"]),
             helper.make_node("Sub", ["hop", "rest"], ["short"]),
             helper.make_node("Mod", ["short", "hop"], ["after"]),
             helper.make_node("Concat", ["zeros", "before", "zeros", "after"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode, name="pad_time")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _check(target, mode, before):
    model = pad_to_multiple(mode, before)
    compiled = persist_rnn.compile(model, target, measure=False)
    for steps in (5, 8, 9):
        x = np.random.default_rng(steps).standard_normal((1, 3, steps)).astype("float32")
        got, want = compiled.run({"x": x})[0], ort_run(model, {"x": x})[0]
        assert got.shape == want.shape and np.array_equal(got, want), (mode, before, steps)


@pytest.mark.parametrize("before", [2, -1], ids=["pad", "crop"])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pads_computed_at_run_time_match_onnxruntime(mode, before):
    _check("llvm", mode, before)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pads_computed_at_run_time_on_gpu(mode):
    _check("cuda", mode, 2)
    _check("cuda", mode, -1)
