"""What deployments do to a compiled model and its tuning log (CPU side; docs/reliability.md):
calls from many threads at once, two processes tuning into one log, a log that cannot be written."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import tvm

import persist_rnn
from persist_rnn import compile as compile_model
from persist_rnn.schedule import tuning_log
from persist_rnn.schedule.planner import plan_layer
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error
from tir_templates.spec import CellSpec


def test_eight_threads_each_get_their_own_answer():
    model, feeds = make_model(LayerCase(op="LSTM", hidden_size=16, input_size=8, batch=2, seq_len=12))
    compiled = compile_model(model, "llvm")
    rng = np.random.default_rng(0)
    inputs = [{**feeds, "X": rng.standard_normal(feeds["X"].shape).astype("float32")} for _ in range(8)]
    want = [compiled.run(x) for x in inputs]  # serially first
    errors, barrier = [], threading.Barrier(8)

    def worker(k):
        barrier.wait()
        for _ in range(20):
            err = max_rel_error(compiled.run(inputs[k]), want[k])
            if err > 1e-6:
                errors.append((k, err))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


APPENDER = '''
import sys
from persist_rnn.schedule import tuning_log
from tir_templates.config import Config
from tir_templates.spec import CellSpec
path, first = sys.argv[1], int(sys.argv[2])
for b in range(first, first + 50):
    wl = tuning_log.workload(CellSpec("lstm", 16, 32), b, "sm_90")
    tuning_log.append(path, tuning_log.Record(wl, Config(32, 4, 8, 1), 1.0 + b, "measured"))
'''


def test_two_processes_tuning_into_one_log_lose_nothing(tmp_path):
    log = tmp_path / "tune.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(log), str(first)]) for first in (0, 1000)]
    assert [p.wait() for p in procs] == [0, 0]
    records = tuning_log.read(str(log))  # every line parses
    assert sorted(r.workload["batch"] for r in records) == list(range(50)) + list(range(1000, 1050))


def test_a_log_that_cannot_be_written_warns_and_the_compile_goes_on(tmp_path):
    unwritable = tmp_path / "a_directory"  # open(..., "a") fails with an OSError, also for root
    unwritable.mkdir()
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    with pytest.warns(UserWarning, match="cannot be written"):
        plan = plan_layer(CellSpec("lstm", 16, 32), cuda, batch=4, tuning_log_path=str(unwritable), measure=False)
    assert plan.kernel is not None and plan.source == "cost_model"


@pytest.mark.parametrize("name", ["T=1", "T=20000", "B=4096", "lengths-all-zero", "B=0"])
def test_sizes_at_the_edges_on_cpu(name, size_model_llvm):
    """Each edge size through one compiled model (symbolic T and B) matches ONNX Runtime; B=0,
    which aborts ONNX Runtime's process, gives empty outputs."""
    from persist_rnn.bench.size_cases import empty_outputs, size_feeds
    from persist_rnn.bench.layer_models import ort_run

    model, compiled = size_model_llvm
    feeds = size_feeds(name)
    got = compiled.run(feeds)
    want = empty_outputs(feeds) if name == "B=0" else ort_run(model, feeds)
    assert max_rel_error(got, want) <= 1e-4


@pytest.fixture(scope="module")
def size_model_llvm():
    from persist_rnn.bench.size_cases import size_model

    model = size_model()
    return model, compile_model(model, "llvm")


def test_hidden_sizes_past_the_chip_run_persistent_or_a_scan_with_the_reason():
    """What the H100 cannot hold on chip never gets the reference scan's CTA per batch row: fp32
    LSTM H=2048 (forward and bidirectional), GRU H=4096 and fp16 LSTM H=4096 run the persistent
    kernel reading what does not fit from global memory each step; where no config fits even so
    (fp32 LSTM H=4096 at B=64: every config's threads or registers overflow) the layer runs the
    GEMM scan (a tensor-core GEMM and an update a step), and where that cannot run it either (GRU
    with linear_before_reset=0: two GEMMs a step) the streamed scan (a kernel a step, weights from
    L2/HBM), with the reason; a small layer no config takes keeps the reference."""
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    for op, hidden, direction, dtype in (("LSTM", 2048, "forward", "float32"), ("LSTM", 2048, "bidirectional", "float32"),
                                         ("GRU", 4096, "forward", "float32"), ("LSTM", 4096, "forward", "float16")):
        model, _ = make_model(LayerCase(op=op, hidden_size=hidden, input_size=16, batch=1, seq_len=3,
                                        direction=direction, dtype=dtype))
        [layer] = compile_model(model, cuda, measure=False).report()
        assert layer.lowering == "persistent" and layer.config["global_runs"] > 0, layer.line()
        assert "part of its weights read from global memory each step" in layer.line()
    model, _ = make_model(LayerCase(op="LSTM", hidden_size=4096, input_size=16, batch=64, seq_len=3))
    [layer] = compile_model(model, cuda, measure=False).report()
    assert layer.lowering == "gemm_scan" and "no persistent config fits" in layer.reason, layer.line()
    assert "a tensor-core GEMM and an update a step" in layer.line()
    model, _ = make_model(LayerCase(op="GRU", hidden_size=4096, input_size=16, batch=64, seq_len=3,
                                    linear_before_reset=0))
    [layer] = compile_model(model, cuda, measure=False).report()
    assert layer.lowering == "streamed" and "no persistent config fits" in layer.reason, layer.line()
    assert "a kernel a step" in layer.line()
    model, _ = make_model(LayerCase(op="RNN", hidden_size=7, input_size=3))
    assert compile_model(model, cuda, measure=False).report()[0].lowering == "reference"


def test_a_streamed_layer_in_a_stack_says_why_it_runs_its_own_kernel():
    from persist_rnn.report import LayerReport

    layer = LayerReport("lstm1", "lstm", 2048, 2048, 1, "streamed", reason="a kernel a step",
                        stack=["lstm0", "lstm1"], stack_reason="no wavefront config fits")
    assert "layer 2 of 2 stacked (own kernel: no wavefront config fits)" in layer.line()


def test_token_ids_outside_the_embedding_are_refused_naming_the_gather():
    """TVM's take runs in "fast" mode: an id past the table read past it (ONNX Runtime refuses)."""
    import os

    path = os.path.join(os.path.dirname(__file__), "fixtures", "corpus", "bilstm_tagger_torchscript.onnx")
    compiled = persist_rnn.compile(path, "llvm")
    good = np.array([[1, 499, -500, 7]], "int64")
    compiled.run({"tokens": good})
    for bad in (500, -501):
        tokens = good.copy()
        tokens[0, 2] = bad
        with pytest.raises(persist_rnn.PersistRNNError, match=rf"Gather.*'tokens' holds \[{bad}\].*500 rows"):
            compiled.run({"tokens": tokens})


def test_checks_survive_export_and_load(tmp_path):
    import os

    path = os.path.join(os.path.dirname(__file__), "fixtures", "corpus", "bilstm_tagger_torchscript.onnx")
    compiled = persist_rnn.compile(path, "llvm")
    compiled.export_library(str(tmp_path / "tagger.so"))
    loaded = persist_rnn.load(str(tmp_path / "tagger.so"))
    with pytest.raises(persist_rnn.PersistRNNError, match="outside"):
        loaded.run({"tokens": np.array([[1, 2, 600]], "int64")})
