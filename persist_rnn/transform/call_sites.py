"""Where the recurrence kernels and projections are called: every `call_tir` to a PrimFunc, in
every Relax function, at any depth (dataflow blocks, plain blocks, `If` branches, the functions
FuseOps makes).

The pass reads shapes from these sites (static batch, GEMM rows) and rewrites them (exchange
buffer). Other passes put call_tir of their own kernels beside ours (LegalizeOps, FuseTIR), with
any argument list, so only the sites of the callees asked about are read.
"""
from __future__ import annotations

import tvm
from tvm import relax

_CALL_TIR = "relax.call_tir"


@relax.expr_functor.visitor
class _OpCalls(relax.PyExprVisitor):
    def __init__(self, op_name: str):
        super().__init__()
        self.op_name, self.calls = op_name, []

    def visit_call_(self, call):
        super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == self.op_name:
            self.calls.append(call)


def op_calls(mod: tvm.IRModule, op_name: str):
    """(Relax function, call) of every call to the Relax op `op_name` ("relax.matmul"), in every
    Relax function of `mod`, at any depth."""
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            collector = _OpCalls(op_name)
            collector.visit_expr(func)
            for call in collector.calls:
                yield func, call


def call_tir_sites(mod: tvm.IRModule, callees=None):
    """(Relax function, call_tir) of every call_tir whose callee's name is in `callees` (all
    callees if None)."""
    for func, call in op_calls(mod, _CALL_TIR):
        if isinstance(call.args[0], relax.GlobalVar) and (callees is None or call.args[0].name_hint in callees):
            yield func, call


def call_args(call) -> list:
    """The argument tensors of a call_tir site (a Tuple, or one tensor passed alone)."""
    args = call.args[1]
    return list(args.fields) if isinstance(args, relax.Tuple) else [args]


def static_dim(expr, axis: int):
    """The static extent of `expr`'s axis, or None (symbolic, unknown rank, not a tensor)."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None or ty.ndim <= axis:
        return None
    d = ty.shape[axis]
    return int(d) if isinstance(d, tvm.tirx.IntImm) else None


def _per_callee(mod, callees, axis: int) -> dict:
    """Callee name -> static extent of axis `axis` of its first argument at every site (None if
    symbolic or if two sites differ)."""
    out = {}
    for _, call in call_tir_sites(mod, callees):
        args = call_args(call)
        extent = static_dim(args[0], axis) if args else None
        name = call.args[0].name_hint
        out[name] = extent if out.get(name, extent) == extent else None
    return out


def call_site_batches(mod: tvm.IRModule, callees) -> dict:
    """Recurrence name -> static batch at its call sites (xw is (T, B, D, G*H)); None if symbolic."""
    return _per_callee(mod, callees, 1)


def call_site_rows(mod: tvm.IRModule, callees) -> dict:
    """Projection name -> static row count (T*B) of x at its call sites; None if symbolic."""
    return _per_callee(mod, callees, 0)


def drop_uncalled(mod: tvm.IRModule, candidates: set) -> tvm.IRModule:
    """`mod` without those of `candidates` (GlobalVars: a fused layer's kernel, a projection folded
    away) that no Relax function calls any more, so that they are neither tuned nor compiled."""
    used = {gv for func in mod.functions.values() if isinstance(func, relax.Function)
            for gv in relax.analysis.all_global_vars(func)}
    for gv in candidates - used:
        del mod[gv]
    return mod
