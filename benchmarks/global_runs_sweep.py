"""Configs that read part of their weights from global memory each step (`Config.global_runs`),
timed kernel alone beside the cost model's price of them: the data `streamed_weights_us` is
checked and fitted on (docs/cost-model.md, *Weights read each step*). Needs a GPU.

    python benchmarks/global_runs_sweep.py --out rows.jsonl [--layers LSTM:1280:128 GRU:2048:16 ...] [--limit 12]

For each layer (fp32, input = hidden) up to `--limit` of its candidate configs (`sample_configs`:
the model's best half and a random spread of the rest) are built in parallel and timed. One JSON
line a config: the sweep row `fit` reads (`calibrate.sweep_rows`) plus what the streamed term
priced (`streamed_us`), the bytes every CTA reads from global memory a step (`global_bytes`),
and the passes over them (`passes`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

#: fp32 layers whose weights do not fit on chip (every config streams some), at batches from 1 to 128
LAYERS = ("LSTM:1280:128", "LSTM:1536:128", "GRU:1536:128", "GRU:2048:64", "LSTM:2048:16", "GRU:2048:16",
          "LSTM:2048:1", "GRU:2048:1")


def main():
    import tvm

    from persist_rnn.schedule.calibrate import sample_configs, sweep_rows
    from persist_rnn.schedule.cost_model import streamed_weights_us, weight_passes
    from persist_rnn.schedule.gpu import gpu_model
    from tir_templates.spec import CellSpec

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", nargs="*", default=LAYERS, help="CELL:H:B")
    ap.add_argument("--limit", type=int, default=12, help="configs a layer at most")
    args = ap.parse_args()
    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    gpu = gpu_model("sm_90")
    for layer in args.layers:
        cell, hidden, batch = layer.split(":")
        hidden, batch = int(hidden), int(batch)
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")
        configs = [c for c in sample_configs(spec, gpu, batch, args.limit) if c.global_runs]
        by_dict = {json.dumps(c.as_dict(), sort_keys=True): c for c in configs}
        for row in sweep_rows(spec, configs, gpu, target, dev, batch):  # a config that failed to build has none
            cfg = by_dict[json.dumps(row["config"], sort_keys=True)]
            row.update(streamed_us=streamed_weights_us(spec, cfg, gpu, batch), passes=weight_passes(spec, cfg, batch),
                       global_bytes=cfg.num_ctas(spec) * cfg.global_weight_bytes(spec), gpu=str(dev.device_name))
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(layer, round(row["measured_us"], 2), "model", round(row["model_us"], 2), "streamed",
                  round(row["streamed_us"], 2), flush=True)


if __name__ == "__main__":
    main()
