"""Recurrences written as primitive ops: chains of LSTM and GRU cells become the canonical form."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import persist_rnn
from persist_rnn.bench.layer_models import (
    LayerCase,
    cell_loop_model,
    max_rel_error,
    ort_run,
    reference,
)
from persist_rnn.transform.match_cells import MatchCells

LSTMCELL_LOOP = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_lstmcell_loop.onnx")
GRUCELL_LOOP = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_grucell_loop.onnx")
CUDA = {"kind": "cuda", "arch": "sm_90"}


def _matched(report):
    return [r for r in report if r.node.startswith("matched_")]


def test_torch_lstmcell_loop_is_matched_and_correct():
    """torch's gate order (i, f, g, o) and its split; step 0 (h = 0 folded away) stays as ops."""
    feeds = dict(np.load(LSTMCELL_LOOP[:-5] + ".npz"))
    compiled = persist_rnn.compile(LSTMCELL_LOOP, "llvm")
    [layer] = _matched(compiled.report())
    assert (layer.cell, layer.hidden_size, layer.lowering) == ("lstm", 12, "reference")
    assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(LSTMCELL_LOOP), feeds)) <= 1e-4
    [layer] = _matched(persist_rnn.compile(LSTMCELL_LOOP, CUDA, measure=False).report())
    assert layer.lowering == "persistent"


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_unrolled_lstm_is_matched_per_direction(direction):
    """The importer's unroll=True output: ONNX gate order, strided slices, initial states."""
    case = LayerCase(op="LSTM", direction=direction, initial_h=True, initial_c=True, seq_len=6)
    model, feeds, want = reference(case)
    compiled = persist_rnn.compile(model, "llvm", unroll=True)
    assert len(_matched(compiled.report())) == (2 if direction == "bidirectional" else 1)
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4


@pytest.mark.parametrize("near_miss", [dict(peepholes=True), dict(clip=1.0), dict(seq_lens=[6, 2, 4])],
                         ids=["peepholes", "clip", "sequence_lens"])
def test_near_misses_are_left_untouched(near_miss):
    """An extra op inside the cell (peephole terms, clip, masking) is not an LSTM cell."""
    model, feeds, want = reference(LayerCase(op="LSTM", seq_len=6, **near_miss))
    compiled = persist_rnn.compile(model, "llvm", unroll=True)
    assert _matched(compiled.report()) == []
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4


def test_torch_grucell_loop_is_matched_and_correct():
    """torch's GRUCell: h' = (h - n) * z + n, separate input and hidden splits, r inside n."""
    feeds = dict(np.load(GRUCELL_LOOP[:-5] + ".npz"))
    compiled = persist_rnn.compile(GRUCELL_LOOP, "llvm")
    [layer] = _matched(compiled.report())
    assert (layer.cell, layer.hidden_size) == ("gru", 12)
    assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(GRUCELL_LOOP), feeds)) <= 1e-4
    [layer] = _matched(persist_rnn.compile(GRUCELL_LOOP, CUDA, measure=False).report())  # h(T) is the graph output
    assert layer.lowering == "persistent"


@pytest.mark.parametrize("lbr", [1, 0], ids=["linear_before_reset=1", "linear_before_reset=0"])
def test_unrolled_gru(lbr):
    """ONNX's (1 - z) * n + z * h form, both candidate forms, one chain per direction."""
    case = LayerCase(op="GRU", linear_before_reset=lbr, direction="bidirectional", initial_h=True, seq_len=6)
    model, feeds, want = reference(case)
    compiled = persist_rnn.compile(model, "llvm", unroll=True)
    assert [r.cell for r in _matched(compiled.report())] == ["gru", "gru"]
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4
    assert _ops_left(model, ["tanh", "sigmoid"], unroll=True) == []
    [layer, _] = _matched(persist_rnn.compile(model, CUDA, measure=False, unroll=True).report())
    assert layer.lowering == "persistent"


def _ops_left(model, names, unroll=False):
    """Calls of relax ops `names` still in main after MatchCells."""
    mod = MatchCells()(persist_rnn.from_onnx(model, unroll=unroll))
    wanted, found = {"relax." + n for n in names}, []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name in wanted:
            found.append(e.op.name)
    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


@pytest.mark.parametrize("cell,activation,input_size", [("rnn", "Tanh", 8), ("rnn", "Relu", 8), ("rnn", "Tanh", 5),
                                                        ("lstm", "Tanh", 8)],
                         ids=["rnn_tanh_I=H", "rnn_relu_I=H", "rnn_tanh", "lstm_I=H"])
def test_torch_style_cell_loops(cell, activation, input_size):
    """Gemm(x, W_ih) + Gemm(h, W_hh) per step; with I == H both terms look recurrent, and the
    chain (h(t-1) is the previous cell's h(t)) decides. Every step is swallowed, none left as ops."""
    model, feeds = cell_loop_model(cell, steps=4, input_size=input_size, hidden=8, activation=activation)
    compiled = persist_rnn.compile(model, "llvm")
    [layer] = _matched(compiled.report())
    assert (layer.cell, layer.hidden_size) == (cell, 8)
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4
    assert _ops_left(model, ["tanh", "nn.relu", "sigmoid"]) == []
    [layer] = _matched(persist_rnn.compile(model, CUDA, measure=False).report())
    assert layer.lowering == "persistent"


@pytest.mark.parametrize("activations,matched", [(["Relu", "Tanh"], 2), (["LeakyRelu", "Tanh"], 1)],
                         ids=["relu+tanh", "leakyrelu+tanh"])
def test_unrolled_rnn(activations, matched):
    """The importer's unrolled RNN, one chain per direction; an activation the matcher does not
    know (LeakyRelu) leaves that direction as ops, still correct."""
    case = LayerCase(op="RNN", direction="bidirectional", initial_h=True, seq_len=5, activations=activations)
    model, feeds, want = reference(case)
    compiled = persist_rnn.compile(model, "llvm", unroll=True)
    assert sorted(r.cell for r in _matched(compiled.report())) == ["rnn"] * matched
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4


@pytest.mark.parametrize("case", [LayerCase(op="RNN", seq_len=5, clip=0.5),
                                  LayerCase(op="GRU", seq_len=5, clip=0.5, linear_before_reset=0)], ids=["rnn", "gru_lbr0"])
def test_near_miss_clip(case):
    """clip inside the cell is an extra op: left as ops, still correct."""
    model, feeds, want = reference(case)
    compiled = persist_rnn.compile(model, "llvm", unroll=True)
    assert _matched(compiled.report()) == []
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4


@pytest.mark.parametrize("input_size", [8, 5], ids=["I=H", "I!=H"])
def test_keras_style_gru_reset_before(input_size):
    """GRU with linear_before_reset=0 as Keras writes it: a MatMul per gate, (r * h) @ U_n inside
    the candidate, z * h + (1 - z) * n. Matched whole; its persistent kernel is opt-in."""
    model, feeds = cell_loop_model("gru0", steps=4, input_size=input_size, hidden=8)
    compiled = persist_rnn.compile(model, "llvm")
    [layer] = _matched(compiled.report())
    assert layer.cell == "gru" and layer.hidden_size == 8
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4
    assert _ops_left(model, ["tanh", "sigmoid"]) == []
    [layer] = _matched(persist_rnn.compile(model, CUDA, measure=False).report())
    assert layer.lowering == "persistent"
