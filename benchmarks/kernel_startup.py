"""A persistent kernel's start and its step, kernels alone (GPU).

    python benchmarks/kernel_startup.py LSTM:768:32:fp16 GRU:640:128:fp16 ...

For each layer (input = hidden) the measure-off pick, as `bench --parts offgrid` builds it (with
the shared-fragments variant where a compile takes it), timed alone at T=50 and T=400: the slope
is its µs a step, the intercept what a call spends outside the steps (loading the weights into
registers and shared memory, h0 and the final states). One JSON line a layer.
"""
from __future__ import annotations

import argparse
import json

from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.gpu import gpu_model, present_device
from persist_rnn.schedule.measure import measure_configs
from persist_rnn.schedule.planner import _ranked, model_pick
from persist_rnn.schedule.space import unmeasured_variant
from persist_rnn.targets import as_target
from tir_templates.spec import CellSpec

SHORT, LONG = 50, 400


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION")
    args = ap.parse_args()
    target, dev, gpu = as_target("cuda"), present_device(), gpu_model("sm_90")
    for text in args.layers:
        cell, hidden, batch, precision = text.split(":")
        hidden, batch = int(hidden), int(batch)
        build_precision, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell.upper() == "GRU", dtype=dtype)
        _, ranked = _ranked(spec, gpu, batch, False, build_precision)
        pick = model_pick(ranked, gpu, batch)
        pick = unmeasured_variant(spec, pick, gpu) or pick
        short, long = (measure_configs(spec, [pick], target, dev, batch, seq_len=n)[0][0] * n for n in (SHORT, LONG))
        step = (long - short) / (LONG - SHORT)
        print(json.dumps({"cell": cell.upper(), "hidden": hidden, "batch": batch, "precision": precision,
                          "config": pick.as_dict(), f"t{SHORT}_us": short, f"t{LONG}_us": long, "step_us": step,
                          "start_us": short - SHORT * step}), flush=True)


if __name__ == "__main__":
    main()
