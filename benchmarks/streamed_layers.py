"""Layers whose fp32 weights fit on no chip (H = 2048 and 4096, LSTM and GRU), compiled as a user
compiles them (measure off, no tuning log): the persistent kernel reading the weights that do not
fit from global memory each step (`Config.global_runs`), or the streamed scan
(tir_templates/streamed.py) where the planner predicts it faster. Against, in the same run: the
other of the two (`alt_*`: the streamed scan as the planner builds it where no config fits, or the
model's best persistent config), cuDNN's four algorithms called directly with strict fp32 math, and
torch's cuDNN layer in a CUDA graph (TF32 off). T=100, input = hidden. Each output is checked
against torch's first. One JSON line per layer.

    python benchmarks/streamed_layers.py --out streamed.jsonl [--layers LSTM:2048:1 GRU:4096:16] [--no-alt]
        [--precision fp16]

`--no-alt` skips the other lowering (an H=4096 B=16 row builds each in minutes). `--precision fp16`
(or bf16) builds the layer as a 16-bit model and times cuDNN's four algorithms on 16-bit copies,
held to that precision's bound (`torch_layers.at_precision`); torch's graph is then not timed.
"""
from __future__ import annotations

import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import cuda_ms, vm_call  # noqa: E402
from persist_rnn.bench.layer_rows import run_layer_rows  # noqa: E402
from persist_rnn.bench.suite import matched_ms  # noqa: E402
from persist_rnn.bench.torch_layers import PRECISIONS, at_precision, cudnn_ms, strict_fp32_case  # noqa: E402

LAYERS = [(cell, h, b) for cell in ("LSTM", "GRU") for h in (2048, 4096) for b in (1, 16)]


def layer_row(cell, hidden, batch, seq_len=100, alt=True, precision="fp32"):
    import torch

    from persist_rnn.bench.cudnn_direct import algorithm_rows

    _, dtype, math = PRECISIONS[precision]
    layer, x, want, model, feeds = strict_fp32_case(cell, hidden, batch, seq_len, dtype)
    row = {"cell": cell, "hidden": hidden, "batch": batch, "seq_len": seq_len, "precision": precision}
    row.update(_ours(model, feeds, want, "ours"))
    # the other lowering: the streamed scan (no config offered), or the model's best persistent config
    if alt:
        other = (mock.patch("persist_rnn.schedule.planner.candidate_configs", return_value=[])
                 if row["ours_lowering"] == "persistent"
                 else mock.patch("persist_rnn.schedule.planner.streamed_scan_note", return_value=""))
        with other:
            row.update(_ours(model, feeds, want, "alt"))
    if precision == "fp32":
        row["cudnn_fp32_graph_ms"] = cudnn_ms(layer, x)[1]
    theirs, tx, theirs_want, bound = at_precision(layer, x, precision)
    with torch.no_grad():
        direct = algorithm_rows(theirs, tx, theirs_want, lambda call: cuda_ms(call, calls=3, repeats=5), math=math)
    row["cudnn_direct"] = direct
    timed = matched_ms(direct, bound if precision != "fp32" else 1e-3)
    if timed:
        row["cudnn_best_algo"] = min(timed, key=timed.get)
        row["cudnn_best_ms"] = timed[row["cudnn_best_algo"]]
        row["cudnn_best_over_ours"] = row["cudnn_best_ms"] / row["ours_ms"]
    return row


def _ours(model, feeds, want, key):
    """{key_lowering, key_config, key_reason, key_err, key_ms} of one build of `model`."""
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    [report] = compiled.report()
    got = compiled.run(feeds)[0][:, 0].astype("float32")
    out = {f"{key}_lowering": report.lowering, f"{key}_config": report.config, f"{key}_reason": report.reason,
           f"{key}_err": float(np.abs(got - want.cpu().numpy()).max() / max(1.0, float(want.abs().max()))),
           f"{key}_ms": cuda_ms(vm_call(compiled, feeds), calls=3, repeats=5)}
    del compiled
    return out


def main():
    run_layer_rows(__doc__.split("\n")[0], LAYERS, layer_row, hidden=("cudnn_direct",),
                   options=[(("--no-alt",), {"dest": "alt", "action": "store_false",
                                             "help": "time only the planner's lowering"}),
                            (("--precision",), {"default": "fp32", "choices": ["fp32", "fp16", "bf16"],
                                                "help": "the model's dtype and cuDNN's (default fp32)"})])


if __name__ == "__main__":
    main()
