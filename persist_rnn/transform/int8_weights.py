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
from tvm import relax

from tir_templates.int8_rows import pack

from ..errors import PersistRNNError
from .call_sites import call_args, call_tir_sites


def _weights(call):
    """The R argument of a recurrence's call_tir site (the signature's second operand)."""
    args = call_args(call)
    return args[1] if len(args) > 1 else None


def int8_layers(mod: tvm.IRModule, callees: set) -> dict:
    """Name -> {R constant -> its packed array} for each of `callees` whose R is, at every call
    site, an fp32 constant that `pack` takes."""
    packed, refused = {}, set()
    for _, call in call_tir_sites(mod, callees):
        name, r = call.args[0].name_hint, _weights(call)
        if name in refused:
            continue
        if not isinstance(r, tvm.ir.expr.Constant) or str(r.value.dtype) != "float32":
            refused.add(name)
            continue
        p = pack(r.value.numpy())
        if p is None:
            refused.add(name)
            continue
        packed.setdefault(name, {})[r] = p
    return {name: arrays for name, arrays in packed.items() if name not in refused}


@relax.expr_functor.mutator
class _PackR(relax.PyExprMutator):
    """Each call_tir site of the kernels in `packed` with its R replaced by the packed constant."""

    def __init__(self, mod, packed: dict):
        super().__init__(mod)
        self.packed = packed
        self.call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.call_tir) or not isinstance(call.args[0], relax.GlobalVar):
            return call
        arrays = self.packed.get(call.args[0].name_hint)
        if arrays is None:
            return call
        args = call_args(call)
        packed = next((p for const, p in arrays.items() if const.same_as(args[1])), None)
        if packed is None:  # a call site made after `int8_layers` looked: pack what it passes
            packed = pack(args[1].value.numpy()) if isinstance(args[1], tvm.ir.expr.Constant) else None
        if packed is None:
            raise PersistRNNError(f"{call.args[0].name_hint}: its kernel holds int8 weights, but a call site passes "
                                  "an R that is not int8 values times a scale a row")
        args[1] = relax.const(packed, "float32")
        return relax.Call(call.op, [call.args[0], relax.Tuple(args), *call.args[2:]], call.attrs, call.ty_args)


def pack_int8_weights(mod: tvm.IRModule, packed: dict) -> tvm.IRModule:
    """`mod` with R packed at every call site of the kernels in `packed` (`int8_layers`' map,
    narrowed to the kernels that hold their weights as int8)."""
    if not packed:
        return mod
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mutator = _PackR(mod, packed)
            mod[gv] = mutator.visit_expr(func)
    return mod
