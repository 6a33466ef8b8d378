"""Where a compiled layer's wall time goes between kernels (GPU, torch's profiler).

    python benchmarks/timeline.py [--tuning-log F] --cell LSTM --hidden 64 --batch 1 [--precision fp16]

Compiles the layer as `bench --parts offgrid` does (measure off; no tuning log unless given) and
prints JSON: the host's time per VM call when nothing waits for the GPU (`host_us_per_call`; if
it is close to the measured layer time, the layer is bound by the VM's dispatch, not the GPU),
the CUDA-event time per call, from a CUPTI trace of back-to-back calls every kernel's duration
and the gap before it (`kernels`: name, start-to-start offset, duration, gap, in µs), and each
kernel name's µs a call (`per_call_us`), so the input projection's share of a layer is one line.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import cuda_ms, kernel_trace, vm_call
from persist_rnn.bench.torch_layers import PRECISIONS, strict_fp32_case


def main():
    import tvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuning-log")
    ap.add_argument("--cell", default="LSTM")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=sorted(PRECISIONS))
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    build_precision, dtype, _ = PRECISIONS[args.precision]
    *_, model, feeds = strict_fp32_case(args.cell, args.hidden, args.batch, 100, dtype)
    compiled = persist_rnn.compile(model, "cuda", precision=build_precision, tuning_log=args.tuning_log,
                                   measure=False)
    dev = tvm.cuda(0)
    call = vm_call(compiled, feeds)
    row = {"cell": args.cell, "hidden": args.hidden, "batch": args.batch, "precision": args.precision,
           "config": compiled.report()[0].config, "event_ms": cuda_ms(call)}
    for _ in range(3):
        call()
    dev.sync()
    t0 = time.perf_counter()
    for _ in range(200):
        call()
    row["host_us_per_call"] = (time.perf_counter() - t0) / 200 * 1e6
    dev.sync()
    kernels = kernel_trace(call, args.calls, dev.sync)
    t_first, end = kernels[0]["ts"] if kernels else 0, None
    row["kernels"], per_name = [], collections.Counter()
    for e in kernels:
        row["kernels"].append([e["name"][:40], round(e["ts"] - t_first, 2), round(e["dur"], 2),
                               None if end is None else round(e["ts"] - end, 2)])
        per_name[e["name"][:60]] += e["dur"] / args.calls
        end = e["ts"] + e["dur"]
    row["per_call_us"] = {k: round(v, 2) for k, v in per_name.most_common()}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
