"""Hidden sizes whose weights fill the chip (issue 18): fp16 LSTM and GRU with H=2048 (32 and
24 MiB of recurrent weights, part of each lane's slice in shared memory) against cuDNN fp16
through torch, eager and in a CUDA graph, timed in turn (`bench.interleaved_ms`). Each build is
checked first against the torch layer in fp32 on the same fp16-rounded weights and input, as is
cuDNN's fp16 output. One JSON line per layer.

    python benchmarks/large_hidden.py --out large_hidden.jsonl [--hidden 2048] [--batch 1 8] [--tuning-log LOG]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms, vm_call
from persist_rnn.bench.torch_layers import onnx_from_torch, torch_layer


def relative_error(got, want) -> float:
    return float(np.abs(got.astype("float64") - want).max() / max(1.0, np.abs(want).max()))


def layer_row(torch, op, hidden, batch, seq_len, tuning_log):
    layer = torch_layer(op, hidden, seed=hidden + batch).half()  # fp16 weights, as the ONNX model holds them
    x = torch.randn(seq_len, batch, hidden, device="cuda").half()
    with torch.no_grad():
        want = layer.float()(x.float())[0].double().cpu().numpy()  # fp32 math on the same fp16 values
        layer.half()
        cudnn_out = layer(x)[0].cpu().numpy()
    model = onnx_from_torch(op, layer, seq_len, batch, dtype="float16")
    feeds = {"X": x.cpu().numpy()}
    compiled = persist_rnn.compile(model, "cuda", tuning_log=tuning_log)
    [report] = compiled.report()
    ours = compiled.run(feeds)[0][:, 0]
    row = {"cell": op, "hidden": hidden, "batch": batch, "seq_len": seq_len, "dtype": "float16",
           "lowering": report.lowering, "config": report.config, "config_source": report.source,
           "ours_err": relative_error(ours, want), "cudnn_fp16_err": relative_error(cudnn_out, want)}
    with torch.no_grad():
        times = interleaved_ms({"ours_ms": vm_call(compiled, feeds), "cudnn_fp16_eager_ms": lambda: layer(x),
                                "cudnn_fp16_graph_ms": graph_replay(lambda: layer(x))})
    row |= times
    row["cudnn_fp16_graph_over_ours"] = times["cudnn_fp16_graph_ms"] / times["ours_ms"]
    return row


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", nargs="+", default=["LSTM", "GRU"])
    ap.add_argument("--hidden", nargs="+", type=int, default=[2048])
    ap.add_argument("--batch", nargs="+", type=int, default=[1])
    ap.add_argument("--seq-len", type=int, default=100)
    ap.add_argument("--tuning-log")
    args = ap.parse_args()
    for op in args.cells:
        for hidden in args.hidden:
            for batch in args.batch:
                row = layer_row(torch, op, hidden, batch, args.seq_len, args.tuning_log)
                print(json.dumps(row), flush=True)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
