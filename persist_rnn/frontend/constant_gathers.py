"""Gather by a constant index, imported as a plain `take`.

TVM 0.27's Gather converter turns a negative index into `index + extent` at run time, for every
index: the extent comes from `shape_to_tensor(shape_of(data))`, which a symbolic batch keeps
from folding. torch exports `h_n[-1]` (the last layer's final state, what a classifier reads)
that way, and a model with a symbolic batch then ran three small kernels per call to compute a
constant. When the index is a constant and the gathered axis has a static extent, the index is
normalised here, at import; a constant index that is out of range is refused, naming the node.
Any other Gather goes to TVM's converter unchanged.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as F

from ..errors import node_error
from .op_fixes import StandIn, node_name


class Gather(StandIn):
    tvm = F.Gather

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        data, indices = inputs[0], inputs[1]
        if (not isinstance(indices, tvm.ir.expr.Constant) or isinstance(data, tvm.ir.expr.Constant)
                or not isinstance(getattr(data, "ty", None), relax.TensorType) or data.ty.shape is None):
            return tvm_impl(bb, inputs, attr, params)
        axis = int(attr.get("axis", 0))
        axis = axis + data.ty.ndim if axis < 0 else axis
        extent = data.ty.shape[axis] if 0 <= axis < data.ty.ndim else None
        if not isinstance(extent, tvm.tirx.IntImm):
            return tvm_impl(bb, inputs, attr, params)
        index = indices.value.numpy()
        n = int(extent)
        if index.size and ((index < -n).any() or (index >= n).any()):
            raise node_error(node_name(attr), "Gather", "input 'indices'", f"is {index.tolist()}",
                             f"indices in [-{n}, {n - 1}] (axis {axis} has {n} entries)")
        normalised = np.where(index < 0, index + n, index).astype("int64")  # the dtype TVM gives it
        return relax.op.take(data, relax.const(normalised, "int64"), axis)


CONVERTERS = {"Gather": Gather}
