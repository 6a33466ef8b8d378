"""ExactPower: ONNX's Pow on every target, CUDA's fast math (exp2(y * log2(x)), NaN for x < 0)
included. Checked against ONNX Runtime on llvm, on the CUDA source (no powf left where the
exponent is a small integer), and on the GPU."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper

import persist_rnn
from persist_rnn.bench.layer_models import cuda_source, ort_run
from persist_rnn.transform import ExactPower

X = np.array([-2, -0.5, 0, 0.5, 3, -3], "float32")
RUNTIME_EXPONENTS = np.array([2, 3, 0, 1.5, -2, 0.5], "float32")
EXPONENTS = [2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 1.5, 0.0, 17.0, None]  # None: the exponent is an input


def _pow_model(exponent):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])
    inputs, inits = [x], []
    if exponent is None:
        inputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [6]))
    else:
        inits.append(helper.make_tensor("e", TensorProto.FLOAT, [], [exponent]))
    graph = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "g", inputs, [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # ORT 1.2x reads it


def _feeds(exponent):
    return {"x": X} if exponent is not None else {"x": X, "e": RUNTIME_EXPONENTS}


def _check(exponent, target):
    model = _pow_model(exponent)
    got = persist_rnn.compile(model, target, measure=False).run(_feeds(exponent))[0]
    want = ort_run(model, _feeds(exponent))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_pow_matches_onnx_runtime_on_llvm(exponent):
    _check(exponent, "llvm")


@pytest.mark.gpu
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_pow_matches_onnx_runtime_on_cuda(exponent):
    _check(exponent, "cuda")


def _cuda_source(mod):
    return cuda_source(tvm.compile(mod, tvm.target.Target({"kind": "cuda", "arch": "sm_90"})))


def test_small_integer_exponents_leave_no_powf_in_cuda():
    mod = persist_rnn.from_onnx(_pow_model(2.0))
    assert "powf" in _cuda_source(mod)  # what TVM alone emits: __powf under fast math
    assert "powf" not in _cuda_source(ExactPower()(mod))


def test_other_functions_and_integer_powers_are_untouched():
    mod = persist_rnn.from_onnx("examples/char_rnn.onnx")
    assert ExactPower()(mod).same_as(mod)
