"""What one call of a compiled model costs on the GPU, by call path (issue 16): the VM alone with
inputs already on the GPU, run() with numpy (host copies both ways) and run() with torch CUDA
tensors (no copy), timed in turn (`bench.interleaved_ms`); then, after a torch.cuda.graph capture
of run(), the VM, run() (which now copies its outputs out of the VM's pool, which the graph
shares) and the graph's replay, in turn again. One JSON line each.

    python benchmarks/call_path.py --model examples/char_rnn.onnx --batch 1 --out call_path.jsonl [--profile]

`--profile` also prints where run()'s host time goes (cProfile, torch CUDA tensors).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats

import numpy as np
import torch

import persist_rnn
from persist_rnn.bench.gpu_timing import interleaved_ms, vm_call
from persist_rnn.bench.suite import inputs_at_batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="examples/char_rnn.onnx")
    ap.add_argument("--inputs", default=None)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    npz = args.inputs or args.model.replace(".onnx", "_inputs.npz")
    compiled = persist_rnn.compile(args.model, "cuda", measure=False)
    feeds = inputs_at_batch(compiled, npz, args.batch)
    torch_feeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    vm = vm_call(compiled, feeds)
    rows = interleaved_ms({
        "vm, inputs on the GPU": vm,
        "run(), numpy in and out": lambda: compiled.run(feeds),
        "run(), torch CUDA tensors": lambda: compiled.run(torch_feeds),
    }, per_timing=50)
    try:
        warm = torch.cuda.Stream()  # torch's recipe: a few calls on a side stream before capturing
        with torch.cuda.stream(warm):
            for _ in range(3):
                compiled.run(torch_feeds)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled.run(torch_feeds)
        graph.replay()
        torch.cuda.synchronize()
        want = compiled.run(feeds)
        rows["graph replay max abs error vs run()"] = max(float(np.abs(c.cpu().numpy() - w).max())
                                                          for c, w in zip(captured, want))
        rows |= interleaved_ms({
            "after capture: vm, inputs on the GPU": vm,
            "after capture: run(), torch CUDA tensors (outputs copied out of the pool)": lambda: compiled.run(torch_feeds),
            "torch.cuda.graph replay of run()": graph.replay,
        }, per_timing=50)
    except Exception as e:  # record why capture failed, as a result
        rows["torch.cuda.graph capture"] = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [compiled.run(torch_feeds) for _ in range(2000)])
        torch.cuda.synchronize()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    with open(args.out, "a") as f:
        for path, value in rows.items():
            row = {"model": args.model, "batch": args.batch, "path": path, "ms": value}
            f.write(json.dumps(row) + "\n")
            print(json.dumps(row))


if __name__ == "__main__":
    main()
