"""The 16-bit mma step's exchange of h(t-1), kernel alone, on each layer's measure-off pick: fp32
(every CTA packs the B fragments' pairs itself) against 16 bits (`Config.h16_exchange`) with as
many of a thread's 16-byte loads in flight as `h16_exchange.loads_in_flight` allows ("h16"), and
with N forced ("h16/N"), timed in turn (needs a GPU).

    python benchmarks/exchange_ab.py LSTM:768:32:fp16 GRU:640:128:fp16 --out rows.jsonl --loads 16 8 4

The variants are built in parallel worker processes (each sets its variant before it builds),
then timed in rounds, every variant once a round. One JSON line a layer: microseconds a step of
each variant (median of the rounds) and the pick.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import tempfile

import tvm

from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.measure import build_kernel, kernel_arrays, time_kernel, timing
from persist_rnn.schedule.planner import choose, target_arch
from persist_rnn.targets import as_target
from tir_templates.config import Config
from tir_templates.persistent import h16_exchange, persistent_kernel
from tir_templates.spec import CellSpec

STEPS = 100
H16_EXCHANGE = Config.h16_exchange  # the product's rule, restored before each build (workers are reused)


def layer(text: str) -> tuple[CellSpec, int, str]:
    cell, hidden, batch, precision = text.split(":")
    _, dtype, _ = PRECISIONS[precision]
    return CellSpec(cell.lower(), int(hidden), int(hidden), linear_before_reset=cell.upper() == "GRU",
                    dtype=dtype), int(batch), precision


def build(spec: CellSpec, cfg: Config, variant: str, path: str, arch: str) -> int:
    """Build `variant` ("fp32", "h16" or "h16/N") of the kernel for `arch` into `path`; its exchange slots."""
    Config.h16_exchange = (lambda self, spec: False) if variant == "fp32" else H16_EXCHANGE
    h16_exchange.FORCED_LOADS = int(variant.split("/")[1]) if "/" in variant else None
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    build_kernel(persistent_kernel.__wrapped__(spec, cfg), target).export_library(path)
    return cfg.exchange_slots(spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION")
    ap.add_argument("--out", required=True)
    ap.add_argument("--loads", nargs="*", type=int, default=[16, 8, 4])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    variants = ["fp32", "h16"] + [f"h16/{n}" for n in args.loads]
    tmp = tempfile.mkdtemp()
    target = as_target("cuda")
    arch = target_arch(target)
    jobs = {}
    # fresh interpreters: a forked child of a process that has touched the GPU cannot build
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count(),
                                                mp_context=multiprocessing.get_context("spawn")) as pool:
        for text in args.layers:
            spec, batch, precision = layer(text)
            cfg = choose(spec, target, batch, measure=False, precision=PRECISIONS[precision][0]).config
            for v in variants:
                path = os.path.join(tmp, f"{text.replace(':', '_')}_{v.replace('/', '_')}.so")
                jobs[text, v] = (spec, batch, cfg, path, pool.submit(build, spec, cfg, v, path, arch))
        for *_, built in jobs.values():
            built.result()  # a failed build raises here, naming its error
    dev = tvm.cuda(0)
    times = {key: [] for key in jobs}
    for _ in range(args.rounds):
        for (text, v), (spec, batch, cfg, path, slots) in jobs.items():
            lib = tvm.runtime.load_module(path)
            arrays = kernel_arrays(spec, batch, STEPS, slots=slots.result())
            try:
                times[text, v].append(time_kernel(lib, dev, arrays, cold=timing(spec, dev) == "cold") / STEPS)
            except RuntimeError as err:  # the fp32 variant of a pick that fits only with 16-bit h
                print(f"{text} {v}: {str(err).strip().splitlines()[-1]}", flush=True)
    with open(args.out, "a") as f:
        for text in args.layers:
            cfg = next(j[2] for (t, _), j in jobs.items() if t == text)
            row = {"part": "exchange_ab", "layer": text, "config": cfg.as_dict(),
                   "us_per_step": {v: statistics.median(times[text, v]) if times[text, v] else None
                                   for v in variants}}
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
