"""Fit the cost model's weights to measured configs, and judge its ranking.

Input: JSON lines from `benchmarks/sweep_configs.py` or `persist-rnn calibrate --sweep-out`
(one measured config each). The weights
minimise the relative error of predicted step times (least squares on rows scaled by 1/measured,
negative weights dropped and refitted), so the model ranks well across fast and slow workloads.
The tensor-core terms are fitted apart, on a sweep that times tensor-core and FMA-unit configs
side by side (`benchmarks/sweep_offgrid.py`), with the other weights fixed.

    python -m persist_rnn.schedule.fit sweep.jsonl      # per-workload and held-out ranking quality
    python -m persist_rnn.schedule.fit --tensor-cores docs/data/sweep-offgrid-h100.jsonl
(`persist-rnn calibrate sweep.jsonl --out DIR` writes the fitted calibration.)
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json

import numpy as np

from tir_templates.config import Config
from tir_templates.spec import CellSpec

from .cost_model import FEATURES, MMA_FEATURES, features, step_us
from .gpu import gpu_model

#: the terms fitted on the FMA-unit sweeps
BASE_FEATURES = tuple(k for k in FEATURES if k not in MMA_FEATURES)


def _spec(row) -> CellSpec:
    return CellSpec(row["cell"], row["hidden"], row["hidden"], linear_before_reset=(row["cell"] == "gru"),
                    dtype=row.get("dtype", "float32"))


def _nonnegative_lstsq(A, b):
    """w >= 0 minimising |A w - b|^2: least squares with negative weights dropped and the rest refitted."""
    active = list(range(A.shape[1]))
    while True:
        w, *_ = np.linalg.lstsq(A[:, active], b, rcond=None)
        if (w >= 0).all() or len(active) == 1:
            break
        active = [a for a, wi in zip(active, w) if wi >= 0]
    out = np.zeros(A.shape[1])
    out[active] = np.maximum(w, 0.0)
    return out


def _nonnegative_relative_fit(X, y):
    """Weights w >= 0 minimising sum(((X w) - y) / y)^2."""
    return _nonnegative_lstsq(X / y[:, None], np.ones(len(y)))


def fit_weights(rows, gpu) -> dict:
    """Non-negative weights (cycles per unit; barrier_us as a factor) of BASE_FEATURES from
    measured rows."""
    clock = gpu.clock_ghz * 1e3
    X = np.array([[features(_spec(r), Config.from_dict(r["config"]), gpu, r["batch"])[k] / (1.0 if k == "barrier_us" else clock)
                   for k in BASE_FEATURES] for r in rows])
    y = np.array([r["measured_us"] for r in rows])
    return {k: float(w) for k, w in zip(BASE_FEATURES, _nonnegative_relative_fit(X, y))}


def fit_tensor_core_terms(rows, gpu) -> dict:
    """`gpu`'s weights plus MMA_FEATURES' fitted to the tensor-core rows of a side-by-side sweep,
    the other weights kept (they rank the FMA-unit configs as fitted)."""
    clock = gpu.clock_ghz * 1e3
    rows = [r for r in rows if "measured_us" in r and r["config"].get("mma_k_split")]
    base = dataclasses.replace(gpu, weights={**gpu.weights, **{k: 0.0 for k in MMA_FEATURES}})
    y, X = [], []
    for r in rows:
        spec, cfg = _spec(r), Config.from_dict(r["config"])
        f = features(spec, cfg, gpu, r["batch"])
        y.append(r["measured_us"] - step_us(spec, cfg, base, r["batch"]))  # what the mma terms must explain
        X.append([f[k] / clock for k in MMA_FEATURES])
    y, X = np.array(y), np.array(X)
    measured = np.array([r["measured_us"] for r in rows])
    # relative to the whole step: minimise sum(((X w) - y) / measured)^2, w >= 0
    w = _nonnegative_lstsq(X / measured[:, None], y / measured) if len(rows) else np.zeros(len(MMA_FEATURES))
    return {**gpu.weights, **{k: float(v) for k, v in zip(MMA_FEATURES, w)}}


def _workload(row) -> tuple:
    """(cell, hidden, batch, precision): the workload a side-by-side sweep's row timed a config of."""
    return row["cell"], row["hidden"], row["batch"], row.get("precision", "fp32")


def _workloads(rows) -> dict:
    by = collections.defaultdict(list)
    for r in rows:
        if "measured_us" in r:
            by[_workload(r)].append(r)
    return by


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 and ra.std() and rb.std() else float("nan")


def pick_quality(rows, gpu, *, tensor_cores: bool = True) -> list[dict]:
    """Per workload of a side-by-side sweep: the measured time of the model's pick over the best
    measured (its regret), and the rank correlation of predicted and measured times. Without
    `tensor_cores` the pick is among FMA-unit configs only, as the planner picks where the
    calibration does not carry the tensor-core terms."""
    out = []
    for (cell, hidden, batch, precision), rs in sorted(_workloads(rows).items()):
        spec = _spec(rs[0])
        pred = [step_us(spec, Config.from_dict(r["config"]), gpu, batch) for r in rs]
        allowed = [i for i, r in enumerate(rs) if tensor_cores or not r["config"].get("mma_k_split")]
        if not allowed:  # a workload timed on tensor-core configs only
            continue
        pick = min(allowed, key=lambda i: pred[i])
        best = min(r["measured_us"] for r in rs)
        out.append({"cell": cell, "hidden": hidden, "batch": batch, "precision": precision, "configs": len(rs),
                    "regret": rs[pick]["measured_us"] / best,
                    "spearman": _spearman(pred, [r["measured_us"] for r in rs])})
    return out


def held_out_picks(rows, gpu) -> list[dict]:
    """`pick_quality` of each workload with the tensor-core terms fitted without it."""
    out = []
    for key, rs in sorted(_workloads(rows).items()):
        train = [r for r in rows if _workload(r) != key]
        fitted = dataclasses.replace(gpu, weights=fit_tensor_core_terms(train, gpu))
        out += pick_quality(rs, fitted)
    return out


def pick_summary(quality) -> str:
    regret = [q["regret"] for q in quality]
    rho = [q["spearman"] for q in quality if q["spearman"] == q["spearman"]]
    return (f"{len(regret)} workloads: regret geomean {float(np.exp(np.mean(np.log(regret)))):.3f}x, worst "
            f"{max(regret):.3f}x, within 1.15x {sum(r <= 1.15 for r in regret)}/{len(regret)}; "
            f"rank correlation mean {np.mean(rho):.2f}")


def ranking_quality(rows, gpu) -> list[dict]:
    """Per workload: measured time of the model's top-1 and best-of-top-5 against the true best."""
    from .cost_model import step_us

    by = collections.defaultdict(list)
    for r in rows:
        by[(r["cell"], r["hidden"], r["batch"])].append(r)
    out = []
    for (cell, hidden, batch), rs in sorted(by.items()):
        spec = _spec(rs[0])
        pred = sorted(rs, key=lambda r: step_us(spec, Config.from_dict(r["config"]), gpu, batch))
        best = min(r["measured_us"] for r in rs)
        out.append({"cell": cell, "hidden": hidden, "batch": batch, "configs": len(rs), "best_us": best,
                    "top1_ratio": pred[0]["measured_us"] / best,
                    "top5_ratio": min(r["measured_us"] for r in pred[:5]) / best})
    return out


def summary(quality) -> str:
    t1 = [r["top1_ratio"] for r in quality]
    t5 = [r["top5_ratio"] for r in quality]
    return f"top-1 mean {np.mean(t1):.3f}x, worst {max(t1):.3f}x; best of top-5 mean {np.mean(t5):.3f}x"


def held_out_quality(rows, gpu) -> dict:
    """Ranking quality on each cell and each hidden size when the weights are fitted without it."""
    import dataclasses

    out = {}
    for key, values in (("cell", sorted({r["cell"] for r in rows})), ("hidden", sorted({r["hidden"] for r in rows}))):
        for v in values:
            train = [r for r in rows if r[key] != v]
            test = [r for r in rows if r[key] == v]
            if train and test:
                fitted = dataclasses.replace(gpu, weights=fit_weights(train, gpu))
                out[f"{key}={v}"] = ranking_quality(test, fitted)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--tensor-cores", action="store_true", help="fit and judge the tensor-core terms on a "
                    "side-by-side sweep (benchmarks/sweep_offgrid.py)")
    args = ap.parse_args()
    rows = [json.loads(line) for p in args.sweeps for line in open(p) if line.strip()]
    rows = [r for r in rows if r.get("part") != "meta"]  # a data file's note of its runs
    gpu = gpu_model(args.arch)
    if args.tensor_cores:
        return tensor_core_report(rows, gpu)
    weights = fit_weights(rows, gpu)
    print("weights:", json.dumps(weights))
    import dataclasses

    fitted = dataclasses.replace(gpu, weights=weights)
    q = ranking_quality(rows, fitted)
    for r in q:
        print(f"{r['cell']} H={r['hidden']} B={r['batch']}: {r['configs']} configs, best {r['best_us']:.2f} us, "
              f"model top-1 {r['top1_ratio']:.3f}x, best of top-5 {r['top5_ratio']:.3f}x")
    print("in sample:", summary(q))
    for name, held_out in held_out_quality(rows, gpu).items():
        print(f"held out {name}:", summary(held_out))

def tensor_core_report(rows, gpu):
    """The tensor-core terms fitted on all rows, and the picks they make, in sample and held out."""
    unfitted = dataclasses.replace(gpu, weights={k: v for k, v in gpu.weights.items() if k not in MMA_FEATURES})
    weights = fit_tensor_core_terms(rows, unfitted)
    print("tensor-core terms:", json.dumps({k: weights[k] for k in MMA_FEATURES}))
    print("FMA-unit configs only (the planner without tensor-core prices):", pick_summary(pick_quality(rows, unfitted, tensor_cores=False)))
    print("every config, the prices set before this sweep (an mma at MMA_ISSUE_SLOTS FMA slots, no chain):", pick_summary(pick_quality(rows, unfitted)))
    print("every config, the calibration's prices:", pick_summary(pick_quality(rows, gpu)))
    print("every config, both terms refitted, in sample:", pick_summary(pick_quality(rows, dataclasses.replace(gpu, weights=weights))))
    held = held_out_picks(rows, unfitted)
    print("every config, both terms refitted, each workload held out:", pick_summary(held))
    for q in held:
        print(f"  {q['cell']} H={q['hidden']} B={q['batch']} {q['precision']}: {q['configs']} configs, pick "
              f"{q['regret']:.3f}x the best, rank correlation {q['spearman']:.2f}")


if __name__ == "__main__":
    main()
