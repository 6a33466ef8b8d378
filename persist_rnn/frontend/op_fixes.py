"""Converters that stand in for TVM 0.27's where its ONNX importer gives a silently wrong answer
(found by ONNX's own backend cases, `persist_rnn.bench.op_sweep`). Each either computes what ONNX
specifies or refuses the node with an error naming it and the attribute at fault; otherwise it
hands the node to TVM's converter unchanged.

- Expand with a runtime shape: TVM broadcast to the shape's values even where a value of 1 meant
  "keep the input's extent" ((3, 1) by [2, 1, 6] gave (2, 1, 6), not (2, 3, 6)).
- LayerNormalization: TVM returns 0-d placeholders for the optional Mean and InvStdDev outputs;
  computed here when the node names them.
- BatchNormalization in training mode: TVM normalises with the running statistics; refused.
- ConvTranspose with `output_shape`: TVM ignores it; written as the pads and output_padding that
  ONNX's formula gives, or refused where those do not exist.
- Pad with pads computed at run time (from a symbolic length): TVM refuses ("Dynamic pads are not
  supported yet"); computed here as one gather-like loop over the output, every mode and sign.
- Slice with INT64_MAX-style starts/ends ("to the end"; torch writes them for reversed slices):
  on a symbolic extent TVM's shape arithmetic on them overflowed int64 at build time, and a
  smaller constant made the memory planner reserve that many elements (T.min(2**31 - 2, ...)).
  Written as the extent itself (or -(extent + 1)), the same slice under ONNX's clamping. A
  negative step with a start before the first element gave an empty slice where ONNX clamps the
  start to 0 (`x[..., -2::-2]` of one element); that start is clamped here.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as F

from ..errors import node_error


def node_name(attr) -> str:
    return attr.get("tvm_custom", {}).get("name", "?")


class StandIn(F.OnnxOpConverter):
    """Base: `convert` sees every node of the op; `tvm` is TVM's own converter class."""

    tvm = None

    @classmethod
    def get_converter(cls, opset):
        tvm_impl = cls.tvm.get_converter(opset)
        return lambda bb, inputs, attr, params: cls.convert(tvm_impl, bb, inputs, attr, params)

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        raise NotImplementedError


class Expand(StandIn):
    tvm = F.Expand

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        data, shape = inputs[0], inputs[1]
        if isinstance(shape, (relax.ShapeExpr, tvm.ir.expr.Constant)) or not isinstance(data.ty, relax.TensorType):
            return tvm_impl(bb, inputs, attr, params)  # static targets: TVM broadcasts correctly
        ndim = int(shape.ty.shape[0])
        as_shape = bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_to_shape"), [shape],
                                      ty_args=[relax.ShapeType(ndim=ndim)]))
        wanted = [tvm.tirx.Var(f"expand_{i}", "int64") for i in range(ndim)]
        bb.match_cast(as_shape, relax.ShapeType(wanted))
        have = [tvm.tirx.IntImm("int64", 1)] * max(0, ndim - data.ty.ndim) + list(data.ty.shape)
        if len(have) > ndim:  # the shape has fewer axes than the data: pad it with 1s
            wanted = [tvm.tirx.IntImm("int64", 1)] * (len(have) - ndim) + wanted
        padded = bb.normalize(relax.op.reshape(data, relax.ShapeExpr(have)))
        out = [tvm.tirx.Select(w == 1, h, w) for w, h in zip(wanted, have)]  # 1 keeps the input's extent
        return bb.normalize(relax.op.broadcast_to(padded, relax.ShapeExpr(out)))


class LayerNormalization(StandIn):
    tvm = F.LayerNormalization

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        if attr.get("tvm_custom", {}).get("num_outputs", 1) <= 1:
            return tvm_impl(bb, inputs, attr, params)
        x, scale, bias = inputs[0], inputs[1], inputs[2]
        rank = x.ty.ndim
        axis = attr.get("axis", -1)
        axis = axis + rank if axis < 0 else axis
        eps = attr.get("epsilon", 1e-05)
        axes = list(range(axis, rank))
        xf = relax.op.astype(x, "float32")  # stash_type 1: float32
        mean = bb.emit(relax.op.mean(xf, axes, keepdims=True))
        centred = bb.emit(relax.op.subtract(xf, mean))
        var = relax.op.mean(relax.op.multiply(centred, centred), axes, keepdims=True)
        inv = bb.emit(relax.op.rsqrt(relax.op.add(var, relax.const(eps, "float32"))))
        y = relax.op.multiply(relax.op.astype(relax.op.multiply(centred, inv), x.ty.dtype), scale)
        if bias is not None:
            y = relax.op.add(y, bias)
        return relax.Tuple([bb.emit(y), mean, inv])


class BatchNormalization(StandIn):
    tvm = F.BatchNormalization

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        if attr.get("training_mode", 0):
            raise node_error(node_name(attr), "BatchNormalization", "attribute 'training_mode'", "1 (batch statistics)",
                             "0: an inference model normalises with the running mean and variance")
        return tvm_impl(bb, inputs, attr, params)


class ConvTranspose(StandIn):
    tvm = F.ConvTranspose

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        if "output_shape" not in attr:
            return tvm_impl(bb, inputs, attr, params)
        attr = dict(attr)
        out = list(attr.pop("output_shape"))
        x, w = list(inputs[0].ty.shape), list(inputs[1].ty.shape)
        spatial = len(x) - 2
        if not all(isinstance(d, tvm.tirx.IntImm) for d in list(x[2:]) + list(w[2:])):
            raise node_error(node_name(attr), "ConvTranspose", "attribute 'output_shape'", "with symbolic input sizes",
                             "static spatial sizes, or 'pads' and 'output_padding' instead of 'output_shape'")
        out = out[-spatial:]
        strides = list(attr.get("strides", [1] * spatial))
        dilations = list(attr.get("dilations", [1] * spatial))
        extra = list(attr.get("output_padding", [0] * spatial))
        begin, end, padding = [], [], []
        for i in range(spatial):
            full = strides[i] * (int(x[2 + i]) - 1) + extra[i] + (int(w[2 + i]) - 1) * dilations[i] + 1
            total = full - out[i]
            if total >= 0:  # ONNX: SAME_UPPER puts the odd pixel at the end, otherwise at the start
                upper = attr.get("auto_pad", b"NOTSET") in (b"SAME_UPPER", "SAME_UPPER")
                begin.append(total // 2 if upper else total - total // 2)
                end.append(total - begin[-1])
                padding.append(extra[i])
            elif extra[i] - total < strides[i]:  # a larger output: the rest is output_padding
                begin.append(0)
                end.append(0)
                padding.append(extra[i] - total)
            else:
                raise node_error(node_name(attr), "ConvTranspose", "attribute 'output_shape'", f"{out} is out of reach",
                                 "an output no more than stride - 1 larger than the transposed convolution's")
        attr.pop("auto_pad", None)
        attr["pads"], attr["output_padding"] = begin + end, padding
        return tvm_impl(bb, inputs, attr, params)


def _as_prim_values(bb, values, count, prefix):
    """`count` int64 PrimExprs from a ShapeExpr, or from an int64 tensor read at run time."""
    if isinstance(values, relax.ShapeExpr):
        return list(values.values)
    as_shape = bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_to_shape"), [values],
                                  ty_args=[relax.ShapeType(ndim=count)]))
    out = [tvm.tirx.Var(f"{prefix}{i}", "int64") for i in range(count)]
    bb.match_cast(as_shape, relax.ShapeType(out))
    return out


def _pad_loop(x, before, after, mode, value):
    """out[i] = x[i - before] where that is inside x, else `value` (constant; a number or a 0-d or
    1-element tensor), the nearest border element (edge), the mirror image without repeating the
    border (reflect) or x read cyclically (wrap). A negative pad crops, as ONNX says; reflect
    needs pads below the extent, as in ONNX Runtime."""
    n = [tvm.tirx.Cast("int64", d) for d in x.shape]
    zero, one = tvm.tirx.IntImm("int64", 0), tvm.tirx.IntImm("int64", 1)

    def clamped(index):  # inside x on every axis, so that no read is out of bounds
        return tuple(tvm.te.max(zero, tvm.te.min(i, e - one)) for i, e in zip(index, n))

    def element(*idx):
        src = [i - b for i, b in zip(idx, before)]
        if mode == "edge":
            return x[clamped(src)]
        if mode == "wrap":
            return x[tuple(tvm.tirx.floormod(s, e) for s, e in zip(src, n))]
        if mode == "reflect":
            mirrored = [tvm.tirx.Select(s < zero, -s, s) for s in src]
            return x[clamped([tvm.tirx.Select(m >= e, e + e - 2 - m, m) for m, e in zip(mirrored, n)])]
        inside = tvm.tirx.all(*[tvm.tirx.all(s >= zero, s < e) for s, e in zip(src, n)])
        fill = tvm.tirx.const(value, x.dtype) if isinstance(value, float) else \
            value[(0,) * len(value.shape)].astype(x.dtype)
        return tvm.tirx.Select(inside, x[clamped(src)], fill)

    shape = [e + b + a for e, b, a in zip(n, before, after)]
    return tvm.te.compute(shape, element, name="pad_run_time")


class Pad(StandIn):
    tvm = F.Pad

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        pads = inputs[1] if len(inputs) > 1 else None
        if pads is None or isinstance(F.get_constant(pads, params), tvm.ir.GenericConst):
            return tvm_impl(bb, inputs, attr, params)  # constant pads: TVM's converter
        x = inputs[0]
        rank = x.ty.ndim
        axes = list(range(rank))
        if len(inputs) > 3 and inputs[3] is not None:
            const = F.get_constant(inputs[3], params)
            if not isinstance(const, tvm.ir.GenericConst):
                raise node_error(node_name(attr), "Pad", "input 'axes'", "computed at run time", "constant axes")
            axes = [int(a) % rank for a in const.value.numpy().ravel()]
        value = 0.0
        if len(inputs) > 2 and inputs[2] is not None:
            const = F.get_constant(inputs[2], params)
            value = float(const.value.numpy().item()) if isinstance(const, tvm.ir.GenericConst) else inputs[2]
        mode = attr.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("constant", "edge", "reflect", "wrap"):
            raise node_error(node_name(attr), "Pad", "attribute 'mode'", repr(mode), "constant, edge, reflect or wrap")
        amounts = _as_prim_values(bb, pads, 2 * len(axes), "pad_")
        zero = tvm.tirx.IntImm("int64", 0)
        before, after = [zero] * rank, [zero] * rank
        for k, axis in enumerate(axes):
            before[axis], after[axis] = amounts[k], amounts[len(axes) + k]
        return bb.emit_te(_pad_loop, x, before, after, mode, value)


class Slice(StandIn):
    tvm = F.Slice
    LIMIT = 2**31 - 1  # beyond this, a bound means "past the end" (or "before the start")

    @classmethod
    def convert(cls, tvm_impl, bb, inputs, attr, params):
        x = inputs[0]
        parts = [F.get_constant(inputs[k], params) if inputs[k] is not None else None for k in (1, 2, 3, 4)]
        known_shape = isinstance(getattr(x, "ty", None), relax.TensorType) and isinstance(x.ty.shape, relax.ShapeExpr)
        constant = all(p is None or isinstance(p, tvm.ir.GenericConst) for p in parts)
        if isinstance(x, relax.ShapeExpr) or not known_shape or not constant or parts[0] is None or parts[1] is None:
            return tvm_impl(bb, inputs, attr, params)
        starts, ends, axes, steps = [p.value.numpy().ravel().tolist() if p is not None else None for p in parts]
        axes = [a % x.ty.ndim for a in (axes if axes is not None else range(len(starts)))]
        steps = steps if steps is not None else [1] * len(axes)
        if len({len(starts), len(ends), len(axes), len(steps)}) != 1:
            return tvm_impl(bb, inputs, attr, params)  # TVM's converter names the mismatch
        huge = max(map(abs, starts + ends), default=0) > cls.LIMIT
        if not huge and not any(step < 0 and start < 0 for start, step in zip(starts, steps)):
            return tvm_impl(bb, inputs, attr, params)
        if 0 in steps:
            raise node_error(node_name(attr), "Slice", "input 'steps'", "a step of 0", "non-zero steps")
        extents = [int(e) if isinstance(e, tvm.tirx.IntImm) else e for e in x.ty.shape]
        begin, end = [], []
        for start, stop, step, axis in zip(starts, ends, steps, axes):
            begin.append(cls._start(start, step, extents[axis]))
            end.append(cls._end(stop, extents[axis]))
        prims = [[relax.prim_value(tvm.tirx.IntImm("int64", v) if isinstance(v, int) else v) for v in values]
                 for values in (begin, end, steps)]
        return relax.op.strided_slice(x, axes, *prims, assume_inbound=False)

    @classmethod
    def _start(cls, value, step, extent):
        """ONNX clamps a start to [0, extent] (to [0, extent - 1] for a negative step); strided_slice
        clamps a negative start to -1 for a negative step, so that one is written out."""
        if value > cls.LIMIT:
            return extent
        if value < -cls.LIMIT:
            return 0
        if step < 0 and value < 0:
            return max(value + extent, 0) if isinstance(extent, int) else tvm.tirx.max(extent + value, 0)
        return value

    @classmethod
    def _end(cls, value, extent):
        """Past the end is the extent; before the start is -(extent + 1), i.e. -1 once normalised."""
        if value > cls.LIMIT:
            return extent
        if value < -cls.LIMIT:
            return -(extent + 1)
        return value


#: op type -> the converter that stands in for TVM's
CONVERTERS = {c.__name__: c for c in (Expand, LayerNormalization, BatchNormalization, ConvTranspose, Pad, Slice)}
