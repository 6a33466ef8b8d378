"""Where a corpus model's time goes on the GPU: the CUDA kernels of one call, summed by kernel.

    python benchmarks/corpus_kernels.py --out kernels.jsonl [--batch 1] [--models crnn_ocr,gru_enhancer]

For each self-made corpus model as exported (symbolic shapes), compiled by persist_rnn: the
kernels of 20 calls through TVM's VM (torch profiler), per kernel name the calls, total µs per
model call and share; and the same for the torch module (cuDNN, eager), so that the slower part
is named. The input sizes are benchmarks/corpus_latency.py's.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures", "corpus"))

CALLS = 20


def _summary(events):
    per = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        per[e["name"]][0] += 1
        per[e["name"]][1] += e["dur"]
    total = sum(d for _, d in per.values()) / CALLS
    rows = sorted(((n, c // CALLS, d / CALLS) for n, (c, d) in per.items()), key=lambda r: -r[2])
    span = (events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"]) / CALLS if events else 0.0
    return {"kernel_us": total, "span_us": span,
            "kernels": [{"name": n[:90], "per_call": c, "us": round(d, 2)} for n, c, d in rows[:12]]}


def main():
    import torch
    import tvm
    from corpus_latency import OWN
    from make_corpus import build, example_input
    from tvm import relax

    import persist_rnn
    from persist_rnn.bench.gpu_timing import kernel_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--models", default=",".join(OWN))
    args = ap.parse_args()
    for name in args.models.split(","):
        path = os.path.join(HERE, "..", "tests", "fixtures", "corpus", f"{name}_torchscript.onnx")
        compiled = persist_rnn.compile(path, "cuda")
        x = example_input(name, args.batch, OWN[name])
        dev = tvm.cuda(0)
        vm = relax.VirtualMachine(compiled.executable, dev)
        arg = tvm.runtime.tensor(x.numpy(), dev)
        vm["main"](arg)
        ours = _summary(kernel_trace(lambda: vm["main"](arg), CALLS, dev.sync))
        module, xc = build(name).cuda(), x.cuda()
        with torch.no_grad():
            module(xc)
            theirs = _summary(kernel_trace(lambda: module(xc), CALLS, torch.cuda.synchronize))
        row = {"model": name, "batch": args.batch, "persist_rnn": ours, "torch_eager": theirs}
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
