"""Models exported by torch (committed fixtures, made by tests/fixtures/make_fixtures.py)."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest

import persist_rnn
from persist_rnn.bench.layer_models import max_rel_error, ort_run

FIXTURES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "fixtures", "*.onnx")))


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_fixture_matches_onnxruntime_on_cpu(path):
    feeds = dict(np.load(path[:-5] + ".npz"))
    want = ort_run(onnx.load(path), feeds)
    got = persist_rnn.compile(path, "llvm").run(feeds)
    assert max_rel_error(got, want) <= 1e-4


def test_dynamic_axes_export_runs_other_shapes():
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch_classifier.onnx")
    compiled = persist_rnn.compile(path, "llvm")
    for steps, batch in ((3, 1), (11, 5)):
        feeds = {"tokens": np.random.default_rng(steps).integers(0, 50, (steps, batch))}
        assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(path), feeds)) <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "reference"])
@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_fixture_end_to_end_on_gpu(path, persistent):
    feeds = dict(np.load(path[:-5] + ".npz"))
    want = ort_run(onnx.load(path), feeds)
    compiled = persist_rnn.compile(path, "cuda", persistent=persistent)
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4
    expected = "persistent" if persistent else "reference"
    assert all(r.lowering == expected for r in compiled.report()), compiled.report()
