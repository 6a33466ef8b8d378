"""FlashRNN's builds before the timed run (`persist_rnn/bench/flashrnn_prebuild.py`, `bench.flashrnn_builds`):
every job runs once, at most `workers` at a time, and a failure is recorded with the end of its
output instead of stopping the others. The builds themselves need torch, flashrnn and a GPU (the
GPU box); here a stand-in command plays the build."""
from __future__ import annotations

import sys

from persist_rnn.bench import suite as bench
from persist_rnn.bench.flashrnn_prebuild import build_command, prebuild


def _stand_in(tmp_path):
    """A build that records its start and end in `tmp_path` and fails for hidden size 13."""
    script = (
        "import os, sys, time\n"
        "job = '-'.join(sys.argv[1:])\n"
        "open(os.path.join(sys.argv[0] + '.d', job + '.start'), 'w').close()\n"
        "running = len([f for f in os.listdir(sys.argv[0] + '.d') if f.endswith('.start')])"
        " - len([f for f in os.listdir(sys.argv[0] + '.d') if f.endswith('.end')])\n"
        "open(os.path.join(sys.argv[0] + '.d', job + '.running%d' % running), 'w').close()\n"
        "time.sleep(0.3)\n"
        "open(os.path.join(sys.argv[0] + '.d', job + '.end'), 'w').close()\n"
        "print('x' * 1000 + ' nvcc failed')\n"
        "sys.exit(1 if sys.argv[2] == '13' else 0)\n")
    path = tmp_path / "build.py"
    path.write_text(script)
    (tmp_path / "build.py.d").mkdir()
    return lambda *job: [sys.executable, str(path), *map(str, job)]


def test_every_build_runs_once_and_a_failure_is_kept(tmp_path):
    jobs = [("LSTM", h, 1, "float16", "cuda") for h in (64, 13, 256, 1024, 128)]
    done = prebuild(jobs, workers=2, command=_stand_in(tmp_path), log=lambda *_: None)
    assert set(done) == set(jobs)
    assert [j for j, r in done.items() if not r["ok"]] == [("LSTM", 13, 1, "float16", "cuda")]
    assert done[("LSTM", 13, 1, "float16", "cuda")]["output"].strip().endswith("nvcc failed")
    assert all(r["output"] == "" for j, r in done.items() if r["ok"])
    marks = [p.name for p in (tmp_path / "build.py.d").iterdir()]
    assert len([m for m in marks if m.endswith(".start")]) == len(jobs)
    assert max(int(m.rsplit("running", 1)[1]) for m in marks if "running" in m) <= 2


def test_a_build_that_hangs_is_killed_and_recorded():
    hang = lambda *job: [sys.executable, "-c", "import time; print('started'); time.sleep(60)"]
    done = prebuild([("LSTM", 64, 1, "float16", "cuda")], command=hang, log=lambda *_: None, timeout_s=1)
    (result,) = done.values()
    assert not result["ok"] and result["s"] < 30 and result["output"].endswith("killed after 1 s")


def test_the_build_command_runs_this_module():
    assert build_command("GRU", 256, 10, "bfloat16", "triton_fused")[1:] == [
        "-m", "persist_rnn.bench.flashrnn_prebuild", "GRU", "256", "10", "bfloat16", "triton_fused"]


def test_the_bench_builds_only_the_16_bit_rows_that_time_flashrnn(monkeypatch):
    """fp32 rows never run FlashRNN; `--flashrnn` layers, when given, are the only ones; no fused GRU."""
    seen = []
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    monkeypatch.setattr("persist_rnn.bench.flashrnn_prebuild.prebuild",
                        lambda jobs, log: seen.extend(jobs) or {j: {"ok": True, "s": 1.0, "output": ""} for j in jobs})
    jobs = [("fp32", "LSTM", 256, 1), ("fp16", "LSTM", 256, 1), ("bf16", "GRU", 64, 10), ("fp16", "GRU", 1024, 1)]
    rows = bench.flashrnn_builds(jobs, (("LSTM", 256, 1), ("GRU", 64, 10)), lambda *_: None)
    assert sorted(seen) == sorted([("LSTM", 256, 1, "float16", b) for b in ("cuda_fused", "cuda", "triton_fused")]
                                  + [("GRU", 64, 10, "bfloat16", b) for b in ("cuda", "triton_fused")])
    assert all(r["ok"] for r in rows) and len(rows) == 5
    assert bench.flashrnn_builds([("fp32", "LSTM", 256, 1)], (), lambda *_: None) == []
