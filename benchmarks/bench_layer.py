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


import persist_rnn
from persist_rnn.bench.gpu_timing import cuda_ms
from persist_rnn.bench.torch_layers import cudnn_ms, onnx_from_torch, torch_layer


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
