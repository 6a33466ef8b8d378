"""Timing on the GPU, shared by the benchmarks: CUDA events around back-to-back calls, callables
timed in turn, torch's CUDA-graph recipe, a compiled model's VM call with its inputs on the GPU."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np


def cuda_ms(fn, calls=20, repeats=15, warmup=1):
    """Median milliseconds per call, CUDA events around `calls` back-to-back calls, after `warmup`
    calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return float(np.median(times))


def interleaved_ms(calls: dict, rounds: int = 7, per_timing: int = 20) -> dict:
    """Median ms per call of each callable (a build, a call path), the callables timed in turn
    (the order rotating) for `rounds` rounds: a host-bound call of ~0.1 ms drifts by 10-30% over
    seconds on the H100 box, and callables timed one after another compare different moments
    (call_path.py once put run() 32% over the VM alone that way; in turn, 1%). Each timing starts
    after `per_timing` untimed calls of its own: a rotation does not give every callable every
    predecessor, and one timed right after a syncing one (run() with numpy) can start cold."""
    names, times = list(calls), {n: [] for n in calls}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(cuda_ms(calls[n], calls=per_timing, repeats=5, warmup=per_timing))
    return {n: float(np.median(t)) for n, t in times.items()}


def graph_replay(fn):
    """`fn` captured into a CUDA graph after torch's recipe (three warm-up calls on a side
    stream); the graph's replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def vm_call(compiled, feeds):
    """One call of a persist_rnn-compiled model through TVM's VM, inputs already on the GPU."""
    import tvm
    from tvm import relax

    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(compiled.executable, dev)
    args = [tvm.runtime.tensor(feeds[i.name], dev) for i in compiled.inputs]
    return lambda: vm["main"](*args)


def compiled_ms(compiled, feeds):
    """Milliseconds per call of a persist_rnn-compiled model through TVM's VM, inputs on the GPU."""
    return cuda_ms(vm_call(compiled, feeds))


def kernel_trace(call, calls: int, sync) -> list[dict]:
    """The CUDA kernels (chrome-trace events: name, ts, dur in µs) that `calls` calls of `call` ran."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        sync()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
