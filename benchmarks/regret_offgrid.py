"""How far the cost model's own pick is from the fastest config of a layer's space, on the layers
of `bench --parts offgrid` (issue 52's regret floor: within 1.15x on 90% of the set).

A layer's space holds hundreds to thousands of configs (mostly FMA-unit ones), too many to build
each. For each layer this times the measure-off pick (`planner.choose`, as `compile` makes it), the
model's best TOP configs, and RANDOM more drawn from the rest of the space (half tensor-core
configs where the space has them), every step kernel alone. So the regret it reports is against
the best config of that sample: a lower bound on the regret against the whole space, but from a
sample the model did not choose. Layers the planner gives the GEMM scan are left out (their
persistent configs are the scan's rivals, not its configs). One JSON line a config.

    python benchmarks/regret_offgrid.py --out F [--top 10 --random 30] [--shard 0/2]
    python benchmarks/regret_offgrid.py --report F [F ...]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

def sampled(spec, gpu, batch: int, precision: str, top: int, spread: int, seed: int = 0):
    """(the measure-off pick, configs to time with their model rank and price), or None where
    the planner gives the layer no persistent kernel."""
    from persist_rnn.schedule.planner import _ranked, choose
    from persist_rnn.targets import as_target

    plan = choose(spec, as_target("cuda"), batch, measure=False, precision=precision)
    if plan.config is None:
        return None
    _, ranked = _ranked(spec, gpu, batch, False, precision)
    rank_of = {c: (i, t) for i, (t, c) in enumerate(ranked)}
    rest = [c for _, c in ranked[top:]]
    rng = random.Random(seed)
    tensor, simt = [c for c in rest if c.tensor_cores()], [c for c in rest if not c.tensor_cores()]
    n_tensor = min(len(tensor), spread // 2 if simt else spread)
    drawn = rng.sample(tensor, n_tensor) + rng.sample(simt, min(len(simt), spread - n_tensor))
    chosen = [plan.config] + [c for _, c in ranked[:top]] + drawn
    out, seen = [], set()
    for c in chosen:
        if c not in seen:
            seen.add(c)
            out.append((c, *rank_of.get(c, (None, None))))
    return plan.config, out


def sweep(args):
    import tvm

    from persist_rnn.bench.offgrid import offgrid_set
    from persist_rnn.bench.torch_layers import PRECISIONS  # precision -> (build precision, layer dtype, cuDNN's math)
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.measure import builds, built_as_completed
    from persist_rnn.targets import as_target
    from sweep_offgrid import timed_into
    from tir_templates.spec import CellSpec

    target, gpu, dev = as_target("cuda"), gpu_model("sm_90"), tvm.cuda(0)
    index, count = (int(x) for x in args.shard.split("/"))
    jobs = []
    for k, (cell, hidden, batch, precision) in enumerate(offgrid_set()):
        if k % count != index:
            continue
        build, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
        got = sampled(spec, gpu, batch, build, args.top, args.random)
        if got is None:
            print(f"{cell} H={hidden} B={batch} {precision}: no persistent kernel, left out", flush=True)
            continue
        jobs.append((spec, cell, batch, precision, *got))
    start = time.perf_counter()
    for spec, *_, configs in jobs:  # every layer's builds go to the pool first: all cores compile
        builds().submit(spec, [c for c, *_ in configs], target)
    print(f"{len(jobs)} layers, {sum(len(j[-1]) for j in jobs)} configs submitted", flush=True)
    with open(args.out, "a") as f:
        for spec, cell, batch, precision, pick, configs in jobs:
            meta = {c: (r, p) for c, r, p in configs}
            for cfg, lib, build_s in built_as_completed(spec, [c for c, *_ in configs], target):
                rank, price = meta[cfg]
                row = {"cell": cell, "hidden": spec.hidden_size, "batch": batch, "precision": precision,
                       "config": cfg.as_dict(), "pick": cfg == pick, "model_rank": rank,
                       "predicted_us": price, "tensor_cores": cfg.tensor_cores(), "build_s": round(build_s, 2)}
                f.write(json.dumps(timed_into(row, spec, batch, cfg, lib, dev)) + "\n")
                f.flush()
            print(f"{cell} H={spec.hidden_size} B={batch} {precision}: done at {time.perf_counter() - start:.0f} s",
                  flush=True)


def spearman(xs, ys) -> float:
    """Rank correlation of two equal-length lists (ties ranked in order of appearance)."""
    import numpy as np

    rx, ry = np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys))
    return float(np.corrcoef(rx, ry)[0, 1])


def report(paths: list[str]) -> str:
    """A markdown table: each layer's pick against the best timed config, the model's rank
    correlation over the timed configs, and the regret distribution."""
    layers: dict[tuple, list[dict]] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if "measured_us" in r:
                    layers.setdefault((r["cell"], r["hidden"], r["batch"], r["precision"]), []).append(r)
    lines = ["| layer | precision | configs timed | pick µs | best µs | regret | best is | rank correlation |",
             "|---|---|---|---|---|---|---|---|"]
    regrets, rhos = [], []
    for (cell, hidden, batch, precision), rows in layers.items():
        pick = next((r for r in rows if r["pick"]), None)
        if pick is None:
            continue
        best = min(rows, key=lambda r: r["measured_us"])
        regret = pick["measured_us"] / best["measured_us"]
        priced = [r for r in rows if r["predicted_us"] is not None]
        rho = spearman([r["predicted_us"] for r in priced], [r["measured_us"] for r in priced])
        regrets.append(regret)
        rhos.append(rho)
        where = "the pick" if best is pick else (f"model's #{best['model_rank'] + 1}" if best["model_rank"] is not None
                                                 else "a variant")
        kind = "tensor cores" if best["tensor_cores"] else "FMA units"
        lines.append(f"| {cell} H={hidden} B={batch} | {precision} | {len(rows)} | {pick['measured_us']:.2f} | "
                     f"{best['measured_us']:.2f} | {regret:.3f}x | {where} ({kind}) | {rho:.2f} |")
    regrets.sort()
    n = len(regrets)
    within = sum(r <= 1.15 for r in regrets)
    quart = [regrets[min(n - 1, int(q * n))] for q in (0.5, 0.75, 0.9)]
    lines += ["", f"{n} layers: the pick within 1.15x of the best timed config on {within} of {n}; regret median "
              f"{quart[0]:.3f}x, 75th percentile {quart[1]:.3f}x, 90th {quart[2]:.3f}x, worst {regrets[-1]:.3f}x; "
              f"rank correlation mean {sum(rhos) / n:.2f}."]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--random", type=int, default=30)
    ap.add_argument("--shard", default="0/1", help="I/N: only every Nth layer of the set, from the Ith")
    ap.add_argument("--report", nargs="+")
    args = ap.parse_args()
    if args.report:
        print(report(args.report))
    elif args.out:
        sweep(args)
    else:
        ap.error("--out or --report")


if __name__ == "__main__":
    main()
