"""Grid-barrier kernels while something else runs on the GPU (issue 18), plain and cooperative launch.

    python benchmarks/contention.py --out results.jsonl

Builds an LSTM layer (H=1024, B=1, T=100: a grid barrier across 128 CTAs) twice, launched plainly
and cooperatively (`PersistentRNN(cooperative=...)`), exports both, then runs each case in a child
process with a time limit, so that a hang costs the limit and nothing more:
- `streams`: two threads, each with its own torch stream, each running the layer 200 times;
- `busy`: the layer 200 times while another process keeps the GPU busy with long matmuls;
- `mps`: two processes under MPS (only if an MPS daemon can be started here; stopped after).
Every output is compared with the layer's serial answer. Then the cost of the cooperative launch:
time per call of both builds, uncaptured and replayed from a CUDA graph, for a few grid layers.
One JSON line per result.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

LIMIT_S = 120  # per case: the barrier's own timeout traps after ~30 s


def _build(hidden, batch, cooperative, path):
    import tvm

    import persist_rnn
    from persist_rnn.frontend import from_onnx
    from persist_rnn.bench.layer_models import LayerCase, make_model

    model, _ = make_model(LayerCase(op="LSTM", hidden_size=hidden, input_size=hidden, batch=batch, seq_len=100,
                                    weight_scale=1.0 / hidden ** 0.5))
    target = persist_rnn.targets.as_target("cuda")
    layers = []
    build = persist_rnn.pipeline(target, report=layers, measure=False, cooperative=cooperative)
    with tvm.transform.PassContext(opt_level=3):
        ex = tvm.compile(from_onnx(model), target=target, relax_pipeline=build)
    compiled = persist_rnn.runtime.CompiledModel(ex, target, layers, persist_rnn.runtime.graph_inputs(model),
                                                 [o.name for o in model.graph.output], [])
    compiled.export_library(path)
    return [r.line() for r in layers]


def _inputs(compiled, seed=0):
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in compiled.inputs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]
        feeds[spec.name] = torch.from_numpy(rng.standard_normal(shape).astype(spec.dtype)).cuda()
    return feeds


def _worker(path, case, calls, start_at=0.0):
    """Child process: run `case` with the library at `path` (from wall-clock time `start_at`, so
    that processes overlap); print one JSON line."""
    import threading

    import torch

    import persist_rnn

    compiled = persist_rnn.load(path)
    feeds = _inputs(compiled)
    want = [o.clone() for o in compiled.run(feeds)]
    torch.cuda.synchronize()
    bad, done = [], []

    def loop(tag):
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream):
                for k in range(calls):
                    outs = compiled.run(feeds)
                    if k % 20 == 19 or k == calls - 1:
                        stream.synchronize()
                        err = max(float((o - w).abs().max()) for o, w in zip(outs, want))
                        if err > 1e-5:
                            bad.append((tag, k, err))
            stream.synchronize()
            done.append(tag)
        except Exception as err:  # a trapped barrier surfaces here
            bad.append((tag, "error", f"{type(err).__name__}: {str(err)[:200]}"))

    time.sleep(max(0.0, start_at - time.time()))
    start = time.perf_counter()
    if case == "streams_unordered":  # what the stream order prevents (persist_rnn.stream_order)
        import contextlib
        persist_rnn.runtime.ordered_after_other_streams = lambda torch, index, handle: contextlib.nullcontext()
    if case.startswith("streams"):
        threads = [threading.Thread(target=loop, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        loop(0)
    print(json.dumps({"threads": 2 if case.startswith("streams") else 1, "threads_done": len(done), "wrong": bad[:5], "seconds": time.perf_counter() - start}))


def _busy(seconds):
    """Child process: long matmuls for `seconds`."""
    import torch

    a = torch.randn(8192, 8192, device="cuda")
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            a = torch.tanh(a @ a * 1e-4)
        torch.cuda.synchronize()


def _child(args, env=None, limit=LIMIT_S):
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, timeout=limit,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "seconds": limit}
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode == 0 and last:
        got = json.loads(last[0])
        ok = got["threads_done"] == got["threads"] and not got["wrong"]
        return {"outcome": "ok" if ok else "wrong", **got}
    tail = (proc.stderr or "").strip().splitlines()[-3:]
    return {"outcome": "error", "rc": proc.returncode, "stderr": tail, "seconds": time.perf_counter() - start}


def _start_mps(env):
    try:
        proc = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cannot start MPS: {err}"
    return None if proc.returncode == 0 else f"cannot start MPS: rc {proc.returncode} {proc.stderr.strip()[:200]}"


def _stop_mps(env):
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, capture_output=True, text=True, timeout=20)


def _cases(libs, emit):
    for name, path in libs.items():
        for case in ("streams", "streams_unordered"):
            emit({"case": case, "launch": name, **_child(["--worker", path, "--case", case, "--calls", "200"])})
        busy = subprocess.Popen([sys.executable, __file__, "--busy", "60"])
        time.sleep(5)
        emit({"case": "busy", "launch": name, **_child(["--worker", path, "--case", "one", "--calls", "200"])})
        busy.kill()
        busy.wait()
    pipe = tempfile.mkdtemp(prefix="mps")
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": pipe}
    why = _start_mps(env)
    if why:
        emit({"case": "mps", "outcome": "skipped", "why": why})
        return
    try:
        for name, path in libs.items():
            start_at = str(time.time() + 20)  # both loaded by then
            procs = [subprocess.Popen([sys.executable, __file__, "--worker", path, "--case", "one", "--calls", "1000",
                                       "--start-at", start_at],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                     for _ in range(2)]
            results = []
            for p in procs:
                try:
                    out, err = p.communicate(timeout=LIMIT_S)
                    results.append(json.loads(out.strip().splitlines()[-1]) if p.returncode == 0 and out.strip()
                                   else {"rc": p.returncode, "stderr": err.strip().splitlines()[-3:]})
                except subprocess.TimeoutExpired:
                    p.kill()
                    results.append({"outcome": "hang"})
            emit({"case": "mps", "launch": name, "processes": results})
    finally:
        _stop_mps(env)


def _cost(emit, layers):
    """Time per call, plain against cooperative, uncaptured and from a CUDA graph."""
    import torch

    import persist_rnn
    from persist_rnn.bench.gpu_timing import cuda_ms

    for hidden, batch in layers:
        row = {"case": "cost", "hidden": hidden, "batch": batch}
        for name in ("plain", "cooperative"):
            path = os.path.join(tempfile.mkdtemp(), f"lstm{hidden}_{batch}_{name}.so")
            row[f"{name}_layers"] = _build(hidden, batch, name == "cooperative", path)
            compiled = persist_rnn.load(path)
            feeds = _inputs(compiled)
            run = lambda: compiled.run(feeds)
            for _ in range(20):
                run()
            torch.cuda.synchronize()
            row[f"{name}_us"] = cuda_ms(run, calls=20) * 1000
            stream = torch.cuda.Stream()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.stream(stream):
                    run()
                    stream.synchronize()
                    with torch.cuda.graph(graph, stream=stream):
                        run()
                row[f"{name}_graph_us"] = cuda_ms(graph.replay, calls=20) * 1000
            except Exception as err:  # capture unsupported: say so
                row[f"{name}_graph_us"] = f"{type(err).__name__}: {str(err)[:160]}"
        emit(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="contention.jsonl")
    ap.add_argument("--worker")
    ap.add_argument("--case", default="one")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--busy", type=float)
    ap.add_argument("--start-at", type=float, default=0.0)
    ap.add_argument("--skip-cost", action="store_true")
    args = ap.parse_args()
    if args.busy:
        return _busy(args.busy)
    if args.worker:
        return _worker(args.worker, args.case, args.calls, args.start_at)
    out = open(args.out, "a")

    def emit(row):
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()

    work = tempfile.mkdtemp()
    libs = {}
    for name in ("cooperative", "plain"):
        libs[name] = os.path.join(work, f"lstm1024_{name}.so")
        emit({"case": "build", "launch": name, "layers": _build(1024, 1, name == "cooperative", libs[name])})
    _cases(libs, emit)
    if not args.skip_cost:
        _cost(emit, [(512, 1), (1024, 1), (1024, 20)])


if __name__ == "__main__":
    main()
