"""A layer's fp32, fp16 and bf16 builds timed in turn, and every kernel of a call (needs torch and
a GPU): whether a 16-bit layer launches and takes what the fp32 one does (issue 20's item 4).

    python benchmarks/dtype_gap.py --out gap.jsonl --tuning-log docs/data/tune-h100.jsonl GRU:64:1 LSTM:64:1

One JSON line per layer (T=100, input = hidden): for each dtype its config, `ms` (the median of
`interleaved_ms`' rounds, the three builds timed in turn) and `kernels` ([name, µs, gap before it
in µs] of one call, from a CUPTI trace through torch's profiler).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.gpu_timing import kernel_trace, vm_call
from persist_rnn.bench.torch_layers import strict_fp32_case
from persist_rnn.compile import compile_onnx as compile_model
from persist_rnn.bench.gpu_timing import interleaved_ms

DTYPES = ("float32", "float16", "bfloat16")
CALLS_TRACED = 5


def layer_row(op: str, hidden: int, batch: int, tuning_log: str | None) -> dict:
    import tvm

    calls, row = {}, {"part": "dtype_gap", "cell": op, "hidden": hidden, "batch": batch}
    for dtype in DTYPES:
        _, _, _, model, feeds = strict_fp32_case(op, hidden, batch, 100, dtype)
        compiled = compile_model(model, "cuda", tuning_log=tuning_log)
        calls[dtype] = vm_call(compiled, feeds)
        row[dtype] = {"config": compiled.report()[0].config}
    ms = interleaved_ms(calls, rounds=9)
    for dtype, call in calls.items():
        events = kernel_trace(call, CALLS_TRACED, tvm.cuda(0).sync)
        last = events[-(len(events) // CALLS_TRACED):]  # the last call's kernels
        row[dtype].update(ms=ms[dtype], kernels=[
            [e["name"][:48], round(e["dur"], 2), None if before is None else round(e["ts"] - before["ts"] - before["dur"], 2)]
            for before, e in zip([None] + last[:-1], last)])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tuning-log")
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH")
    args = ap.parse_args()
    for key in args.layers:
        op, hidden, batch = key.split(":")
        row = layer_row(op, int(hidden), int(batch), args.tuning_log)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
