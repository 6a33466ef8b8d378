"""Fit the wgmma step's prices (gemm_scan_cost.WGMMA_STEP_US) to timed steps, and judge the split
of K they pick on layers the fit never saw.

Input: docs/data/gemm-scan-h200.jsonl's rows of `benchmarks/gemm_scan_layers.py --wgmma auto`, each a
layer with every plan a build chooses from timed ("wgmma": [{"plan", "us"}, ...]).

    python -m persist_rnn.schedule.wgmma_step_fit docs/data/gemm-scan-h200.jsonl --fit-runs S --held-out-runs T
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np

from tir_templates.spec import CellSpec

from .fit import _nonnegative_relative_fit
from .gemm_scan_cost import WGMMA_STEP_US, wgmma_terms
from .gpu import gpu_model

_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def _spec(row) -> CellSpec:
    return CellSpec(row["cell"].lower(), row["hidden"], row["hidden"],
                    "bidirectional" if row["directions"] == 2 else "forward",
                    linear_before_reset=1, dtype=_DTYPES[row["precision"]])


def timed_plans(rows, num_sms: int) -> list[dict]:
    """One entry per timed plan: its layer's index, splits, a direction's µs and `wgmma_terms`."""
    out = []
    for index, row in enumerate(rows):
        spec = _spec(row)
        for entry in row["wgmma"]:
            out.append({"layer": index, "splits": entry["plan"]["splits"],
                        "us": entry["us"] / spec.num_directions,
                        "terms": wgmma_terms(spec, row["batch"], entry["plan"], num_sms)})
    return out


def fit_prices(plans) -> dict:
    """Non-negative µs per unit of each term, minimising the relative error of the plans' times."""
    names = list(WGMMA_STEP_US)
    X = np.array([[p["terms"][n] for n in names] for p in plans])
    y = np.array([p["us"] for p in plans])
    return {n: float(w) for n, w in zip(names, _nonnegative_relative_fit(X, y))}


def priced(plan, prices) -> float:
    """A direction's µs of a timed plan at `prices`, as `wgmma_scan_us` sums them."""
    return sum(prices[n] * units for n, units in plan["terms"].items())


def judge(plans, prices) -> dict:
    """The prices' median and largest relative error, and each layer's regret: the time of the plan
    priced least (the fewest splits of equals, as `wgmma_step` takes) over the fastest plan's, with
    the geomean regret of K never split and split in two beside it (a layer whose k-tiles two does
    not divide counts as its fastest there)."""
    errors = [abs(priced(p, prices) - p["us"]) / p["us"] for p in plans]
    layers = {}
    for p in plans:
        layers.setdefault(p["layer"], []).append(p)
    regret, fixed = [], {1: [], 2: []}
    for own in layers.values():
        best = min(p["us"] for p in own)
        pick = min(own, key=lambda p: (round(priced(p, prices), 6), p["splits"]))
        regret.append(pick["us"] / best)
        for splits in fixed:
            fixed[splits].append(next((p["us"] for p in own if p["splits"] == splits), best) / best)

    def geomean(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))

    return {"layers": len(layers), "plans": len(plans), "median_error": float(np.median(errors)),
            "max_error": max(errors), "regret_geomean": geomean(regret), "regret_max": max(regret),
            "never_split_geomean": geomean(fixed[1]), "two_splits_geomean": geomean(fixed[2])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="JSON lines of gemm_scan_layers.py --wgmma auto, each with its run's letter")
    ap.add_argument("--fit-runs", default="S", help="the runs fitted on (comma-separated letters)")
    ap.add_argument("--held-out-runs", default="T", help="the runs judged only")
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.data) if line.strip()]
    num_sms = gpu_model(args.arch).num_sms

    def plans_of(runs):
        return timed_plans([r for r in rows if r.get("run") in runs.split(",") and r.get("wgmma")], num_sms)

    fitted = fit_prices(plans_of(args.fit_runs))
    print("fitted:", json.dumps({n: round(w, 3) for n, w in fitted.items()}))
    print("shipped:", json.dumps(WGMMA_STEP_US))
    for name, runs in (("fit", args.fit_runs), ("held out", args.held_out_runs)):
        for which, prices in (("fitted", fitted), ("shipped", WGMMA_STEP_US)):
            print(f"{name} runs {runs}, {which} prices:", json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                                       for k, v in judge(plans_of(runs), prices).items()}))


if __name__ == "__main__":
    main()
