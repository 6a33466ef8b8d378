"""A 16-bit layer exported with a symbolic batch, as users export it, against the same layer built
for each batch (static shapes), and against its symbolic build with the input projection on the FMA
GEMM (what a symbolic batch got before the tensor-core GEMM picked its plan by the runtime rows).
All measure off, no tuning log; each through TVM's VM, inputs on the GPU, timed in turn; each
kernel's µs a call from a CUPTI trace of every build. One JSON line per (layer, batch).

    python benchmarks/symbolic_16bit.py --out F [--layer LSTM:768:fp16 ...] [--batches 1,8,32,64]
        [--no-fma-gemm] [--pairs-gemm] [--without-shared-beside]

On sm_90a a symbolic build's GEMM of K >= 512 is the wgmma GEMM by rows; `--pairs-gemm` also times
the build with the pairs GEMM by rows there (`symbolic_pairs_gemm`). `--without-shared-beside` also
times the symbolic build whose buckets keep their picks where `planner.shared_fragments_lead` would
move them (`symbolic_without_shared_beside`).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.gpu_timing import interleaved_ms, kernel_trace, vm_call
from persist_rnn.bench.torch_layers import PRECISIONS, onnx_from_torch, torch_layer
from persist_rnn.compile import compile_onnx
from persist_rnn.schedule import planner
from persist_rnn.transform import projection_gemms

T = 100


def symbolic_batch(model):
    """The model with its input's batch axis named "N" (its outputs carry no shapes)."""
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "N"
    return model


def kernels_us(call, sync) -> dict:
    """Each kernel name's µs a call, over 5 calls."""
    per = collections.Counter()
    for e in kernel_trace(call, 5, sync):
        per[e["name"][:48]] += e["dur"] / 5
    return {k: round(v, 2) for k, v in per.most_common()}


def main():
    import tvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layer", action="append", help="CELL:HIDDEN:PRECISION (fp16 or bf16); default LSTM:768:fp16")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--no-fma-gemm", action="store_true", help="skip the build with its projection on the FMA GEMM")
    ap.add_argument("--pairs-gemm", action="store_true",
                    help="also the build whose GEMM is the pairs GEMM by rows where the wgmma GEMM by rows would be")
    ap.add_argument("--without-shared-beside", action="store_true",
                    help="also the symbolic build without planner.shared_fragments_lead in its buckets")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    dev = tvm.cuda(0)
    for text in args.layer or ["LSTM:768:fp16"]:
        cell, hidden, precision = text.split(":")
        hidden, dtype = int(hidden), PRECISIONS[precision][1]
        layer = torch_layer(cell, hidden, seed=hidden)
        symbolic = compile_onnx(symbolic_batch(onnx_from_torch(cell, layer, T, batches[-1], dtype)), "cuda",
                                tuning_log=None, measure=False)
        variants = {"symbolic": symbolic}
        if not args.no_fma_gemm:
            min_k = projection_gemms.PAIRS_MIN_K
            projection_gemms.PAIRS_MIN_K = 1 << 30  # the FMA GEMM for symbolic rows
            try:
                variants["symbolic_fma_gemm"] = compile_onnx(symbolic_batch(onnx_from_torch(
                    cell, layer, T, batches[-1], dtype)), "cuda", tuning_log=None, measure=False)
            finally:
                projection_gemms.PAIRS_MIN_K = min_k
        if args.pairs_gemm:
            by_rows_pays = projection_gemms.by_rows_pays
            projection_gemms.by_rows_pays = lambda K, N: False  # the pairs GEMM by rows, not the wgmma GEMM
            try:
                variants["symbolic_pairs_gemm"] = compile_onnx(symbolic_batch(onnx_from_torch(
                    cell, layer, T, batches[-1], dtype)), "cuda", tuning_log=None, measure=False)
            finally:
                projection_gemms.by_rows_pays = by_rows_pays
        if args.without_shared_beside:
            lead = planner.shared_fragments_lead
            planner.shared_fragments_lead = lambda *a, **k: None  # every bucket keeps the model's pick
            try:
                variants["symbolic_without_shared_beside"] = compile_onnx(symbolic_batch(onnx_from_torch(
                    cell, layer, T, batches[-1], dtype)), "cuda", tuning_log=None, measure=False)
            finally:
                planner.shared_fragments_lead = lead
        plans = {"cell": cell, "hidden": hidden, "precision": precision, "what": "each build's buckets",
                 "buckets": {name: [(b["max_batch"], b["config"]) for b in c.report()[0].buckets]
                             for name, c in variants.items()}}
        with open(args.out, "a") as f:
            f.write(json.dumps(plans) + "\n")
        for batch in batches:
            feeds = {"X": np.random.default_rng(batch).standard_normal((T, batch, hidden)).astype(dtype)}
            static = compile_onnx(onnx_from_torch(cell, layer, T, batch, dtype), "cuda", tuning_log=None, measure=False)
            calls = {name: vm_call(c, feeds) for name, c in (*variants.items(), ("static", static))}
            want = static.run(feeds)[0].astype("float32")
            got = symbolic.run(feeds)[0].astype("float32")
            row = {"cell": cell, "hidden": hidden, "precision": precision, "batch": batch, "seq_len": T,
                   **{f"{k}_ms": v for k, v in interleaved_ms(calls).items()},
                   "symbolic_vs_static_max_diff": float(np.abs(got - want).max() / max(1.0, np.abs(want).max())),
                   **{f"{name}_kernels_us": kernels_us(calls[name], dev.sync) for name in variants},
                   "static_kernels_us": kernels_us(calls["static"], dev.sync)}
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
