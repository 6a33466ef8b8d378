"""Latency of the real-model corpus (docs/models.md) on the GPU box, every peer in the same run.

    python benchmarks/corpus_latency.py --out corpus.jsonl [--models DIR_OF_FETCHED_FILES]

Per model, at a realistic input (batch 1, and batch 8 where the batch is symbolic), fp32:
- persist_rnn's compiled model as shipped (symbolic shapes, the cost model's configs), through
  TVM's VM with the inputs on the GPU, and its max error against ONNX Runtime on that input;
- ONNX Runtime on the CPU (the box's onnxruntime has no CUDA provider);
- for the self-made exports, the same torch module on the GPU (cuDNN), eager and replayed from a
  CUDA graph. The third-party models ship no torch source, so they have no torch column;
- with `--dlight-fallback`, for the third-party models, the same model built with dlight's own
  Fallback schedule where the pipeline has RowReductionFallback (one thread a reduction: the build
  before that rule), timed in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures", "corpus"))

#: self-made: name -> steps along the time axis (width in pixels, frames, samples, tokens)
OWN = {"crnn_ocr": 256, "conv_bilstm_speech": 400, "stft_lstm_vad": 16000, "gru_enhancer": 200,
       "seq2seq_encoder": 50, "bilstm_tagger": 64}


def _third_party(models_dir):
    """name -> (file, shapes pins, feeds(batch) or None where the batch is fixed at 1)."""
    rng = np.random.default_rng(0)

    def audio(*shape):
        return (rng.standard_normal(shape) * 0.1).astype("float32")

    def vad(b):
        return {"input": audio(b, 1536), "sr": np.array(16000, "int64"), "h": audio(2, b, 64), "c": audio(2, b, 64)}

    return {
        "nsnet2_16k": (os.path.join(models_dir, "nsnet2-20ms-baseline.onnx"), {}, lambda b: {"input": audio(b, 200, 161) * 10}),
        "nsnet2_48k": (os.path.join(models_dir, "nsnet2-20ms-48k-baseline.onnx"), {}, lambda b: {"input": audio(b, 200, 513) * 10}),
        "pyannote_segmentation_3": (os.path.join(models_dir, "segmentation-3.0.onnx"), {"input": ("B", 1, "T")},
                                    lambda b: {"input": audio(b, 1, 160000)}),
        "openwakeword_silero_vad": (os.path.join(models_dir, "silero_vad.onnx"), {}, vad),
        "silero_vad_16k_sequence": ("tests/fixtures/real/silero_vad_16k_sequence.onnx", {},
                                    lambda b: {"input": audio(28, 576), "h": audio(1, 1, 128), "c": audio(1, 1, 128)}
                                    if b == 1 else None),  # 28 windows of 576 samples (~1 s), batch fixed at 1
    }


def _persist_rnn_row(compiled, model, feeds):
    from persist_rnn.bench.gpu_timing import compiled_ms
    from persist_rnn.bench.suite import _ort_ms
    from persist_rnn.bench.layer_models import max_rel_error, ort_run

    want = ort_run(model, feeds)
    got = compiled.run(feeds)
    return {"persist_rnn_ms": compiled_ms(compiled, feeds), "ort_cpu_ms": _ort_ms(model, feeds),
            "max_error_vs_ort": max_rel_error(got, want)}


def _with_dlight_fallback(build):
    """`build()` with dlight's own Fallback rule in the pipeline's place of RowReductionFallback."""
    from tvm.s_tir import dlight as dl

    from persist_rnn.transform import buildable_schedules

    rule = buildable_schedules.RowReductionFallback
    buildable_schedules.RowReductionFallback = dl.gpu.Fallback
    try:
        return build()
    finally:
        buildable_schedules.RowReductionFallback = rule


def main():
    import onnx
    import torch

    import persist_rnn
    from make_corpus import build, example_input
    from persist_rnn.bench.gpu_timing import compiled_ms
    from persist_rnn.bench.layer_models import max_rel_error, ort_run
    from persist_rnn.bench.torch_layers import cudnn_ms

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=os.path.expanduser("~/models"), help="the fetched third-party files")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--dlight-fallback", action="store_true",
                    help="third-party models: also time the build with dlight's own Fallback (module doc)")
    args = ap.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    rows = []

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")

    for name, steps in OWN.items():
        if wanted and name not in wanted:
            continue
        path = os.path.join(HERE, "..", "tests", "fixtures", "corpus", f"{name}_torchscript.onnx")
        model, compiled = onnx.load(path), persist_rnn.compile(path, "cuda")
        module = build(name).cuda()
        for batch in (1, 8):
            x = example_input(name, batch, steps)
            feeds = {compiled.inputs[0].name: x.numpy()}
            row = {"model": name, "source": "torchscript export", "batch": batch, "steps": steps,
                   "lowering": [r.lowering for r in compiled.report()], **_persist_rnn_row(compiled, model, feeds)}
            eager, graph = cudnn_ms(module, x.cuda())
            row.update(torch_eager_ms=eager, torch_graph_ms=graph)
            emit(row)
        del module
        torch.cuda.empty_cache()

    for name, (path, shapes, feeds_at) in _third_party(args.models).items():
        if wanted and name not in wanted:
            continue
        if not os.path.exists(path):
            emit({"model": name, "skipped": f"{path} not found"})
            continue
        try:
            model, compiled = onnx.load(path), persist_rnn.compile(path, "cuda", shapes=shapes)
        except persist_rnn.PersistRNNError as err:
            emit({"model": name, "error": str(err)[:400]})
            continue
        baseline = (_with_dlight_fallback(lambda: persist_rnn.compile(path, "cuda", shapes=shapes))
                    if args.dlight_fallback else None)
        for batch in (1, 8):
            feeds = feeds_at(batch)
            if feeds is None:
                continue
            row = {"model": name, "source": "third party", "batch": batch,
                   "lowering": [r.lowering for r in compiled.report()], **_persist_rnn_row(compiled, model, feeds)}
            if baseline is not None:
                row["dlight_fallback_ms"] = compiled_ms(baseline, feeds)
                row["dlight_fallback_max_error_vs_ort"] = max_rel_error(baseline.run(feeds), ort_run(model, feeds))
            emit(row)


if __name__ == "__main__":
    main()
