"""Configs of one layer, whole layer through the VM, timed in turn, beside cuDNN's best at the same
precision: what the tuner's kernel-alone timing does not see (the GEMM, the launch, the prologue).

    python benchmarks/configs_in_turn.py --out rows.jsonl --layer LSTM:256:1 --precision fp16 \\
        --configs 32x8x4:cluster:dsmem 16x8x4:cluster:dsmem
    python benchmarks/configs_in_turn.py --out rows.jsonl --layer LSTM:1024:1 \\
        --tuning-log docs/data/tune-h100.jsonl --gemm 32/1/0 64/2/0

The first build is the cost model's pick (`planner`), or with --tuning-log the log's (`log`).
A GEMM plan BK/GROUPS/STAGES (`projection_mma.gemm_plan`'s k-tile, warp groups and k-tiles in
flight) builds that first build again with the tensor-core input projection forced to it
(`gemm <plan>`; a layer whose projection is not on the tensor cores builds as before).

A config is TILExGROUPxROWS (tile_units, group_size, rows_per_group) and any of: `cluster`,
`dsmem`, `stamped`, `float16` or `bfloat16` (weights), `tf32` (the tensor cores' precision),
`chunk=N`, `tile=N`, `mma=N` (batch_chunk, batch_tile, mma_k_split: N warps a row tile on the
tensor cores), e.g. `8x32x16:float16:mma=8:chunk=20`. A config
the planner refuses falls back to the reference scan; its row says so (`<name>_lowering`). Each
build's error is the largest of three runs against torch's strict fp32 layer, over the output
scale. cuDNN is held to the precision's bound, as `persist-rnn bench --precision` holds it
(`bench.at_precision`). One JSON line per layer (data: docs/data/cluster16-h100.jsonl, lstm1024-configs-h100.jsonl).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.torch_layers import PRECISIONS  # noqa: E402
from tir_templates.config import Config  # noqa: E402

FLAGS = {"cluster": {"cluster": True}, "dsmem": {"dsmem": True}, "stamped": {"stamped": True},
         "float16": {"weight_dtype": "float16"}, "bfloat16": {"weight_dtype": "bfloat16"},
         "tf32": {"mma_precision": "tf32"}}
NUMBERS = {"chunk": "batch_chunk", "tile": "batch_tile", "mma": "mma_k_split"}


def parse_config(text: str) -> Config:
    """`16x8x4:cluster:dsmem` as a Config (batch_chunk 1 unless `chunk=N`)."""
    head, *flags = text.split(":")
    try:
        tile, group, rows = (int(v) for v in head.split("x"))
    except ValueError:
        raise SystemExit(f"--configs: {text!r} does not start with TILExGROUPxROWS") from None
    fields = {"batch_chunk": 1}
    for flag in flags:
        name, _, value = flag.partition("=")
        if name in FLAGS and not value:
            fields.update(FLAGS[name])
        elif name in NUMBERS and value.isdigit():
            fields[NUMBERS[name]] = int(value)
        else:
            raise SystemExit(f"--configs: unknown flag {flag!r} in {text!r} (cluster, dsmem, stamped, float16, "
                             "bfloat16, tf32, chunk=N, tile=N, mma=N)")
    return Config(tile, group, rows, **fields)


def parse_gemm(text: str, precision: str = "fp32") -> dict:
    """`64/2/0` as projection_mma_kernel's bk, k_groups and stages, checked against the kernel's
    own limits at the GEMM precision the pass gives a layer at `precision`."""
    from persist_rnn.transform.projection_gemms import projection_precision
    from tir_templates.projection_mma import projection_mma_kernel

    try:
        bk, groups, stages = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"--gemm: {text!r} is not BK/GROUPS/STAGES, e.g. 64/2/0") from None
    plan = {"bk": bk, "k_groups": groups, "stages": stages}
    try:
        build_precision, dtype, _ = PRECISIONS[precision]
        projection_mma_kernel(64, 64, projection_precision(dtype, build_precision), **plan)
    except ValueError as err:
        raise SystemExit(f"--gemm {text} at {precision}: {err}") from None
    return plan


def forced_gemm(plan: dict):
    """A stand-in for the pass's projection_mma_kernel that builds every GEMM with `plan`."""
    from tir_templates.projection_mma import projection_mma_kernel

    return lambda K, N, precision, **_: projection_mma_kernel(K, N, precision, **plan)


def layer_row(cell: str, hidden: int, batch: int, precision: str, configs: list[str], seq_len: int = 100,
              gemms: tuple = (), tuning_log: str | None = None) -> dict:
    from unittest import mock

    import torch

    import persist_rnn
    from persist_rnn.transform import persistent_rnn
    from persist_rnn.bench.gpu_timing import cuda_ms, interleaved_ms, vm_call
    from persist_rnn.bench.suite import matched_ms
    from persist_rnn.bench.torch_layers import at_precision, strict_fp32_case
    from persist_rnn.bench.cudnn_direct import algorithm_rows

    build_precision, dtype, math = PRECISIONS[precision]
    layer, x, strict, model, feeds = strict_fp32_case(cell, hidden, batch, seq_len, dtype)
    strict = strict.cpu().numpy()
    row = {"cell": cell, "hidden": hidden, "batch": batch, "seq_len": seq_len, "precision": precision}
    first, base = ("log", {"tuning_log": tuning_log}) if tuning_log else ("planner", {"measure": False})
    builds = {first: persist_rnn.compile(model, "cuda", precision=build_precision, **base)}
    row[f"{first}_config"] = builds[first].report()[0].config
    for text in gemms:
        with mock.patch.object(persistent_rnn, "projection_mma_kernel", forced_gemm(parse_gemm(text, precision))):
            builds[f"gemm {text}"] = persist_rnn.compile(model, "cuda", precision=build_precision, **base)
    for text in configs:
        builds[text] = persist_rnn.compile(model, "cuda", config=parse_config(text), precision=build_precision)
    for name, compiled in builds.items():
        row[f"{name}_lowering"] = compiled.report()[0].lowering
        errors = [np.abs(compiled.run(feeds)[0][:, 0].astype("float32") - strict).max() for _ in range(3)]
        row[f"{name}_err"] = float(max(errors) / max(1.0, float(np.abs(strict).max())))
    row.update({f"{n}_ms": v for n, v in interleaved_ms({n: vm_call(c, feeds) for n, c in builds.items()}).items()})
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    theirs, tx, want, bound = at_precision(layer, x, precision)
    with torch.no_grad():
        direct = algorithm_rows(theirs, tx, want, cuda_ms, math=math)
    torch.backends.cudnn.allow_tf32 = True
    timed = matched_ms(direct, bound)
    row["cudnn_direct"] = direct
    if timed:
        row["best_cudnn"] = min(timed, key=timed.get)
        row["best_cudnn_ms"] = timed[row["best_cudnn"]]
        row.update({f"{n}_ratio": row["best_cudnn_ms"] / row[f"{n}_ms"] for n in builds})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layer", required=True, help="CELL:HIDDEN:BATCH, e.g. LSTM:1024:1")
    ap.add_argument("--precision", default="fp32", choices=list(PRECISIONS))
    ap.add_argument("--configs", nargs="*", default=[])
    ap.add_argument("--gemm", nargs="*", default=[], help="GEMM plans BK/GROUPS/STAGES, e.g. 32/1/0 64/2/0")
    ap.add_argument("--tuning-log", help="the first build from this log instead of the cost model")
    args = ap.parse_args()
    for text in args.configs:
        parse_config(text)  # every config and plan readable before anything is built
    for text in args.gemm:
        parse_gemm(text, args.precision)
    cell, hidden, batch = args.layer.split(":")
    row = layer_row(cell.upper(), int(hidden), int(batch), args.precision, args.configs, gemms=tuple(args.gemm),
                    tuning_log=args.tuning_log)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k.endswith(("_ms", "_ratio", "_err", "_lowering"))}))


if __name__ == "__main__":
    main()
