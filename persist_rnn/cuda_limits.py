"""What TVM 0.27's CUDA build cannot run, refused at compile time with a clear error (on llvm the
same models run): `nonzero` of a tensor that is not a constant, as ONNX NonZero imports, and
Squeeze with its axes fed as a graph input (TVM finds the axes to keep with nonzero). On the H100
such a model built, then failed at run time ("expected cuda", op sweep 2026-11-24)."""
from __future__ import annotations

import tvm
from tvm import relax

from .errors import PersistRNNError
from .transform.call_sites import op_calls


def _needs_nonzero(mod: tvm.IRModule) -> bool:
    """Whether a Relax function of `mod` calls nonzero on a value that is not a constant."""
    return any(not isinstance(call.args[0], tvm.ir.expr.Constant) for _, call in op_calls(mod, "relax.nonzero"))


def refuse_unsupported_on_cuda(mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Raise PersistRNNError for a CUDA target when `mod` needs nonzero of run-time values."""
    if target.kind.name != "cuda" or not _needs_nonzero(mod):
        return
    folded = relax.transform.FoldConstant()(mod)  # nonzero of values known at compile time folds away
    for gv, func in folded.functions.items():
        if isinstance(func, relax.Function) and _needs_nonzero(tvm.IRModule({gv: func})):
            raise PersistRNNError(
                f"function {gv.name_hint!r}: nonzero of run-time values (an ONNX NonZero, or a Squeeze whose "
                "'axes' is a graph input rather than an initializer), which TVM's CUDA build cannot run; make "
                "'axes' an initializer, or compile for llvm")
