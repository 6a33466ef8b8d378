"""Random ONNX recurrent layers, compiled as a user compiles them for CUDA (no tuning log, nothing
measured: the cost model's own pick), run on the GPU and compared with ONNX Runtime (CPU).

The tests force one config at a time; this draws the layer instead: every ONNX option at once
(direction, ragged `sequence_lens`, initial states, peepholes, clip, input_forget, both GRU forms,
layout 1), off-grid hidden and input sizes, static or symbolic batch and length, fp32, fp16 and
bf16, and TF32 builds. Each layer must match within its precision's bound (the bench's:
schedule/precision.TOLERANCE and torch_layers.BOUNDS, fp32 1e-4, TF32 2e-3, fp16 2e-3, bf16 8e-3 of
the output scale), or be refused with a PersistRNNError; anything else is a failure. One JSON line
a layer.

    python benchmarks/conformance_sweep.py --layers 40 --seed 1 --out sweep.jsonl   # on the GPU box
    python benchmarks/conformance_sweep.py --layers 40 --seed 2 --tensor-cores --out sweep.jsonl
    python benchmarks/conformance_sweep.py --layers 5 --target llvm --out sweep.jsonl  # no GPU

Data: docs/data/conformance-sweep-h200.jsonl (runs A and B).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

#: a 16-bit layer's precision by its dtype (an fp32 layer's is its build's, fp32 or TF32)
HALF = {"float16": "fp16", "bfloat16": "bf16"}
HIDDEN = (24, 48, 96, 160, 192, 320, 384, 512, 640, 768, 1024)
BATCHES = (1, 2, 3, 5, 8, 13, 16, 24, 32, 48)
STEPS = (1, 3, 17, 40)


def draw(rng: np.random.Generator, tensor_cores: bool = False):
    """One layer: (LayerCase, build precision); `tensor_cores`: the layers whose steps the planner
    puts on the tensor cores (16-bit or TF32, H >= 256, B >= 8, mostly a static batch)."""
    from persist_rnn.bench.layer_models import LayerCase

    op = str(rng.choice(["LSTM", "GRU", "RNN"]))
    hidden = int(rng.choice([h for h in HIDDEN if h >= 256] if tensor_cores else HIDDEN))
    batch, steps = int(rng.choice([b for b in BATCHES if b >= 8] if tensor_cores else BATCHES)), int(rng.choice(STEPS))
    dtype = str(rng.choice(["float32", "float16", "bfloat16"] if tensor_cores else
                           ["float32", "float32", "float16", "bfloat16"]))
    precision = "tf32" if dtype == "float32" and (tensor_cores or rng.random() < 0.3) else "fp32"
    case = LayerCase(
        op=op, hidden_size=hidden, input_size=int(rng.choice([hidden, 40, 80, 256])), batch=batch, seq_len=steps,
        direction=str(rng.choice(["forward", "reverse", "bidirectional"])), layout=int(rng.random() < 0.2),
        seq_lens=[int(v) for v in rng.integers(0, steps + 1, batch)] if rng.random() < 0.3 else None,
        initial_h=bool(rng.random() < 0.4), initial_c=op == "LSTM" and bool(rng.random() < 0.4),
        peepholes=op == "LSTM" and bool(rng.random() < 0.2), clip=3.0 if rng.random() < 0.15 else None,
        input_forget=1 if op == "LSTM" and rng.random() < 0.1 else None,
        linear_before_reset=int(rng.random() < 0.7) if op == "GRU" else None,
        dynamic=bool(rng.random() < (0.2 if tensor_cores else 0.4)), dtype=dtype, weight_scale=float(1.0 / np.sqrt(hidden)))
    return case, precision


def one_layer(case, precision: str, target: str = "cuda") -> dict:
    """Compile (for `target`), run and compare one layer: its row."""
    import persist_rnn
    from persist_rnn.bench.layer_models import max_rel_error, reference
    from persist_rnn.bench.torch_layers import BOUNDS
    from persist_rnn.errors import PersistRNNError
    from persist_rnn.schedule.precision import TOLERANCE

    row = {"case": {k: v for k, v in dataclasses.asdict(case).items() if v not in (None, False)},
           "precision": precision}
    model, feeds, want = reference(case)
    start = time.time()
    try:
        compiled = persist_rnn.compile(model, target, measure=False, precision=precision)
    except PersistRNNError as err:
        return {**row, "outcome": "refused", "why": str(err).splitlines()[0]}
    row["compile_s"] = round(time.time() - start, 1)
    report = compiled.report()
    row["lowerings"] = [r.lowering for r in report]
    row["configs"] = [r.config for r in report if r.config]
    err = max_rel_error(compiled.run(feeds), want)
    bound = {**TOLERANCE, **BOUNDS}[HALF.get(case.dtype, precision)]  # as the bench judges cuDNN (torch_layers)
    return {**row, "error": err, "bound": bound, "outcome": "match" if err <= bound else "MISMATCH"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="cuda", help="cuda (the GPU box), or llvm")
    ap.add_argument("--tensor-cores", action="store_true", help="draw layers whose steps run on the tensor cores")
    ap.add_argument("--out", required=True, help="JSON lines, one a layer")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    counts = {}
    with open(args.out, "a") as out:
        for i in range(args.layers):
            case, precision = draw(rng, args.tensor_cores)
            try:
                row = one_layer(case, precision, args.target)
            except Exception as err:  # a crash is a failure too: its last line and where
                row = {"case": dataclasses.asdict(case), "precision": precision, "outcome": "CRASH",
                       "why": f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}",
                       "where": traceback.format_exc().strip().splitlines()[-3:]}
            row.update(seed=args.seed, index=i, tensor_cores=args.tensor_cores)
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            print(i, row["outcome"], row.get("error", row.get("why", "")), json.dumps(row["case"]), flush=True)
    print("summary", json.dumps(counts))


if __name__ == "__main__":
    main()
