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
    python benchmarks/regret_offgrid.py --out F --layer LSTM:1280:32:fp16 ... [--shared 4]
    python benchmarks/regret_offgrid.py --report F [F ...]

`--layer` samples those layers instead of the set's; `--shared K` adds the model's best K configs
with A fragments in shared memory of those offered beside configs that fit
(`space.shared_fragment_fits`, which a compile on a GPU times) and each one's fullest variant.

`--picks-of F` judges the measure-off pick the same way on a side-by-side sweep of other
workloads (`benchmarks/sweep_offgrid.py`'s rows, and `pick_ab.py --extra` rows ("probe") that
timed a pick the sweep did not beside the sweep's fastest config of its workload):

    python benchmarks/regret_offgrid.py --picks-of docs/data/sweep-shared-fragments-h200.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

def sampled(spec, gpu, batch: int, precision: str, top: int, spread: int, seed: int = 0, shared: int = 0):
    """(the measure-off pick, configs to time with their model rank and price), or None where
    the planner gives the layer no persistent kernel."""
    from persist_rnn.schedule.cost_model import rank
    from persist_rnn.schedule.planner import _ranked, choose
    from persist_rnn.schedule.space import fullest_shared_fragments, shared_fragment_fits
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
    if shared:
        beside = rank(spec, [c for c in shared_fragment_fits(spec, gpu, batch, precision) if c not in rank_of],
                      gpu, batch)[:shared]
        rank_of.update({c: (None, t) for t, c in beside})
        fullest = [f for _, c in beside if (f := fullest_shared_fragments(spec, c, gpu)) is not None]
        chosen += [c for _, c in beside] + fullest
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
    layers = ([(c, int(h), int(b), p) for c, h, b, p in (t.split(":") for t in args.layer)] if args.layer
              else offgrid_set())
    for k, (cell, hidden, batch, precision) in enumerate(layers):
        if k % count != index:
            continue
        build, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
        got = sampled(spec, gpu, batch, build, args.top, args.random, shared=args.shared)
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


def sweep_picks(path: str) -> str:
    """Each workload of a side-by-side sweep: the measure-off pick's step over the fastest timed
    config of its workload (the pick's own timing where the sweep holds it, else its "probe" row
    beside the sweep's fastest, timed in turn), and the regret distribution."""
    import numpy as np

    from persist_rnn.bench.torch_layers import PRECISIONS
    from persist_rnn.schedule.planner import choose
    from persist_rnn.targets import as_target
    from tir_templates.spec import CellSpec

    timed, probes = {}, {}
    for line in open(path):
        r = json.loads(line)
        key = (r.get("cell", "").lower(), r.get("hidden"), r.get("batch"), r.get("precision"))
        if "measured_us" in r:
            timed.setdefault(key, []).append(r)
        elif r.get("part") == "probe" and r.get("us"):
            probes.setdefault(key, []).append(r)
    lines, regrets = [], []
    for key in sorted(timed):
        cell, hidden, batch, precision = key
        build, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype=dtype)
        pick = choose(spec, as_target("cuda"), batch, measure=False, precision=build).config
        if pick is None:
            continue
        best = min(r["measured_us"] for r in timed[key])
        own = [r["measured_us"] for r in timed[key] if r["config"] == pick.as_dict()]
        beside = [r for r in probes.get(key, []) if r["pick"] and r["config"] == pick.as_dict()]
        if own:
            regret, how = min(own) / best, "swept"
        elif beside:
            regret = beside[0]["us"] / min(r["us"] for r in probes[key])
            how = "timed beside the sweep's fastest"
        else:
            lines.append(f"{cell} H={hidden} B={batch} {precision}: the pick was not timed")
            continue
        regrets.append(regret)
        lines.append(f"{cell} H={hidden} B={batch} {precision}: {regret:.3f}x ({how})")
    r = sorted(regrets)
    n = len(r)
    lines.append(f"{n} workloads: the pick within 1.15x of the fastest on {sum(x <= 1.15 for x in r)} of {n}; regret "
                 f"geomean {float(np.exp(np.mean(np.log(r)))):.3f}x, median {r[n // 2]:.3f}x, 90th percentile "
                 f"{r[min(n - 1, int(0.9 * n))]:.3f}x, worst {r[-1]:.3f}x")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--random", type=int, default=30)
    ap.add_argument("--shard", default="0/1", help="I/N: only every Nth layer of the set, from the Ith")
    ap.add_argument("--layer", action="append", help="CELL:HIDDEN:BATCH:PRECISION instead of the set's layers")
    ap.add_argument("--shared", type=int, default=0, help="the best-priced configs with A fragments in shared memory")
    ap.add_argument("--report", nargs="+")
    ap.add_argument("--picks-of", help="a side-by-side sweep (sweep_offgrid.py) whose workloads' picks to judge")
    args = ap.parse_args()
    if args.picks_of:
        print(sweep_picks(args.picks_of))
    elif args.report:
        print(report(args.report))
    elif args.out:
        sweep(args)
    else:
        ap.error("--out or --report")


if __name__ == "__main__":
    main()
