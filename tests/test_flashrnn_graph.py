"""FlashRNN replayed from a CUDA graph in a process of its own (`persist_rnn/bench/flashrnn_graph.py`): its
answer is read back, and a process that fails, prints nothing or hangs gives a refusal that says
so, never an exception in the benchmark. The capture itself needs torch, flashrnn and a GPU (the
GPU box); here a stand-in command plays it."""
from __future__ import annotations

import sys

from persist_rnn.bench.flashrnn_graph import graph_columns, graph_command


def _stand_in(body: str):
    return lambda *job: [sys.executable, "-c", body, *map(str, job)]


def test_the_answer_is_read_back():
    answer = _stand_in("import json, sys; print('noise'); print(json.dumps({'graph_ms': float(sys.argv[2]) / 1000, "
                       "'graph_max_diff': 0.0}))")
    assert graph_columns("LSTM", 256, 1, "fp16", "cuda_fused", answer) == {"graph_ms": 0.256, "graph_max_diff": 0.0}


def test_a_failed_silent_or_hung_capture_is_a_refusal():
    crash = _stand_in("import sys; sys.stderr.write('AcceleratorError: operation failed during capture\\n'); sys.exit(1)")
    assert graph_columns("LSTM", 64, 1, "fp16", "cuda", crash) == {
        "graph_refused": "exit 1: AcceleratorError: operation failed during capture"}
    assert graph_columns("LSTM", 64, 1, "fp16", "cuda", _stand_in("pass"))["graph_refused"] == "exit 0: no output"
    hang = _stand_in("import time; time.sleep(30)")
    assert graph_columns("GRU", 64, 1, "bf16", "cuda", hang, timeout_s=0.5) == {"graph_refused": "no answer in 0 s"}


def test_the_command_names_the_layer_and_backend():
    assert graph_command("GRU", 1024, 20, "bf16", "cuda")[-6:] == ["persist_rnn.bench.flashrnn_graph", "GRU", "1024", "20",
                                                                   "bf16", "cuda"]
