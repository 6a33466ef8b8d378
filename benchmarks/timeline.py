"""Where a compiled layer's wall time goes between kernels (GPU, torch's profiler).

    python benchmarks/timeline.py --tuning-log docs/data/tune-h100.jsonl --cell LSTM --hidden 64 --batch 1

Prints JSON: the host's time per VM call when nothing waits for the GPU (`host_us_per_call`; if
it is close to the measured layer time, the layer is bound by the VM's dispatch, not the GPU),
the CUDA-event time per call, and from a CUPTI trace of back-to-back calls every kernel's
duration and the gap before it (`kernels`: name, start-to-start offset, duration, gap, in µs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import cuda_ms, kernel_trace
from persist_rnn.bench.torch_layers import onnx_from_torch, torch_layer


def main():
    import torch
    import tvm
    from tvm import relax

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuning-log")
    ap.add_argument("--cell", default="LSTM")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    layer = torch_layer(args.cell, args.hidden, seed=0)
    x = torch.randn(100, args.batch, args.hidden, device="cuda")
    compiled = persist_rnn.compile(onnx_from_torch(args.cell, layer, 100, args.batch), "cuda",
                                   tuning_log=args.tuning_log)
    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(compiled.executable, dev)
    x_dev = tvm.runtime.tensor(x.cpu().numpy(), dev)
    call = lambda: vm["main"](x_dev)
    row = {"cell": args.cell, "hidden": args.hidden, "batch": args.batch, "event_ms": cuda_ms(call)}
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
    row["kernels"] = []
    for e in kernels:
        row["kernels"].append([e["name"][:40], round(e["ts"] - t_first, 2), round(e["dur"], 2),
                               None if end is None else round(e["ts"] - end, 2)])
        end = e["ts"] + e["dur"]
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
