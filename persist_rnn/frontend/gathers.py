"""Gather, imported without the run-time index arithmetic of TVM's converter.

TVM 0.27's Gather converter turns a negative index into `index + extent` at run time, for every
index: the extent comes from `shape_to_tensor(shape_of(data))`, which a symbolic batch keeps
from folding, and the `where` that picks the normalised index is a kernel of its own on every
call. Each kernel costs ~8 µs of host time (VM instructions and a launch), which is most of a
small model's call: the text classifier issues its B=1 call with ~77 µs of host work for ~86 µs
of GPU work. So, where the gathered axis has a static extent n:
- a constant index is normalised here, at import (torch's `h_n[-1]`); one out of range is
  refused, naming the node;
- a constant index into a `Concat` along the gathered axis reads the one part that holds it
  (`h_n[-1]` of torch's stacked layers concatenates every layer's final state, then keeps the
  last): a squeeze (a view) or a take of that part, and no concatenation;
- a run-time index (an embedding's token ids) is taken in TVM's `wrap` mode, which maps an
  index in [-n, n) to the row ONNX names (i mod n), in the take kernel itself. An index outside
  [-n, n) is invalid ONNX: `CompiledModel.run` refuses one given as a host array
  (input_checks.IndexCheck); one in a device tensor wraps, where the fast mode would read past
  the table.
Any other Gather goes to TVM's converter unchanged.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as F

from ..errors import node_error
from .op_fixes import StandIn, node_name


def _static_extent(value, axis: int) -> int | None:
    """The extent of `value`'s `axis` when the graph knows it, else None."""
    shape = getattr(getattr(value, "ty", None), "shape", None)
    if not isinstance(getattr(value, "ty", None), relax.TensorType) or shape is None:
        return None
    extent = shape[axis] if 0 <= axis < len(shape) else None
    return int(extent) if isinstance(extent, tvm.tirx.IntImm) else None


def _concat_part(bb, data, axis: int, index: np.ndarray):
    """(part, index into it) when `data` is a Concat along `axis` and every index falls in one part
    of static extent, else None."""
    bound = bb.lookup_binding(data) if isinstance(data, relax.Var) else data  # the importer may pass the call
    if not (isinstance(bound, relax.Call) and bound.op == tvm.ir.Op.get("relax.concat")
            and isinstance(bound.args[0], relax.Tuple) and int(bound.attrs.axis) == axis):
        return None
    start = 0
    for part in bound.args[0].fields:
        extent = _static_extent(part, axis)
        if extent is None:
            return None
        if ((index >= start) & (index < start + extent)).all():
            return part, index - start
        start += extent
    return None


class Gather(StandIn):
    tvm = F.Gather

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        data, indices = inputs[0], inputs[1]
        ndim = getattr(getattr(data, "ty", None), "ndim", -1)
        axis = int(attr.get("axis", 0))
        axis = axis + ndim if axis < 0 else axis
        n = _static_extent(data, axis)
        constant_index = isinstance(indices, tvm.ir.expr.Constant)
        if n is None or (constant_index and isinstance(data, tvm.ir.expr.Constant)):  # TVM folds the latter
            return tvm_impl(bb, inputs, attr, params)
        if not constant_index:
            return relax.op.take(data, indices, axis, mode="wrap")
        index = indices.value.numpy()
        if index.size and ((index < -n).any() or (index >= n).any()):
            raise node_error(node_name(attr), "Gather", "input 'indices'", f"is {index.tolist()}",
                             f"indices in [-{n}, {n - 1}] (axis {axis} has {n} entries)")
        normalised = np.where(index < 0, index + n, index).astype("int64")  # the dtype TVM gives it
        picked = _concat_part(bb, data, axis, normalised)
        if picked is None:
            return relax.op.take(data, relax.const(normalised, "int64"), axis)
        part, within = picked
        if within.ndim == 0 and _static_extent(part, axis) == 1:
            return relax.op.squeeze(part, [axis])
        return relax.op.take(part, relax.const(within, "int64"), axis)


CONVERTERS = {"Gather": Gather}
