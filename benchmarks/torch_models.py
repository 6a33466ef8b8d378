"""PyTorch users' models on the GPU box, every way a torch user can run them, in the same run.

    python benchmarks/torch_models.py --out torch.jsonl [--models char_rnn,crnn_ocr] [--batches 1,16]

The three shipped examples' torch definitions and the corpus's six torch models, fp32 (TF32 off for
torch's cuDNN and matmuls: the same precision as ours), at batch 1 and 16 and a realistic length:
- `module`: persist_rnn.compile(module, (x,), dynamic=batch and time) (measure off: the cost
  model's configs, as `onnx` below gets them);
- `onnx`: persist_rnn.compile of the ONNX file the repository ships for that model (examples/,
  tests/fixtures/corpus/*_torchscript.onnx), the road a user took before;
- `backend`: torch.compile(module, backend="persist_rnn") (measure off; options' "rest" at its
  default, "auto": on the GPU the graph's other ops compiled by inductor around the layers);
  `backend_eager` and `backend_inductor` (paths to ask for) the same with "rest" "eager" (those
  ops as torch's eager code) and "inductor";
- `inductor`: torch.compile(module), inductor's default, in a process of its own (`--peer
  inductor`): dynamo's allow_rnn off, its default, which the persist_rnn backend turns on; and
  once dynamo has skipped a forward for one backend (nn.LSTM with allow_rnn off) it runs that code
  eagerly for every backend, so the two cannot share a process;
- `eager`: the module as torch runs it (cuDNN), in both processes.
Each is timed as a call (CUDA events around back-to-back calls, the callables in turn) and, where
torch's CUDA-graph capture takes it, as a graph replay; each row also holds the largest error of
`module`, `onnx` and `backend` against eager torch relative to the output scale. `--trace` adds the
kernels one call of `module` and of `backend` runs (torch profiler), to say where they differ.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))

#: model -> steps along its time axis (tokens, frames, pixels of width, samples)
STEPS = {"char_rnn": 100, "text_classifier": 20, "speech_gru": 200, "crnn_ocr": 256, "conv_bilstm_speech": 400,
         "stft_lstm_vad": 16000, "gru_enhancer": 200, "seq2seq_encoder": 50, "bilstm_tagger": 64}


def _model(name):
    """(module, input maker (batch -> tensor), dynamic, shipped ONNX path)."""
    import torch
    from torch_models import examples, make_corpus

    if name in ("char_rnn", "text_classifier", "speech_gru"):
        module, _, dynamic, _ = examples()[name]
        make = {"char_rnn": lambda b: torch.randint(0, 65, (STEPS[name], b)),
                "text_classifier": lambda b: torch.randint(0, 1000, (STEPS[name], b)),
                "speech_gru": lambda b: torch.randn(b, STEPS[name], 40)}[name]
        return module, make, dynamic, os.path.join(HERE, "..", "examples", f"{name}.onnx")
    b_axis, t_axis = make_corpus.MODELS[name][2]
    return (make_corpus.build(name), lambda b: make_corpus.example_input(name, b, STEPS[name]),
            {"batch": b_axis, "steps": t_axis},
            os.path.join(HERE, "..", "tests", "fixtures", "corpus", f"{name}_torchscript.onnx"))


def _onnx_call(compiled, x):
    """The ONNX build called with x on the GPU, as the torch user would (its one input by name)."""
    name = compiled.inputs[0].name
    return lambda: compiled.run({name: x}, outputs="device")


def _relative_error(got, want) -> float:
    import torch

    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    return max(float((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-30))
               for g, w in zip(got, want))


def _kernels(call, calls: int = 10) -> dict:
    """The CUDA kernels one call of `call` runs (torch profiler over `calls` calls): how many, and
    the most expensive names with their µs a call."""
    import collections

    import torch

    from persist_rnn.bench.gpu_timing import kernel_trace

    events = kernel_trace(call, calls, torch.cuda.synchronize)
    us = collections.Counter()
    for e in events:
        us[e["name"][:90]] += e["dur"] / calls
    return {"kernels_per_call": len(events) / calls, "us": [[n, round(t, 2)] for n, t in us.most_common(12)]}


def run_inductor(names, batches, out):
    """The `inductor` peer and eager torch, timed in turn (allow_rnn left at dynamo's default)."""
    import torch

    from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        module, make, _, _ = _model(name)
        module = module.cuda().eval()
        inductor = torch.compile(module)
        for batch in batches:
            x = make(batch).cuda()
            with torch.no_grad():
                inductor(x)
                calls = {"inductor": lambda: inductor(x), "eager": lambda: module(x)}
                row = {"model": name, "batch": batch, "steps": STEPS[name], "precision": "fp32", "peer": "inductor",
                       "call_ms": interleaved_ms(calls, rounds=5)}
                try:
                    row["graph_ms"] = interleaved_ms({k: graph_replay(f) for k, f in calls.items()}, rounds=5)
                except Exception as err:  # torch's capture refused a path: recorded, not fatal
                    row["graph_refused"] = f"{type(err).__name__}: {str(err)[:160]}"
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            out.flush()


def run(names, batches, out, paths, trace=False):
    import torch

    import persist_rnn
    import persist_rnn.pytorch.backend  # noqa: F401  (names the backend where persist_rnn is not installed)
    from persist_rnn.pytorch.backend import reports
    from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        module, make, dynamic, onnx_path = _model(name)
        module = module.cuda().eval()
        example = make(2).cuda()
        started = time.time()
        built_module = persist_rnn.compile(module, (example,), target="cuda", dynamic=dynamic, measure=False)
        module_s = time.time() - started
        started = time.time()
        built_onnx = persist_rnn.compile(onnx_path, "cuda", measure=False) if "onnx" in paths else None
        onnx_s = time.time() - started
        torch._dynamo.reset()
        backend = torch.compile(module, backend="persist_rnn", options={"measure": False})
        pinned = {path: torch.compile(module, backend="persist_rnn", options={"measure": False, "rest": rest})
                  for path, rest in (("backend_eager", "eager"), ("backend_inductor", "inductor")) if path in paths}
        met_before = len(reports())  # the layers this model's backend builds are the ones met after
        for batch in batches:
            x = make(batch).cuda()
            with torch.no_grad():
                want = module(x)
                calls = {"module": lambda: built_module(x), "backend": lambda: backend(x), "eager": lambda: module(x)}
                for path, compiled in pinned.items():
                    calls[path] = lambda compiled=compiled: compiled(x)
                if built_onnx is not None:  # (the examples' ONNX files hold other weights: its error is not ours)
                    calls["onnx"] = _onnx_call(built_onnx, x)
                row = {"model": name, "batch": batch, "steps": STEPS[name], "precision": "fp32",
                       "compile_s": {"module": round(module_s, 1), "onnx": round(onnx_s, 1)},
                       "error_vs_eager": {k: _relative_error(calls[k](), want) for k in calls if k != "eager"},
                       "layers": [r.line() for r in built_module.report()]}
                row["backend_layers"] = [o.line() for o in reports()[met_before:]]
                row["call_ms"] = interleaved_ms(calls, rounds=5)
                graphs, why = {}, {}
                for k in calls:
                    try:
                        graphs[k] = graph_replay(calls[k])
                    except Exception as err:  # a path torch's capture does not take: recorded, not fatal
                        why[k] = f"{type(err).__name__}: {str(err)[:160]}"
                        torch.cuda.synchronize()
                row["graph_ms"] = interleaved_ms(graphs, rounds=5) if graphs else {}
                row["graph_refused"] = why
                if trace:  # where the paths' time goes, kernel by kernel
                    row["kernels"] = {k: _kernels(calls[k]) for k in ("module", "backend")}
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            out.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(STEPS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--paths", default="module,onnx,backend",
                        help="persist_rnn's paths to build (module and backend always, eager always; also onnx, "
                             "backend_eager, backend_inductor)")
    parser.add_argument("--peer", choices=["inductor"], help="time this peer (and eager) in this process instead")
    parser.add_argument("--trace", action="store_true", help="also list the kernels of `module` and `backend`")
    args = parser.parse_args()
    names, batches = args.models.split(","), [int(b) for b in args.batches.split(",")]
    with open(args.out, "a") as out:
        if args.peer == "inductor":
            run_inductor(names, batches, out)
        else:
            run(names, batches, out, args.paths.split(","), args.trace)


if __name__ == "__main__":
    main()
