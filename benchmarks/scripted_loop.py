"""A scripted LSTMCell loop, as a torch user ships it, against torch itself (GPU box).

    python benchmarks/scripted_loop.py --out results.jsonl

Exports `torch.jit.script` of an LSTMCell stepped over `x.size(0)` (an ONNX Loop, symbolic T and
B), compiles it with persist_rnn (the Loop becomes one persistent LSTM), and times, per call, in
the same run and at fp32:
- the scripted loop in torch (what the user ran before), eager and replayed from a CUDA graph;
- the same weights as one `nn.LSTM` layer (cuDNN), eager and from a CUDA graph;
- ONNX Runtime on the exported file (CUDA provider if present, else CPU);
- persist_rnn's compiled model, with torch tensors in and out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "loops"))


def _time_us(fn):
    """Median µs per call (persist_rnn.bench.cuda_ms: CUDA events around back-to-back calls)."""
    from persist_rnn.bench.gpu_timing import cuda_ms

    return cuda_ms(fn) * 1000


def _graph_us(fn):
    """Time per replay of `fn` captured in a CUDA graph, or why it could not be captured."""
    try:
        return _time_us(_graph(fn))
    except Exception as err:  # noqa: BLE001 - the reason is the result
        return f"{type(err).__name__}: {str(err)[:120]}"


def _graph(fn):
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    return graph.replay


def main():
    import numpy as np
    import onnxruntime as ort
    import torch
    from make_loop_fixtures import LSTMCellScripted

    import persist_rnn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="scripted_loop.jsonl")
    args = ap.parse_args()
    rows = []
    for hidden, batch in ((128, 1), (256, 1), (256, 16)):
        torch.manual_seed(0)
        steps = 100
        module = LSTMCellScripted(hidden, hidden).eval()
        x = torch.randn(steps, batch, hidden)
        h, c = torch.zeros(batch, hidden), torch.zeros(batch, hidden)
        path = os.path.join(tempfile.mkdtemp(), "loop.onnx")
        torch.onnx.export(torch.jit.script(module), (x, h, c), path, input_names=["x", "h0", "c0"],
                          output_names=["y", "h", "c"], opset_version=17, dynamo=False,
                          dynamic_axes={"x": {0: "T", 1: "B"}, "h0": {0: "B"}, "c0": {0: "B"}})
        compiled = persist_rnn.compile(path, "cuda")
        gpu = {"x": x.cuda(), "h0": h.cuda(), "c0": c.cuda()}
        scripted = torch.jit.script(module).cuda()
        lstm = torch.nn.LSTM(hidden, hidden).cuda().eval()
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(lstm, f"{name}_l0").copy_(getattr(module.cell, name))
        with torch.no_grad():
            want = scripted(gpu["x"], gpu["h0"], gpu["c0"])
            got = compiled.run(gpu)
            err = max(float((g - w).abs().max()) for g, w in zip(got, want))
            row = {"hidden": hidden, "batch": batch, "steps": steps, "max_abs_err_vs_torch": err,
                   "layers": [r.line() for r in compiled.report()], "notes": compiled.notes}
            row["torch_scripted_us"] = _time_us(lambda: scripted(gpu["x"], gpu["h0"], gpu["c0"]))
            row["torch_scripted_graph_us"] = _graph_us(lambda: scripted(gpu["x"], gpu["h0"], gpu["c0"]))
            hc = (gpu["h0"][None], gpu["c0"][None])
            row["cudnn_lstm_us"] = _time_us(lambda: lstm(gpu["x"], hc))
            row["cudnn_lstm_graph_us"] = _graph_us(lambda: lstm(gpu["x"], hc))
            row["persist_rnn_us"] = _time_us(lambda: compiled.run(gpu))
            row["persist_rnn_graph_us"] = _graph_us(lambda: compiled.run(gpu))
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
        sess = ort.InferenceSession(path, providers=providers)
        feeds = {k: v.numpy() for k, v in (("x", x), ("h0", h), ("c0", c))}
        import time
        sess.run(None, feeds)
        start = time.perf_counter()
        for _ in range(20):
            sess.run(None, feeds)
        row["onnxruntime_us"] = (time.perf_counter() - start) / 20 * 1e6
        row["onnxruntime_provider"] = sess.get_providers()[0]
        ours = row["persist_rnn_graph_us"] if isinstance(row["persist_rnn_graph_us"], float) else row["persist_rnn_us"]
        for base in ("torch_scripted_us", "torch_scripted_graph_us", "cudnn_lstm_graph_us"):
            if isinstance(row[base], float):
                row[f"speedup_vs_{base[:-3]}"] = row[base] / ours
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(args.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
