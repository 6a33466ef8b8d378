"""Batch 1 against cuDNN's own persistent kernels (issue 22), fp32, T=100, input = hidden.

For each layer, in one run: our layer as the shipped tuning log builds it (`tuned`), the same
config with h exchanged through distributed shared memory where it is a cluster config (`dsmem`;
`dsmem_late`: the same, not launched during the input GEMM) or reading h(t-1) as stamped words
where it is a grid config (`stamped`), and, with --retune, the tuner's pick over the whole space with dsmem allowed (`retuned`), timed in
turn (`bench.interleaved_ms`); torch's cuDNN layer in a CUDA graph with TF32 off; and cuDNN's
four algorithms called directly with strict fp32 math (`cudnn_direct.py`), each checked against
torch's output first. One JSON line per layer.

    python benchmarks/batch1.py --out results.jsonl [--layers LSTM:256:1 GRU:256:1] [--retune]
"""
from __future__ import annotations

import dataclasses
import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import cuda_ms, interleaved_ms, vm_call  # noqa: E402
from persist_rnn.bench.layer_rows import run_layer_rows  # noqa: E402
from persist_rnn.bench.torch_layers import cudnn_ms, strict_fp32_case
from persist_rnn.transform import persistent_rnn  # noqa: E402
from tir_templates.config import Config, stamped_problems  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

GRID = [(cell, h, 1) for cell in ("LSTM", "GRU") for h in (64, 256, 1024)] + [
    (cell, 256, b) for cell in ("LSTM", "GRU") for b in (10, 20)]
SHIPPED_LOG = os.path.join(os.path.dirname(__file__), "..", "docs", "data", "tune-h100.jsonl")


def model_spec(cell, hidden):
    """The layer `strict_fp32_case` builds (input size = hidden size), as the template sees it."""
    return CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")


def layer_row(cell, hidden, batch, retune, seq_len=100):
    import torch

    from persist_rnn.bench.cudnn_direct import algorithm_rows

    layer, x, want, model, feeds = strict_fp32_case(cell, hidden, batch, seq_len)
    row = {"cell": cell, "hidden": hidden, "batch": batch, "seq_len": seq_len}
    builds = {"tuned": persist_rnn.compile(model, "cuda", tuning_log=SHIPPED_LOG)}
    cfg = Config.from_dict(builds["tuned"].report()[0].config)
    stamped = dataclasses.replace(cfg, stamped=True)
    if not stamped_problems(model_spec(cell, hidden), stamped):  # a grid config (and few enough words)
        builds["stamped"] = persist_rnn.compile(model, "cuda", config=stamped)  # a grid: h(t-1) as stamped words
    if cfg.cluster:
        builds["dsmem"] = persist_rnn.compile(model, "cuda", config=dataclasses.replace(cfg, dsmem=True))
        with mock.patch.object(persistent_rnn, "EARLY_LAUNCH_BARRIERS", ("cta",)):  # as before: no early launch
            builds["dsmem_late"] = persist_rnn.compile(model, "cuda", config=dataclasses.replace(cfg, dsmem=True))
    if retune:
        builds["retuned"] = persist_rnn.compile(model, "cuda", unverified=True, top_k=8, measure=True)
    for name, compiled in builds.items():
        got = compiled.run(feeds)[0][:, 0]
        row[f"{name}_err"] = float(np.abs(got - want.cpu().numpy()).max() / max(1.0, float(want.abs().max())))
        row[f"{name}_config"] = compiled.report()[0].config
    row.update({f"{n}_ms": v for n, v in interleaved_ms({n: vm_call(c, feeds) for n, c in builds.items()}).items()})
    row["cudnn_fp32_graph_ms"] = cudnn_ms(layer, x)[1]
    with torch.no_grad():
        direct = algorithm_rows(layer, x, want, cuda_ms)
    row["cudnn_direct"] = direct
    timed = {a: r["ms"] for a, r in direct.items() if "ms" in r and r["max_diff"] < 1e-3}
    if timed:
        row["cudnn_best_algo"] = min(timed, key=timed.get)
        row["cudnn_best_ms"] = timed[row["cudnn_best_algo"]]
        ours = min(row[f"{n}_ms"] for n in builds)
        row["best_ours_ms"] = ours
        row["best_cudnn_over_ours"] = row["cudnn_best_ms"] / ours
    return row


def main():
    retune = (["--retune"], {"action": "store_true", "help": "also tune over the whole space, dsmem allowed"})
    run_layer_rows(__doc__.split("\n")[0], GRID, layer_row, hidden=("cudnn_direct",), options=[retune])


if __name__ == "__main__":
    main()
