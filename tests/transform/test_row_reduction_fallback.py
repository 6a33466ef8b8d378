"""RowReductionFallback: a reduction over a symbolic or long extent is read by a thread block (a
cross-thread reduction), where dlight's Fallback ran it in one thread (pyannote's InstanceNorm over
a waveform: one thread read 160,000 samples in turn); short reductions keep the Fallback's mapping."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import s_tir, te

import persist_rnn
from persist_rnn.bench.layer_models import max_rel_error, ort_run
from persist_rnn.transform import buildable_schedules
from persist_rnn.transform.row_reduction_fallback import LONG_REDUCTION, is_long

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _sum_rows(length):
    """A (rows, length) -> (rows,) sum as a scheduled-to-be PrimFunc; `length` an int or a name."""
    rows = tvm.tirx.Var("rows", "int64")
    extent = tvm.tirx.Var(length, "int64") if isinstance(length, str) else length
    x = te.placeholder((rows, extent), name="x")
    k = te.reduce_axis((0, extent), name="k")
    y = te.compute((rows,), lambda i: te.sum(x[i, k], axis=k), name="y")
    return te.create_prim_func([x, y])


@pytest.mark.parametrize("length, long", [(251, False), (LONG_REDUCTION - 1, False), (LONG_REDUCTION, True),
                                          ("samples", True)])
def test_which_reductions_count_as_long(length, long):
    sch = s_tir.Schedule(_sum_rows(length))
    _, reduction = sch.get_loops(sch.get_sblock("y"))
    assert is_long(sch, [reduction]) is long


def _instance_norm_over_time():
    """(B, 2, T) -> InstanceNormalization over T; a symbolic T, as an audio model's front end has."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(2).astype("float32"), "scale"),
             numpy_helper.from_array(rng.standard_normal(2).astype("float32"), "bias")]
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], epsilon=1e-5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 2, "T"])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _cuda_source(model) -> str:
    host = persist_rnn.compile(model, CUDA, measure=False).executable.mod.imports[0]
    return next(m for m in host.imports if m.kind == "cuda").inspect_source()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_normalization_over_a_symbolic_length_reduces_across_threads(monkeypatch):
    assert "__shfl" in _cuda_source(_instance_norm_over_time())  # the cross-thread reduction's warp shuffles
    from tvm.s_tir import dlight as dl

    monkeypatch.setattr(buildable_schedules, "RowReductionFallback", dl.gpu.Fallback)
    assert "__shfl" not in _cuda_source(_instance_norm_over_time())  # dlight's Fallback: one thread a row


def test_the_normalization_matches_onnx_runtime_on_llvm():
    model = _instance_norm_over_time()
    compiled = persist_rnn.compile(model, "llvm")
    for batch, length in ((1, 5000), (3, 77)):
        x = np.random.default_rng(length).standard_normal((batch, 2, length)).astype("float32")
        assert max_rel_error(compiled.run({"x": x}), ort_run(model, {"x": x})) <= 1e-4



def _over_time(op, attrs, axes=None):
    """(B, 3, T) -> `op` over T, the axis a symbolic length puts in every sequence model."""
    inputs = ["x"] + (["axes"] if axes is not None else [])
    inits = [numpy_helper.from_array(np.array(axes, "int64"), "axes")] if axes is not None else []
    out_type = TensorProto.INT64 if op == "ArgMax" else TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, "T"])],
                              [helper.make_tensor_value_info("y", out_type, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("op, attrs, axes", [("ArgMax", {"axis": 2}, None), ("ReduceLogSumExp", {}, [2]),
                                             ("ReduceProd", {"keepdims": 0}, [2]), ("Softmax", {"axis": 2}, None)])
def test_other_reductions_over_a_symbolic_length_build_for_cuda(op, attrs, axes):
    """An index reduction (two values a thread), a max and sum in turn, a product, a normalization:
    each builds across threads where dlight's own rules leave it to the Fallback, and matches on llvm."""
    model = _over_time(op, attrs, axes)
    assert "__shfl" in _cuda_source(model)
    compiled = persist_rnn.compile(model, "llvm")
    x = (1 + 0.01 * np.random.default_rng(0).standard_normal((2, 3, 3000))).astype("float32")  # a finite product
    got, want = compiled.run({"x": x}), ort_run(model, {"x": x})
    np.testing.assert_allclose(np.asarray(got[0], "float64"), np.asarray(want[0], "float64"), rtol=1e-4, atol=1e-5)
