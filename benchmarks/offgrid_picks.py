"""The cost model's own pick (no tuning log, nothing measured, as a compile without a GPU makes
it) on layers off GRNN's grid, against cuDNN's best algorithm at the same precision and against
the pick of the model without its fitted tensor-core terms (FMA-unit configs only), all in one run
(needs torch and a GPU).

    python benchmarks/offgrid_picks.py --out picks.jsonl LSTM:1024:20:fp16 GRU:320:16:fp32 ...

One JSON line a layer (T=100, input = hidden): `precision_row`'s columns for the model's pick
(ours against torch's layer and cuDNN's four algorithms, each checked against torch's output),
plus `fma_only_ms` and `fma_only_config`, the same layer built with the FMA-unit pick, timed in
turn with ours.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

DEFAULT = ("LSTM:1024:20:fp16", "LSTM:384:32:fp16", "GRU:1536:8:fp16", "LSTM:768:2:fp16", "LSTM:512:64:fp32",
           "LSTM:512:4:fp32", "GRU:768:1:fp32", "GRU:320:16:fp32", "LSTM:1024:10:fp32", "GRU:1024:10:fp32")


def row(op: str, hidden: int, batch: int, precision: str) -> dict:
    from persist_rnn.bench.gpu_timing import interleaved_ms, vm_call
    from persist_rnn.bench.suite import precision_row
    from persist_rnn.bench.torch_layers import PRECISIONS, strict_fp32_case
    from persist_rnn.compile import compile_onnx as compile_model
    from persist_rnn.schedule import planner

    options = {"tuning_log": None, "unverified": False, "measure": False}
    out = precision_row(op, hidden, batch, 100, options, precision, flashrnn=False)
    build_precision, dtype, _ = PRECISIONS[precision]
    _, _, _, model, feeds = strict_fp32_case(op, hidden, batch, 100, dtype)
    ours = compile_model(model, "cuda", precision=build_precision, **options)
    priced = planner.prices_tensor_cores
    planner.prices_tensor_cores = lambda gpu: False  # the planner as it picks without fitted tensor-core terms
    try:
        fma_only = compile_model(model, "cuda", precision=build_precision, **options)
    finally:
        planner.prices_tensor_cores = priced
    ms = interleaved_ms({"ours": vm_call(ours, feeds), "fma_only": vm_call(fma_only, feeds)})
    out.update(part="offgrid_pick", ours_in_turn_ms=ms["ours"], fma_only_ms=ms["fma_only"],
               fma_only_config=fma_only.report()[0].config, fma_only_over_ours=ms["fma_only"] / ms["ours"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layers", nargs="*", default=DEFAULT, help="CELL:HIDDEN:BATCH:PRECISION")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for spec in args.layers:
        op, hidden, batch, precision = spec.split(":")
        r = row(op, int(hidden), int(batch), precision)
        with open(args.out, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"{spec}: ours {r['ours_ms']:.4f} ms ({'tensor cores' if r['config'].get('mma_k_split') else 'FMA'}), "
              f"best cuDNN {r['best_cudnn_ms']:.4f} ({r['best_cudnn']}) = {r['best_cudnn_over_ours']:.2f}x; "
              f"FMA-only pick {r['fma_only_ms']:.4f} ms = {r['fma_only_over_ours']:.2f}x ours", flush=True)


if __name__ == "__main__":
    main()
