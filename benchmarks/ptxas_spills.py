"""What ptxas spills for the 16-bit tensor-core configs that data files timed, against their time
and their price: the evidence that the cost model, which does not price spills, misprices the
configs that spill (docs/cost-model.md, *Spills*). No GPU: nvcc builds each kernel for sm_90 with
`-Xptxas -v` here. One JSON line a config, then `--report` for the medians.

    python benchmarks/ptxas_spills.py --out F docs/data/sweep-shared-fragments-h200.jsonl \
        docs/data/lstm2048-shared-fragments-h200.jsonl
    python benchmarks/ptxas_spills.py --report F
(`--shard 0/2` and `--shard 1/2` to two files, cat'ed, use two cores.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def timed_configs(paths: list[str]) -> list[tuple]:
    """(cell, hidden, batch, precision, config, us) of each 16-bit tensor-core config the files
    timed: a sweep's rows ("measured_us") and pick_ab.py's pairs ("new_us", "old_us"), once each."""
    out, seen = [], set()
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r.get("precision") not in DTYPES:
                continue
            pairs = [(r.get("config"), r.get("measured_us"))] + [(r.get(s), r.get(s + "_us")) for s in ("new", "old")]
            for cfg, us in pairs:
                key = json.dumps([r["cell"].lower(), r["hidden"], r["batch"], r["precision"], cfg], sort_keys=True)
                if isinstance(cfg, dict) and cfg.get("mma_k_split") and us and key not in seen:
                    seen.add(key)
                    out.append((r["cell"].lower(), r["hidden"], r["batch"], r["precision"], cfg, us))
    return out


def spills(spec, cfg) -> tuple[int, int]:
    """(registers, spill-store bytes) ptxas reports for the persistent kernel's largest function."""
    import tvm

    from tir_templates.persistent import persistent_kernel

    func = persistent_kernel(spec, cfg).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.cu")
        with open(src, "w") as f:
            f.write(lib.mod.imports[0].inspect_source())
        res = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", os.path.join(tmp, "k.cubin"), src],
                             capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(next((l for l in res.stderr.splitlines() if "error" in l), f"nvcc exit {res.returncode}"))
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", res.stderr)]
    stores = [int(x) for x in re.findall(r"(\d+) bytes spill stores", res.stderr)]
    return max(regs), max(stores)


def main():
    from persist_rnn.schedule.cost_model import step_us
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.space import fragment_registers
    from tir_templates.config import Config
    from tir_templates.spec import CellSpec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--report")
    ap.add_argument("--shard", default="0/1", help="I/N: only every Nth config, from the Ith")
    args = ap.parse_args()
    if args.report:
        return report(args.report)
    gpu = gpu_model("sm_90")
    index, count = (int(x) for x in args.shard.split("/"))
    with open(args.out, "w") as f:
        for cell, hidden, batch, precision, config, us in timed_configs(args.files)[index::count]:
            spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype=DTYPES[precision])
            cfg = Config.from_dict(config)
            try:
                regs, spilled = spills(spec, cfg)
            except RuntimeError as err:  # recorded, not fatal: the rest still build
                print(f"{cell} H={hidden} B={batch} {precision} {config}: {err}", flush=True)
                continue
            f.write(json.dumps({"cell": cell, "hidden": hidden, "batch": batch, "precision": precision, "config": config,
                                "us": us, "priced_us": step_us(spec, cfg, gpu, batch), "ptxas_registers": regs,
                                "spill_bytes": spilled, "estimated_registers": fragment_registers(spec, cfg),
                                "cap": cfg.register_cap(spec)}) + "\n")
            f.flush()


def report(path: str):
    """Median time over price of the configs ptxas spills 256 bytes or more for, and of the rest."""
    import numpy as np

    rows = [json.loads(line) for line in open(path)]
    for name, keep in (("spilling 256 bytes or more", lambda r: r["spill_bytes"] >= 256),
                       ("the rest", lambda r: r["spill_bytes"] < 256)):
        ratios = [r["us"] / r["priced_us"] for r in rows if keep(r)]
        print(f"{name}: {len(ratios)} configs, run / priced median {np.median(ratios):.2f}")


if __name__ == "__main__":
    main()
