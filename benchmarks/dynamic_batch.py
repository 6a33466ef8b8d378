"""Each shipped example as shipped (symbolic batch, one build) against a build specialised for
each batch (static shapes, tuned on this GPU), both through the VM with inputs on the GPU (issue
16's floor: within 1.1x at every batch). One JSON line per (model, batch).

    python benchmarks/dynamic_batch.py --out dynamic_batch.jsonl [--models char_rnn,speech_gru]
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import tvm

import persist_rnn
from persist_rnn.bench import cuda_ms

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def inputs_at(compiled, npz: str, batch: int) -> dict:
    """The example's inputs tiled or cut to `batch` along each input's symbolic batch axis."""
    out = {}
    for spec, (_, a) in zip(compiled.inputs, np.load(npz).items()):
        axis = next(k for k, d in enumerate(spec.shape) if d == "batch")
        out[spec.name] = np.ascontiguousarray(np.take(a, np.arange(batch) % a.shape[axis], axis=axis))
    return out


def vm_ms(compiled, feeds) -> float:
    dev = tvm.cuda(0)
    vm = tvm.relax.VirtualMachine(compiled.executable, dev)
    args = [tvm.runtime.tensor(v, dev) for v in feeds.values()]
    return cuda_ms(lambda: vm["main"](*args))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="char_rnn,speech_gru,text_classifier")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    args = ap.parse_args()
    for name in args.models.split(","):
        path, npz = f"examples/{name}.onnx", f"examples/{name}_inputs.npz"
        shipped = persist_rnn.compile(path, "cuda")
        for batch in map(int, args.batches.split(",")):
            feeds = inputs_at(shipped, npz, batch)
            shapes = {k: v.shape for k, v in feeds.items()}
            static = persist_rnn.compile(path, "cuda", shapes=shapes)
            row = {"model": name, "batch": batch, "as_shipped_ms": vm_ms(shipped, feeds),
                   "static_ms": vm_ms(static, feeds),
                   "as_shipped_configs": [r.config for r in shipped.report()],
                   "static_configs": [r.config for r in static.report()]}
            row["ratio"] = row["as_shipped_ms"] / row["static_ms"]
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            brief = {k: row[k] for k in ("model", "batch", "as_shipped_ms", "static_ms", "ratio")}
            print(json.dumps(brief), flush=True)


if __name__ == "__main__":
    main()
