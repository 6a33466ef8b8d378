"""RegisterReduction: a short reduction (a small convolution, a pooling window) that no tiled rule
takes is summed in a register and written once, with its epilogue in the same kernel; the
Fallback wrote every term to global memory and ran the epilogue as a second kernel."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te

import persist_rnn
from persist_rnn.bench.layer_models import max_rel_error, ort_run
from persist_rnn.transform import buildable_schedules
from persist_rnn.transform.register_reduction import RegisterReduction
from persist_rnn.transform.row_reduction_fallback import LONG_REDUCTION, RowReductionFallback

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def _conv_relu_over_width():
    """(B, 1, 8, W) -> Conv 3x3 (4 channels, padded) -> Relu: a symbolic width, as an OCR model's."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype("float32"), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 1, 8, "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4, 8, "W"])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernels(model) -> dict[str, str]:
    host = persist_rnn.compile(model, CUDA, measure=False).executable.mod.imports[0]
    source = next(m for m in host.imports if m.kind == "cuda").inspect_source()
    bodies = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\([^)]*\) \{(.*?)\n\}', source, re.S)
    return dict(bodies)


@needs_nvcc
def test_a_short_convolution_is_one_kernel_that_writes_its_output_once(monkeypatch):
    kernels = _kernels(_conv_relu_over_width())
    conv = [body for name, body in kernels.items() if "conv2d" in name]
    assert len(conv) == 1
    assert "intermediate_local_ptr[1]" in conv[0]  # the register the sum is kept in
    assert "conv2d_nchw_intermediate_ptr" not in conv[0]  # the sum never goes through global memory
    divisors = set(re.findall(r" [/%] (\(?[^;]*?\)\)?)[;)]", conv[0]))
    assert len(divisors) == 1  # a thread divides by one run-time length; the constant axes take shifts

    monkeypatch.setattr(buildable_schedules, "untiled_rules", lambda: [RowReductionFallback()])
    fallback = [name for name in _kernels(_conv_relu_over_width()) if "conv2d" in name]
    assert len(fallback) == 2  # the Fallback: the sum, then the bias and Relu


@pytest.mark.parametrize("target", ["llvm", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_convolution_matches_onnx_runtime(target):
    """Widths below, across and beyond one block's 256 threads; on CUDA, the rule's kernel."""
    model = _conv_relu_over_width()
    compiled = persist_rnn.compile(model, target, measure=False)
    for batch, width in ((1, 37), (3, 300), (2, 1024)):
        x = np.random.default_rng(width).standard_normal((batch, 1, 8, width)).astype("float32")
        assert max_rel_error(compiled.run({"x": x}), ort_run(model, {"x": x})) <= 1e-4


def _sum_then(extent: int, epilogue: str):
    """(rows, extent) -> row sums, then an elementwise or a second reduction after them."""
    rows = tvm.tirx.Var("rows", "int64")
    x = te.placeholder((rows, extent), name="x")
    k = te.reduce_axis((0, extent), name="k")
    sums = te.compute((rows,), lambda i: te.sum(x[i, k], axis=k), name="sums")
    if epilogue == "relu":
        out = te.compute((rows,), lambda i: te.max(sums[i], 0.0), name="relu")
    else:
        j = te.reduce_axis((0, rows), name="j")
        out = te.compute((1,), lambda _: te.sum(sums[j], axis=j), name="total")
    return te.create_prim_func([x, out])


@pytest.mark.parametrize("extent, epilogue, taken", [(9, "relu", True), (LONG_REDUCTION - 1, "relu", True),
                                                      (LONG_REDUCTION, "relu", False), (9, "sum", False)])
def test_which_functions_the_rule_takes(extent, epilogue, taken):
    """Long reductions are RowReductionFallback's; a second reduction after the first is no epilogue."""
    with CUDA:
        assert (RegisterReduction().apply(_sum_then(extent, epilogue), CUDA, False) is not None) is taken
