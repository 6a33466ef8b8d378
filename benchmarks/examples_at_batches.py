"""The shipped examples as users compile them (symbolic batch, no tuning log, measure off), timed
at batches 4-32 through TVM's VM, with the batch buckets each layer got (needs a GPU). Run with
two checkouts on PYTHONPATH in turn to compare the planner's bucket choices:

    python benchmarks/examples_at_batches.py TAG >> out.jsonl

Data: docs/data/examples-cluster-waves-h200.jsonl.
"""
from __future__ import annotations

import json
import sys

from persist_rnn.bench.gpu_timing import compiled_ms
from persist_rnn.bench.suite import compile_model, inputs_at_batch


def main(tag: str):
    for name in ("speech_gru", "text_classifier", "char_rnn"):
        path = f"examples/{name}.onnx"
        shipped = compile_model(path, "cuda", tuning_log=None)
        buckets = [[(b["max_batch"], b["config"]["tile_units"], b["config"]["batch_tile"]) for b in r.buckets]
                   for r in shipped.report() if r.buckets]
        for batch in (4, 8, 16, 32):
            feeds = inputs_at_batch(shipped, path.replace(".onnx", "_inputs.npz"), batch)
            ms = min(compiled_ms(shipped, feeds) for _ in range(3))
            print(json.dumps({"code": tag, "model": name, "batch": batch, "ms": ms, "buckets": buckets}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
