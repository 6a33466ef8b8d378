"""The GEMM scan (a tensor-core GEMM and an update a step, tir_templates/gemm_scan.py) against the
best persistent config the cost model ranks for the same layer and the streamed scan, kernels
alone, timed in turn at T=MEASURE_STEPS (needs a GPU). Each layer's GEMM scan output is checked
against the streamed scan's (fp32 FMA sums) on the same inputs.

    python benchmarks/gemm_scan_layers.py LSTM:1280:128:fp32 GRU:4096:16:fp32:bi ...

One JSON line a layer: µs a step of each, the cost model's prediction of each, and the largest
difference of Y from the streamed scan's over Y's scale. `--wgmma auto` (16-bit layers, sm_90a)
also times the scan with its step GEMM on the wgmma tensor cores in each plan a build chooses from
(CTA tiles of 64 rows by 128 columns, K split 1-8 ways, `--wgmma-stages`: rings of other depths), each checked against the
mma.sync scan's Y; `--wgmma step` the plan a build for sm_90a takes. Data: docs/data/gemm-scan-h200.jsonl.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import tempfile

import numpy as np
import tvm

from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.gemm_scan_cost import gemm_scan_us, step_launched_early, step_plan, wgmma_plans, wgmma_step
from persist_rnn.schedule.gpu import gpu_model, present_device
from persist_rnn.schedule.measure import (MEASURE_STEPS, as_params, build_kernel, builds, kernel_arrays,
                                          measure_configs, time_kernel, timing)
from persist_rnn.schedule.planner import _ranked, model_pick
from persist_rnn.schedule.space import unmeasured_variant
from persist_rnn.schedule.streamed_cost import streamed_scan_us
from persist_rnn.targets import as_target
from tir_templates.gemm_scan import gemm_precision, gemm_scan, gemm_scan_slots, wgmma_step_problem
from tir_templates.spec import CellSpec
from tir_templates.streamed import streamed_scan


def run(lib, dev, func, arrays):
    """Y after one call of `lib` on `arrays`."""
    tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
    getattr(lib, "mod", lib)["main"](*tensors)
    return tensors[7].numpy().astype("float32")


def traced(lib, dev, func, arrays, steps: int) -> dict:
    """Where a call's time goes, from a CUPTI trace of three back-to-back calls (torch's profiler):
    the GPU's busy µs a step (the kernels' durations), the span from the first kernel's start to the
    last one's end a step, and each kernel name's mean µs. A span well past the busy time is the
    host's launches: the GPU waits between kernels. Kernels launched early (the wgmma scan's
    programmatic launch) overlap, so there the busy time can exceed the span."""
    from persist_rnn.bench.gpu_timing import kernel_trace

    tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
    main = getattr(lib, "mod", lib)["main"]
    main(*tensors)
    dev.sync()
    kernels = kernel_trace(lambda: main(*tensors), 3, dev.sync)
    by_name = {}
    for k in kernels:
        by_name.setdefault(k["name"], []).append(k["dur"])
    span = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
    return {"busy_us_per_step": round(sum(k["dur"] for k in kernels) / (3 * steps), 3),
            "span_us_per_step": round(span / (3 * steps), 3),
            "kernels": {name[:60]: {"count": len(d), "mean_us": round(sum(d) / len(d), 3)} for name, d in by_name.items()}}


def layer(text: str) -> tuple[CellSpec, int, str]:
    """(spec, batch, build precision) of CELL:HIDDEN:BATCH:PRECISION[:bi]."""
    cell, hidden, batch, precision, *bi = text.split(":")
    build_precision, dtype, _ = PRECISIONS[precision]
    return (CellSpec(cell.lower(), int(hidden), int(hidden), "bidirectional" if bi else "forward",
                     linear_before_reset=cell.upper() == "GRU", dtype=dtype), int(batch), build_precision)


def timed_wgmma_plans(mode: str, spec: CellSpec, batch: int, splits: str = "", stages: str = "") -> list[dict]:
    """The wgmma step plans `--wgmma mode` times for a layer: "auto", those a build chooses from
    (gemm_scan_cost.wgmma_plans; those of the comma-separated `splits` where given), each with a
    ring of each of the comma-separated `stages` k-tiles that fits where given; "step", the build's (gemm_scan_cost.wgmma_step); "", none."""
    if mode == "step":
        return [wgmma_step(spec, batch, gpu_model("sm_90").num_sms, True)]
    if mode != "auto":
        return []
    plans = [plan for plan in wgmma_plans(spec)
             if not splits or plan["splits"] in {int(s) for s in splits.split(",")}]
    if stages:
        plans = [dict(plan, stages=int(s)) for plan in plans for s in stages.split(",")]
    return [plan for plan in plans if not wgmma_step_problem(spec, plan)]


def export_wgmma_scan(spec_json: str, batch: int, precision: str, plan: dict, path: str, early: bool = True) -> str:
    """Build the wgmma scan of a layer for sm_90a in a worker process (its kernels launched early, or
    one after another) and export it to `path`."""
    spec = CellSpec.from_json(spec_json)
    func = gemm_scan(spec, batch, precision, early_launch=early, wgmma=plan)
    target = tvm.target.Target({**json.loads(str(as_target("cuda"))), "arch": "sm_90a"})
    build_kernel(func.with_attr("global_symbol", "main"), target).export_library(path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION[:bi]")
    ap.add_argument("--steps", type=int, default=MEASURE_STEPS)
    ap.add_argument("--plans", default="[]", help="step GEMM plans (JSON list of projection_mma plan dicts) to time too")
    ap.add_argument("--scan-only", action="store_true", help="time the GEMM scan alone (no streamed scan or persistent pick)")
    ap.add_argument("--plain-too", action="store_true",
                    help="also time the scan's kernels launched one after another, not early (plain_us)")
    ap.add_argument("--early", action="store_true", help="launch the scan's kernels early whatever its tiles")
    ap.add_argument("--wgmma", default="", choices=("", "auto", "step"), help="'auto': also time the wgmma step's plans (`timed_wgmma_plans`); "
                    "'step': the one plan a build takes (gemm_scan_cost.wgmma_step)")
    ap.add_argument("--wgmma-splits", default="", help="with --wgmma auto: only these splits of K (e.g. 1,2,4)")
    ap.add_argument("--wgmma-stages", default="", help="with --wgmma auto: each plan with rings of these k-tiles (e.g. 3,5,9)")
    ap.add_argument("--wgmma-plain", action="store_true",
                    help="also time each wgmma plan with its kernels launched one after another (plain_us)")
    ap.add_argument("--trace", action="store_true",
                    help="also trace each scan's kernels (`traced`: GPU busy time against the span, a step)")
    ap.add_argument("--unverified", action="store_true",
                    help="rank variants not yet run on a GPU too (`checks.unverified_reason`) for the persistent pick")
    args = ap.parse_args()
    wgmma_builds = {}  # (layer, plan) -> future of its exported library, every core building
    if args.wgmma:
        pool = cf.ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("spawn"))
        out_dir = tempfile.mkdtemp(prefix="wgmma_scans_")
        for text in args.layers:
            spec, batch, build_precision = layer(text)
            for plan in timed_wgmma_plans(args.wgmma, spec, batch, args.wgmma_splits, args.wgmma_stages):
                path = os.path.join(out_dir, f"scan{len(wgmma_builds)}.so")
                wgmma_builds[text, json.dumps(plan)] = pool.submit(export_wgmma_scan, spec.to_json(), batch,
                                                                   build_precision, plan, path)
                if args.wgmma_plain:
                    wgmma_builds[text, json.dumps(plan), "plain"] = pool.submit(
                        export_wgmma_scan, spec.to_json(), batch, build_precision, plan, path[:-3] + "_plain.so", False)
    target, dev = as_target("cuda"), present_device()
    gpu = gpu_model("sm_90")
    picks = {}  # layer -> (the persistent config a compile builds, the model's price of its pick)
    for text in args.layers:  # every persistent build in flight at once
        spec, batch, build_precision = layer(text)
        _, ranked = _ranked(spec, gpu, batch, args.unverified, build_precision)
        if ranked and not args.scan_only:
            pick = model_pick(spec, ranked, gpu, batch)
            picks[text] = (unmeasured_variant(spec, pick, gpu) or pick, next(t for t, c in ranked if c == pick))
            builds().submit(spec, [picks[text][0]], target)
    for text in args.layers:
        cell, hidden, _, precision, *_ = text.split(":")
        hidden = int(hidden)
        spec, batch, build_precision = layer(text)
        row = {"cell": cell.upper(), "hidden": hidden, "batch": batch, "precision": precision,
               "directions": spec.num_directions, "gemm": gemm_precision(spec, build_precision),
               "gemm_scan_predicted_us": round(gemm_scan_us(spec, batch, gpu.num_sms, build_precision), 2),
               "wgmma_predicted_us": round(gemm_scan_us(spec, batch, gpu.num_sms, build_precision, sm90a=True), 2),
               "streamed_predicted_us": round(streamed_scan_us(spec, batch), 2)}
        cold = timing(spec, dev) == "cold"
        row["plan"] = step_plan(spec, batch, gpu.num_sms)
        row["early_launch"] = args.early or step_launched_early(row["plan"])  # as the pass builds it on sm_90
        func = gemm_scan(spec, batch, build_precision, plan=row["plan"], early_launch=row["early_launch"])
        wgmma = timed_wgmma_plans(args.wgmma, spec, batch, args.wgmma_splits, args.wgmma_stages)
        slots = max([gemm_scan_slots(spec, batch)] + [gemm_scan_slots(spec, batch, plan) for plan in wgmma])
        arrays = kernel_arrays(spec, batch, args.steps, slots=slots)
        arrays[1] = arrays[1] / (0.3 * hidden ** 0.5)  # R of N(0, 1/H): a layer that is not chaotic
        lib = build_kernel(func.with_attr("global_symbol", "main"), target)
        row["gemm_scan_us"] = time_kernel(lib, dev, as_params(func, arrays), cold=cold) / args.steps
        got = run(lib, dev, func, arrays)
        if args.trace:
            row["trace"] = traced(lib, dev, func, arrays, args.steps)
        if args.plain_too:
            plain = gemm_scan(spec, batch, build_precision, plan=row["plan"])
            plain_lib = build_kernel(plain.with_attr("global_symbol", "main"), target)
            row["plain_us"] = time_kernel(plain_lib, dev, as_params(plain, arrays), cold=cold) / args.steps
            row["plain_max_diff"] = float(np.abs(run(plain_lib, dev, plain, arrays) - got).max())
        row["plans"] = []
        for plan in json.loads(args.plans):
            other = gemm_scan(spec, batch, build_precision, plan=plan, early_launch=step_launched_early(plan))
            other_lib = build_kernel(other.with_attr("global_symbol", "main"), target)
            us = time_kernel(other_lib, dev, as_params(other, arrays), cold=cold) / args.steps
            err = float(np.abs(run(other_lib, dev, other, arrays) - got).max())
            row["plans"].append({"plan": plan, "us": us, "max_diff_from_default": err})
        row["wgmma"] = []
        for plan in wgmma:
            other = gemm_scan(spec, batch, build_precision, early_launch=True, wgmma=plan)
            other_lib = tvm.runtime.load_module(wgmma_builds[text, json.dumps(plan)].result())
            us = time_kernel(other_lib, dev, as_params(other, arrays), cold=cold) / args.steps
            y = run(other_lib, dev, other, arrays)
            err = float(np.abs(y - got).max() / max(np.abs(got).max(), 1e-30))
            entry = {"plan": plan, "us": round(us, 3), "diff_from_mma_sync": err}
            if args.trace:
                entry["trace"] = traced(other_lib, dev, other, arrays, args.steps)
            if args.wgmma_plain:
                plain_lib = tvm.runtime.load_module(wgmma_builds[text, json.dumps(plan), "plain"].result())
                entry["plain_us"] = round(time_kernel(plain_lib, dev, as_params(other, arrays), cold=cold) / args.steps, 3)
                entry["plain_max_diff"] = float(np.abs(run(plain_lib, dev, other, arrays) - y).max())
            row["wgmma"].append(entry)
        if args.scan_only:
            print(json.dumps(row), flush=True)
            continue
        ref_func = streamed_scan(spec)
        ref_lib = build_kernel(ref_func.with_attr("global_symbol", "main"), target)
        ref_arrays = [a.copy() for a in arrays[:10]] + [np.zeros((3, *arrays[10].shape[1:]), "float32"), arrays[11]]
        want = run(ref_lib, dev, ref_func, ref_arrays)
        row["streamed_us"] = time_kernel(ref_lib, dev, as_params(ref_func, ref_arrays), cold=cold) / args.steps
        row["err_vs_streamed"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        if text in picks:
            pick, predicted_us = picks[text]
            row["persistent_config"] = pick.as_dict()
            row["persistent_predicted_us"] = round(predicted_us, 2)
            timed = measure_configs(spec, [pick], target, dev, batch, seq_len=args.steps)
            row["persistent_us"] = timed[0][0] if timed else None
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
