"""Time FMA-unit and tensor-core configs side by side at shapes off GRNN's grid: the data the cost
model's tensor-core term is fitted to and judged on (`persist_rnn/schedule/fit.py --tensor-cores`).

A deterministic sample of workloads (cell, hidden, batch, precision) covers every hidden size,
batch and precision of the list below for both cells. For each: the current model's best FMA
configs and its best tensor-core configs plus a random spread of the rest, all built at once on
every core (`measure.Builds`) and each timed as its build finishes. One JSON line a config.

    python benchmarks/sweep_offgrid.py --out docs/data/sweep-offgrid-h100.jsonl [--workloads 36]
    python benchmarks/sweep_offgrid.py --out F --seed 1 --shared 3   # with A fragments in shared memory
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

HIDDEN = (96, 192, 320, 384, 640, 768, 896, 1280, 1536, 2048)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
#: precision -> (layer dtype, build precision)
PRECISIONS = {"fp32": ("float32", "fp32"), "tf32": ("float32", "tf32"), "fp16": ("float16", "fp32"),
              "bf16": ("bfloat16", "fp32")}


def workloads(n: int, seed: int = 0, batches=BATCH, precisions=tuple(PRECISIONS)) -> list[tuple]:
    """`n` (cell, hidden, batch, precision), each hidden size, batch and precision drawn for both
    cells at least once (a Latin-square-like cover, then random fill)."""
    rng = random.Random(seed)
    out = []
    for cell in ("lstm", "gru"):
        hs, bs, ps = list(HIDDEN), list(batches), list(precisions)
        rng.shuffle(hs), rng.shuffle(bs), rng.shuffle(ps)
        for i in range(max(len(hs), len(bs), len(ps))):
            out.append((cell, hs[i % len(hs)], bs[i % len(bs)], ps[i % len(ps)]))
    rest = [w for w in itertools.product(("lstm", "gru"), HIDDEN, batches, precisions) if w not in out]
    return out + rng.sample(rest, max(0, n - len(out)))


def chosen(spec, gpu, batch, precision, fma: int, tensor: int, spread: int, seed: int = 0, shared: int = 0):
    """The model's best `fma` FMA configs, its best `tensor` tensor-core configs, `spread` more
    tensor-core configs drawn from the rest, and its best `shared` 16-bit tensor-core configs with
    A fragments in shared memory (`space.shared_fragment_fits`) that are not among them."""
    from persist_rnn.schedule.cost_model import rank
    from persist_rnn.schedule.space import candidate_configs, shared_fragment_fits

    ranked = [c for _, c in rank(spec, candidate_configs(spec, gpu, batch, precision), gpu, batch)]
    simt = [c for c in ranked if not c.tensor_cores()]
    mma = [c for c in ranked if c.tensor_cores()]
    rest = mma[tensor:]
    out = simt[:fma] + mma[:tensor] + random.Random(seed).sample(rest, min(spread, len(rest)))
    fits = [c for _, c in rank(spec, shared_fragment_fits(spec, gpu, batch, precision), gpu, batch) if c not in out]
    return out + fits[:shared]


def timed_into(row: dict, spec, batch: int, cfg, lib, dev) -> dict:
    """`row` with the built kernel's microseconds a step over MEASURE_STEPS steps ("measured_us"),
    or what stopped its build or its run ("error": its lines joined, the build's stderr tail with them)."""
    from persist_rnn.schedule.measure import MEASURE_STEPS, kernel_arrays, time_kernel

    try:
        if isinstance(lib, Exception):
            raise lib
        arrays = kernel_arrays(spec, batch, MEASURE_STEPS, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec))
        row["measured_us"] = time_kernel(lib, dev, arrays) / MEASURE_STEPS
    except RuntimeError as err:
        row["error"] = " | ".join(str(err).strip().splitlines())[:600]
    return row


def main():
    import tvm

    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.measure import builds, built_as_completed
    from persist_rnn.targets import as_target
    from tir_templates.spec import CellSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workloads", type=int, default=36)
    ap.add_argument("--fma", type=int, default=5)
    ap.add_argument("--tensor", type=int, default=4)
    ap.add_argument("--spread", type=int, default=2)
    ap.add_argument("--shared", type=int, default=0, help="the best-priced configs with A fragments in shared memory")
    ap.add_argument("--seed", type=int, default=0, help="the workloads' draw")
    ap.add_argument("--batches", type=int, nargs="+", default=BATCH)
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    args = ap.parse_args()
    target, gpu, dev = as_target("cuda"), gpu_model("sm_90"), tvm.cuda(0)
    jobs = []
    for cell, hidden, batch, precision in workloads(args.workloads, args.seed, args.batches, args.precisions):
        dtype, build = PRECISIONS[precision]
        spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype=dtype)
        configs = chosen(spec, gpu, batch, build, args.fma, args.tensor, args.spread, shared=args.shared)
        if configs:
            jobs.append((spec, batch, precision, configs))
    start = time.perf_counter()
    for spec, _, _, configs in jobs:  # every workload's builds go to the pool first: all cores compile
        builds().submit(spec, configs, target)
    print(f"{len(jobs)} workloads, {sum(len(c) for *_, c in jobs)} configs submitted", flush=True)
    streams = [(spec, batch, precision, built_as_completed(spec, configs, target)) for spec, batch, precision, configs in jobs]
    with open(args.out, "a") as f:
        for spec, batch, precision, done in streams:
            for cfg, lib, build_s in done:
                row = {"cell": spec.cell, "hidden": spec.hidden_size, "batch": batch, "precision": precision,
                       "dtype": spec.dtype, "config": cfg.as_dict(), "build_s": round(build_s, 2)}
                f.write(json.dumps(timed_into(row, spec, batch, cfg, lib, dev)) + "\n")
                f.flush()
            print(f"{spec.cell} H={spec.hidden_size} B={batch} {precision}: done at {time.perf_counter() - start:.0f} s",
                  flush=True)


if __name__ == "__main__":
    main()
