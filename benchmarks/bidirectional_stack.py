"""What fusing a stack of bidirectional layers could save at most, measured on the GPU box.

    python benchmarks/bidirectional_stack.py --out bidir.jsonl [--layers 4] [--hidden 128] [--steps 589] [--batches 1,8]

Layer l+1 reads, at step t, both of layer l's directions at t; layer l's backward direction
reaches t only at its step T-1-t. So layer l+1's forward direction cannot start before layer l's
backward has finished (its t=0 is the backward's last step), nor its backward direction before
layer l's forward has (its first step reads t=T-1): a layer starts when the layer below has
ended, fused or not, and a wavefront kernel would run the layers one after another. What it could
save is what lies between the recurrence kernels: the launches, the upper layers' projection GEMMs
and the copies.

This times a stack like pyannote segmentation-3.0's (4 x BiLSTM 128; 10 s of audio is 589 frames),
exported from torch.nn.LSTM, compiled as shipped (symbolic batch and time, no tuning log), and
reads the CUDA kernels of 20 calls (torch profiler): the recurrence kernels' time against the whole
call's span, and the bound `span / recurrence`, the most any fused kernel could gain.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

CALLS = 20


def _export(layers, hidden, steps, path):
    import torch

    module = torch.nn.LSTM(hidden, hidden, num_layers=layers, bidirectional=True).eval()
    x = torch.randn(steps, 2, hidden)
    torch.onnx.export(module, (x,), path, input_names=["x"], output_names=["y", "h", "c"], dynamo=False,
                      opset_version=17, dynamic_axes={"x": {0: "time", 1: "batch"}})


def run(args, out):
    import numpy as np
    import torch

    import persist_rnn
    from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms, kernel_trace

    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "bilstm.onnx")
        _export(args.layers, args.hidden, args.steps, path)
        compiled = persist_rnn.compile(path, "cuda", measure=False)
    for batch in [int(b) for b in args.batches.split(",")]:
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((args.steps, batch, args.hidden)).astype("float32")).cuda()
        call = lambda: compiled.run({"x": x}, outputs="device")  # noqa: E731
        call()
        events = kernel_trace(call, CALLS, torch.cuda.synchronize)
        recurrence = [e for e in events if "persist_rnn_lstm" in e["name"]]
        per_call = lambda evs: sum(e["dur"] for e in evs) / CALLS  # noqa: E731
        span = (events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"]) / CALLS
        row = {"layers": args.layers, "hidden": args.hidden, "steps": args.steps, "batch": batch, "precision": "fp32",
               "graph_ms": interleaved_ms({"model": graph_replay(call)}, rounds=5)["model"],
               "recurrence_us": per_call(recurrence), "all_kernels_us": per_call(events), "span_us": span,
               "kernels_per_call": len(events) / CALLS, "lowerings": [r.lowering for r in compiled.report()]}
        row["most_a_fused_kernel_could_gain"] = row["graph_ms"] * 1000 / row["recurrence_us"]
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=589)
    parser.add_argument("--batches", default="1,8")
    args = parser.parse_args()
    with open(args.out, "a") as out:
        run(args, out)


if __name__ == "__main__":
    main()
