"""Stacks of recurrent layers: chains in which layer l's Y, reshaped only, is the input of layer
l+1's projection. The layer wavefront (issue 21, `layer_wavefront.py`) can run such a stack in one
kernel, layer l at time step s - l of wavefront step s; report() names the stack each layer
belongs to, fused or not.

A link needs both layers unidirectional and walking time the same way (a bidirectional layer needs
the whole sequence of the layer below it), the same sequence lengths (one wavefront step is one time
step for every layer), and between them only views that keep Y's element order (reshape, squeeze,
expand_dims) that leave the upper layer the same time and batch extents: the upper projection's
rows are then the lower layer's (time, batch) rows, in order.
"""
from __future__ import annotations

import json

import tvm
import tvm_ffi
from tvm import relax

from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.spec import ATTR_KEY, CellSpec

from ..report import STACK_ATTR
from .call_sites import call_args

#: Relax ops that change a tensor's shape but not the order of its elements
_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims")


def _bindings(func: relax.Function) -> dict:
    """Each variable's bound value, over every block of `func`."""
    out = {}
    body = func.body
    if isinstance(body, relax.SeqExpr):
        for block in body.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    out[binding.var] = binding.value
    return out


def is_op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == name


def through_views(expr, bound: dict):
    """`expr` with the views in front of it peeled off (variables followed to their values), and
    dropout's output (inference leaves the tensor as it is)."""
    while True:
        if isinstance(expr, relax.Var) and expr in bound:
            expr = bound[expr]
        elif any(is_op(expr, view) for view in _VIEWS):
            expr = expr.args[0]
        elif isinstance(expr, relax.TupleGetItem) and expr.index == 0:
            source = through_views(expr.tuple_value, bound)
            if not is_op(source, "relax.nn.dropout"):
                return expr
            expr = source.args[0]
        else:
            return expr


def callee(call, mod: tvm.IRModule, attr: str):
    """The PrimFunc a call_tir site calls, if it carries `attr`; else None."""
    if not is_op(call, "relax.call_tir"):
        return None
    func = mod[call.args[0]] if isinstance(call.args[0], relax.GlobalVar) and call.args[0] in mod else None
    return func if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and attr in func.attrs else None


def _below(call, mod: tvm.IRModule, bound: dict):
    """The recurrence call whose Y feeds this recurrence call's projection through views only, or None."""
    xw = through_views(call_args(call)[0], bound)
    if callee(xw, mod, PROJECTION_ATTR) is None:
        return None
    y = through_views(call_args(xw)[0], bound)
    if not (isinstance(y, relax.TupleGetItem) and y.index == 0):
        return None
    lower = through_views(y.tuple_value, bound)
    return lower if callee(lower, mod, ATTR_KEY) is not None else None


def layer_spec(call, mod) -> CellSpec:
    return CellSpec.from_json(str(mod[call.args[0]].attrs[ATTR_KEY]))


def _same_steps(lower, upper) -> bool:
    """Whether the upper layer's (time, batch) extents are the lower layer's: a reshape keeps the
    elements' order but could read (T, B) rows as (B, T)."""
    y, xw = lower.ty.fields[0], call_args(upper)[0].ty
    if not (isinstance(y, relax.TensorType) and isinstance(xw, relax.TensorType)) or y.shape is None or xw.shape is None:
        return False
    return tvm_ffi.structural_equal(y.shape[0], xw.shape[0]) and tvm_ffi.structural_equal(y.shape[2], xw.shape[1])


def _linkable(lower, upper, mod, bound) -> bool:
    """Whether the wavefront could run `upper` one time step behind `lower` (module docstring)."""
    a, b = layer_spec(lower, mod), layer_spec(upper, mod)
    lens_a, lens_b = (through_views(call_args(c)[3], bound) for c in (lower, upper))
    return (a.num_directions == b.num_directions == 1 and a.direction == b.direction and a.dtype == b.dtype
            and tvm_ffi.structural_equal(lens_a, lens_b) and _same_steps(lower, upper))


def call_chains(func: relax.Function, mod: tvm.IRModule) -> tuple[list, dict]:
    """Each stack in `func` as its recurrence calls, lowest layer first; and `func`'s bindings."""
    bound = _bindings(func)
    calls = [v for v in bound.values() if callee(v, mod, ATTR_KEY) is not None]
    above = {}  # lower call -> upper call
    for call in calls:
        lower = _below(call, mod, bound)
        if lower is not None and _linkable(lower, call, mod, bound) and lower not in above:
            above[lower] = call
    chains = []
    for bottom in [c for c in calls if c in above and c not in above.values()]:
        chain = [bottom]
        while chain[-1] in above:
            chain.append(above[chain[-1]])
        chains.append(chain)
    return chains, bound


def projection_of(call, bound: dict):
    """The projection call whose result is this recurrence call's input (through views)."""
    return through_views(call_args(call)[0], bound)


def find_stacks(mod: tvm.IRModule) -> list[list[relax.GlobalVar]]:
    """The recurrence kernels of every stack of two or more layers, lowest layer first."""
    return [[c.args[0] for c in chain] for func in mod.functions.values() if isinstance(func, relax.Function)
            for chain in call_chains(func, mod)[0]]


def mark_stacks(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with each stacked layer's recurrence kernel carrying STACK_ATTR."""
    for stack in find_stacks(mod):
        names = [CellSpec.from_json(str(mod[gv].attrs[ATTR_KEY])).node for gv in stack]
        for position, gv in enumerate(stack):
            mod[gv] = mod[gv].with_attr(STACK_ATTR, json.dumps({"stack": names, "position": position}))
    return mod
