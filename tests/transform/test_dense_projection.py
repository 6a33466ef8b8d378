"""DenseToProjection: on CUDA a float32 dense layer over symbolic rows runs as the projection GEMM
(tile chosen per call from the rows), or as the narrow kernel (a warp per row) when it has at
most 32 columns; static rows and other dtypes keep TVM's lowering. The rewrite's numerics are
checked on the CPU with the kernel's serial twin in its place."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from persist_rnn.frontend import from_onnx, load_model
from persist_rnn.transform import DenseToProjection, PersistentRNN
from tir_templates.narrow_dense import emulated_narrow_dense_kernel
from tir_templates.projection import PROJECTION_ATTR, emulated_projection_kernel

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
K = 12


def _dense_funcs(mod) -> dict:
    return {gv: f for gv, f in mod.functions.items() if gv.name_hint.startswith("persist_rnn_dense")}


def _model(order: str, transposed: bool, dtype="float32", lead=3, N=5):
    """main(x (n, lead, K)) = x @ W + b, W a constant (transposed first, as ONNX Gemm's transB, if
    asked); lead None: x is (n, K)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, N)).astype(dtype)
    b = rng.standard_normal((1, N)).astype(dtype)
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, K) if lead is None else (n, lead, K), dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = bb.emit(relax.op.permute_dims(relax.const(w.T.copy()), [1, 0])) if transposed else relax.const(w)
            mm = bb.emit(relax.op.matmul(x, weight))
            out = bb.emit_output(relax.op.add(mm, relax.const(b)) if order == "mm+b" else relax.op.add(relax.const(b), mm))
        bb.emit_func_output(out)
    return bb.get(), w, b


@pytest.mark.parametrize("order,transposed,lead,N", [("mm+b", False, 3, 5), ("b+mm", True, 3, 5), ("mm+b", True, None, 5),
                                                     ("mm+b", False, 3, 40), ("mm+b", True, None, 40)])
def test_rewrite_computes_the_dense_layer(order, transposed, lead, N):
    mod, w, b = _model(order, transposed, lead=lead, N=N)
    out = DenseToProjection(CUDA)(mod)
    [(gv, func)] = _dense_funcs(out).items()
    narrow = N <= 32
    assert json.loads(str(func.attrs[PROJECTION_ATTR]))["tile"] == ("a warp per row" if narrow else "by rows, 132 SMs")
    names = set()
    relax.analysis.post_order_visit(out["main"], lambda e: names.add(e.op.name) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) else None)
    assert "relax.matmul" not in names and "relax.add" not in names
    assert ("relax.reshape" in names) == (lead is not None)  # rows already x's only leading axis: none
    out[gv] = emulated_narrow_dense_kernel(K, N) if narrow else emulated_projection_kernel(K, N, None)  # serial twin
    vm = relax.VirtualMachine(tvm.compile(out, target="llvm"), tvm.cpu())
    for rows in (1, 7):
        x = np.random.default_rng(rows).standard_normal((rows, K) if lead is None else (rows, lead, K))
        x = x.astype("float32")
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), x @ w + b, rtol=1e-5, atol=1e-5)


def test_static_rows_other_dtypes_and_other_targets_are_left_alone():
    mod, _, _ = _model("mm+b", False, dtype="float16")
    assert not _dense_funcs(DenseToProjection(CUDA)(mod))
    mod, _, _ = _model("mm+b", False)
    assert not _dense_funcs(DenseToProjection("llvm")(mod))
    static = from_onnx(load_model("examples/speech_gru.onnx"), {"frames": (2, 7, 40)})
    assert not _dense_funcs(DenseToProjection(CUDA)(PersistentRNN(CUDA, measure=False)(static)))


def test_shipped_example_head_becomes_the_projection_gemm():
    """The speech GRU's per-frame logits over (batch x time) rows, 29 of them: the narrow kernel
    (its CUDA build is tests/templates/test_narrow_dense.py's)."""
    mod = DenseToProjection(CUDA)(PersistentRNN(CUDA, measure=False)(from_onnx(load_model("examples/speech_gru.onnx"))))
    [func] = _dense_funcs(mod).values()
    assert json.loads(str(func.attrs[PROJECTION_ATTR])) == {"K": 256, "N": 29, "tile": "a warp per row"}
