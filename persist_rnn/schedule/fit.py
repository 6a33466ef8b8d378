"""Fit the cost model's weights to measured configs, and judge its ranking.

Input: JSON lines from `benchmarks/sweep_configs.py` or `persist-rnn calibrate --sweep-out`
(one measured config each). The weights
minimise the relative error of predicted step times (least squares on rows scaled by 1/measured,
negative weights dropped and refitted), so the model ranks well across fast and slow workloads.

    python -m persist_rnn.schedule.fit sweep.jsonl      # per-workload and held-out ranking quality
(`persist-rnn calibrate sweep.jsonl --out DIR` writes the fitted calibration.)
"""
from __future__ import annotations

import argparse
import collections
import json

import numpy as np

from tir_templates.config import Config
from tir_templates.spec import CellSpec

from .cost_model import FEATURES, features
from .gpu import gpu_model


def _spec(row) -> CellSpec:
    return CellSpec(row["cell"], row["hidden"], row["hidden"], linear_before_reset=(row["cell"] == "gru"))


def fit_weights(rows, gpu) -> dict:
    """Non-negative weights (cycles per unit; barrier_us as a factor) from measured rows."""
    clock = gpu.clock_ghz * 1e3
    X = np.array([[features(_spec(r), Config.from_dict(r["config"]), gpu, r["batch"])[k] / (1.0 if k == "barrier_us" else clock)
                   for k in FEATURES] for r in rows])
    y = np.array([r["measured_us"] for r in rows])
    active = list(range(len(FEATURES)))
    while True:
        A = X[:, active] / y[:, None]
        w, *_ = np.linalg.lstsq(A, np.ones(len(y)), rcond=None)
        if (w >= 0).all() or len(active) == 1:
            break
        active = [a for a, wi in zip(active, w) if wi >= 0]
    weights = {k: 0.0 for k in FEATURES}
    for a, wi in zip(active, w):
        weights[FEATURES[a]] = float(max(wi, 0.0))
    return weights


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
    args = ap.parse_args()
    rows = [json.loads(line) for p in args.sweeps for line in open(p) if line.strip()]
    gpu = gpu_model(args.arch)
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

if __name__ == "__main__":
    main()
