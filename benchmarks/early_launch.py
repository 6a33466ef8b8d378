"""The early launch (tir_templates/early_launch.py) on and off, one layer at a time (GPU, torch).

    python benchmarks/early_launch.py --tuning-log docs/data/tune-h100.jsonl [--hidden 64 --batch 1 10]

Prints one JSON line per layer (T=100, input = hidden): the whole compiled layer through TVM's
VM built twice from the same config, `early_ms` with the recurrence launched early and `plain_ms`
without, each checked against torch first, and cuDNN fp32 in a CUDA graph.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import compiled_ms
from persist_rnn.bench.suite import grid_arguments, grid_layers
from persist_rnn.bench.torch_layers import cudnn_ms, onnx_from_torch


def main():
    import torch

    args = grid_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args()
    torch.backends.cudnn.allow_tf32 = False
    for op, hidden, batch, layer, x in grid_layers(args):
        with torch.no_grad():
            want = layer(x)[0].cpu().numpy()
        model = onnx_from_torch(op, layer, 100, batch)
        feeds = {"X": x.cpu().numpy()}
        row = {"cell": op, "hidden": hidden, "batch": batch}
        for key, early in (("early", True), ("plain", False)):
            with mock.patch("persist_rnn.transform.persistent_rnn.supports_early_launch", return_value=early):
                compiled = persist_rnn.compile(model, "cuda", tuning_log=args.tuning_log)
            got = compiled.run(feeds)[0][:, 0]
            row[f"{key}_err"] = float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))
            row[f"{key}_ms"] = compiled_ms(compiled, feeds)
        row["cudnn_fp32_graph_ms"] = cudnn_ms(layer, x)[1]
        row["config"] = compiled.report()[0].config
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
