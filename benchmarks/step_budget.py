"""Where a batch-1 step's microseconds go (issue 22's budget), before and after a change of exchange.

    python benchmarks/step_budget.py --out budget.jsonl [--layers LSTM:1024 GRU:256]

For each layer (T=100, input = hidden, B=1) and each config (`before`: the shipped tuning log's;
`after`: the same with h through distributed shared memory where it is a cluster config, or as
stamped words where it is a grid config):
- the layer through TVM's VM, and its kernels' own durations from a CUPTI trace (the input
  projection GEMM, the persistent kernel, any zeroing kernel);
- the persistent kernel alone at T=100, 400 and 1000, the least-squares slope its time per step,
  three ways:
  `full`; `no_dot` (the dot products left out: their time is full - no_dot); `bare` (the cell's
  gates left out too: each unit's h(t) is its first gate sum plus its input; their time is
  no_dot - bare). What `bare` keeps is the step's skeleton: next inputs, h(t-1) in (the barrier
  and the L2 reload, the stamped words' wait, or the dsmem wait), the syncs, h(t) out.
The ablated kernels compute nonsense; only their times are read. They are built by rebinding the
persistent kernel module's `dot_products` and `update` and reloading it (TVMScript macros take
their globals when they are defined).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tvm.script import tirx as T  # noqa: E402

import persist_rnn  # noqa: E402
from persist_rnn.bench import cuda_ms, kernel_trace, strict_fp32_case, vm_call  # noqa: E402
from persist_rnn.schedule.measure import build_kernel, kernel_arrays, time_kernel  # noqa: E402
from tir_templates.config import Config  # noqa: E402
from tir_templates.persistent import dots, kernel, update  # noqa: E402
from tir_templates.persistent.update import each_owned_pair, h_out, recurrent_parts  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

SHIPPED_LOG = os.path.join(os.path.dirname(__file__), "..", "docs", "data", "tune-h100.jsonl")
LAYERS = [("LSTM", 256), ("GRU", 256), ("LSTM", 1024), ("GRU", 1024)]
STEPS = (100, 400, 1000)


@T.macro
def no_dot_products(L, t, hs, gs, phase):
    """The ablation of `dots.dot_products`: no products at all."""
    T.evaluate(0)


@T.macro
def gateless_pair(L, a, t, e, b, j, bi, d, hs, gs, s, hs_next):
    """The ablation of `update.update_pair`: h(t) is the first gate's sum plus its input, stored
    and published where the kernel's own update would."""
    t.hn[t.row, e] = recurrent_parts(L, t, gs, e, bi, j % L.TW)[0] + t.xr[t.row, e * L.XR]
    a.y[s, d, b, j] = t.hn[t.row, e]
    h_out(L, a, t, e, b, j, bi, d, s, hs_next)


@T.macro
def gateless_update(L, a, t, hs, gs, s, ch, hs_next):
    each_owned_pair(L, a, t, ch, gateless_pair, hs, gs, s, hs_next)


def ablated_kernel(spec: CellSpec, cfg: Config, variant: str):
    """The persistent kernel of `variant` ("full", "no_dot", "bare")."""
    saved = dots.dot_products, update.update
    try:
        if variant in ("no_dot", "bare"):
            dots.dot_products = no_dot_products
        if variant == "bare":
            update.update = gateless_update
        return importlib.reload(kernel).persistent_kernel(spec, cfg)
    finally:
        dots.dot_products, update.update = saved
        importlib.reload(kernel)


def step_times(spec: CellSpec, cfg: Config, dev, target) -> dict:
    """Microseconds per step (the slope of a line through T = STEPS) and at each T, of each variant."""
    out = {}
    for variant in ("full", "no_dot", "bare"):
        lib = build_kernel(ablated_kernel(spec, cfg, variant), target)
        us = [time_kernel(lib, dev, kernel_arrays(spec, 1, n, slots=cfg.exchange_slots(spec)), repeats=9) for n in STEPS]
        out[f"{variant}_step_us"] = float(np.polyfit(STEPS, us, 1)[0])
        out[f"{variant}_t100_us"] = us[0]
        out[f"{variant}_us"] = us
    out["dot_us"] = out["full_step_us"] - out["no_dot_step_us"]
    out["gates_us"] = out["no_dot_step_us"] - out["bare_step_us"]
    out["skeleton_us"] = out["bare_step_us"]
    out["prologue_us"] = out["full_t100_us"] - STEPS[0] * out["full_step_us"]
    return out


def layer_kernels(compiled, feeds) -> dict:
    """The layer through the VM (ms) and each of its kernels' median duration (µs) in a CUPTI trace."""
    import tvm

    call = vm_call(compiled, feeds)
    events = kernel_trace(call, 20, tvm.cuda(0).sync)
    names = sorted({e["name"] for e in events})
    return {"layer_ms": cuda_ms(call),
            "kernels_us": {n: float(np.median([e["dur"] for e in events if e["name"] == n])) for n in names}}


def main():
    import tvm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", nargs="*", help="CELL:H (default: LSTM and GRU at H=256 and 1024)")
    args = ap.parse_args()
    layers = [(c, int(h)) for c, h in (s.split(":") for s in args.layers)] if args.layers else LAYERS
    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    for cell, hidden in layers:
        _, _, _, model, feeds = strict_fp32_case(cell, hidden, 1, STEPS[0])
        before = persist_rnn.compile(model, "cuda", tuning_log=SHIPPED_LOG)
        cfg = Config.from_dict(before.report()[0].config)
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")
        configs = {"before": cfg, "after": dataclasses.replace(cfg, **({"dsmem": True} if cfg.cluster else {"stamped": True}))}
        for name, c in configs.items():
            compiled = before if name == "before" else persist_rnn.compile(model, "cuda", config=c)
            row = {"cell": cell, "hidden": hidden, "batch": 1, "build": name, "config": c.as_dict(),
                   **layer_kernels(compiled, feeds), **step_times(spec, c, dev, target)}
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "config"}),
                  flush=True)


if __name__ == "__main__":
    main()
