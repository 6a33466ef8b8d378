"""Where a shipped example (symbolic batch) loses time against its static build, and how both
stand against the same model in torch (cuDNN fp32, CUDA graph): per (model, batch, build) the
call's time (CUDA events, back to back), the host's time to issue one call on an idle GPU, the
GPU's busy time (sum of the call's kernels, CUPTI trace) and the kernel count. A call whose
host time exceeds its GPU time is host-bound, and only fewer launches or host steps help it.
Builds: `static` (built for that batch, its layers measured and logged), `shipped` (symbolic
batch, bucket configs from the cost model: a plain compile) and `shipped_tuned` (built with the
static builds' tuning log, what `persist-rnn tune --batches` gives; issue 16's floor). The three
builds' call times are taken in turn (`interleaved_ms`).

    python benchmarks/shipped_gap.py --out gap.jsonl [--models text_classifier] [--batches 1,8]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import interleaved_ms, kernel_trace, vm_call  # noqa: E402
from persist_rnn.bench.suite import inputs_at_batch
from persist_rnn.bench.torch_layers import cudnn_ms

from dynamic_batch import BATCHES  # noqa: E402  (beside this file)

TRACE_CALLS = 10


def host_us(call, sync, repeats=200) -> float:
    """Median host microseconds to issue one call with the GPU idle (synchronised before each)."""
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    sync()
    return float(np.median(times) * 1e6)


def torch_graph_ms(name: str, feeds: dict) -> float:
    """The example's torch module (export_examples.py; random weights of the same shapes) on the
    same inputs, captured in a CUDA graph and replayed."""
    import torch
    import export_examples as ex

    module = {"char_rnn": ex.CharRNN, "text_classifier": ex.TextClassifier, "speech_gru": ex.SpeechGRU}[name]()
    x = torch.from_numpy(next(iter(feeds.values()))).cuda()
    return cudnn_ms(module.cuda().eval(), x)[1]  # (eager, graph): the graph's


def per_call_kernels(events: list[dict]) -> list[list]:
    """[name, gap before it (µs), duration (µs)] of one call's kernels, in order."""
    out, end = [], None
    for e in events:
        out.append([e["name"][:48], round(e["ts"] - end, 2) if end is not None else None, round(e["dur"], 2)])
        end = e["ts"] + e["dur"]
    return out


def build_row(call, ms, sync) -> dict:
    import torch

    kernels = kernel_trace(call, TRACE_CALLS, torch.cuda.synchronize)
    per_call = kernels[-(len(kernels) // TRACE_CALLS):]
    return {"ms": ms, "host_us": host_us(call, sync), "gpu_busy_us": sum(k["dur"] for k in per_call),
            "kernels": len(per_call), "trace": per_call_kernels(per_call)}


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="char_rnn,speech_gru,text_classifier")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--tuning-log")
    args = ap.parse_args()
    for name in args.models.split(","):
        path, npz = f"examples/{name}.onnx", f"examples/{name}_inputs.npz"
        log = args.tuning_log or os.path.join(tempfile.mkdtemp(), f"{name}.jsonl")
        shipped = persist_rnn.compile(path, "cuda")
        feeds = {int(b): inputs_at_batch(shipped, npz, int(b)) for b in args.batches.split(",")}
        static = {b: persist_rnn.compile(path, "cuda", shapes={k: v.shape for k, v in f.items()}, tuning_log=log)
                  for b, f in feeds.items()}
        tuned = persist_rnn.compile(path, "cuda", tuning_log=log)
        for b, f in feeds.items():
            builds = {"shipped": shipped, "shipped_tuned": tuned, "static": static[b]}
            calls = {build: vm_call(model, f) for build, model in builds.items()}
            ms = interleaved_ms(calls)
            row = {"model": name, "batch": b, "torch_graph_ms": torch_graph_ms(name, f)}
            row |= {build: build_row(calls[build], ms[build], torch.cuda.synchronize) for build in builds}
            for build in ("shipped", "shipped_tuned"):
                row[f"{build}_over_static"] = row[build]["ms"] / row["static"]["ms"]
                row[f"torch_over_{build}"] = row["torch_graph_ms"] / row[build]["ms"]
            with open(args.out, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if not isinstance(v, dict)}
                             | {f"{b}_{k}": round(row[b][k], 4) for b in builds
                                for k in ("ms", "host_us", "gpu_busy_us", "kernels")}), flush=True)


if __name__ == "__main__":
    main()
