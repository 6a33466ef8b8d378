"""The `persist-rnn` command line, through click's test runner."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from persist_rnn.cli import main
from persist_rnn.schedule.gpu import gpu_model, present_device, user_calibration_dir

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def _run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_compile_for_cuda_writes_library_and_report(tmp_path):
    out = str(tmp_path / "m.so")
    res = _run("compile", f"{FIX}/torch_gru_batch_first.onnx", "-o", out, "--target", "cuda")
    assert res.exit_code == 0, res.output
    assert "/GRU: GRU input 10 hidden 12, 1 direction: persistent" in res.output
    assert os.path.getsize(out) > 0 and os.path.exists(out + ".json")


def test_run_check_against_onnxruntime(tmp_path):
    saved = str(tmp_path / "out.npz")
    res = _run("run", f"{FIX}/torch_rnn_relu.onnx", "--inputs", f"{FIX}/torch_rnn_relu.npz", "--check", "--save", saved)
    assert res.exit_code == 0, res.output
    assert "max error vs ONNX Runtime" in res.output
    err = float(res.output.split("output scale): ")[1].split()[0])
    assert err <= 1e-4 and set(np.load(saved)) == {"y", "h"}


def test_inspect_lines():
    res = _run("inspect", f"{FIX}/torch_classifier.onnx")
    assert res.exit_code == 0
    lines = [l for l in res.output.splitlines() if l.strip() and not l.startswith(("note: ", "  B"))]
    assert len(lines) == 2 and lines[0].startswith("/lstm/LSTM: LSTM input 12 hidden 16")
    # the batch is symbolic: a config per batch bucket, from B 1 up to an open-ended last bucket
    buckets = [l for l in res.output.splitlines() if l.startswith("  B")]
    assert "batch buckets" in lines[0] and buckets[0].startswith("  B 1") and "B >= " in res.output
    assert "note: onnxslim folded the graph" in res.output  # the front door says what it did
    res = _run("inspect", f"{FIX}/torch_classifier.onnx", "--target", "llvm")
    assert "1 direction: reference, layer 2 of 2 stacked (target llvm: the persistent kernel is CUDA only)" in res.output


def test_bad_input_is_a_clean_error(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, wrong=np.zeros(3, "float32"))
    res = _run("run", f"{FIX}/torch_rnn_relu.onnx", "--inputs", str(bad))
    assert res.exit_code == 2 and "unknown ['wrong'], missing ['x']" in res.output


def test_log_list_and_merge(tmp_path):
    log = str(tmp_path / "a.jsonl")
    assert _run("compile", f"{FIX}/torch_rnn_relu.onnx", "-o", str(tmp_path / "m.so"), "--tuning-log", log).exit_code == 0
    res = _run("log", "list", log)
    from persist_rnn.schedule.cost_model import MODEL_VERSION

    # compile times its top 5 on a GPU; an unmeasured pick names the model's version
    source = "[measured]" if present_device() is not None else f"[cost_model v{MODEL_VERSION}]"
    assert "rnn I=10 H=8" in res.output and source in res.output and "precision=" not in res.output
    assert _run("compile", f"{FIX}/torch_rnn_relu.onnx", "-o", str(tmp_path / "m.so"), "--tuning-log", log,
                "--precision", "tf32").exit_code == 0
    assert "float32 precision=tf32 sm_90" in _run("log", "list", log).output  # a record of its own
    # a symbolic batch's last bucket: its own record beside a static build's of the same batch
    from persist_rnn.schedule import tuning_log

    static = tuning_log.read(log)[0]
    wl = {**static.workload, "open_ended": True}
    tuning_log.append(log, tuning_log.Record(wl, static.config, None, "cost_model"))
    assert f"B={wl['batch']} (last bucket: every larger batch too)" in _run("log", "list", log).output
    res = _run("log", "merge", log, log, "-o", str(tmp_path / "m.jsonl"))
    assert "3 workloads" in res.output  # the fp32 build's, the tf32 build's and the last bucket's, each once


def test_log_list_says_which_records_were_timed_cold():
    shipped = os.path.join(os.path.dirname(__file__), "..", "docs", "data", "tune-h100.jsonl")
    lines = _run("log", "list", shipped).output.splitlines()
    cold = [line for line in lines if "(cold: L2 flushed before each launch)" in line]
    assert cold and all("lstm I=1024 H=1024" in line and "D=1 float32" in line for line in cold)  # fp32 LSTM H=1024 only


NO_GPU = pytest.mark.skipif(present_device() is not None, reason="with a GPU, bench runs the benchmark itself")


@NO_GPU
def test_bench_without_gpu_skips_with_a_message(tmp_path):
    res = _run("bench", "--out", str(tmp_path / "r.jsonl"), "--parts", "grid")
    assert res.exit_code == 0 and res.output.startswith("skip:")


def test_bench_layer_filter_is_checked(tmp_path):
    res = _run("bench", "--out", str(tmp_path / "r.jsonl"), "--layer", "LSTM:256")
    assert res.exit_code == 2 and "expected CELL:HIDDEN:BATCH" in res.output


@NO_GPU
def test_bench_takes_a_layer_in_the_right_form(tmp_path):
    res = _run("bench", "--out", str(tmp_path / "r.jsonl"), "--layer", "gru:1024:20", "--parts", "grid")
    assert res.exit_code == 0


SWEEPS = [os.path.join(os.path.dirname(__file__), "..", "docs", "data", f"sweep-h100-{c}.jsonl") for c in ("lstm", "gru")]


def test_calibrate_from_recorded_sweeps_fits_the_features_and_the_user_file_wins(tmp_path, monkeypatch):
    """calibrate writes the weights `fit_weights` fits to the committed H100 sweeps (the
    tensor-core terms apart: validated on the H100's side-by-side sweep, which a calibration of
    another GPU has not had, so its compiles keep to FMA-unit configs without measurements), and a
    calibration in the user directory is what gpu_model then reads. The shipped sm_90 weights are
    that fit with MODEL_VERSION 4's features: refitted with version 5's they moved six more picks,
    five slower on the H200 (its provenance; docs/data/scheduler-warps-h200.jsonl, run C)."""
    from persist_rnn.schedule.cost_model import MMA_FEATURES, prices_tensor_cores
    from persist_rnn.schedule.fit import fit_weights

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    shipped = gpu_model("sm_90")
    assert "MODEL_VERSION 4's features" in shipped.provenance
    res = _run("calibrate", *SWEEPS)
    assert res.exit_code == 0, res.output
    assert "on these 2709 configs: top-1 mean 1.028x" in res.output
    written = json.load(open(os.path.join(user_calibration_dir(), "sm_90.json")))
    rows = [json.loads(line) for p in SWEEPS for line in open(p) if line.strip()]
    assert written["weights"] == pytest.approx(fit_weights([r for r in rows if "measured_us" in r], shipped), rel=1e-6)
    base = {k: v for k, v in shipped.weights.items() if k not in MMA_FEATURES}
    assert written["weights"]["fma_issue"] == pytest.approx(base["fma_issue"], rel=0.01)
    assert prices_tensor_cores(shipped) and not prices_tensor_cores(gpu_model("sm_90"))
    assert written["num_sms"] == 132 and "sweep-h100-gru.jsonl" in written["provenance"]
    written["weights"]["chunks"] = 1.0  # now the user's file differs from the shipped one, and wins
    json.dump(written, open(os.path.join(user_calibration_dir(), "sm_90.json"), "w"))
    assert gpu_model("sm_90").weights["chunks"] == 1.0


def test_calibrate_errors(tmp_path):
    if present_device() is None:  # on a GPU this would measure it
        res = _run("calibrate", "--out", str(tmp_path))
        assert res.exit_code == 2 and "calibrate needs a CUDA GPU" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"cell": "lstm", "hidden": 64, "batch": 1, "config": {}, "measured_us": 2.0}\n{"cell": "lstm"}\n')
    res = _run("calibrate", str(bad), "--out", str(tmp_path))
    assert res.exit_code == 2 and "bad.jsonl:2: not a sweep row" in res.output


def test_pins_on_the_command_line(tmp_path):
    """--shape and --const: the pinned input leaves the model's inputs, --check feeds ORT its value."""
    model, inputs = "tests/fixtures/real/silero_vad_16k_op15.onnx", tmp_path / "vad.npz"
    rng = np.random.default_rng(0)
    np.savez(inputs, input=(rng.standard_normal((1, 512)) * 0.1).astype("float32"),
             state=np.zeros((2, 1, 128), "float32"), sr=np.array(16000))
    pins = ["--shape", "input=1,512", "--shape", "state=2,1,128", "--const", "sr=16000"]
    res = _run("run", model, "--inputs", str(inputs), "--check", "--target", "llvm", *pins)
    assert res.exit_code == 0, res.output
    assert "note: input 'sr' pinned to the constant 16000" in res.output
    assert float(res.output.split("output scale): ")[1].split()[0]) <= 1e-4
    res = _run("inspect", model, *pins)
    assert res.exit_code == 0 and "LSTM input 128 hidden 128, 1 direction: persistent" in res.output
    res = _run("inspect", model, "--const", "sr")
    assert res.exit_code != 0 and "expected NAME=VALUES" in res.output


def test_run_check_holds_each_precision_to_its_bound():
    res = _run("run", f"{FIX}/torch_rnn_relu.onnx", "--inputs", f"{FIX}/torch_rnn_relu.npz", "--check",
               "--target", "llvm", "--precision", "tf32")
    assert res.exit_code == 0, res.output
    assert "(bound at tf32: 0.002)" in res.output
    res = CliRunner().invoke(main, ["run", f"{FIX}/torch_rnn_relu.onnx", "--inputs", f"{FIX}/torch_rnn_relu.npz",
                                    "--precision", "fp16"])
    assert res.exit_code == 2 and "'fp16' is not one of 'fp32', 'tf32'" in res.output


def test_bench_precisions_are_checked_and_reported(tmp_path):
    """--precision takes fp32, tf32, fp16 and bf16, and names the choices for anything else; the
    report makes one table per precision with the floors' numbers."""
    res = _run("bench", "--out", str(tmp_path / "r.jsonl"), "--precision", "fp32,fp64")
    assert res.exit_code == 2 and "fp64: choose from fp32, tf32, fp16, bf16" in res.output
    res = _run("bench", "--out", str(tmp_path / "r.jsonl"), "--precision", "tf32,fp16,bf16")
    assert res.exit_code == 0 and res.output.startswith("skip:")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from report import precision_lines

    row = dict(precision="tf32", cell="GRU", hidden=1024, batch=1, ours_ms=0.2, ours_err=1e-4, torch_graph_ms=0.6,
               best_cudnn_ms=0.1, best_cudnn="PERSIST_DYNAMIC", best_cudnn_over_ours=0.5, torch_graph_over_ours=3.0,
               floor_ms=0.05, ours_over_floor=4.0)
    text = "\n".join(precision_lines([row, {**row, "batch": 20, "best_cudnn_over_ours": 2.0}]))
    assert "## tf32" in text and "slower than it: GRU H=1024 B=1 (0.50x)" in text and "1.00x against the best" in text
    assert "more than 3x the floor: GRU H=1024 B=1 (4.0x), GRU H=1024 B=20 (4.0x)" in text


def test_run_loads_a_compiled_library_and_checks_it(tmp_path):
    """`run LIB.so` loads what `compile` wrote (no second compile) and --check finds the ONNX file
    it was compiled from; options that choose how to compile are refused by name."""
    lib = str(tmp_path / "m.so")
    assert _run("compile", f"{FIX}/torch_rnn_relu.onnx", "-o", lib, "--target", "llvm").exit_code == 0
    res = _run("run", lib, "--inputs", f"{FIX}/torch_rnn_relu.npz", "--check")
    assert res.exit_code == 0, res.output
    assert f"running {lib} (llvm)" in res.output
    assert float(res.output.split("output scale): ")[1].split()[0]) <= 1e-4
    res = _run("run", lib, "--inputs", f"{FIX}/torch_rnn_relu.npz", "--precision", "tf32", "--target", "llvm")
    assert res.exit_code == 2 and "--target, --precision: these choose how an ONNX model is compiled" in res.output


def test_run_check_of_a_library_wants_its_onnx_unchanged(tmp_path):
    """A library whose ONNX file moved or changed is checked only against a --reference."""
    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(open(f"{FIX}/torch_rnn_relu.onnx", "rb").read())
    lib = str(tmp_path / "m.so")
    assert _run("compile", str(onnx_path), "-o", lib, "--target", "llvm").exit_code == 0
    onnx_path.write_bytes(onnx_path.read_bytes() + b"\0")  # same graph, other bytes
    res = _run("run", lib, "--inputs", f"{FIX}/torch_rnn_relu.npz", "--check")
    assert res.exit_code == 2 and "has changed since" in res.output
    res = _run("run", lib, "--inputs", f"{FIX}/torch_rnn_relu.npz", "--check", "--reference", f"{FIX}/torch_rnn_relu.onnx")
    assert res.exit_code == 0 and "max error vs ONNX Runtime" in res.output
    res = _run("run", f"{FIX}/torch_rnn_relu.onnx", "--inputs", f"{FIX}/torch_rnn_relu.npz", "--reference", str(onnx_path))
    assert res.exit_code == 2 and "--reference goes with a compiled MODEL" in res.output


@pytest.mark.skipif(present_device() is not None, reason="the refusal is for a machine without a CUDA GPU")
def test_run_refuses_a_cuda_library_without_a_gpu(tmp_path):
    lib = str(tmp_path / "m.so")
    assert _run("compile", f"{FIX}/torch_rnn_relu.onnx", "-o", lib, "--target", "cuda").exit_code == 0
    res = _run("run", lib, "--inputs", f"{FIX}/torch_rnn_relu.npz")
    assert res.exit_code == 2 and "was compiled for cuda and there is no CUDA GPU here" in res.output


def test_cuda_targets_carry_the_shared_memory_limit():
    """TVM's GPU schedules warn for each kernel of a CUDA target without max_shared_memory_per_block
    and take 49152 bytes; every CUDA target persist_rnn builds for states that value."""
    from persist_rnn.targets import CUDA_SHARED_BYTES_PER_BLOCK, as_target

    for target in ("cuda", {"kind": "cuda", "arch": "sm_80"}, '{"kind": "cuda", "arch": "sm_90"}'):
        assert int(as_target(target).attrs["max_shared_memory_per_block"]) == CUDA_SHARED_BYTES_PER_BLOCK == 49152
    assert int(as_target({"kind": "cuda", "arch": "sm_90", "max_shared_memory_per_block": 1000})
               .attrs["max_shared_memory_per_block"]) == 1000
    assert "max_shared_memory_per_block" not in as_target("llvm").attrs
