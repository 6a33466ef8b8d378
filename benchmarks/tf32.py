"""fp32 layers at TF32 (issue 20, item 2): our precision="tf32" build against cuDNN with TF32
allowed, in one run, T=100, input = hidden.

For each layer of GRNN's grid: our fp32 build as the shipped tuning log makes it (`fp32`) and
our TF32 build, the tuner's pick with TF32 steps allowed (`tf32`), timed in turn
(`bench.interleaved_ms`); torch's cuDNN layer in a CUDA graph with TF32 allowed (what torch users
run by default) and with it off; cuDNN's four algorithms called directly with CUDNN_DEFAULT_MATH
(TF32 allowed on fp32 data), each checked against torch's TF32 output first. Errors are against
torch's strict fp32 output, relative to the output scale. One JSON line per layer.

    python benchmarks/tf32.py --out results.jsonl [--layers LSTM:1024:20 GRU:256:10]
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import cuda_ms, interleaved_ms, vm_call  # noqa: E402
from persist_rnn.bench.layer_rows import run_layer_rows  # noqa: E402
from persist_rnn.bench.torch_layers import cudnn_ms, strict_fp32_case

GRID = [(cell, h, b) for cell in ("LSTM", "GRU") for h in (64, 256, 1024) for b in (1, 10, 20)]
SHIPPED_LOG = os.path.join(os.path.dirname(__file__), "..", "docs", "data", "tune-h100.jsonl")
#: a cuDNN algorithm's output counts as the layer's when it is this close to torch's TF32 output
#: (the two round differently; a wrong call is off by O(1))
SAME_LAYER = 1e-2


def _relative(got, want) -> float:
    return float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))


def layer_row(cell, hidden, batch, seq_len=100, top_k=2):
    import torch

    from persist_rnn.bench.cudnn_direct import algorithm_rows

    layer, x, strict, model, feeds = strict_fp32_case(cell, hidden, batch, seq_len)
    row = {"cell": cell, "hidden": hidden, "batch": batch, "seq_len": seq_len}
    builds = {"fp32": persist_rnn.compile(model, "cuda", tuning_log=SHIPPED_LOG),
              "tf32": persist_rnn.compile(model, "cuda", precision="tf32", measure=True,
                                          top_k=top_k)}
    for name, compiled in builds.items():
        row[f"{name}_err"] = _relative(compiled.run(feeds)[0][:, 0], strict.cpu().numpy())
        row[f"{name}_config"] = compiled.report()[0].config
    row.update({f"{n}_ms": v for n, v in interleaved_ms({n: vm_call(c, feeds) for n, c in builds.items()}).items()})
    row["cudnn_fp32_graph_ms"] = cudnn_ms(layer, x)[1]
    torch.backends.cudnn.allow_tf32 = True
    with torch.no_grad():
        tf32_out = layer(x)[0]
    row["cudnn_tf32_err"] = _relative(tf32_out.cpu().numpy(), strict.cpu().numpy())
    row["cudnn_tf32_graph_ms"] = cudnn_ms(layer, x)[1]
    with torch.no_grad():
        direct = algorithm_rows(layer, x, tf32_out, cuda_ms, math="DEFAULT")
    row["cudnn_direct_tf32"] = direct
    timed = {"torch_graph": row["cudnn_tf32_graph_ms"]}
    timed.update({a: r["ms"] for a, r in direct.items() if "ms" in r and r["max_diff"] < SAME_LAYER})
    row["cudnn_tf32_best_algo"] = min(timed, key=timed.get)
    row["cudnn_tf32_best_ms"] = timed[row["cudnn_tf32_best_algo"]]
    row["best_cudnn_tf32_over_ours"] = row["cudnn_tf32_best_ms"] / row["tf32_ms"]
    row["cudnn_tf32_graph_over_ours"] = row["cudnn_tf32_graph_ms"] / row["tf32_ms"]
    return row


def main():
    run_layer_rows(__doc__.split("\n")[0], GRID, layer_row, hidden=("cudnn_direct_tf32",))


if __name__ == "__main__":
    main()
