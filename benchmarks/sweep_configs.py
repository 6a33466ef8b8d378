"""Exhaustive measurement of the pruned config space for GRNN's 18 workloads (cost-model accuracy).

For each workload (LSTM/GRU x H in {64, 256, 1024} x B in {1, 10, 20}, T=100 as per-step time)
every FMA-unit config of `candidate_configs` is compiled (in parallel) and timed (the planner
measures tensor-core configs instead of ranking them); each result is written
as a JSON line with the model's prediction, so the model can be fitted and its ranking judged
(`python -m persist_rnn.schedule.fit sweep.jsonl`).

    python benchmarks/sweep_configs.py --out sweep.jsonl [--cells lstm gru]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main():
    import tvm

    from persist_rnn.schedule.calibrate import sweep_rows
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.space import candidate_configs
    from tir_templates.spec import CellSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", nargs="+", default=["lstm", "gru"])
    ap.add_argument("--hidden", nargs="+", type=int, default=[64, 256, 1024])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 10, 20])
    ap.add_argument("--limit", type=int, default=0, help="at most this many configs per workload (0: all)")
    ap.add_argument("--cluster-tiles-only", action="store_true",
                    help="only the configs with a cluster per batch tile (added to the space after sweep-h100-v2)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    gpu = gpu_model("sm_90")
    dev = tvm.cuda(0)
    for cell, hidden, batch in itertools.product(args.cells, args.hidden, args.batch):
        spec = CellSpec(cell, hidden, hidden, linear_before_reset=(cell == "gru"))
        configs = [c for c in candidate_configs(spec, gpu, batch) if not c.tensor_cores()]  # the model ranks these
        if args.cluster_tiles_only:
            configs = [c for c in configs if c.batch_tile and c.cluster]
        if args.limit:
            configs = configs[: args.limit]
        t0 = time.perf_counter()
        rows = sweep_rows(spec, configs, gpu, target, dev, batch)
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        print(f"{cell} H={hidden} B={batch}: {len(rows)} of {len(configs)} configs timed in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
