"""A 16-bit tensor-core config with its last k-tiles' A fragments in shared memory (`smem_runs`),
against the same config with every fragment in registers: the kernel alone (µs a step, the slope
through T = 100 and 400) and the whole layer (forced config, its output against torch's strict
fp32 layer), one line each.

    python benchmarks/tc_shared_fragments.py --out F --layer GRU:640:128:fp16 [GRU:2048:16:bf16 ...] \
        --smem-runs 0 10 variant [--config JSON]

Without --config each layer's default compile (no tuning log, measure off) gives the config;
"variant" is the k-tiles the measuring compile would time (`space.shared_fragments_variant`, none
where the config does not spill).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import compiled_ms  # noqa: E402
from persist_rnn.bench.torch_layers import PRECISIONS, strict_fp32_case  # noqa: E402
from persist_rnn.schedule.measure import build_kernel, kernel_arrays, time_kernel  # noqa: E402
from persist_rnn.schedule.gpu import gpu_model  # noqa: E402
from persist_rnn.schedule.space import shared_fragments_variant  # noqa: E402
from tir_templates.config import Config  # noqa: E402
from tir_templates.persistent.kernel import persistent_kernel  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

STEPS = (100, 400)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layer", required=True, nargs="+", help="CELL:H:B:PRECISION (fp16 or bf16)")
    ap.add_argument("--smem-runs", nargs="+", default=["0", "variant"], help="k-tiles in shared memory, or 'variant'")
    ap.add_argument("--config", help="the config (JSON) whose smem_runs vary")
    args = ap.parse_args()
    for layer in args.layer:
        time_layer(layer, args.smem_runs, args.config, args.out)


def time_layer(text: str, smem_runs: list[str], config: str | None, out: str):
    """One layer's rows: its config with each of `smem_runs`."""
    import torch
    import tvm

    cell, hidden, batch, precision = text.split(":")
    hidden, batch = int(hidden), int(batch)
    build_precision, dtype, _ = PRECISIONS[precision]
    layer, x, strict, model, feeds = strict_fp32_case(cell, hidden, batch, STEPS[0], dtype)
    strict = strict.cpu().numpy()
    spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
    if config:
        base = Config.from_dict(json.loads(config))
    else:
        base = Config.from_dict(persist_rnn.compile(model, "cuda", precision=build_precision, tuning_log=None,
                                                    measure=False).report()[0].config)
    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    variant = shared_fragments_variant(spec, base, gpu_model("sm_90"))
    for runs in smem_runs:
        if runs == "variant" and variant is None:
            continue
        cfg = variant if runs == "variant" else dataclasses.replace(base, smem_runs=int(runs))
        lib = build_kernel(persistent_kernel(spec, cfg), target)
        us = [time_kernel(lib, dev, kernel_arrays(spec, batch, n, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec)), repeats=9)
              for n in STEPS]
        compiled = persist_rnn.compile(model, "cuda", precision=build_precision, config=cfg)
        report = compiled.report()[0]
        got = compiled.run(feeds)[0][:, 0].astype("float32")
        row = {"cell": cell, "hidden": hidden, "batch": batch, "precision": precision, "config": cfg.as_dict(),
               "lowering": report.lowering, "step_us": float(np.polyfit(STEPS, us, 1)[0]), "kernel_us": us,
               "layer_ms": compiled_ms(compiled, feeds),
               "err": float(np.abs(got - strict).max() / max(1.0, float(np.abs(strict).max()))),
               "gpu": torch.cuda.get_device_name()}
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)


if __name__ == "__main__":
    main()
