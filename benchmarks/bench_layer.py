"""One recurrent layer, T=100, input size = hidden size: persist_rnn against cuDNN (torch).

Runs on a CUDA machine with torch. persist_rnn's number is the whole compiled layer (input
projection GEMM included) called back to back through TVM's VM; cuDNN's are torch's nn.LSTM /
nn.GRU eager and captured in a CUDA graph. All use the same weights and inputs, and the outputs
are compared before timing. Medians of CUDA-event timings over repeated batches of calls.

    python benchmarks/bench_layer.py --out docs/benchmark-layer.md
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import persist_rnn  # noqa: E402
from persist_rnn.testing import torch_to_onnx_weights  # noqa: E402


def torch_layer(op, hidden, seed):
    import torch

    torch.manual_seed(seed)
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[op]
    return cls(hidden, hidden).cuda().eval()


def onnx_from_torch(op, layer, seq_len, batch):
    w, r, b = torch_to_onnx_weights(op, *(p.detach().cpu().numpy() for p in (
        layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0)))
    H = layer.hidden_size
    inits = [numpy_helper.from_array(w[None], "W"), numpy_helper.from_array(r[None], "R"),
             numpy_helper.from_array(b[None], "B")]
    attrs = {"hidden_size": H}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B"], outs, name="layer", **attrs)
    g = helper.make_graph([node], "bench", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq_len, batch, H])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # loadable by older ONNX Runtime builds too
    return model


def cuda_ms(fn, calls=20, repeats=15):
    """Median milliseconds per call, CUDA events around `calls` back-to-back calls."""
    import torch

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


def cudnn_ms(layer, x):
    """(eager ms, CUDA-graph ms) of a torch RNN module on x."""
    import torch

    with torch.no_grad():
        eager = cuda_ms(lambda: layer(x))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                layer(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer(x)
        return eager, cuda_ms(graph.replay)


def bench_one(op, hidden, batch, seq_len, tuning_log, top_k):
    import torch
    import tvm
    from tvm import relax

    layer = torch_layer(op, hidden, seed=hidden + batch)
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    with torch.no_grad():
        want = layer(x)[0].cpu().numpy()
    eager, graphed = cudnn_ms(layer, x)
    t0 = time.perf_counter()
    compiled = persist_rnn.compile(onnx_from_torch(op, layer, seq_len, batch), "cuda", tuning_log=tuning_log, top_k=top_k)
    compile_s = time.perf_counter() - t0
    rep = compiled.report()[0]
    got = compiled.run({"X": x.cpu().numpy()})[0][:, 0]
    err = float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))
    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(compiled.executable, dev)
    x_dev = tvm.runtime.tensor(x.cpu().numpy(), dev)
    ours = cuda_ms(lambda: vm["main"](x_dev))
    return {"cell": op, "hidden": hidden, "batch": batch, "seq_len": seq_len, "ours_ms": ours,
            "cudnn_graph_ms": graphed, "cudnn_eager_ms": eager, "speedup_vs_graph": graphed / ours,
            "max_rel_err": err, "lowering": rep.lowering, "config": rep.config, "source": rep.source,
            "compile_s": compile_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=["LSTM", "GRU"])
    ap.add_argument("--hidden", nargs="+", type=int, default=[64, 256, 1024])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 10, 20])
    ap.add_argument("--seq-len", type=int, default=100)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--tuning-log", default=None)
    ap.add_argument("--out", default=None, help="markdown table to write")
    ap.add_argument("--json", default=None, help="raw rows to write")
    args = ap.parse_args()
    import torch

    rows = []
    for op, hidden, batch in itertools.product(args.cells, args.hidden, args.batch):
        row = bench_one(op, hidden, batch, args.seq_len, args.tuning_log, args.top_k)
        rows.append(row)
        print(json.dumps(row), flush=True)
    gpu = torch.cuda.get_device_name()
    lines = [f"# One layer, T={args.seq_len}, input = hidden, fp32: persist_rnn vs cuDNN",
             "", f"GPU: {gpu}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
             f"{datetime.date.today().isoformat()}. Ours = the whole compiled layer (input projection GEMM "
             "included) through TVM's VM; ratio = cuDNN graph / ours (>1: we are faster).", "",
             "| config | ours ms | cuDNN graph ms | cuDNN eager ms | ratio | max rel err | kernel config |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        cfg = r["config"]
        cfg_s = f"TW={cfg.get('tile_units')} WS={cfg.get('group_size')} RPG={cfg.get('rows_per_group')} BC={cfg.get('batch_chunk')}" if cfg else r["lowering"]
        lines.append(f"| {r['cell']} H={r['hidden']} B={r['batch']} | {r['ours_ms']:.3f} | {r['cudnn_graph_ms']:.3f} | "
                     f"{r['cudnn_eager_ms']:.3f} | {r['speedup_vs_graph']:.2f}x | {r['max_rel_err']:.1e} | {cfg_s} |")
    ratios = [r["speedup_vs_graph"] for r in rows]
    lines += ["", f"Geometric-mean speed-up over cuDNN (graph): {float(np.exp(np.mean(np.log(ratios)))):.2f}x; "
              f"worst {min(ratios):.2f}x, best {max(ratios):.2f}x."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
