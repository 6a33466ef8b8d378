"""ONNX recurrent activations as TIR expressions, shared by every template."""
from __future__ import annotations

from tvm import tirx

from .spec import Activation


def _f32(v: float):
    return tirx.const(float(v), "float32")


def apply(act: Activation, x, fast: bool = False):
    """`act` applied to the float32 PrimExpr `x` (ONNX semantics, alpha/beta already resolved).
    `fast` (CUDA only): the sigmoid from CUDA's __expf and __fdividef, a few ulp from expf and
    IEEE division (far inside the 1e-4 tolerance) and shorter on the step's critical path."""
    one, zero = _f32(1.0), _f32(0.0)
    name = act.name
    if name == "Sigmoid" and fast:  # __fdividef(1, inf) is 0: still the limit for x -> -inf
        return tirx.call_pure_extern("float32", "__fdividef", one,
                                     one + tirx.call_pure_extern("float32", "__expf", -x))
    if name == "Sigmoid":
        return one / (one + tirx.exp(-x))
    if name == "Tanh":
        return tirx.tanh(x)
    if name == "Relu":
        return tirx.max(x, zero)
    if name == "Affine":
        return _f32(act.alpha) * x + _f32(act.beta)
    if name == "LeakyRelu":
        return tirx.Select(x >= zero, x, _f32(act.alpha) * x)
    if name == "ThresholdedRelu":
        return tirx.Select(x > _f32(act.alpha), x, zero)
    if name == "ScaledTanh":
        return _f32(act.alpha) * tirx.tanh(_f32(act.beta) * x)
    if name == "HardSigmoid":
        return tirx.max(zero, tirx.min(one, _f32(act.alpha) * x + _f32(act.beta)))
    if name == "Elu":
        return tirx.Select(x >= zero, x, _f32(act.alpha) * (tirx.exp(x) - one))
    if name == "Softsign":
        return x / (one + tirx.abs(x))
    if name == "Softplus":
        return tirx.max(x, zero) + tirx.log(one + tirx.exp(-tirx.abs(x)))  # overflow-free
    raise ValueError(f"activation {name!r} has no TIR lowering")


def clip(spec_clip, x):
    """ONNX `clip`: bound a gate's pre-activation to [-clip, clip] when the attribute is set."""
    if spec_clip is None:
        return x
    return tirx.max(tirx.min(x, _f32(spec_clip)), _f32(-spec_clip))
