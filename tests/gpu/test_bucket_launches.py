"""A layer with a symbolic batch whose tuning log holds grid-barrier configs for some buckets and
cluster configs for others (the text classifier with its static builds' log did) runs at every
batch on the GPU: one bucketed kernel has one launch flag, so the planner keeps its buckets to
one kind (planner.one_launch_kind)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, max_rel_error, reference

sys.path.insert(0, str(Path(__file__).parents[1] / "schedule"))
from test_schedule import mixed_barrier_log  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

pytestmark = pytest.mark.gpu


def test_mixed_barrier_log_runs_at_every_batch(tmp_path):
    case = LayerCase(op="LSTM", input_size=128, hidden_size=256, dynamic=True, seq_len=20, batch=32,
                     weight_scale=1.0 / 16)
    log = mixed_barrier_log(tmp_path / "t.jsonl", CellSpec("lstm", 128, 256))
    model, _, _ = reference(case)
    compiled = persist_rnn.compile(model, "cuda", tuning_log=log, measure=False)
    for batch in (1, 16, 32, 64):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch}))
        assert max_rel_error(compiled.run(feeds), want) < 1e-4, batch
