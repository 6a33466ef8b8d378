"""`benchmarks/conformance_sweep.py`: its draws cover the ONNX options and precisions it names,
and a drawn layer goes through the compile a user makes and is judged against ONNX Runtime (here
on llvm, whose reference lowering must match; the GPU box runs it on CUDA)."""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import conformance_sweep  # noqa: E402


def test_the_draws_cover_every_option_and_precision():
    rng = np.random.default_rng(0)
    draws = [conformance_sweep.draw(rng) for _ in range(200)]
    cases = [c for c, _ in draws]
    assert {c.op for c in cases} == {"LSTM", "GRU", "RNN"}
    assert {c.direction for c in cases} == {"forward", "reverse", "bidirectional"}
    assert {c.dtype for c in cases} == {"float32", "float16", "bfloat16"}
    assert {p for _, p in draws} == {"fp32", "tf32"}
    assert all(p == "fp32" for c, p in draws if c.dtype != "float32")  # TF32 is an fp32 layer's option
    for option in ("seq_lens", "initial_h", "initial_c", "peepholes", "clip", "input_forget", "dynamic", "layout"):
        assert any(getattr(c, option) for c in cases), option
    assert {c.linear_before_reset for c in cases if c.op == "GRU"} == {0, 1}
    assert any(c.input_size != c.hidden_size for c in cases)
    rng = np.random.default_rng(0)
    tensor = [conformance_sweep.draw(rng, tensor_cores=True) for _ in range(100)]
    assert all(c.hidden_size >= 256 and c.batch >= 8 for c, _ in tensor)
    assert all(p == "tf32" for c, p in tensor if c.dtype == "float32")


def test_a_layer_is_compiled_run_and_judged(tmp_path):
    case, _ = conformance_sweep.draw(np.random.default_rng(3))
    case = dataclasses.replace(case, op="GRU", hidden_size=24, input_size=40, batch=3, seq_len=3,
                               seq_lens=[3, 0, 2], linear_before_reset=0, dtype="float32", dynamic=True)
    row = conformance_sweep.one_layer(case, "fp32", "llvm")
    assert row["outcome"] == "match" and row["error"] <= row["bound"] == 1e-4, row
    json.dumps(row)  # a JSON line
    bf16 = conformance_sweep.one_layer(dataclasses.replace(case, dtype="bfloat16"), "fp32", "llvm")
    assert bf16["bound"] == 8e-3 and bf16["outcome"] == "match"  # judged at its own precision's bound
