"""The layer wavefront on models as users export them (a symbolic batch), on the GPU box.

    python benchmarks/wavefront_buckets.py --out buckets.jsonl [--models char_rnn,seq2seq_encoder] [--batches 1,2,4]

Each model as shipped (examples/NAME.onnx, tests/fixtures/corpus/NAME_torchscript.onnx), fp32, no
tuning log, measure off, built twice: compile's default (`wavefront="auto"`: the runtime-batch
stack fused for the buckets where the cost model finds it faster) and `wavefront="off"` (a kernel a
layer). At each batch both are timed in turn as CUDA-graph replays of `run()` on torch CUDA tensors
(the zero-copy path, on torch's stream), and
checked against ONNX Runtime (CPU) on the same inputs: an example's own inputs tiled to the batch,
a corpus model's at the latency table's length (`torch_models.STEPS`). The char-RNN's row also times torch's cuDNN
on its torch definition (embedding, 3 x nn.LSTM 128, linear; TF32 off), as a CUDA graph (`torch`)
and eagerly (`torch_eager`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "pytorch"))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "corpus"))
sys.path.insert(0, HERE)

EXAMPLES = ("char_rnn", "text_classifier", "speech_gru")
CORPUS = ("seq2seq_encoder", "gru_enhancer", "stft_lstm_vad", "bilstm_tagger", "crnn_ocr", "conv_bilstm_speech")


def _paths(name):
    if name in EXAMPLES:
        return os.path.join(ROOT, "examples", f"{name}.onnx"), os.path.join(ROOT, "examples", f"{name}_inputs.npz")
    corpus = os.path.join(ROOT, "tests", "fixtures", "corpus")
    return os.path.join(corpus, f"{name}_torchscript.onnx"), os.path.join(corpus, f"{name}.npz")


def _feeds(name, compiled, npz, batch):
    """The inputs at `batch`: an example's own (tiled), a corpus model's at the realistic length
    the latency table uses (`torch_models.STEPS`: 200 frames for the enhancer, ...)."""
    from persist_rnn.bench.suite import inputs_at_batch

    if name in EXAMPLES:
        return inputs_at_batch(compiled, npz, batch)
    from make_corpus import example_input
    from torch_models import STEPS

    return {compiled.inputs[0].name: example_input(name, batch, STEPS[name]).numpy()}


def _torch_char_rnn(batch, steps):
    """(eager call, its input) of the char-RNN's torch definition on the GPU."""
    import torch
    from torch_models import examples

    module = examples()["char_rnn"][0].cuda().eval()
    x = torch.randint(0, 65, (steps, batch)).cuda()
    return (lambda: module(x)), x


def run(names, batches, out):
    import numpy as np
    import onnx
    import torch

    import persist_rnn
    from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms
    from persist_rnn.bench.layer_models import max_rel_error, ort_run

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        path, npz = _paths(name)
        started = time.time()
        default = persist_rnn.compile(path, "cuda", measure=False)
        default_s = time.time() - started
        apart = persist_rnn.compile(path, "cuda", measure=False, wavefront="off")
        for batch in batches:
            feeds = _feeds(name, default, npz, batch)
            want = ort_run(onnx.load(path), feeds)
            on_gpu = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}  # run() on torch's stream: capturable
            calls = {"default": lambda: default.run(on_gpu, outputs="device"),
                     "per_layer": lambda: apart.run(on_gpu, outputs="device")}
            row = {"model": name, "batch": batch, "precision": "fp32", "default_compile_s": round(default_s, 1),
                   "error_vs_ort": {k: max_rel_error(v, want) for k, v in
                                    (("default", default.run(feeds)), ("per_layer", apart.run(feeds)))},
                   "layers": [r.line() for r in default.report()],
                   "stack_buckets": [ln for r in default.report()[:1] for ln in r.bucket_lines() if "stack" in ln]}
            eager = None
            if name == "char_rnn":  # torch's cuDNN on the same shapes (the ONNX file's own length)
                calls["torch"], _ = _torch_char_rnn(batch, int(next(iter(np.load(npz).values())).shape[0]))
                eager = calls["torch"]
            with torch.no_grad():
                timed = {k: graph_replay(f) for k, f in calls.items()}
                if eager is not None:
                    timed["torch_eager"] = eager
                row["graph_ms"] = ms = interleaved_ms(timed, rounds=5)
            row["default_over_per_layer"] = ms["per_layer"] / ms["default"]
            if eager is not None:
                row["default_over_torch_graph"] = ms["torch"] / ms["default"]
                row["default_over_torch_eager"] = ms["torch_eager"] / ms["default"]
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            out.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(EXAMPLES + CORPUS))
    parser.add_argument("--batches", default="1,2,4,8,16")
    args = parser.parse_args()
    with open(args.out, "a") as out:
        run(args.models.split(","), [int(b) for b in args.batches.split(",")], out)


if __name__ == "__main__":
    main()
