"""LSTM layers quantized by ONNX Runtime (`quantize_dynamic`, int8 weights, per tensor or per
channel), compiled as users compile them, against what a user of the same layer has elsewhere,
in the same run (T=100, input = hidden):
- cuDNN fp16: torch's layer in fp16 (CUDA graph) and cuDNN's four algorithms called directly with
  tensor ops, each checked against torch's fp16 output (cuDNN has no int8 recurrent path);
- our fp16 build of the same layer (its ONNX export in fp16);
- the same layer with its dequantized weights held in fp32 (the fp32 LSTM they stand for, not
  named int8: at H=2048 the streamed scan);
- where the cost model held the weights as int8, its pick were R not packable (fp16 or fp32
  weights), forced;
- where the cost model did not hold the weights as int8, its best config that does, forced (with
  --int8-top N, its best N int8 configs: the regret of its int8 pick).
Ours is checked against ONNX Runtime (CPU) on the QDQ form of the same int8 weights (fp32
activations). One JSON line per layer.

    python benchmarks/quantized_layers.py --out quantized.jsonl [--hidden 1024 2048] [--batch 1] [--int8-top 6]
        [--force 2048:16:before='{"tile_units": 16, ...}'] [--symbolic] [--trace]

`--force H:B:NAME=CONFIG` also times that config (Config's fields, JSON) forced on the layer of
hidden size H at batch B, as `NAME_ms` (e.g. the pick of the code before a change). `--symbolic`
exports the layers (ours, quantized and fp16) with a symbolic batch, as exporters write them, and
times the static build of the quantized layer beside them as `static_ms`; `--trace` records each
build's kernels in one call (`kernels`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn  # noqa: E402
from persist_rnn.bench.gpu_timing import cuda_ms, graph_replay, interleaved_ms, kernel_trace, vm_call  # noqa: E402
from persist_rnn.bench.layer_models import max_rel_error  # noqa: E402
from persist_rnn.bench.suite import matched_ms  # noqa: E402
from persist_rnn.bench.torch_layers import PRECISIONS, at_precision, onnx_from_torch, torch_layer  # noqa: E402
from persist_rnn.frontend.front_door import prepare  # noqa: E402
from persist_rnn.frontend.quantized import INT8_NODES  # noqa: E402


def quantize(model: onnx.ModelProto, per_channel: bool) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, out, weight_type=QuantType.QInt8, per_channel=per_channel)
        return onnx.load(out)


def dequantized(quantized: onnx.ModelProto) -> onnx.ModelProto:
    """The fp32 LSTM the int8 weights stand for: the model as persist_rnn's front door rewrites it,
    without the property that names its weights int8 (so a build holds them in fp32)."""
    model, _ = prepare(quantized, simplify=False)
    kept = [prop for prop in model.metadata_props if prop.key != INT8_NODES]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    return model


def qdq_reference(quantized: onnx.ModelProto, feeds: dict) -> list:
    """ONNX Runtime (CPU) on the LSTM the int8 weights stand for (fp32 activations)."""
    import onnxruntime as ort

    session = ort.InferenceSession(dequantized(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def int8_ranked(hidden, batch, top):
    """The cost model's `top` configs holding the layer's weights as int8 at `batch`, best first."""
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.planner import _ranked, target_arch
    from persist_rnn.targets import as_target
    from tir_templates.spec import CellSpec

    spec = CellSpec("lstm", hidden, hidden, int8_weights=True, int8_rows=True)
    _, ranked = _ranked(spec, gpu_model(target_arch(as_target("cuda"))), batch, False, "fp32")
    return [c for _, c in ranked if c.int8_weights()][:top]


def not_int8_pick(hidden, batch):
    """The cost model's pick for the layer were its R not packable (its weights in fp32 or fp16)."""
    from persist_rnn.schedule.planner import choose
    from persist_rnn.targets import as_target
    from tir_templates.spec import CellSpec

    return choose(CellSpec("lstm", hidden, hidden, int8_weights=True), as_target("cuda"), batch, measure=False).config


def time_forced(quantized, feeds, exact, cfg, name, row, calls):
    """`cfg` forced on the quantized model: its error against `exact` (the QDQ reference) into
    `row` as NAME_err_vs_qdq, its call into `calls` as NAME_ms, to be timed with the others."""
    build = persist_rnn.compile(quantized, "cuda", config=cfg)
    row[f"{name}_err_vs_qdq"] = max_rel_error(build.run(feeds), exact)
    calls[f"{name}_ms"] = vm_call(build, feeds)


def layer_row(torch, hidden, batch, per_channel, seq_len=100, int8_top=1, fp32_held=True, named_configs=None,
              symbolic=False, trace=False):
    from persist_rnn.bench.cudnn_direct import algorithm_rows

    layer = torch_layer("LSTM", hidden, seed=hidden + batch)
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    batch_dim = "batch" if symbolic else batch  # symbolic: as exporters write it, a kernel per batch bucket
    float_model = onnx_from_torch("LSTM", layer, seq_len, batch_dim)
    quantized = quantize(float_model, per_channel)
    feeds = {"X": x.cpu().numpy()}
    exact = qdq_reference(quantized, feeds)
    ours = persist_rnn.compile(quantized, "cuda", measure=False)
    [report] = ours.report()
    row = {"cell": "LSTM", "hidden": hidden, "batch": batch, "seq_len": seq_len, "symbolic_batch": symbolic,
           "scales": "per channel" if per_channel else "per tensor", "lowering": report.lowering,
           "config": report.config, "ours_err_vs_qdq": max_rel_error(ours.run(feeds), exact)}
    calls = {"ours_ms": vm_call(ours, feeds)}
    if symbolic:  # the bucket this batch runs, and the static build of the same layer beside it
        row["buckets"] = report.buckets
        static = persist_rnn.compile(quantize(onnx_from_torch("LSTM", layer, seq_len, batch), per_channel), "cuda",
                                     measure=False)
        row["static_config"] = static.report()[0].config
        calls["static_ms"] = vm_call(static, feeds)
    if fp32_held:
        as_fp32 = persist_rnn.compile(dequantized(quantized), "cuda", measure=False)
        row["fp32_held_lowering"] = as_fp32.report()[0].lowering
        calls["fp32_held_ms"] = vm_call(as_fp32, feeds)
    if report.config.get("weight_dtype") == "int8" and not symbolic:  # the pick without int8 weights, forced
        other = not_int8_pick(hidden, batch)
        row["without_int8_config"] = other.as_dict()
        time_forced(quantized, feeds, exact, other, "without_int8", row, calls)
    fp16_model = onnx_from_torch("LSTM", layer, seq_len, batch_dim, dtype="float16")
    fp16_feeds = {"X": feeds["X"].astype("float16")}
    ours_fp16 = persist_rnn.compile(fp16_model, "cuda", measure=False)
    row["fp16_build_config"] = ours_fp16.report()[0].config
    calls["ours_fp16_build_ms"] = vm_call(ours_fp16, fp16_feeds)
    # the model's best int8 configs, forced: how far its pick is from the best of them, and (where
    # it held the weights otherwise) whether that was right
    top = [] if symbolic else int8_ranked(hidden, batch, int8_top if report.config.get("weight_dtype") != "int8"
                                         or int8_top > 1 else 0)
    row["int8_forced_configs"] = [c.as_dict() for c in top]
    for k, cfg in enumerate(top):
        time_forced(quantized, feeds, exact, cfg, f"int8_forced{k}", row, calls)
    for name, cfg in (named_configs or {}).items():  # configs asked for by name (`--force`)
        row[f"{name}_config"] = cfg.as_dict()
        time_forced(quantized, feeds, exact, cfg, name, row, calls)
    theirs, tx, want, bound = at_precision(layer, x, "fp16")
    with torch.no_grad():
        times = interleaved_ms({**calls, "cudnn_fp16_graph_ms": graph_replay(lambda: theirs(tx))})
        direct = algorithm_rows(theirs, tx, want, cuda_ms, math=PRECISIONS["fp16"][2])
    row.update(times)
    if trace:  # each build's kernels in one call: [name, gap before it (µs), duration (µs)]
        from model_kernels import CALLS, per_call

        row["kernels"] = {name: per_call(kernel_trace(calls[f"{name}_ms"], CALLS, torch.cuda.synchronize))
                          for name in ("ours", "static", "ours_fp16_build") if f"{name}_ms" in calls}
    timed = {"torch_graph": times["cudnn_fp16_graph_ms"], **matched_ms(direct, bound)}
    best = min(timed, key=timed.get)
    row.update(cudnn_direct=direct, best_cudnn_fp16=best, best_cudnn_fp16_ms=timed[best],
               best_cudnn_fp16_over_ours=timed[best] / times["ours_ms"],
               fp16_build_over_ours=times["ours_fp16_build_ms"] / times["ours_ms"])
    for name in ("fp32_held", "without_int8", "static", *(named_configs or {})):
        if f"{name}_ms" in times:
            row[f"{name}_over_ours"] = times[f"{name}_ms"] / times["ours_ms"]
    return row


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", nargs="+", type=int, default=[1024, 2048])
    ap.add_argument("--batch", nargs="+", type=int, default=[1])
    ap.add_argument("--scales", nargs="+", choices=["tensor", "channel"], default=["tensor", "channel"])
    ap.add_argument("--int8-top", type=int, default=1,
                    help="time the cost model's best N int8 configs, forced (1: only where it held the weights otherwise)")
    ap.add_argument("--no-fp32-held", action="store_true", help="skip the build holding the weights in fp32")
    ap.add_argument("--symbolic", action="store_true",
                    help="export the layers with a symbolic batch (a kernel per batch bucket), as exporters do")
    ap.add_argument("--trace", action="store_true", help="record each build's kernels in one call (CUPTI)")
    ap.add_argument("--force", action="append", default=[], metavar="H:B:NAME=CONFIG",
                    help="also time CONFIG (JSON) forced on the layer of hidden size H at batch B, as NAME_ms")
    args = ap.parse_args()
    from tir_templates.config import Config

    forced = {}
    for text in args.force:
        where, config = text.split("=", 1)
        hidden, batch, name = where.split(":")
        forced.setdefault((int(hidden), int(batch)), {})[name] = Config.from_dict(json.loads(config))
    for hidden in args.hidden:
        for batch in args.batch:
            for scales in args.scales:
                row = layer_row(torch, hidden, batch, scales == "channel", int8_top=args.int8_top,
                                fp32_held=not args.no_fp32_held, named_configs=forced.get((hidden, batch)),
                                symbolic=args.symbolic, trace=args.trace)
                print(json.dumps({k: v for k, v in row.items() if k != "cudnn_direct"}), flush=True)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
