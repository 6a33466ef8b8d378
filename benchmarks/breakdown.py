"""Where a compiled layer's time goes, on GRNN's grid (needs torch and a GPU).

    python benchmarks/breakdown.py --tuning-log docs/data/tune-h100.jsonl [--cells LSTM --hidden 64]

Prints one JSON line per layer (T=100, input = hidden): `whole_ms`, the compiled layer through
TVM's VM; `default_gemm_ms`, the input projection alone as TVM's default schedule builds it (what
persist_rnn's tiled GEMM replaces); `kernel_ms`, the persistent kernel alone with the layer's
config; and cuDNN fp32 in a CUDA graph. What is left of `whole_ms` after the projection and the
kernel is launches, gaps and the graph's other operators.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench.gpu_timing import compiled_ms, cuda_ms
from persist_rnn.bench.suite import grid_arguments, grid_layers
from persist_rnn.bench.torch_layers import cudnn_ms, onnx_from_torch


def gemm_ms(rows: int, cols_in: int, cols_out: int) -> float:
    """The input projection alone: (rows x cols_in) @ (cols_in x cols_out) + bias, built as the layer's is."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Gemm:
        @R.function
        def main(x: R.Tensor((rows, cols_in), "float32"), w: R.Tensor((cols_in, cols_out), "float32"),
                 b: R.Tensor((cols_out,), "float32")):
            with R.dataflow():
                y = R.add(R.matmul(x, w), b)
                R.output(y)
            return y

    with tvm.transform.PassContext(opt_level=3):  # as persist_rnn.compile builds the layer
        ex = tvm.compile(Gemm, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(ex, dev)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), dev)
            for s in ((rows, cols_in), (cols_in, cols_out), (cols_out,))]
    return cuda_ms(lambda: vm["main"](*args))


def kernel_ms(cell: str, hidden: int, batch: int, config: dict, seq_len: int = 100) -> float:
    """The persistent kernel alone, on random inputs, with `config`."""
    import tvm

    from persist_rnn.schedule.measure import build_kernel, kernel_arrays
    from tir_templates.config import Config
    from tir_templates.persistent import persistent_kernel
    from tir_templates.spec import CellSpec

    spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")  # as torch's GRU
    cfg = Config.from_dict(config)
    lib = build_kernel(persistent_kernel(spec, cfg), tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    dev = tvm.cuda(0)
    args = [tvm.runtime.tensor(a, dev) for a in kernel_arrays(spec, batch, seq_len, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec))]
    return cuda_ms(lambda: lib["main"](*args))


def main():
    import torch

    args = grid_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args()
    torch.backends.cudnn.allow_tf32 = False
    for op, hidden, batch, layer, x in grid_layers(args):
        model = onnx_from_torch(op, layer, 100, batch)
        feeds = {"X": x.cpu().numpy()}
        compiled = persist_rnn.compile(model, "cuda", tuning_log=args.tuning_log)
        config = compiled.report()[0].config
        gates = {"LSTM": 4, "GRU": 3}[op]
        row = {"cell": op, "hidden": hidden, "batch": batch, "whole_ms": compiled_ms(compiled, feeds),
               "default_gemm_ms": gemm_ms(100 * batch, hidden, gates * hidden),
               "kernel_ms": kernel_ms(op, hidden, batch, config), "cudnn_fp32_graph_ms": cudnn_ms(layer, x)[1],
               "config": config}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
