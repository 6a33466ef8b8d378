"""ApplyBuildableSchedule: dlight's tiled schedules whose staging buffers would have symbolic sizes
(TVM 0.27's CUDA codegen cannot build them) are replaced by dlight's Fallback schedule, and the
model builds for CUDA and still matches ONNX Runtime on llvm."""
from __future__ import annotations

import numpy as np
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.bench.layer_models import max_rel_error, ort_run
from persist_rnn.transform.buildable_schedules import ApplyBuildableSchedule
from persist_rnn.transform.staging_buffers import declares_symbolic_staging, symbolic_staging

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _strided_convs_then_gemm():
    """(1, 4, W) -> two stride-2 Conv1d -> (1, 8, (W - 1) // 4 + 1) -> transpose -> MatMul (., 8) x (8, 16)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3)).astype("float32") * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3)).astype("float32") * 0.3, "w2"),
             numpy_helper.from_array(rng.standard_normal((8, 16)).astype("float32") * 0.3, "fc")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2], pads=[1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], strides=[2], pads=[1, 1]),
             helper.make_node("Transpose", ["c2"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, 16])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_symbolic_staging_falls_back_and_builds():
    from tvm.relax.backend.cuda import pipeline as cuda

    model = _strided_convs_then_gemm()
    with CUDA:
        fused = tvm.ir.transform.Sequential(cuda.legalize_passes(CUDA)[:-1])(from_onnx(model))
        dlight = cuda.legalize_passes(CUDA)[-1]
        tiled = dlight(tvm.IRModule(dict(fused.functions)))  # a copy: dlight schedules in place
        bad = [gv.name_hint for gv, f in tiled.functions.items() if declares_symbolic_staging(f)]
        fixed = ApplyBuildableSchedule(CUDA)(fused)
    assert bad, "dlight no longer stages over symbolic extents: the fallback may be unneeded"
    assert not [gv.name_hint for gv, f in fixed.functions.items() if symbolic_staging(f)]
    persist_rnn.compile(model, CUDA, measure=False)  # builds (TVM's own schedule stops in codegen)
    compiled = persist_rnn.compile(model, "llvm")
    for width in (9, 16, 33):
        x = np.random.default_rng(width).standard_normal((1, 4, width)).astype("float32")
        assert max_rel_error(compiled.run({"x": x}), ort_run(model, {"x": x})) <= 1e-4
