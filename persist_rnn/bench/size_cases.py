"""The sizes at the edges (issue 18) as one model and its feeds, shared by the CPU test and the
GPU test: one LSTM (input 32, hidden 64) with symbolic T and B, sequence_lens and initial states
as inputs, so every case runs through one compiled model."""
from __future__ import annotations

import numpy as np

from .layer_models import LayerCase, make_model

INPUT, HIDDEN = 32, 64
#: name -> (T, B, lengths or None for all T)
CASES = {
    "T=1": (1, 1, None),
    "T=20000": (20000, 1, None),
    "B=4096": (10, 4096, None),
    "lengths-all-zero": (5, 3, [0, 0, 0]),
    "B=0": (5, 0, None),
}


def size_model():
    case = LayerCase(op="LSTM", hidden_size=HIDDEN, input_size=INPUT, dynamic=True, seq_lens=[1, 1, 1],
                     initial_h=True, initial_c=True, weight_scale=1.0 / HIDDEN ** 0.5)
    return make_model(case)[0]


def size_feeds(name: str) -> dict:
    steps, batch, lens = CASES[name]
    rng = np.random.default_rng(steps * 7 + batch)
    return {"X": rng.standard_normal((steps, batch, INPUT)).astype("float32"),
            "sequence_lens": np.full((batch,), steps, "int32") if lens is None else np.asarray(lens, "int32"),
            "initial_h": rng.standard_normal((1, batch, HIDDEN)).astype("float32"),
            "initial_c": rng.standard_normal((1, batch, HIDDEN)).astype("float32")}


def empty_outputs(batch_zero_feeds: dict) -> list:
    """What the layer gives for B=0 (ONNX Runtime aborts the process on it): empty Y, Y_h, Y_c."""
    steps = batch_zero_feeds["X"].shape[0]
    return [np.zeros((steps, 1, 0, HIDDEN), "float32"), np.zeros((1, 0, HIDDEN), "float32"),
            np.zeros((1, 0, HIDDEN), "float32")]
