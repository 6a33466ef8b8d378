"""BroadcastBatchInvariants: a recurrence whose batch is symbolic gets its default lengths and
constant initial states once for the whole batch (batch extent 1), not once per batch row.

Why: with a static batch, FoldConstant turns `full((B,), T)` (a layer without sequence_lens),
`zeros((D, B, H))` (one without initial states) and torch's `Expand(zeros)` + `Slice` of the
initial state into constants. With a symbolic batch each stays a kernel that runs on every call:
five to eight launches for a two-layer model, and they stand between the projection GEMM and
the recurrence, so that the recurrence cannot launch early (tir_templates.early_launch). Every
batch row of such an operand is the same row, so the call site gets that row as a constant of
batch extent 1 and the callee a spec whose `batch_broadcast` names the operand
(tir_templates.signature.batch_row): no kernel computes it, and dead bindings are dropped.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tvm
from tvm import relax

from tir_templates.reference import reference_scan
from tir_templates.signature import BROADCASTABLE
from tir_templates.spec import ATTR_KEY, CellSpec

from .call_sites import call_args, call_tir_sites

#: argument position of each broadcastable operand in the recurrence signature
OPERAND_ARGS = dict(zip(BROADCASTABLE, (3, 4, 5)))


def _ones_for_symbolic(dims) -> list:
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else 1 for d in dims]


def _extents(expr) -> list | None:
    """expr's extents with every symbolic one as 1, or None when its rank is unknown."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    return _ones_for_symbolic(ty.shape)


def _shape(shape_expr) -> list | None:
    return _ones_for_symbolic(shape_expr.values) if isinstance(shape_expr, relax.ShapeExpr) else None


def _ints(tuple_expr) -> list | None:
    fields = tuple_expr.fields if isinstance(tuple_expr, relax.Tuple) else []
    values = [getattr(f, "value", f) for f in fields]
    return [int(v) for v in values] if all(isinstance(v, (int, tvm.tirx.IntImm)) for v in values) else None


def _slice(value: np.ndarray, args) -> np.ndarray | None:
    """strided_slice with positive strides on static axes only (a symbolic axis keeps extent 1 in
    `value`); numpy's slice clamps such bounds as Relax does."""
    axes, begin, end = (_ints(a) for a in args[1:4])
    strides = _ints(args[4]) if len(args) > 4 else [1] * len(axes or [])
    source = args[0].ty.shape
    if None in (axes, begin, end, strides) or any(not isinstance(source[a], tvm.tirx.IntImm) for a in axes) \
            or any(s <= 0 for s in strides):
        return None
    index = [slice(None)] * value.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        index[a] = slice(b, e, s)
    return value[tuple(index)]


def invariant_value(expr, var2val) -> np.ndarray | None:
    """The value of `expr` if it is the same for every index of its symbolic axes, as an array
    with extent 1 on those axes (a constant broadcast, filled or sliced along static axes); None
    when that is not known."""
    while isinstance(expr, relax.Var) and expr in var2val:
        expr = var2val[expr]
    extents = _extents(expr)
    if extents is None:
        return None
    value = None
    if isinstance(expr, tvm.ir.expr.Constant):
        value = expr.value.numpy()
    elif isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        name, args = expr.op.name, expr.args
        if name in ("relax.zeros", "relax.ones") and _shape(args[0]) is not None:
            value = np.full(_shape(args[0]), 0 if name == "relax.zeros" else 1, str(expr.attrs.dtype))
        elif name == "relax.full" and _shape(args[0]) is not None and isinstance(args[1], tvm.ir.expr.Constant):
            value = np.full(_shape(args[0]), args[1].value.numpy(), str(expr.attrs.dtype))
        elif name == "relax.broadcast_to" and _shape(args[1]) is not None:
            source = invariant_value(args[0], var2val)
            try:
                value = None if source is None else np.broadcast_to(source, _shape(args[1]))
            except ValueError:
                value = None
        elif name == "relax.strided_slice":
            source = invariant_value(args[0], var2val)
            value = None if source is None else _slice(source, args)
        elif name == "relax.astype":
            source = invariant_value(args[0], var2val)
            value = None if source is None else source.astype(str(expr.attrs.dtype))
        elif name == "relax.permute_dims":
            source = invariant_value(args[0], var2val)
            axes = None if expr.attrs.axes is None else [int(a) for a in expr.attrs.axes]
            value = None if source is None else np.transpose(source, axes)
    if value is None or list(value.shape) != extents or str(value.dtype) != expr.ty.dtype:
        return None  # whatever the rules made must have the call's own extents and dtype
    return np.ascontiguousarray(value)


def static_value(expr, var2val) -> np.ndarray | None:
    """The value of a static tensor known at compile time (a constant, or one transposed as ONNX
    Gemm's transB gives it, when no FoldConstant ran), as numpy."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None or \
            not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape):
        return None
    return invariant_value(expr, var2val)  # with no symbolic axis: the value itself


@relax.expr_functor.mutator
class _OperandSwap(relax.PyExprMutator):
    """The call_tir sites in `constants` (by identity) get those constants (argument position ->
    value) in place of their arguments."""

    def __init__(self, mod, constants: dict):
        super().__init__(mod)
        self.constants = constants

    def visit_call_(self, call):
        swap = self.constants.get(call)
        call = super().visit_call_(call)
        if swap is None:
            return call
        args = [relax.const(swap[i], str(swap[i].dtype)) if i in swap else a for i, a in enumerate(call_args(call))]
        return relax.Call(call.op, [call.args[0], relax.Tuple(args), *call.args[2:]], call.attrs, call.ty_args)


def _symbolic_batch(args) -> bool:
    """Whether a recurrence's call site (xw is (T, B, D, G*H)) has a symbolic batch."""
    ty = args[0].ty if args else None
    return (len(args) == 7 and isinstance(ty, relax.TensorType) and ty.ndim == 4
            and not isinstance(ty.shape[1], tvm.tirx.IntImm))


def broadcast_batch_invariants(mod: tvm.IRModule, target_kind: str) -> tvm.IRModule:
    """Give each reference recurrence called with a symbolic batch its batch-invariant operands
    once (see the module docstring). A callee with several call sites broadcasts the operands
    that are invariant at all of them, and none if one of them has a static batch."""
    specs = {gv.name_hint: (gv, CellSpec.from_json(str(f.attrs[ATTR_KEY]))) for gv, f in mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and ATTR_KEY in f.attrs
             and str(f.attrs.get("persist_rnn.lowering", "reference")) == "reference"}
    var2val, found, agreed = {}, {}, {}
    for func, call in call_tir_sites(mod, set(specs)):
        name, args = call.args[0].name_hint, call_args(call)
        invariant = {}
        if _symbolic_batch(args):
            if func not in var2val:
                var2val[func] = relax.analysis.get_var2val(func)
            for op, i in OPERAND_ARGS.items():
                value = invariant_value(args[i], var2val[func])
                if value is not None:
                    invariant[op] = value
        found[call] = invariant
        agreed[name] = agreed.get(name, set(invariant)) & set(invariant)
    constants = {call: {OPERAND_ARGS[op]: v for op, v in invariant.items() if op in agreed[call.args[0].name_hint]}
                 for call, invariant in found.items()}
    constants = {call: swap for call, swap in constants.items() if swap}
    if not constants:
        return mod
    for name, ops in agreed.items():
        if ops:
            gv, spec = specs[name]
            spec = dataclasses.replace(spec, batch_broadcast=tuple(op for op in BROADCASTABLE if op in ops))
            mod[gv] = reference_scan(spec, target_kind)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            swap = _OperandSwap(mod, constants)
            new_func = relax.analysis.remove_all_unused(swap.visit_expr(func))
            mod = swap.builder_.get()
            mod[gv] = new_func
    return mod
