"""The canonical recurrent form: one input-projection GEMM, then one call to the reference scan.

The scan's PrimFunc carries the layer's CellSpec as a function attribute; this is the shape the
PersistentRNN pass looks for.
"""
from __future__ import annotations

import re

import numpy as np
from tvm import relax

from tir_templates.reference import WORKSPACE_WORDS, reference_scan

from .layer import RecurrentLayer, finish_outputs, input_projection


#: the lengths a layer without sequence_lens gets: kernels clamp every length to T
ALL_STEPS = np.iinfo(np.int32).max


def full_lengths(layer: RecurrentLayer):
    """sequence_lens when the node has none: every sequence runs all T steps."""
    if isinstance(layer.batch, int):
        return relax.const(np.full((layer.batch,), ALL_STEPS, "int32"))
    return relax.op.full(relax.ShapeExpr([layer.batch]), relax.const(ALL_STEPS, "int32"), "int32")


def func_name(spec) -> str:
    return "persist_rnn_" + spec.cell + "_" + re.sub(r"\W", "_", spec.node or "layer")


def emit_canonical(bb, layer: RecurrentLayer, target_kind: str):
    spec = layer.spec
    D, H, T_, B_ = spec.num_directions, spec.hidden_size, layer.seq_len, layer.batch
    xw = input_projection(bb, layer)
    lens = layer.lens if layer.lens is not None else full_lengths(layer)
    gvar = bb.add_func(reference_scan(spec, target_kind), func_name(spec))
    state = relax.TensorType((D, B_, H), "float32")
    workspace = relax.TensorType((WORKSPACE_WORDS,), "uint32")
    exchange = relax.TensorType((3, D, B_, H), "float32")
    out_ty = [relax.TensorType((T_, D, B_, H), "float32"), state, state, exchange, workspace]
    res = bb.emit(relax.call_tir(gvar, [xw, layer.r, layer.rb, lens, layer.h0, layer.c0, layer.p], out_ty))
    y, y_h, y_c = (bb.emit(relax.TupleGetItem(res, i)) for i in range(3))
    return finish_outputs(bb, layer, y, y_h, y_c if spec.cell == "lstm" else None)
