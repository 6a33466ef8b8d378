"""ONNX recurrent activations as TIR expressions, shared by every template."""
from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from .spec import Activation


def _f32(v: float):
    return tirx.const(float(v), "float32")


#: CUDA's sigmoid and tanh from two MUFU instructions each (one definition per function: TVM
#: emits a call's source once per name). ex2/rcp .approx.ftz are within 2 ulp (far inside the
#: 1e-4 tolerance; tanh's absolute error stays under 2e-7) and flush denormal results to zero,
#: which for these functions are their limits; __expf without ftz adds a compare and two
#: conditional multiplies to every exponential on the step's critical path.
FAST_ACTIVATIONS = {
    name: r"""
__device__ __forceinline__ float prnn_%s(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %%0, %%1;" : "=f"(e) : "f"(x * %s));
  asm("rcp.approx.ftz.f32 %%0, %%1;" : "=f"(r) : "f"(1.0f + e));
  return %s;
}
""" % (name, scale, result)
    for name, scale, result in (("sigmoid", "-1.4426950408889634f", "r"),  # 1 / (1 + 2^(-x log2 e))
                                ("tanh", "-2.8853900817779268f", "2.0f * r - 1.0f"))  # 2 sigmoid(2x) - 1
}


def apply(act: Activation, x, fast: bool = False):
    """`act` applied to the float32 PrimExpr `x` (ONNX semantics, alpha/beta already resolved).
    `fast` (CUDA only): sigmoid and tanh from `FAST_ACTIVATIONS`, shorter on the step's critical
    path than expf and IEEE division (or tanhf)."""
    one, zero = _f32(1.0), _f32(0.0)
    name = act.name
    if name in ("Sigmoid", "Tanh") and fast:
        fn = name.lower()
        return T.cuda.func_call("prnn_" + fn, x, source_code=FAST_ACTIVATIONS[fn], return_type="float32")
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
