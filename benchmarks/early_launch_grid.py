"""Persistent kernels with a grid barrier launched early or not, whole layers (GPU, torch).

    python benchmarks/early_launch_grid.py LSTM:768:32:fp16 GRU:640:128:fp16 ...

Each layer (T=100, input = hidden) compiled as `bench --parts offgrid` compiles it (no tuning log,
measure off) twice from the same config: `early_ms` with its kernel launched early behind the
input projection's GEMM (tir_templates/early_launch.py), which the pass otherwise asks only for
kernels without a grid barrier, and `plain_ms` as the pass builds it (a cooperative launch). Each
output is checked against torch's strict fp32 layer. One JSON line a layer.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from unittest import mock

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import compiled_ms  # noqa: E402
from persist_rnn.bench.torch_layers import PRECISIONS, strict_fp32_case  # noqa: E402
from persist_rnn.report import kernel_configs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION")
    args = ap.parse_args()
    for text in args.layers:
        cell, hidden, batch, precision = text.split(":")
        hidden, batch = int(hidden), int(batch)
        build_precision, dtype, _ = PRECISIONS[precision]
        _, _, want, model, feeds = strict_fp32_case(cell, hidden, batch, 100, dtype)
        want = want.cpu().numpy()
        row = {"cell": cell, "hidden": hidden, "batch": batch, "precision": precision}
        for key, early in (("early", True), ("plain", False)):
            launch = (mock.patch("persist_rnn.transform.persistent_rnn._may_launch_early",
                                 side_effect=lambda func, spec: bool(kernel_configs(func)))
                      if early else contextlib.nullcontext())
            with launch:
                compiled = persist_rnn.compile(model, "cuda", precision=build_precision, tuning_log=None, measure=False)
            got = compiled.run(feeds)[0][:, 0].astype("float32")
            row[f"{key}_err"] = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
            row[f"{key}_ms"] = compiled_ms(compiled, feeds)
            row["config"] = compiled.report()[0].config
            del compiled
        row["early_speedup"] = row["plain_ms"] / row["early_ms"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
