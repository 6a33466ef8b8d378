"""Where an example's call goes, as shipped (symbolic batch) and built for one batch: every CUDA
kernel of one VM call (CUPTI trace through torch's profiler), its duration and the gap before it.

    python benchmarks/model_kernels.py --model speech_gru --batch 4

One JSON line per build: `ms` (CUDA events, per call), `kernels` ([name, gap_us, dur_us] in order).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import cuda_ms, kernel_trace, vm_call
from persist_rnn.bench.suite import inputs_at_batch


CALLS = 20


def per_call(events: list[dict]) -> list[list]:
    """The kernels of the last call of the trace: [name, gap before it (µs), duration (µs)]."""
    n = len(events) // CALLS
    last = events[-n:]
    out, end = [], None
    for e in last:
        out.append([e["name"][:60], round(e["ts"] - end, 2) if end is not None else None, round(e["dur"], 2)])
        end = e["ts"] + e["dur"]
    return out


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="speech_gru")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tuning-log")
    args = ap.parse_args()
    path, npz = f"examples/{args.model}.onnx", f"examples/{args.model}_inputs.npz"
    shipped = persist_rnn.compile(path, "cuda", tuning_log=args.tuning_log, measure=False)
    feeds = inputs_at_batch(shipped, npz, args.batch)
    static = persist_rnn.compile(path, "cuda", shapes={k: v.shape for k, v in feeds.items()},
                                 tuning_log=args.tuning_log, measure=False)
    for name, model in (("as_shipped", shipped), ("static", static)):
        call = vm_call(model, feeds)
        ms = cuda_ms(call)
        events = kernel_trace(call, CALLS, torch.cuda.synchronize)
        print(json.dumps({"model": args.model, "batch": args.batch, "build": name, "ms": ms,
                          "kernels": per_call(events)}), flush=True)


if __name__ == "__main__":
    main()
