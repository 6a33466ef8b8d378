"""`benchmarks/regret_offgrid.py`: the sample of a layer's space it times (the measure-off pick,
the model's best ten, configs drawn from the rest, half of them tensor-core configs), and the
regret report it makes of the timings. Timing the sample needs the GPU box."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from regret_offgrid import report, sampled  # noqa: E402

from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import _ranked, choose
from persist_rnn.targets import as_target
from tir_templates.spec import CellSpec


def test_the_sample_holds_the_pick_the_models_best_and_drawn_tensor_core_configs():
    spec, gpu = CellSpec("lstm", 768, 768, dtype="float16"), gpu_model("sm_90")
    pick, configs = sampled(spec, gpu, 32, "fp32", top=10, spread=30)
    assert pick == choose(spec, as_target("cuda"), 32, measure=False, precision="fp32").config
    chosen = [c for c, _, _ in configs]
    assert chosen[0] == pick and len(chosen) == len(set(chosen))
    ranked = [c for _, c in _ranked(spec, gpu, 32, False, "fp32")[1]]
    assert ranked[:10] == [c for c in chosen if c in ranked[:10]] and set(ranked[:10]) <= set(chosen)
    drawn = [c for c in chosen if c != pick and c not in ranked[:10]]
    assert len(drawn) == 30 and sum(c.tensor_cores() for c in drawn) == 15
    ranks = {c: r for c, r, _ in configs}
    assert all(ranks[c] >= 10 for c in drawn)


def test_the_sample_with_shared_adds_the_best_shared_fragments_configs_beside_and_their_fullest():
    """`--shared K`: the model's best K configs of `space.shared_fragment_fits` that its space
    lacks, priced but unranked, and each one's variant with as many k-tiles in shared memory as
    it holds (LSTM H=1280 B=32 fp16, whose own pick is such a config)."""
    from persist_rnn.schedule.space import fullest_shared_fragments, shared_fragment_fits

    spec, gpu = CellSpec("lstm", 1280, 1280, dtype="float16"), gpu_model("sm_90")
    _, plain = sampled(spec, gpu, 32, "fp32", top=4, spread=4)
    _, configs = sampled(spec, gpu, 32, "fp32", top=4, spread=4, shared=2)
    added = [(c, r, p) for c, r, p in configs if c not in {c for c, _, _ in plain}]
    beside = set(shared_fragment_fits(spec, gpu, 32, "fp32"))
    priced = [c for c, r, p in added if c in beside and r is None and p is not None]
    assert len(priced) >= 1 and all(c.smem_runs for c, _, _ in added)
    fullest = {fullest_shared_fragments(spec, c, gpu) for c in priced} - {None}
    assert fullest <= {c for c, _, _ in configs}


def test_the_report_counts_each_layers_regret_against_its_fastest_timed_config(tmp_path):
    def row(hidden, rank, us, pick=False):
        return {"cell": "LSTM", "hidden": hidden, "batch": 8, "precision": "fp16", "pick": pick, "model_rank": rank,
                "predicted_us": 1.0 + rank, "tensor_cores": False, "measured_us": us}
    rows = [row(64, 0, 2.0, pick=True), row(64, 1, 1.6), row(64, 2, 3.0),  # the pick 1.25x the model's 2nd
            row(96, 0, 1.0, pick=True), row(96, 1, 1.1), row(96, 2, 1.2)]  # the pick is the fastest
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [{"cell": "LSTM", "error": "build failed"}]))
    text = report([str(path)])
    assert "| LSTM H=64 B=8 | fp16 | 3 | 2.00 | 1.60 | 1.250x | model's #2 (FMA units) | 0.50 |" in text
    assert "| LSTM H=96 B=8 | fp16 | 3 | 1.00 | 1.00 | 1.000x | the pick (FMA units) | 1.00 |" in text
    assert "within 1.15x of the best timed config on 1 of 2" in text and "worst 1.250x" in text
