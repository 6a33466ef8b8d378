"""DenseToProjection: on CUDA, a float32 dense layer over symbolic rows (x (..., K) @ W (K, N)
[+ b], W and b constants, the rows x's leading extents) runs as the projection GEMM of
tir_templates.projection, whose tile is chosen per call from the runtime row count, or, with
N <= 32 columns, as tir_templates.narrow_dense (a warp per row: the GEMM's 64 x 64 tile would be
mostly empty, and at a batch of 1 one CTA would work through K alone).

Why: the output layers around recurrent ones (a classifier's head, per-frame logits) take the
batch, or batch x time, as their rows, and a model as exported keeps those symbolic. dlight's
schedules for such a matmul were slow on the H100: the text classifier's head (B x 256 @ 256 x
4) took 19 us a call as shipped against 1.5 us built for B=1, the speech GRU's (B*T x 256 @ 256
x 29) 29.7 against 11.4 us (benchmarks/shipped_gap.py). Static rows keep TVM's schedules.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from tir_templates.narrow_dense import MAX_N, narrow_dense_kernel
from tir_templates.projection import projection_kernel

from ..schedule.gpu import gpu_model
from ..schedule.planner import target_arch
from ..targets import as_target
from .batch_invariants import static_value
from .function_rewrite import rewrite_functions


def _float32(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.dtype == "float32" and expr.ty.shape is not None


class _Dense:
    """x @ w + b as found: x (..., K) with symbolic rows, w (K, N) and b (N,) numpy constants."""

    def __init__(self, x, w: np.ndarray, b: np.ndarray):
        self.x, self.w, self.b = x, w, b


def _matmul(call, var2val) -> _Dense | None:
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul"):
        return None
    x, w = call.args[0], static_value(call.args[1], var2val)
    if w is None or w.dtype != np.float32 or w.ndim != 2 or not _float32(x) or x.ty.ndim < 2:
        return None
    if call.attrs.out_dtype is not None and str(call.attrs.out_dtype) not in ("", "void", "float32"):
        return None
    K, N = w.shape
    shape = list(x.ty.shape)
    lead, last = shape[:-1], shape[-1]
    if not isinstance(last, tvm.tirx.IntImm) or int(last) != K:
        return None
    if all(isinstance(d, tvm.tirx.IntImm) for d in lead):
        return None  # static rows: TVM's schedules are tuned for them
    return _Dense(x, np.ascontiguousarray(w), np.zeros(N, "float32"))


def _dense(call, var2val) -> _Dense | None:
    """The dense layer `call` computes (a matmul, or the bias add of one), or None."""
    found = _matmul(call, var2val)
    if found is not None or not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.add"):
        return found
    for mm, bias in ((call.args[0], call.args[1]), (call.args[1], call.args[0])):
        inner = var2val.get(mm) if isinstance(mm, relax.Var) else None
        found = _matmul(inner, var2val) if isinstance(inner, relax.Call) else None
        value = static_value(bias, var2val)
        if found is None or value is None or value.dtype != np.float32:
            continue
        n = found.w.shape[1]
        if value.size == n and value.ndim >= 1 and value.shape[-1] == n and value.ndim <= found.x.ty.ndim:
            found.b = value.reshape(n).astype("float32")
            return found
    return None


@relax.expr_functor.mutator
class _DenseRewriter(relax.PyExprMutator):
    def __init__(self, mod, var2val: dict, num_sms: int, kernels: dict):
        super().__init__(mod)
        self.var2val, self.num_sms, self.kernels = var2val, num_sms, kernels

    def visit_call_(self, call):
        original = call
        call = super().visit_call_(call)
        dense = _dense(original, self.var2val)
        if dense is None:
            return call
        K, N = dense.w.shape
        lead = list(dense.x.ty.shape)[:-1]
        rows = lead[0]
        for d in lead[1:]:
            rows = rows * d
        key = (K, N)
        weights = [relax.const(dense.w, "float32"), relax.const(dense.b, "float32")]
        if key not in self.kernels:
            kernel = narrow_dense_kernel(K, N) if N <= MAX_N else projection_kernel(K, N, None, self.num_sms)
            self.kernels[key] = self.builder_.add_func(kernel, "persist_rnn_dense")
        if len(lead) == 1:  # x is (rows, K): no reshape, which TVM copies when it is the model's output
            return relax.call_tir(self.kernels[key], [dense.x, *weights], relax.TensorType((rows, N), "float32"))
        x2 = self.builder_.emit(relax.op.reshape(dense.x, relax.ShapeExpr([rows, K])))
        out = self.builder_.emit(relax.call_tir(self.kernels[key], [x2, *weights],
                                                relax.TensorType((rows, N), "float32")))
        return relax.op.reshape(out, relax.ShapeExpr([*lead, N]))


def DenseToProjection(target) -> tvm.ir.transform.Pass:
    """The pass (a no-op off CUDA). Run it before legalization, where matmul and add are still
    Relax ops."""
    target = as_target(target)

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.DenseToProjection")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if target.kind.name != "cuda":
            return mod
        num_sms = gpu_model(target_arch(target)).num_sms
        kernels = {}
        return rewrite_functions(mod, lambda mod, var2val: _DenseRewriter(mod, var2val, num_sms, kernels))

    return _pass
