"""Where a compiled layer's time goes: the input-projection GEMM (TVM's default GPU schedule)
against the whole layer, for the small layers where cuDNN is close (needs torch and a GPU).

    python benchmarks/breakdown.py --tuning-log docs/data/tune-h100.jsonl

Prints, per layer: whole layer ms (persist_rnn's VM call), GEMM-alone ms (the same matmul + bias
built by itself), their difference (persistent kernel, launches) and cuDNN fp32 graph ms.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn
from persist_rnn.bench import (
    compiled_ms,
    cuda_ms,
    cudnn_ms,
    onnx_from_torch,
    torch_layer,
)


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


def main():
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuning-log")
    args = ap.parse_args()
    print("layer | whole ms | GEMM ms | rest ms | cuDNN fp32 graph ms")
    for op, hidden, batch in (("LSTM", 64, 1), ("LSTM", 64, 10), ("LSTM", 64, 20), ("GRU", 64, 10)):
        layer = torch_layer(op, hidden, seed=hidden + batch)
        x = torch.randn(100, batch, hidden, device="cuda")
        torch.backends.cudnn.allow_tf32 = False
        cudnn = cudnn_ms(layer, x)[1]
        compiled = persist_rnn.compile(onnx_from_torch(op, layer, 100, batch), "cuda", tuning_log=args.tuning_log)
        whole = compiled_ms(compiled, {"X": x.cpu().numpy()})
        gates = {"LSTM": 4, "GRU": 3}[op]
        gemm = gemm_ms(100 * batch, hidden, gates * hidden)
        print(f"{op} H={hidden} B={batch} | {whole:.4f} | {gemm:.4f} | {whole - gemm:.4f} | {cudnn:.4f}", flush=True)


if __name__ == "__main__":
    main()
