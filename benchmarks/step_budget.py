"""Where a batch-1 step's microseconds go (issue 22's budget), before and after a change of exchange.

    python benchmarks/step_budget.py --out budget.jsonl [--layers LSTM:1024 GRU:256]
    python benchmarks/step_budget.py --out budget.jsonl --untuned --layers LSTM:768:32:fp16 GRU:640:128:fp16

For each layer (T=100, input = hidden, B=1 unless CELL:H:B[:PRECISION] says otherwise) and each
config (`after`: the shipped tuning log's, or with `--untuned` the default compile's with no
tuning log and measure off, as `bench --parts offgrid` builds it; `before`, B=1 only: the same
with h through L2 and a barrier a step, the cluster's or the grid's, as before the
distributed-shared-memory and stamped exchanges):
- the layer through TVM's VM, and its kernels' own durations from a CUPTI trace (the input
  projection GEMM, the persistent kernel, any zeroing kernel);
- the persistent kernel alone at T=100, 400 and 1000, the least-squares slope its time per step,
  five ways, each leaving out more of the step:
  `full`; `no_dot` (the dot products left out: their time is full - no_dot); `bare` (the cell's
  gates left out too: each unit's h(t) is its first gate sum plus its input; their time is
  no_dot - bare); `unsynced` (nothing waits for another CTA: no grid or cluster barrier, the
  stamped words read once whatever their stamp, a dsmem CTA's units of h sent to itself, so that
  its mbarrier completes with its own bytes; the barrier's time, what waiting for the other CTAs
  costs, is bare - unsynced); `local` (h(t-1) not fetched at all: no loads from L2, no dsmem
  sends; the exchange's time is unsynced - local). What `local` keeps is the rest of the step:
  next inputs, the syncs, h(t) out.
The ablated kernels compute nonsense; only their times are read. They are built by rebinding the
persistent kernel module's `dot_products`, `update`, `h_into_shared`, `end_of_step` and
`dsmem_exchange` and reloading it (TVMScript macros take their globals when they are defined).
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
from persist_rnn.bench.gpu_timing import cuda_ms, kernel_trace, vm_call  # noqa: E402
from persist_rnn.bench.torch_layers import PRECISIONS, strict_fp32_case  # noqa: E402
from persist_rnn.schedule.measure import build_kernel, kernel_arrays, time_kernel  # noqa: E402
from tir_templates.config import Config  # noqa: E402
from tir_templates.persistent import dots, exchange, kernel, update  # noqa: E402
from tir_templates.persistent.exchange import DSMEM_SEND, DSMEM_WAIT, load_h  # noqa: E402
from tir_templates.persistent.h16_exchange import load_h16  # noqa: E402
from tir_templates.persistent.stamped_exchange import flat_words, issue_words, words_into_shared  # noqa: E402
from tir_templates.persistent.update import each_owned_pair, h_out, recurrent_parts  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

SHIPPED_LOG = os.path.join(os.path.dirname(__file__), "..", "docs", "data", "tune-h100.jsonl")
LAYERS = [("LSTM", 256), ("GRU", 256), ("LSTM", 1024), ("GRU", 1024)]
STEPS = (100, 400, 1000)


@T.macro
def no_dot_products(L, a, t, hs, gs, phase):
    """The ablation of `dots.dot_products`: no products at all. One word of the gate sums is still
    written (every thread, the same zero): a shared buffer that is only read has no definition
    left once TVM lowers it ("Buffer ... used before its definition")."""
    gs[0, 0] = T.float32(0)


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


@T.macro
def unsynced_h_in(L, a, t, hs, s, slot, ch):
    """The ablation of `exchange.h_into_shared` that waits for no CTA: h(t-1) loaded from L2 once
    (stamped words: each word read once and taken whatever its stamp: `load_stamped_h` without
    its rounds)."""
    if L.stamped:
        cta = t.cta
        d = L.dir_of(cta)
        flat = flat_words(L, a)
        rows = T.min(a.n_b - ch * L.BC, T.int64(L.BC))
        raw = T.alloc_buffer((L.WORDS,), "uint64", scope="local")
        issue_words(L, a, t, raw, flat, s % 2, d, ch, rows)
        words_into_shared(L, a, t, hs, raw, rows)
    elif L.H16:
        load_h16(L, a, t, hs, slot, ch)
    else:
        load_h(L, a, t, hs, slot, ch)


@T.macro
def no_h_in(L, a, t, hs, s, slot, ch):
    """The ablation of `exchange.h_into_shared` that fetches nothing (h(t-1) stays as it was)."""
    T.evaluate(0)


@T.macro
def unsynced_end_of_step(L, a, cta, index):
    """The ablation of `exchange.end_of_step` with no grid or cluster barrier: the CTA's own sync."""
    T.tvm_storage_sync("shared")


@T.macro
def self_dsmem_exchange(L, a, t, hs_next, bar, s):
    """The ablation of `exchange.dsmem_exchange` that waits for no peer: every 16-byte store goes
    to the CTA's own rank (the same address: its own units onto themselves), so the mbarrier
    completes with the CTA's own bytes (as many as the peers' would be)."""
    T.tvm_storage_sync("shared")
    if s + 1 < a.n_t:
        for e in T.unroll((L.SENDS + L.NT - 1) // L.NT):
            if L.sends(t.tx, e):
                peer, row, col = L.dsmem_store(t.cta, t.tx, e)
                T.cuda.func_call("prnn_dsmem_send", T.address_of(hs_next[row, col]), T.Cast("uint32", t.cta % L.CPD),
                                 T.address_of(bar[s % 2]), source_code=DSMEM_SEND)
        T.cuda.func_call("prnn_dsmem_wait", T.address_of(bar[s % 2]), T.Cast("uint32", s // 2 % 2),
                         T.uint32(L.RECV_BYTES), source_code=DSMEM_WAIT)


KEEP = r"""
__device__ __forceinline__ void prnn_keep(void* p) {
  // no instruction: the buffer at p stays allocated although nothing else reads it
  asm volatile("" :: "l"(p));
}
"""


@T.macro
def no_dsmem_exchange(L, a, t, hs_next, bar, s):
    """The ablation of `exchange.dsmem_exchange` that sends and awaits nothing (h(t) stays where
    the CTA put it, which TVM would otherwise find unread and drop, so `prnn_keep` names it)."""
    T.tvm_storage_sync("shared")
    T.cuda.func_call("prnn_keep", T.address_of(hs_next[0, 0]), source_code=KEEP)


VARIANTS = ("full", "no_dot", "bare", "unsynced", "local")
#: what each variant rebinds, (module, name, ablation), on top of the variant before it
ABLATIONS = {
    "no_dot": [(dots, "dot_products", no_dot_products)],
    "bare": [(update, "update", gateless_update)],
    "unsynced": [(exchange, "h_into_shared", unsynced_h_in), (exchange, "end_of_step", unsynced_end_of_step),
                 (exchange, "dsmem_exchange", self_dsmem_exchange)],
    "local": [(exchange, "h_into_shared", no_h_in), (exchange, "dsmem_exchange", no_dsmem_exchange)],
}


def ablated_kernel(spec: CellSpec, cfg: Config, variant: str):
    """The persistent kernel of `variant` (one of VARIANTS): its ablations and those before it."""
    rebound = [r for v in VARIANTS[1:VARIANTS.index(variant) + 1] for r in ABLATIONS[v]]
    saved = [(module, name, getattr(module, name)) for module, name, _ in rebound]
    try:
        for module, name, ablation in rebound:
            setattr(module, name, ablation)
        return importlib.reload(kernel).persistent_kernel(spec, cfg)
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
        importlib.reload(kernel)


def step_times(spec: CellSpec, cfg: Config, dev, target, batch: int = 1) -> dict:
    """Microseconds per step (the slope of a line through T = STEPS) and at each T, of each variant,
    and the step's parts by difference."""
    out = {}
    for variant in VARIANTS:
        try:
            lib = build_kernel(ablated_kernel(spec, cfg, variant), target)
        except Exception as err:  # an ablation a template's variant does not take: its parts stay unknown
            out[f"{variant}_error"] = str(err).splitlines()[-1][:200]
            out[f"{variant}_step_us"] = float("nan")
            continue
        us = [time_kernel(lib, dev, kernel_arrays(spec, batch, n, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec)), repeats=9) for n in STEPS]
        out[f"{variant}_step_us"] = float(np.polyfit(STEPS, us, 1)[0])
        out[f"{variant}_t100_us"] = us[0]
        out[f"{variant}_us"] = us
    out["dot_us"] = out["full_step_us"] - out["no_dot_step_us"]
    out["gates_us"] = out["no_dot_step_us"] - out["bare_step_us"]
    out["skeleton_us"] = out["bare_step_us"]
    out["barrier_us"] = out["bare_step_us"] - out["unsynced_step_us"]
    out["exchange_us"] = out["unsynced_step_us"] - out["local_step_us"]
    out["rest_us"] = out["local_step_us"]
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


def parse_layer(text: str) -> tuple[str, int, int, str]:
    """CELL:H[:B[:PRECISION]] -> (cell, hidden, batch, precision); B=1 and fp32 unless given."""
    parts = text.split(":")
    return parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else 1, parts[3] if len(parts) > 3 else "fp32"


def main():
    import tvm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", nargs="*", help="CELL:H[:B[:PRECISION]] (default: LSTM and GRU at H=256 and 1024, B=1)")
    ap.add_argument("--untuned", action="store_true", help="the default compile's config (no tuning log, measure off)")
    ap.add_argument("--tuning-log", default=SHIPPED_LOG, help="the log whose configs are `after` (default: the shipped H100 log)")
    args = ap.parse_args()
    layers = [parse_layer(s) for s in args.layers] if args.layers else [(c, h, 1, "fp32") for c, h in LAYERS]
    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    for cell, hidden, batch, precision in layers:
        build_precision, dtype, _ = PRECISIONS[precision]
        _, _, _, model, feeds = strict_fp32_case(cell, hidden, batch, STEPS[0], dtype)
        options = {"tuning_log": None, "measure": False} if args.untuned else {"tuning_log": args.tuning_log}
        shipped = persist_rnn.compile(model, "cuda", precision=build_precision, **options)
        cfg = Config.from_dict(shipped.report()[0].config)
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
        configs = {"after": cfg} if batch > 1 or args.untuned else {
            "before": dataclasses.replace(cfg, dsmem=False, stamped=False), "after": cfg}
        for name, c in configs.items():
            compiled = shipped if name == "after" else persist_rnn.compile(model, "cuda", config=c)
            row = {"cell": cell, "hidden": hidden, "batch": batch, "precision": precision, "build": name,
                   "config": c.as_dict(), **layer_kernels(compiled, feeds), **step_times(spec, c, dev, target, batch)}
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "config"}),
                  flush=True)


if __name__ == "__main__":
    main()
