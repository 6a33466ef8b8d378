"""FlashRNN's JIT builds, done before the benchmark times anything, many at once.

FlashRNN compiles a CUDA extension for each layer shape and backend on its first call (its fused
LSTM tries several tile configs in turn: about a minute, several at H=1024), and `bench` would do
them one after another, inside the timed run: over GRNN's grid that is most of an hour. Each
build here runs in a process of its own (`python -m persist_rnn.bench.flashrnn_prebuild CELL HIDDEN
BATCH DTYPE BACKEND`), `workers` at a time, into the same cache that the timed call then loads
from (torch's extension directory, Triton's cache). Plain subprocesses, not a multiprocessing
pool, for `schedule/build_worker.py`'s reason: a pool's workers re-import the caller's `__main__`.
A build that fails is recorded, not raised: the timed call records FlashRNN's refusal itself.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

#: the last characters of a failed build's output that its record keeps
KEPT_OUTPUT = 300
#: seconds a build may take before it is killed and recorded as failed: on the H100 the longest
#: that succeeded, the fused LSTM at H=1024, took 78 s, and triton_fused's LSTM at H=1024 failed
#: after 440 s (out of shared memory); a build that hangs must not hold the benchmark
BUILD_TIMEOUT_S = 300


def build_command(cell: str, hidden: int, batch: int, dtype: str, backend: str) -> list[str]:
    """The command that builds FlashRNN's `backend` for one layer (`main` below)."""
    return [sys.executable, "-m", "persist_rnn.bench.flashrnn_prebuild", cell, str(hidden), str(batch), dtype, backend]


def prebuild(jobs, workers: int = 8, command=build_command, log=print, timeout_s: float = BUILD_TIMEOUT_S) -> dict:
    """Run `command(*job)` for each job (cell, hidden, batch, dtype, backend), `workers` at a
    time, each killed after `timeout_s`; {job: {"ok": bool, "s": seconds, "output": the end of a
    failure's output}}."""
    pending, running, done = list(jobs), {}, {}
    while pending or running:
        while pending and len(running) < max(workers, 1):
            job = pending.pop(0)
            out = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a verbose build never blocks on it
            running[job] = (subprocess.Popen(command(*job), stdout=out, stderr=subprocess.STDOUT, text=True), out,
                            time.perf_counter())
        for job, (proc, out, start) in list(running.items()):
            if proc.poll() is None and time.perf_counter() - start > timeout_s:
                proc.kill()
                proc.wait()
                out.write(f"\nkilled after {timeout_s:.0f} s")
            if proc.poll() is None:
                continue
            out.seek(0)
            text = out.read()
            out.close()
            done[job] = {"ok": proc.returncode == 0, "s": time.perf_counter() - start,
                         "output": "" if proc.returncode == 0 else text[-KEPT_OUTPUT:]}
            del running[job]
            log(f"flashrnn build {':'.join(map(str, job))}: {'ok' if done[job]['ok'] else 'failed'} "
                f"({done[job]['s']:.0f} s)")
        time.sleep(0.2)
    return done


def main(argv: list[str]) -> None:
    """Build one layer's FlashRNN kernel by calling it once, as `bench.flashrnn_columns` will."""
    import torch

    from .torch_layers import torch_layer
    from .flashrnn_anchor import flashrnn_call

    cell, hidden, batch, dtype, backend = argv
    hidden, batch = int(hidden), int(batch)
    half = getattr(torch, dtype)
    layer = torch_layer(cell, hidden, seed=hidden + batch).to(half)
    x = torch.randn(100, batch, hidden, device="cuda", dtype=half)
    with torch.no_grad():
        flashrnn_call(layer, x, backend)
    torch.cuda.synchronize()
    print(f"built {cell} {hidden} {batch} {dtype} {backend}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("MAX_JOBS", "2")  # torch's ninja build, per process: the processes share the cores
    main(sys.argv[1:])
