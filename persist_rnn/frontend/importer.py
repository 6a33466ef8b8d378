"""`from_onnx`: TVM's Relax ONNX importer with LSTM / GRU / RNN converters added from outside.

TVM asks `onnx_frontend._get_convert_map()` for its converter table on every node, so wrapping
that function (for the duration of one import) is enough to add converters without editing TVM;
`op_fixes` stands in for TVM's converters where they give silently wrong answers, `gathers`
for its Gather where a constant index would cost kernels at run time.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import io
import json
import os
import sys
import warnings

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as F

from ..errors import PersistRNNError, last_line
from .canonical import emit_canonical
from .layer import fp16_projection, read_layer
from .gathers import CONVERTERS as GATHERS
from .op_fixes import CONVERTERS as OP_FIXES
from .quantized import int8_weight_nodes
from .unrolled import emit_unrolled

UNROLLED_ATTR = "persist_rnn.unrolled"


@dataclasses.dataclass
class _ImportOptions:
    unroll: bool
    target_kind: str
    unrolled: list  # CellSpec JSON of each layer lowered unrolled, in graph order
    int8_weights: frozenset = frozenset()  # nodes whose weights are int8 values (frontend.quantized)


_options: contextvars.ContextVar[_ImportOptions] = contextvars.ContextVar("persist_rnn_import")


class _RecurrentConverter(F.OnnxOpConverter):
    """Shared by the three ops: ONNX opsets 7 (no layout), 14 (layout) and 22 (bfloat16)."""

    op = ""

    @classmethod
    def _convert(cls, bb, inputs, attr, layout_ok):
        if not layout_ok and "layout" in attr:
            raise PersistRNNError(f"node {attr['tvm_custom']['name']!r} ({cls.op}): attribute 'layout' "
                                  "needs opset 14 or later; expected no 'layout' at opset < 14")
        layer = read_layer(bb, cls.op, inputs, attr)
        opts = _options.get()
        if layer.spec.node in opts.int8_weights:
            layer.spec = dataclasses.replace(layer.spec, int8_weights=True)
            if opts.target_kind == "cuda" and layer.gemm_operands == "float32" and not opts.unroll:
                layer = fp16_projection(bb, layer)
        if opts.unroll:
            opts.unrolled.append(layer.spec.to_json())
            return emit_unrolled(bb, layer)
        return emit_canonical(bb, layer, opts.target_kind)

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, layout_ok=False)

    @classmethod
    def _impl_v14(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, layout_ok=True)


CONVERTERS = {op: type(f"{op}Converter", (_RecurrentConverter,), {"op": op}) for op in ("LSTM", "GRU", "RNN")}


def _naming_failures(op: str, converter):
    """`converter` whose errors name the node: TVM's own raise deep inside its importer."""

    class Named(F.OnnxOpConverter):
        @classmethod
        def get_converter(cls, opset):
            impl = converter.get_converter(opset)

            def convert(bb, inputs, attr, params):
                try:
                    return impl(bb, inputs, attr, params)
                except PersistRNNError:
                    raise
                except Exception as err:  # TVM's converters raise ValueError, TVMError, AssertionError, ...
                    raise PersistRNNError(f"node {attr.get('tvm_custom', {}).get('name', '?')!r} ({op}): TVM's ONNX "
                                          f"importer cannot convert it: {last_line(err)}{_lost_shapes(inputs)}") from err
            return convert

    return Named


def _lost_shapes(inputs) -> str:
    """A hint when the failing node's inputs have lost their rank or extents (an If whose branches
    differ, Shape arithmetic on symbolic extents): pins are how a user gets them back."""
    lost = [k for k, e in enumerate(inputs) if isinstance(getattr(e, "ty", None), relax.TensorType)
            and (e.ty.ndim == -1 or e.ty.shape is None)]
    if not lost:
        return ""
    return (f"; its input {lost[0]} has {'no known rank' if inputs[lost[0]].ty.ndim == -1 else 'no known extents'} "
            "in TVM (an If whose branches differ in shape, or Shape arithmetic): pin the graph inputs' shapes, "
            "a name keeping an axis symbolic (shapes={'x': ('B', 1, 'T')}, CLI --shape x=B,1,T)")


@contextlib.contextmanager
def _converters_registered():
    original = F._get_convert_map
    converters = {**original(), **OP_FIXES, **GATHERS, **CONVERTERS}
    table = {op: _naming_failures(op, cls) for op, cls in converters.items()}
    F._get_convert_map = lambda: table
    try:
        yield
    finally:
        F._get_convert_map = original


#: ops TVM's importer takes without a converter of its table
_TAKEN_WITHOUT_CONVERTER = {"If", "Constant"}


def _refuse_unknown_ops(graph: onnx.GraphProto) -> None:
    """Name the first node of the graph that no converter takes, where TVM's importer would stop
    with OpNotImplemented and no node name (it checks the top-level graph so, as here)."""
    known = {**F._get_convert_map(), **OP_FIXES, **GATHERS, **CONVERTERS}
    for node in graph.node:
        if node.op_type not in known and node.op_type not in _TAKEN_WITHOUT_CONVERTER:
            domain = f"{node.domain}." if node.domain not in ("", "ai.onnx") else ""
            raise PersistRNNError(f"node {node.name!r} ({domain}{node.op_type}): not supported: TVM's ONNX importer "
                                  "has no converter for it")


def load_model(model_or_path) -> onnx.ModelProto:
    """An ONNX model from a path or a ModelProto, checked, with every node given a name."""
    if isinstance(model_or_path, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(model_or_path))
        except Exception as err:  # onnx raises DecodeError, OSError, ...
            raise PersistRNNError(f"{model_or_path}: not a readable ONNX model ({err})") from err
    elif isinstance(model_or_path, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(model_or_path)
    else:
        raise PersistRNNError(f"expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:  # exporters often leave value_info loose: warn, as TVM does
        warnings.warn(f"ONNX checker: {str(err).splitlines()[0]}")
    _check_graph_wiring(model.graph)
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
    return model


def _check_graph_wiring(graph):
    """Every node input must be produced before it is used: TVM would fail with a KeyError."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name not in known:
                raise PersistRNNError(f"invalid ONNX model: node {node.name or i!r} ({node.op_type}) reads "
                                      f"{name!r}, which no graph input, initializer or earlier node produces")
        known.update(node.output)
    if not graph.node:
        raise PersistRNNError("invalid ONNX model: the graph has no nodes")


def from_onnx(model_or_path, shape_dict=None, *, unroll=False, target_kind="llvm", verbose=False) -> tvm.IRModule:
    """Import an ONNX model into Relax; recurrent nodes become the canonical recurrent form.

    unroll=True emits T copies of the cell in primitive ops instead (static T and B only).
    target_kind picks the reference scan's variant ("llvm" or "cuda"); PersistentRNN
    re-targets it anyway. TVM's converters print nothing unless `verbose`.
    """
    model = load_model(model_or_path)
    _refuse_unknown_ops(model.graph)
    opts = _ImportOptions(unroll=unroll, target_kind=target_kind, unrolled=[],
                          int8_weights=frozenset(int8_weight_nodes(model)))
    token = _options.set(opts)
    chatter = io.StringIO()  # TVM prints a converter's inputs (IR dumps) before re-raising its error
    try:
        with _converters_registered(), contextlib.redirect_stdout(chatter if not verbose else sys.stdout):
            mod = F.from_onnx(model, shape_dict=shape_dict)
    finally:
        _options.reset(token)
    if opts.unrolled:
        mod = mod.with_attr(UNROLLED_ATTR, json.dumps(opts.unrolled))
    return mod
