"""One ONNX recurrent node, checked and normalised into Relax values both lowerings start from.

Whatever the node's layout, optional inputs and dtype, a `RecurrentLayer` holds time-major
float32 Relax expressions with every optional input materialised (zeros, full lengths), so the
canonical and unrolled lowerings never branch on what the model left out.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tvm
from tvm import relax, tirx

from tir_templates.projection import projection_reference
from tir_templates.spec import CellSpec

from ..errors import node_error
from .attributes import cell_spec

INPUT_NAMES = {
    "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
    "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
    "RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")


@dataclasses.dataclass
class RecurrentLayer:
    spec: CellSpec
    layout: int
    out_dtype: str
    x: relax.Expr  # (T, B, I) float32, or gemm_operands (an fp16 or bf16 layer's x and W)
    w: relax.Expr  # (D, G*H, I)
    r: relax.Expr  # (D, G*H, H)
    wb: relax.Expr  # (D, G*H)
    rb: relax.Expr  # (D, G*H)
    lens: relax.Expr | None  # (B,) int32, None when the node has no sequence_lens
    h0: relax.Expr  # (D, B, H)
    c0: relax.Expr  # (D, B, H)
    p: relax.Expr  # (D, 3H)
    seq_len: object  # T: int or PrimExpr
    batch: object  # B: int or PrimExpr
    #: the dtype whose values x and w hold (fp16 or bf16 where the node gave both in it), which the
    #: input projection may compute exactly on 16-bit tensor cores
    gemm_operands: str = "float32"


def _dims(expr):
    return [int(d) if isinstance(d, tirx.IntImm) else d for d in expr.ty.shape]


def _same(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return True  # symbolic: checked at run time


def _check_shape(bb, node, op, name, expr, expected):
    """`expr`, checked against `expected`. A tensor whose extents TVM's importer lost (a state built
    by ConstantOfShape from Shape arithmetic) is cast to them; the VM checks that cast per call."""
    if expr is None:
        return None
    if not isinstance(expr.ty, relax.TensorType) or expr.ty.ndim not in (len(expected), -1):
        raise node_error(node, op, f"input {name!r}", f"has type {expr.ty}",
                         f"a tensor of shape {tuple(expected)}")
    if not isinstance(expr.ty.shape, relax.ShapeExpr):
        return bb.match_cast(expr, relax.TensorType(list(expected), expr.ty.dtype))
    got = _dims(expr)
    if not all(_same(g, e) for g, e in zip(got, expected)):
        raise node_error(node, op, f"input {name!r}", f"has shape {tuple(got)}",
                         f"{tuple(expected)} (from hidden_size, direction and X)")
    return expr


def _f32(bb, e):
    return e if e.ty.dtype == "float32" else bb.emit(relax.op.astype(e, "float32"))


def _zeros(shape, dtype="float32"):
    if all(isinstance(d, int) for d in shape):
        return relax.const(np.zeros(shape, dtype))
    return relax.op.zeros(relax.ShapeExpr(shape), dtype)


def read_layer(bb, op: str, inputs, attr: dict) -> RecurrentLayer:
    """Check node `op`'s inputs against its attributes and normalise them (see module doc)."""
    node = str(attr["tvm_custom"]["name"])
    names = INPUT_NAMES[op]
    if len(inputs) > len(names):
        raise node_error(node, op, "inputs", f"{len(inputs)} given", f"at most {len(names)}: {names}")
    get = dict(zip(names, list(inputs) + [None] * (len(names) - len(inputs))))
    x = get["X"]
    for req in ("X", "W", "R"):
        if get[req] is None:
            raise node_error(node, op, f"input {req!r}", "is missing", "a tensor")
    if not isinstance(x.ty, relax.TensorType) or x.ty.ndim != 3:
        raise node_error(node, op, "input 'X'", f"has type {x.ty}", "a rank-3 tensor")
    if x.ty.dtype not in FLOAT_DTYPES:
        raise node_error(node, op, "input 'X'", f"has dtype {x.ty.dtype}", " / ".join(FLOAT_DTYPES))
    layout = int(attr.get("layout", 0))
    in_size = _dims(x)[2]
    if not isinstance(in_size, int):
        raise node_error(node, op, "input 'X'", "has a symbolic input size", "a static last dimension")
    spec = cell_spec(node, op, attr, in_size, x.ty.dtype)
    D, G, H = spec.num_directions, spec.num_gates, spec.hidden_size
    if layout == 1:
        x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
    T_, B_ = _dims(x)[:2]
    state_shape = (B_, D, H) if layout == 1 else (D, B_, H)
    expected = {
        "W": (D, G * H, in_size), "R": (D, G * H, H), "B": (D, 2 * G * H), "sequence_lens": (B_,),
        "initial_h": state_shape, "initial_c": state_shape, "P": (D, 3 * H),
    }
    for name, shape in expected.items():
        get[name] = _check_shape(bb, node, op, name, get.get(name), shape)
    lens = get["sequence_lens"]
    if lens is not None and lens.ty.dtype != "int32":
        raise node_error(node, op, "input 'sequence_lens'", f"has dtype {lens.ty.dtype}", "int32")
    if lens is not None and isinstance(lens, tvm.ir.expr.Constant):
        v = lens.value.numpy()
        if (v < 0).any() or (isinstance(T_, int) and (v > T_).any()):
            raise node_error(node, op, "input 'sequence_lens'", f"is {v.tolist()}",
                             f"values in [0, {T_}] (the sequence length)")

    def state(name):
        e = get.get(name)
        if e is None:
            return _zeros((D, B_, H))
        e = _f32(bb, e)
        return bb.emit(relax.op.permute_dims(e, [1, 0, 2])) if layout == 1 else e

    bias = get["B"]
    if bias is None:
        wb = rb = _zeros((D, G * H))
    else:
        bias = _f32(bb, bias)
        wb = bb.emit(relax.op.strided_slice(bias, [1], [0], [G * H]))
        rb = bb.emit(relax.op.strided_slice(bias, [1], [G * H], [2 * G * H]))
    p = get.get("P")
    if p is not None:
        spec = dataclasses.replace(spec, peepholes=True)
    # x and W of one dtype (ONNX's T): at 16 bits the projection may multiply them exactly as such
    operands = str(x.ty.dtype) if str(getattr(get["W"].ty, "dtype", "")) == str(x.ty.dtype) else "float32"
    return RecurrentLayer(  # x stays 16-bit where the projection multiplies it as such
        spec=spec, layout=layout, out_dtype=x.ty.dtype, x=x if operands != "float32" else _f32(bb, x), w=_f32(bb, get["W"]),
        r=_f32(bb, get["R"]), wb=wb, rb=rb, lens=lens, h0=state("initial_h"),
        c0=state("initial_c"), p=_zeros((D, 3 * H)) if p is None else _f32(bb, p),
        seq_len=T_, batch=B_, gemm_operands=operands,
    )


def fp16_projection(bb, layer: RecurrentLayer) -> RecurrentLayer:
    """A quantized fp32 layer's input projection as a 16-bit layer's, for CUDA: x rounded to fp16
    once (a cast kernel before the GEMM) and multiplied with W held as fp16 pairs on the 16-bit
    tensor cores, fp32 sums, xw in fp32 as before. The rounding is the recurrent step's own on the
    tensor cores (`config.tensor_core_dtypes`: weights and h(t-1) in fp16), 8x finer than ONNX
    Runtime's DynamicQuantizeLSTM, which rounds x to 8 bits; on the H200 3xTF32, which keeps fp32
    accuracy, made LSTM H=1024 B=16's whole layer 1.80x our fp16 build's time, with the same
    recurrent kernel (docs/data/quantized-layers-h200.jsonl, run D)."""
    return dataclasses.replace(layer, x=bb.emit(relax.op.astype(layer.x, "float16")), gemm_operands="float16")


def input_projection(bb, layer: RecurrentLayer):
    """X @ W^T + Wb for every step and direction as one GEMM: (T, B, D, G*H), off the critical path.
    A call to the projection reference, which the PersistentRNN pass swaps for a tiled CUDA GEMM."""
    spec = layer.spec
    D, GH, I = spec.num_directions, spec.num_gates * spec.hidden_size, spec.input_size
    w_t = bb.emit(relax.op.permute_dims(relax.op.reshape(layer.w, (D * GH, I)), [1, 0]))
    x2 = bb.emit(relax.op.reshape(layer.x, (layer.seq_len * layer.batch, I)))
    b = bb.emit(relax.op.reshape(layer.wb, (D * GH,)))
    gvar = bb.add_func(projection_reference(I, D * GH, layer.gemm_operands), "persist_rnn_projection")
    xw = bb.emit(relax.call_tir(gvar, [x2, w_t, b], relax.TensorType((layer.seq_len * layer.batch, D * GH), "float32")))
    return bb.emit(relax.op.reshape(xw, (layer.seq_len, layer.batch, D, GH)))


def finish_outputs(bb, layer: RecurrentLayer, y, y_h, y_c):
    """Back to the node's layout and dtype: ONNX Y, Y_h (and Y_c for LSTM) as a Relax tuple."""
    outs = []
    for e, perm in ((y, [2, 0, 1, 3]), (y_h, [1, 0, 2]), (y_c, [1, 0, 2])):
        if e is None:
            continue
        if layer.layout == 1:
            e = bb.emit(relax.op.permute_dims(e, perm))
        if e.ty.dtype != layer.out_dtype:  # Y leaves the kernel in it already (tir_templates/signature.py)
            e = bb.emit(relax.op.astype(e, layer.out_dtype))
        outs.append(e)
    return relax.Tuple(outs)
