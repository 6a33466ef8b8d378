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

from tir_templates.int8_rows import pack, packable

from ..errors import PersistRNNError
from .call_sites import call_args, call_tir_sites


def _weights(call):
    """The R argument of a recurrence's call_tir site (the signature's second operand)."""
    args = call_args(call)
    return args[1] if len(args) > 1 else None


def _packable(r) -> bool:
    return isinstance(r, tvm.ir.expr.Constant) and str(r.value.dtype) == "float32" and packable(r.value.numpy())


def int8_layers(mod: tvm.IRModule, callees: set) -> set:
    """The names of `callees` whose R is, at every call site, an fp32 constant that `pack` takes."""
    ok, refused = set(), set()
    for _, call in call_tir_sites(mod, callees):
        name = call.args[0].name_hint
        if name not in refused:
            (ok if _packable(_weights(call)) else refused).add(name)
    return ok - refused


@relax.expr_functor.mutator
class _PackR(relax.PyExprMutator):
    """Each call_tir site of the kernels named in `kernels` with its R replaced by R packed (one
    packing per constant, however many sites pass it)."""

    def __init__(self, mod, kernels: set):
        super().__init__(mod)
        self.kernels, self.packed = kernels, []
        self.call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if (not call.op.same_as(self.call_tir) or not isinstance(call.args[0], relax.GlobalVar)
                or call.args[0].name_hint not in self.kernels):
            return call
        args = call_args(call)
        args[1] = self._packed(call.args[0].name_hint, args[1])
        return relax.Call(call.op, [call.args[0], relax.Tuple(args), *call.args[2:]], call.attrs, call.ty_args)

    def _packed(self, kernel: str, r):
        for const, packed in self.packed:
            if const.same_as(r):
                return packed
        words = pack(r.value.numpy()) if isinstance(r, tvm.ir.expr.Constant) else None
        if words is None:  # `int8_layers` saw every site: only a site made since could get here
            raise PersistRNNError(f"{kernel}: its kernel holds int8 weights, but a call site passes an R that is not "
                                  "int8 values times a scale a row")
        self.packed.append((r, relax.const(words, "float32")))
        return self.packed[-1][1]


def pack_int8_weights(mod: tvm.IRModule, kernels: set) -> tvm.IRModule:
    """`mod` with R packed at every call site of the kernels named in `kernels` (those of
    `int8_layers` whose kernels hold their weights as int8)."""
    if not kernels:
        return mod
    mutator = _PackR(mod, kernels)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = mutator.visit_expr(func)
    return mod
