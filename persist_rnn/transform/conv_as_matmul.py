"""ConvAsMatmul: on CUDA, a float32 convolution (conv1d or conv2d, one group, NCW / NCHW, constant
weights) with a reduction of MIN_REDUCTION elements or more runs as im2col (one kernel that lays
each output position's inputs out as a row) and a matmul by the flattened weights, which
DenseToProjection then runs as the projection GEMM (symbolic rows) and dlight's Matmul rule
schedules (static rows).

Why: dlight has no convolution rule. Its Fallback gives each output element one thread that reads
its C x kernel inputs and weights alone: the CRNN's 3x3 convolutions over a 32 x 256 text line took
2.37 ms at B=16 where torch's cuDNN took 0.49 (docs/data/torch-models-h200.jsonl, runs F and G).

im2col writes a row a thread block, its threads along the row, so that a row's position is
divided out of its index once a thread; dlight's Fallback (a thread an element) divides each
element's index by the symbolic extents: 70 µs against 45 for the CRNN's second im2col at B=16.
A shorter reduction keeps TVM's schedule: the CRNN's first convolution (one channel, 3 x 3, 32
outputs) took 111 µs so, and 270 µs as a GEMM (the narrow dense kernel, a warp a row, shuffles 32
column sums for 9 products each) (runs G and H).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.sym.analyzer import Analyzer
from tvm import relax, s_tir, te, tirx

from tir_templates.gemm_signature import OPAQUE

from ..targets import as_target
from .batch_invariants import static_value
from .function_rewrite import rewrite_functions

#: the shortest reduction (channels x kernel elements) that goes through im2col
MIN_REDUCTION = 32

_LAYOUTS = {"relax.nn.conv1d": ("NCW", "OIW"), "relax.nn.conv2d": ("NCHW", "OIHW")}


def _out_extents(x, kernel, strides, pads, dilation) -> list:
    """The convolution's output extents along each spatial axis."""
    rank, simplify = len(kernel), Analyzer().simplify
    return [simplify(tirx.floordiv(x.shape[2 + a] + pads[a] + pads[rank + a] - dilation[a] * (kernel[a] - 1) - 1,
                                   strides[a]) + 1) for a in range(rank)]


def _split_row(r, batch_and_out: list) -> list:
    """Row r of the (B * prod(out), ...) matrix as its (b, *position) indices, last fastest."""
    indices = []
    for extent in reversed(batch_and_out[1:]):
        indices.insert(0, tirx.floormod(r, extent))
        r = tirx.floordiv(r, extent)
    return [r, *indices]


def _im2col(x: te.Tensor, kernel, strides, pads, dilation) -> te.Tensor:
    """(B, C, *spatial) -> (B * prod(out), C * prod(kernel)): output position p's row holds the
    inputs its kernel window reads (zero where the window hangs over the padding), channel-major
    as the weights (O, C, *kernel) flatten. Two dimensions, so that no reshape of symbolic extents
    stands between it and the GEMM (dlight's split of one over pyannote's lengths does not build)."""
    rank, taps = len(kernel), int(np.prod(kernel))
    channels, spatial = x.shape[1], list(x.shape[2:])
    out = _out_extents(x, kernel, strides, pads, dilation)
    rows = x.shape[0]
    for extent in out:
        rows = rows * extent

    def row(r, k):
        b, *positions = _split_row(r, [x.shape[0], *out])
        c, tap = tirx.floordiv(k, taps), tirx.floormod(k, taps)
        inside, reads = [], []
        for a in reversed(range(rank)):  # the last kernel axis varies fastest
            offset = tirx.floormod(tap, kernel[a])
            tap = tirx.floordiv(tap, kernel[a])
            at = positions[a] * strides[a] + offset * dilation[a] - pads[a]
            inside.append(tirx.all(at >= 0, at < spatial[a]))
            reads.insert(0, tirx.max(tirx.min(at, spatial[a] - 1), 0))
        return tirx.if_then_else(tirx.all(*inside), x[(b, c, *reads)], tirx.const(0.0, x.dtype))

    return te.compute([rows, channels * taps], row, name="im2col")


def _channels_first(y: te.Tensor, x: te.Tensor, kernel, strides, pads, dilation) -> te.Tensor:
    """The GEMM's (B * prod(out), O) back as the convolution's (B, O, *out)."""
    out = _out_extents(x, kernel, strides, pads, dilation)

    def value(b, o, *positions):
        r = b
        for p, extent in zip(positions, out):
            r = r * extent + p
        return y[r, o]

    return te.compute([x.shape[0], y.shape[1], *out], value, name="channels_first")


def _row_a_block(im2col: tirx.PrimFunc) -> tirx.PrimFunc:
    """im2col scheduled a row a thread block: up to 256 threads along the row, each dividing the
    row's index into batch and position once for its elements."""
    sch = s_tir.Schedule(im2col)
    row, k = sch.get_loops(sch.get_sblock("im2col"))
    extent = int(sch.get(k).extent)
    _, lane = sch.split(k, [None, min(256, -(-extent // 32) * 32)])
    sch.bind(row, "blockIdx.x")
    sch.bind(lane, "threadIdx.x")
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def _conv(call, var2val):
    """(flattened weights (C * kernel, O), kernel, attrs) of a convolution this pass takes, or None."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name in _LAYOUTS):
        return None
    attrs, (data_layout, kernel_layout) = call.attrs, _LAYOUTS[call.op.name]
    if (int(attrs.groups) != 1 or attrs.data_layout != data_layout or attrs.kernel_layout != kernel_layout
            or attrs.out_layout != data_layout or str(attrs.out_dtype) not in ("", "void", "None", "float32")):
        return None
    ty, w = call.args[0].ty, static_value(call.args[1], var2val)
    if w is None or w.dtype != np.float32 or not isinstance(ty, relax.TensorType) or ty.dtype != "float32" \
            or ty.shape is None or not isinstance(ty.shape[1], tirx.IntImm):
        return None
    if w.shape[1] * int(np.prod(w.shape[2:])) < MIN_REDUCTION:
        return None
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T), [int(k) for k in w.shape[2:]], attrs


@relax.expr_functor.mutator
class _ConvRewriter(relax.PyExprMutator):
    def __init__(self, mod, var2val: dict, blocks: bool):
        super().__init__(mod)
        self.var2val, self.blocks = var2val, blocks

    def visit_call_(self, call):
        original = call
        call = super().visit_call_(call)
        found = _conv(original, self.var2val)
        if found is None:
            return call
        weights, kernel, attrs = found
        x = call.args[0]  # as this mutator left it
        strides, pads, dilation = ([int(v) for v in a] for a in (attrs.strides, attrs.padding, attrs.dilation))
        im2col = self.builder_.call_te(_im2col, x, kernel, strides, pads, dilation,
                                       primfunc_name_hint="persist_rnn_im2col")
        kernel_gv = im2col.args[0]  # unfused: in its producer's kernel, the producer would run K times a value
        func = self.builder_.get()[kernel_gv].with_attr("op_pattern", OPAQUE)
        self.builder_.update_func(kernel_gv, _row_a_block(func) if self.blocks else func)
        rows = self.builder_.emit(im2col)
        out = self.builder_.emit(relax.op.matmul(rows, relax.const(weights, "float32")))
        return self.builder_.call_te(_channels_first, out, x, kernel, strides, pads, dilation,
                                     primfunc_name_hint="persist_rnn_channels_first")


def conv_as_matmul(mod: tvm.IRModule, blocks: bool = True) -> tvm.IRModule:
    """The rewrite itself, whatever the target (the pass applies it on CUDA only); `blocks` False
    leaves every im2col to the target's default schedule (llvm's: a thread block is CUDA's)."""
    return rewrite_functions(mod, lambda mod, var2val: _ConvRewriter(mod, var2val, blocks))


def ConvAsMatmul(target) -> tvm.ir.transform.Pass:
    """The pass (a no-op off CUDA). Run it before DenseToProjection and legalization."""
    target = as_target(target)

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.ConvAsMatmul")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return conv_as_matmul(mod) if target.kind.name == "cuda" else mod

    return _pass
