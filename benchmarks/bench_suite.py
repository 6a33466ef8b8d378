"""The benchmark suite: persist_rnn against cuDNN (eager / CUDA graph, TF32 on and off), ONNX
Runtime on the CPU, and TVM without persist_rnn (the unrolled lowering), on GRNN's grid, a batch
sweep, a sequence-length sweep and the two real models of the GRNN paper.

Runs on a CUDA machine with torch; writes one JSON line per measurement, and `report.py` turns
them into CSV, a markdown table and PNG plots (it needs matplotlib, which the GPU box lacks).
Missing baselines are skipped with a message, never faked.

    python benchmarks/bench_suite.py --out results.jsonl [--parts grid batch seq models] [--tuning-log LOG]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_layer import cuda_ms, cudnn_ms, onnx_from_torch, torch_layer  # noqa: E402

import persist_rnn  # noqa: E402


def _ours(compiled, feeds):
    import tvm
    from tvm import relax

    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(compiled.executable, dev)
    args = [tvm.runtime.tensor(feeds[i.name], dev) for i in compiled.inputs]
    return cuda_ms(lambda: vm["main"](*args))


def _ort_ms(model, feeds, repeats=5):
    try:
        import onnxruntime as ort
    except ImportError:
        print("skip: onnxruntime not installed", flush=True)
        return None
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as err:  # an ONNX Runtime too old for the model: skip, do not fake
        print(f"skip: ONNX Runtime cannot load the model ({str(err)[:120]})", flush=True)
        return None
    sess.run(None, feeds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def layer_row(op, hidden, batch, seq_len, tuning_log, unrolled):
    import torch

    layer = torch_layer(op, hidden, seed=hidden + batch)
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    model = onnx_from_torch(op, layer, seq_len, batch)
    feeds = {"X": x.cpu().numpy()}
    row = {"part": "layer", "cell": op, "hidden": hidden, "batch": batch, "seq_len": seq_len}
    compiled = persist_rnn.compile(model, "cuda", tuning_log=tuning_log)
    row["ours_ms"] = _ours(compiled, feeds)
    row["config"] = compiled.report()[0].config
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        eager, graph = cudnn_ms(layer, x)
        key = "tf32" if tf32 else "fp32"
        row[f"cudnn_{key}_eager_ms"], row[f"cudnn_{key}_graph_ms"] = eager, graph
    torch.backends.cudnn.allow_tf32 = True
    row["ort_cpu_ms"] = _ort_ms(model, feeds)
    if unrolled:
        t0 = time.perf_counter()
        row["tvm_unrolled_ms"] = _ours(persist_rnn.compile(model, "cuda", unroll=True), feeds)
        row["tvm_unrolled_compile_s"] = time.perf_counter() - t0
    return row


def model_rows(name, batches, tuning_log):
    """A real model end to end (examples/), latency against batch: ours vs ONNX Runtime CPU."""
    import onnx

    path = os.path.join(os.path.dirname(__file__), "..", "examples", f"{name}.onnx")
    base = dict(np.load(path.replace(".onnx", "_inputs.npz")))
    (key, arr), = base.items()
    rows = []
    for batch in batches:
        feeds = {key: np.ascontiguousarray(np.repeat(arr[:, :1], batch, axis=1))}
        model = onnx.load(path)
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = batch  # a static batch per build
        compiled = persist_rnn.compile(model, "cuda", tuning_log=tuning_log)
        rows.append({"part": "model", "model": name, "batch": batch, "seq_len": arr.shape[0],
                     "ours_ms": _ours(compiled, feeds), "ort_cpu_ms": _ort_ms(model, feeds),
                     "lowerings": [r.lowering for r in compiled.report()]})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", nargs="+", default=["grid", "batch", "seq", "models"])
    ap.add_argument("--tuning-log", default=None)
    ap.add_argument("--unrolled", nargs="*", type=int, default=[256],
                    help="hidden sizes (of the grid, B=1 and 10) that also get the unrolled TVM baseline")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("skip: torch is not installed; the cuDNN baselines need it")
    if not torch.cuda.is_available():
        sys.exit("skip: no CUDA GPU; nothing to measure")
    import tvm

    meta = {"part": "meta", "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "tvm": tvm.__version__,
            "python": platform.python_version(),
            "driver": os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip()}
    jobs = []
    if "grid" in args.parts:
        jobs += [(op, h, b, 100, h in args.unrolled and b in (1, 10)) for op in ("LSTM", "GRU")
                 for h in (64, 256, 1024) for b in (1, 10, 20)]
    if "batch" in args.parts:
        jobs += [("LSTM", 256, b, 100, False) for b in (2, 4, 8, 32, 64)]
    if "seq" in args.parts:
        jobs += [("LSTM", 256, 10, t, False) for t in (10, 50, 200, 400)]
    with open(args.out, "a") as f:
        f.write(json.dumps(meta) + "\n")
        for op, h, b, t, unrolled in jobs:
            row = layer_row(op, h, b, t, args.tuning_log, unrolled)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)
        if "models" in args.parts:
            for name, batches in (("char_rnn", (1, 16, 64)), ("text_classifier", (1, 8, 64))):
                for row in model_rows(name, batches, args.tuning_log):
                    f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
