"""FlashRNN replayed from a CUDA graph, each (layer, backend) in a process of its own.

torch's cuDNN layer is timed replayed from a CUDA graph, so FlashRNN is too: its Python-side work
per call (0.3-0.4 ms on the H100 at T=100) then drops out. A capture that FlashRNN's kernels do
not allow (its `cuda` backend's, on the H100) poisons the CUDA context of the process that tried
it: every later launch there fails, ours included, and times as if it ran. So each capture runs
in a fresh interpreter (`python -m persist_rnn.bench.flashrnn_graph CELL HIDDEN BATCH PRECISION
BACKEND`), which prints one JSON line: {"graph_ms", "graph_max_diff"} or {"graph_refused"}.
"""
from __future__ import annotations

import json
import subprocess
import sys

#: seconds a capture and its timing may take (the JIT build is done before, `flashrnn_prebuild.py`)
GRAPH_TIMEOUT_S = 180


def graph_command(cell: str, hidden: int, batch: int, precision: str, backend: str) -> list[str]:
    return [sys.executable, "-m", "persist_rnn.bench.flashrnn_graph", cell, str(hidden), str(batch), precision, backend]


def graph_columns(cell: str, hidden: int, batch: int, precision: str, backend: str, command=graph_command,
                  timeout_s: float = GRAPH_TIMEOUT_S) -> dict:
    """{"graph_ms", "graph_max_diff"} of FlashRNN's `backend` on the benchmark layer replayed from a
    CUDA graph, or {"graph_refused": why}, from a process of its own."""
    try:
        res = subprocess.run(command(cell, hidden, batch, precision, backend), capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"graph_refused": f"no answer in {timeout_s:.0f} s"}
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return {"graph_refused": f"exit {res.returncode}: {tail}"[:300]}
    return json.loads(lines[-1])


def main(argv: list[str]) -> None:
    """Capture one (layer, backend) as `bench.precision_row` builds the layer, check the replay's
    output against torch's at the precision's bound, and time the replay."""
    import torch

    from .torch_layers import at_precision, refusal, strict_fp32_case
    from .flashrnn_anchor import flashrnn_call
    from .gpu_timing import cuda_ms, graph_replay

    cell, hidden, batch, precision, backend = argv
    layer, x, *_ = strict_fp32_case(cell, int(hidden), int(batch), 100)
    theirs, tx, want, bound = at_precision(layer, x, precision)
    try:
        with torch.no_grad():
            call, y = flashrnn_call(theirs, tx, backend)
            replay = graph_replay(call)
            y.zero_()
            replay()
            torch.cuda.synchronize()
            diff = float((y.float() - want.float()).abs().max())
            out = ({"graph_refused": f"the replayed graph's output is {diff:.3g} off (bound {bound:.3g})"} if diff > bound
                   else {"graph_ms": cuda_ms(replay), "graph_max_diff": diff})
    except Exception as err:  # a host-side sync or allocation that capture does not allow
        out = {"graph_refused": refusal(err)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
