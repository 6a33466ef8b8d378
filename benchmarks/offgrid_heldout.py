"""Off-grid layers outside `bench --parts offgrid`'s set, each measured as that part measures its
own (`suite.offgrid_row`: T=100, input = hidden, no tuning log; measure off, and the default
compile on the GPU; cuDNN's best algorithm at the same precision in the same run). One JSON line
a layer; a layer that fails is reported and the rest still run. Needs torch and a GPU.

    python benchmarks/offgrid_heldout.py --out F LSTM:512:32:fp16 GRU:768:32:bf16 ...

`--tf32-min-k K` builds with projection_mma.TF32_MIN_K set to K (512: TF32 GEMMs of K < 512 on the
FMA units, as 3xTF32's), `--wgmma-min-k K` with projection_wgmma.WGMMA_MIN_K set to K (a K no layer
has: the pairs GEMM where a build for sm_90a would take the wgmma GEMM), `--wgmma-tile-n N` with
projection_wgmma.WAVE_TILES_N holding N alone and WGMMA_PLAN's width N (every wgmma GEMM in tiles N
columns wide), `--no-wgmma-step` with the GEMM scan's step on mma.sync where a build for sm_90a
would run it on wgmma (gemm_scan_cost.wgmma_step giving none: the pricing and lowering before it),
`--wgmma-splits N` with that step's K split N ways (one where N does not divide its k-tiles) rather
than as many as prices least, for an A/B of each rule.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

#: the layers of docs/data/offgrid-heldout-h200.jsonl: cells, hidden sizes, batches and precisions
#: the set does not pair, weighted to the 16-bit mid-size batches where the set's weakest layer is,
#: and LSTM H=384 B=32 fp16, a layer of the issue that asked for the set
HELD_OUT = ("LSTM:512:32:fp16", "GRU:768:32:bf16", "LSTM:256:16:fp16", "GRU:1024:8:tf32", "LSTM:1024:64:fp16",
            "LSTM:128:64:fp32", "GRU:512:128:bf16", "LSTM:1536:16:fp32", "LSTM:384:32:fp16")


def main():
    from persist_rnn.bench.suite import offgrid_row

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("layers", nargs="*", default=HELD_OUT, help="CELL:HIDDEN:BATCH:PRECISION")
    ap.add_argument("--tf32-min-k", type=int, help="projection_mma.TF32_MIN_K for these builds")
    ap.add_argument("--wgmma-min-k", type=int, help="projection_wgmma.WGMMA_MIN_K for these builds")
    ap.add_argument("--wgmma-tile-n", type=int, help="the one tile width of projection_wgmma.WAVE_TILES_N")
    ap.add_argument("--no-wgmma-step", action="store_true", help="the GEMM scan's step on mma.sync (no wgmma_step)")
    ap.add_argument("--wgmma-splits", type=int, help="the wgmma step's K split this many ways (one where it does not divide)")
    ap.add_argument("--measure-off-only", action="store_true",
                    help="only the compile with measure off against cuDNN (no default compile on the GPU)")
    args = ap.parse_args()
    if args.wgmma_splits is not None:
        import persist_rnn.schedule.gemm_scan_cost as gemm_scan_cost

        every_plan = gemm_scan_cost.wgmma_plans

        def fixed_split(spec):
            """The plan of `--wgmma-splits` ways, or of K whole where that many do not divide it."""
            plans = every_plan(spec)
            return ([p for p in plans if p["splits"] == args.wgmma_splits]
                    or [p for p in plans if p["splits"] == 1])

        gemm_scan_cost.wgmma_plans = fixed_split
    if args.no_wgmma_step:
        import persist_rnn.schedule.gemm_scan_cost as gemm_scan_cost
        import persist_rnn.schedule.planner as planner
        import persist_rnn.transform.persistent_rnn as persistent_rnn

        for module in (gemm_scan_cost, planner, persistent_rnn):
            module.wgmma_step = lambda *_: None
    if args.wgmma_tile_n is not None:
        import tir_templates.projection_wgmma as projection_wgmma

        projection_wgmma.WAVE_TILES_N = {args.wgmma_tile_n: 1.0}
        projection_wgmma.WGMMA_PLAN = dict(projection_wgmma.WGMMA_PLAN, tile_n=args.wgmma_tile_n)
    if args.wgmma_min_k is not None:
        import tir_templates.projection_wgmma as projection_wgmma

        projection_wgmma.WGMMA_MIN_K = args.wgmma_min_k
    if args.tf32_min_k is not None:
        import tir_templates.projection_mma as projection_mma

        projection_mma.TF32_MIN_K = args.tf32_min_k
    for text in args.layers:
        cell, hidden, batch, precision = text.split(":")
        start = time.perf_counter()
        try:
            row = offgrid_row(cell.upper(), int(hidden), int(batch), precision, measured=not args.measure_off_only)
        except Exception as err:  # noqa: BLE001 - reported in the row; the other layers still run
            row = {"cell": cell.upper(), "hidden": int(hidden), "batch": int(batch), "precision": precision,
                   "error": str(err)[:300]}
        row["wall_s"] = round(time.perf_counter() - start, 1)
        for knob in ("tf32_min_k", "wgmma_min_k", "wgmma_tile_n"):
            if getattr(args, knob) is not None:
                row[knob] = getattr(args, knob)
        if args.no_wgmma_step:
            row["no_wgmma_step"] = True
        if args.wgmma_splits is not None:
            row["wgmma_splits"] = args.wgmma_splits
        with open(args.out, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(text, row.get("best_cudnn_over_ours"), row.get("best_cudnn_over_measured"), row.get("error"), flush=True)


if __name__ == "__main__":
    main()
