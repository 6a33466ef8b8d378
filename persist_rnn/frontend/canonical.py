"""The canonical recurrent form: one input-projection GEMM (a call to the projection reference),
then one call to the reference scan.

The scan's PrimFunc carries the layer's CellSpec as a function attribute; this is the shape the
PersistentRNN pass looks for.
"""
from __future__ import annotations

import re

import numpy as np
from tvm import relax

from tir_templates.reference import reference_scan
from tir_templates.signature import EXCHANGE_SLOTS, WORKSPACE_WORDS

from .layer import RecurrentLayer, finish_outputs, input_projection

#: the lengths a layer without sequence_lens gets: kernels clamp every length to T
ALL_STEPS = np.iinfo(np.int32).max


def full_lengths(batch):
    """sequence_lens when the node has none: every sequence runs all T steps."""
    if isinstance(batch, int):
        return relax.const(np.full((batch,), ALL_STEPS, "int32"))
    return relax.op.full(relax.ShapeExpr([batch]), relax.const(ALL_STEPS, "int32"), "int32")


def func_name(spec) -> str:
    return "persist_rnn_" + spec.cell + "_" + re.sub(r"\W", "_", spec.node or "layer")


def call_scan(bb, spec, target_kind: str, args: list, seq_len, batch, name: str):
    """Add the reference scan of `spec` and call it on `args` (xw, r, rb, lens, h0, c0, p):
    returns the Y (T, D, B, H, in the layer's dtype), Y_h and Y_c (D, B, H, float32) vars."""
    D, H = spec.num_directions, spec.hidden_size
    gvar = bb.add_func(reference_scan(spec, target_kind), name)
    state = relax.TensorType((D, batch, H), "float32")
    workspace = relax.TensorType((WORKSPACE_WORDS,), "uint32")
    exchange = relax.TensorType((EXCHANGE_SLOTS, D, batch, H), "float32")
    out_ty = [relax.TensorType((seq_len, D, batch, H), spec.dtype), state, state, exchange, workspace]
    res = bb.emit(relax.call_tir(gvar, args, out_ty))
    return tuple(bb.emit(relax.TupleGetItem(res, i)) for i in range(3))


def emit_canonical(bb, layer: RecurrentLayer, target_kind: str):
    spec = layer.spec
    xw = input_projection(bb, layer)
    lens = layer.lens if layer.lens is not None else full_lengths(layer.batch)
    args = [xw, layer.r, layer.rb, lens, layer.h0, layer.c0, layer.p]
    y, y_h, y_c = call_scan(bb, spec, target_kind, args, layer.seq_len, layer.batch, func_name(spec))
    return finish_outputs(bb, layer, y, y_h, y_c if spec.cell == "lstm" else None)
