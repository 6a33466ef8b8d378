"""The canonical form (reference scan) and the unrolled form against ONNX Runtime, on the CPU."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, max_rel_error, reference

FP32_TOL = 1e-4
CELLS = ("LSTM", "GRU", "RNN")
DIRECTIONS = ("forward", "reverse", "bidirectional")

# Every cell x direction x layout, each with a different mix of the optional features, so that
# each feature meets every cell and direction somewhere in the grid.
OPTION_MIXES = [
    dict(),
    dict(seq_lens=[5, 2, 4], initial_h=True, initial_c=True),
    dict(with_bias=False, input_size=7, hidden_size=5, clip=1.5),
    dict(seq_lens=[1, 5, 3], peepholes=True, linear_before_reset=1, input_size=3),
    dict(initial_h=True, clip=0.8, linear_before_reset=0, peepholes=True, input_forget=1),
    dict(seq_lens=[0, 4, 5], initial_h=True, initial_c=True, hidden_size=9),
]


def _grid():
    for k, (op, direction, layout) in enumerate(itertools.product(CELLS, DIRECTIONS, (0, 1))):
        opts = dict(OPTION_MIXES[k % len(OPTION_MIXES)])
        if op != "LSTM":
            opts.pop("peepholes", None), opts.pop("input_forget", None), opts.pop("initial_c", None)
        if op != "GRU":
            opts.pop("linear_before_reset", None)
        yield LayerCase(op=op, direction=direction, layout=layout, **opts)


@pytest.mark.parametrize("case", list(_grid()), ids=lambda c: f"{c.op}-{c.direction}-layout{c.layout}")
def test_canonical_matches_onnxruntime(case):
    model, feeds, want = reference(case)
    got = persist_rnn.compile(model, "llvm").run(feeds)
    assert max_rel_error(got, want) <= FP32_TOL


ACTIVATION_CASES = [
    ("RNN", ["Relu"], None, None), ("RNN", ["Sigmoid"], None, None), ("RNN", ["Affine"], [0.5], [0.2]),
    ("RNN", ["LeakyRelu"], [0.3], None), ("RNN", ["ThresholdedRelu"], [0.2], None),
    ("RNN", ["ScaledTanh"], [1.3], [0.7]), ("RNN", ["HardSigmoid"], [0.3], [0.4]), ("RNN", ["Elu"], [0.9], None),
    ("RNN", ["Softsign"], None, None), ("RNN", ["Softplus"], None, None),
    ("GRU", ["HardSigmoid", "Softsign"], None, None),
    ("LSTM", ["Sigmoid", "Relu", "Elu"], [0.6], None),
    ("LSTM", ["HardSigmoid", "ScaledTanh", "Affine", "Sigmoid", "Tanh", "Tanh"], [0.25, 1.1, 0.9], [0.45, 0.8, 0.1]),
]


@pytest.mark.parametrize("op,acts,alpha,beta", ACTIVATION_CASES, ids=lambda v: str(v))
def test_activations_match_onnxruntime(op, acts, alpha, beta):
    direction = "bidirectional" if len(acts) == 2 * {"LSTM": 3, "GRU": 2, "RNN": 1}[op] else "forward"
    case = LayerCase(op=op, direction=direction, activations=acts, activation_alpha=alpha, activation_beta=beta,
                     clip=3.0 if op == "RNN" else None)
    model, feeds, want = reference(case)
    assert max_rel_error(persist_rnn.compile(model, "llvm").run(feeds), want) <= FP32_TOL


@pytest.mark.parametrize("op", CELLS)
def test_dynamic_time_and_batch_compile_once(op):
    """One compiled model, many (T, B): symbolic dims from the ONNX graph stay symbolic."""
    case = LayerCase(op=op, dynamic=True, direction="bidirectional", seq_lens=[3, 1, 2], initial_h=True,
                     linear_before_reset=1 if op == "GRU" else None)
    model, _, _ = reference(case)
    compiled = persist_rnn.compile(model, "llvm")
    for steps, batch in ((1, 1), (4, 3), (9, 6)):
        lens = list(np.random.default_rng(steps).integers(0, steps + 1, batch))
        sub = dataclasses.replace(case, seq_len=steps, batch=batch, seq_lens=lens)
        _, feeds, want = reference(sub)
        assert max_rel_error(compiled.run(feeds), want) <= FP32_TOL


@pytest.mark.parametrize("case", [
    LayerCase(op="LSTM", direction="bidirectional", seq_lens=[5, 2, 4], peepholes=True, initial_c=True, clip=2.0),
    LayerCase(op="GRU", direction="reverse", layout=1, seq_lens=[1, 5, 3], linear_before_reset=0),
    LayerCase(op="GRU", direction="forward", linear_before_reset=1, initial_h=True),
    LayerCase(op="RNN", direction="bidirectional", activations=["Relu", "Tanh"]),
], ids=lambda c: f"{c.op}-{c.direction}")
def test_unrolled_agrees_with_canonical_and_onnxruntime(case):
    model, feeds, want = reference(case)
    canonical = persist_rnn.compile(model, "llvm").run(feeds)
    unrolled_model = persist_rnn.compile(model, "llvm", unroll=True)
    unrolled = unrolled_model.run(feeds)
    assert max_rel_error(unrolled, want) <= FP32_TOL
    assert max_rel_error(unrolled, canonical) <= FP32_TOL
    # (the unrolled LSTM and GRU cells are then matched back into scans by the pass: tests/transform)
    assert [r.lowering for r in unrolled_model.report() if not r.node.startswith("matched_")] == ["unrolled"]


def test_subset_of_outputs_and_opset7():
    case = LayerCase(op="LSTM", outputs=("Y_h",), opset=7)
    model, feeds, want = reference(case)
    got = persist_rnn.compile(model, "llvm").run(feeds)
    assert len(got) == 1 and got[0].shape == (1, 3, 6)
    assert max_rel_error(got, want) <= FP32_TOL


def test_float16_model():
    """fp16 models compute in fp32 and round the outputs once: 2e-3 of scale covers that rounding."""
    case = LayerCase(op="GRU", dtype="float16", linear_before_reset=1, direction="bidirectional")
    model, feeds, want = reference(case)
    got = persist_rnn.compile(model, "llvm").run(feeds)
    assert got[0].dtype == np.float16
    assert max_rel_error(got, want) <= 2e-3
