"""A quantized layer's R handed to its kernel as int8 (tir_templates/int8_rows.py).

Before planning, `int8_layers` finds the quantized layers (`CellSpec.int8_weights`) whose R is, at
every call site, a constant whose rows are int8 values times a scale each: the planner may then
hold their weights as int8 (`CellSpec.int8_rows`). After planning, `pack_int8_weights` replaces R
at the call sites of the kernels that do so by its packed form. Where R is not such a constant (a
parameter, asymmetric zero points that put q outside int8), nothing changes: the planner keeps to
fp32 or fp16 weights, which take R as it is.
"""
from __future__ import annotations

import tvm

from tir_templates.int8_rows import pack, packable

from .call_sites import constant_at_every_site, repack_constant_args


#: R, the signature's second operand
_R = 1


def int8_layers(mod: tvm.IRModule, callees: set) -> set:
    """The names of `callees` whose R is, at every call site, an fp32 constant that `pack` takes."""
    return constant_at_every_site(mod, callees, _R, lambda r: r.dtype == "float32" and packable(r))


def pack_int8_weights(mod: tvm.IRModule, kernels: set) -> tvm.IRModule:
    """`mod` with R packed at every call site of the kernels named in `kernels` (those of
    `int8_layers` whose kernels hold their weights as int8)."""
    refusal = "its kernel holds int8 weights, but a call site passes an R that is not int8 values times a scale a row"
    return repack_constant_args(mod, {name: (_R, pack, refusal, None) for name in kernels})
