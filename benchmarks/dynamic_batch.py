"""Each shipped example as shipped (symbolic batch, one build: a kernel per batch bucket) against
a build specialised for each batch (static shapes, tuned on this GPU), all through the VM with
inputs on the GPU (issue 16's floor: within 1.1x at every batch). The static builds tune into one
tuning log; the shipped model is built twice: from the cost model alone (`as_shipped_ms`) and
with that log (`as_shipped_tuned_ms`, what `persist-rnn tune` gives: its buckets' workloads are
the static builds'). One JSON line per (model, batch).

    python benchmarks/dynamic_batch.py --out dynamic_batch.jsonl [--models char_rnn,speech_gru]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import persist_rnn
from persist_rnn.bench.gpu_timing import compiled_ms
from persist_rnn.bench.suite import inputs_at_batch

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="char_rnn,speech_gru,text_classifier")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    for name in args.models.split(","):
        path, npz = f"examples/{name}.onnx", f"examples/{name}_inputs.npz"
        log = os.path.join(tempfile.mkdtemp(), f"{name}.jsonl")
        shipped = persist_rnn.compile(path, "cuda")
        feeds = {b: inputs_at_batch(shipped, npz, b) for b in batches}
        static = {b: persist_rnn.compile(path, "cuda", shapes={k: v.shape for k, v in feeds[b].items()},
                                         tuning_log=log) for b in batches}
        tuned = persist_rnn.compile(path, "cuda", tuning_log=log)
        for b in batches:
            row = {"model": name, "batch": b, "as_shipped_ms": compiled_ms(shipped, feeds[b]),
                   "as_shipped_tuned_ms": compiled_ms(tuned, feeds[b]), "static_ms": compiled_ms(static[b], feeds[b]),
                   "as_shipped_buckets": [r.buckets for r in shipped.report()],
                   "as_shipped_tuned_buckets": [r.buckets for r in tuned.report()],
                   "static_configs": [r.config for r in static[b].report()]}
            row["ratio"] = row["as_shipped_ms"] / row["static_ms"]
            row["tuned_ratio"] = row["as_shipped_tuned_ms"] / row["static_ms"]
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            brief = {k: row[k] for k in ("model", "batch", "as_shipped_ms", "as_shipped_tuned_ms", "static_ms",
                                         "ratio", "tuned_ratio")}
            print(json.dumps(brief), flush=True)


if __name__ == "__main__":
    main()
