"""ExactPower: `relax.power` that gives ONNX's answer on CUDA too.

TVM compiles CUDA with --use_fast_math, which turns `powf(x, y)` into exp2(y * log2(x)): NaN for
every negative x, also for x ** 2 (a real model's STFT magnitude, sqrt(re ** 2 + im ** 2), came
out wrong on CUDA only). This pass rewrites each float power before legalization:
    x ** n, n a constant integer with |n| <= 16   ->  multiplications (and one division if n < 0)
    x ** 0.5                                        ->  sqrt(x)
    any other x ** y                                ->  |x| ** y, its sign and NaN set by ONNX's
                                                        rule for negative bases, 1 where y == 0
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

#: the largest constant integer exponent written out as multiplications
MAX_UNROLLED_EXPONENT = 16


def _scalar_constant(e):
    """The value of a constant with one element, else None."""
    if isinstance(e, tvm.ir.expr.Constant):
        value = e.value.numpy()
        if value.size == 1:
            return float(value.reshape(()))
    return None


def _integer_power(x, n: int):
    """x ** n by repeated squaring (n >= 1)."""
    result, square = None, x
    while n:
        if n & 1:
            result = square if result is None else relax.op.multiply(result, square)
        n >>= 1
        if n:
            square = relax.op.multiply(square, square)
    return result


def _onnx_power(x, y, dtype: str):
    """x ** y for any base: |x| ** y (exp/log, exact enough), negated for negative x and an odd
    integer y, NaN for negative x and a non-integer y, 1 for y == 0 (0 ** 0 included)."""
    const = lambda v: relax.const(v, dtype)
    magnitude = relax.op.power(relax.op.abs(x), y)
    integral = relax.op.equal(relax.op.floor(y), y)
    odd = relax.op.logical_and(integral, relax.op.equal(relax.op.floor_mod(y, const(2.0)), const(1.0)))
    negative_base = relax.op.where(odd, relax.op.negative(magnitude),
                                   relax.op.where(integral, magnitude, const(float("nan"))))
    value = relax.op.where(relax.op.less(x, const(0.0)), negative_base, magnitude)
    return relax.op.where(relax.op.equal(y, const(0.0)), relax.op.ones_like(value), value)


def exact_power(x, y, dtype: str):
    """The rewrite of `power(x, y)` (float x and y of `dtype`), as one unbound expression of
    x's shape (constant exponents) or of the broadcast shape."""
    n = _scalar_constant(y)
    if n is not None and n == int(n) and 1 <= abs(n) <= MAX_UNROLLED_EXPONENT:
        product = _integer_power(x, int(abs(n)))
        return product if n > 0 else relax.op.divide(relax.const(1.0, dtype), product)
    if n == 0.5:
        return relax.op.sqrt(x)
    return _onnx_power(x, y, dtype)


@relax.expr_functor.mutator
class _PowerRewriter(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.power"):
            return call
        x, y = call.args
        ty = call.ty
        if not isinstance(ty, relax.TensorType) or not str(ty.dtype).startswith(("float", "bfloat")):
            return call  # integer powers are exact
        out = exact_power(x, y, str(ty.dtype))
        if ty.shape is not None and not tvm_ffi.structural_equal(x.ty, ty):  # y broadcast x
            out = relax.op.broadcast_to(out, ty.shape)
        return self.builder_.normalize(out)


def ExactPower() -> tvm.ir.transform.Pass:
    """Rewrite every float `relax.power` as described above; other functions are untouched."""

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.ExactPower")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                rewriter = _PowerRewriter(mod)
                new = rewriter.visit_expr(func)
                if not new.same_as(func):
                    mod = rewriter.builder_.get()
                    mod[gv] = new
        return mod

    return _pass
