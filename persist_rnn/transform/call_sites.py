"""Where the recurrence kernels and projections are called: every `call_tir` to a PrimFunc, in
every Relax function, at any depth (dataflow blocks, plain blocks, `If` branches, the functions
FuseOps makes).

The pass reads shapes from these sites (static batch, GEMM rows) and rewrites them (exchange
buffer; a constant argument repacked as the kernel takes it, `repack_constant_args`). Other passes
put call_tir of their own kernels beside ours (LegalizeOps, FuseTIR), with any argument list, so
only the sites of the callees asked about are read.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..errors import PersistRNNError

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


def constant_at_every_site(mod: tvm.IRModule, callees: set, index: int, accepts) -> set:
    """The names of `callees` whose argument `index` is, at every call site, a Constant whose value
    (numpy) `accepts`."""
    ok, refused = set(), set()
    for _, call in call_tir_sites(mod, callees):
        name, args = call.args[0].name_hint, call_args(call)
        arg = args[index] if len(args) > index else None
        if name not in refused:
            (ok if isinstance(arg, tvm.ir.expr.Constant) and accepts(arg.value.numpy()) else refused).add(name)
    return ok - refused


@relax.expr_functor.mutator
class _RepackConstants(relax.PyExprMutator):
    """Each call_tir site of the kernels in `packers` with its argument `index`, a Constant,
    replaced by `pack(value)` (one packing per constant, however many sites pass it), and its
    callee by `callee` where one is given."""

    def __init__(self, mod, packers: dict):
        super().__init__(mod)
        self.packers, self.packed = packers, []
        self.call_tir = tvm.ir.Op.get(_CALL_TIR)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if (not call.op.same_as(self.call_tir) or not isinstance(call.args[0], relax.GlobalVar)
                or call.args[0].name_hint not in self.packers):
            return call
        index, pack, refusal, callee = self.packers[call.args[0].name_hint]
        args = call_args(call)
        args[index] = self._packed(call.args[0].name_hint, args[index], pack, refusal)
        return relax.Call(call.op, [callee or call.args[0], relax.Tuple(args), *call.args[2:]], call.attrs, call.ty_args)

    def _packed(self, kernel: str, arg, pack, refusal: str):
        for const, fn, packed in self.packed:
            if const.same_as(arg) and fn is pack:
                return packed
        value = pack(arg.value.numpy()) if isinstance(arg, tvm.ir.expr.Constant) else None
        if value is None:  # the caller checked every site: only a site made since could get here
            raise PersistRNNError(f"{kernel}: {refusal}")
        self.packed.append((arg, pack, relax.const(value)))
        return self.packed[-1][2]


def repack_constant_args(mod: tvm.IRModule, packers: dict) -> tvm.IRModule:
    """`mod` with, at every call site of each kernel named in `packers` (name -> (argument index,
    pack, refusal, callee)), that argument's constant replaced by pack(its value) (numpy in, numpy
    out; None: not packable, an error that says `refusal`), and the callee by `callee` unless None
    (a kernel whose parameter's type changed goes under a new GlobalVar: a call site is checked
    against the type its callee's GlobalVar carries, which replacing the function leaves as it was)."""
    if not packers:
        return mod
    mutator = _RepackConstants(mod, packers)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = mutator.visit_expr(func)
    return mod
