"""The model's measure-off pick against another config of the same layer, kernel alone, timed in
turn; or configs the model's space prunes, timed beside its pick (needs a GPU).

    python benchmarks/picks_dump.py > before.txt          # with the code before a change
    python benchmarks/pick_ab.py --before before.txt LSTM:1536:1:fp16 GRU:2048:2:fp16 ...
    python benchmarks/pick_ab.py --extra '{"tile_units": 16, "mma_k_split": 4, ...}' GRU:1536:8:fp16
    python benchmarks/pick_ab.py --pick-with '{"stamped": true}' LSTM:768:32:fp16 ...

One JSON line a layer and config: `part` "kernel_ab" (the pick now against the pick in `--before`,
"streamed" where that file has none) or "probe" (each config of `--extra`, or the pick with the
fields of `--pick-with` changed, beside the pick, with the `problems` that prune it). Data: docs/data/tc-registers-h200.jsonl.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.gpu import gpu_model, present_device
from persist_rnn.schedule.measure import builds, measure_configs
from persist_rnn.schedule.planner import choose
from persist_rnn.schedule.space import problems_on
from persist_rnn.targets import as_target
from tir_templates.config import Config
from tir_templates.spec import CellSpec


def picks_file(path: str) -> dict:
    """(cell, hidden, batch, precision) -> Config or None, as `picks_dump.py` wrote them."""
    out = {}
    for line in open(path):
        cell, hidden, batch, precision, config = line.split(" ", 4)
        out[(cell, int(hidden), int(batch), precision)] = None if config.strip() == "null" else Config.from_dict(json.loads(config))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION")
    ap.add_argument("--before", help="picks_dump.py's output for the code before a change")
    ap.add_argument("--extra", action="append", default=[], help="a config (JSON, Config's fields) to time beside the pick")
    ap.add_argument("--pick-with", action="append", default=[],
                    help="fields (JSON) to change in the pick: that config timed beside it")
    args = ap.parse_args()
    before = picks_file(args.before) if args.before else {}
    target, dev, gpu = as_target("cuda"), present_device(), gpu_model("sm_90")
    jobs = []
    for text in args.layers:
        cell, hidden, batch, precision = text.split(":")
        key = (cell.upper(), int(hidden), int(batch), precision)
        build_precision, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), key[1], key[1], linear_before_reset=key[0] == "GRU", dtype=dtype)
        pick = choose(spec, target, key[2], measure=False, precision=build_precision).config
        others = [before[key]] if before.get(key) else [Config(**json.loads(e)) for e in args.extra]
        changed = (dataclasses.replace(pick, **json.loads(w)) for w in args.pick_with)
        others += [c for c in changed if not problems_on(spec, c, gpu)]  # a change the space would prune: left out
        configs = [pick] + [c for c in others if c != pick]
        builds().submit(spec, configs, target)  # every build in flight at once
        jobs.append((key, spec, pick, configs))
    for (cell, hidden, batch, precision), spec, pick, configs in jobs:
        timed = {json.dumps(c.as_dict(), sort_keys=True): us for us, c in measure_configs(spec, configs, target, dev, batch)}
        us = lambda c: timed.get(json.dumps(c.as_dict(), sort_keys=True))
        head = {"cell": cell, "hidden": hidden, "batch": batch, "precision": precision}
        if args.before:
            old = configs[1] if len(configs) > 1 else None
            print(json.dumps({"part": "kernel_ab", **head, "new_us": us(pick), "old_us": us(old) if old else None,
                              "new": pick.as_dict(), "old": old.as_dict() if old else "streamed"}), flush=True)
        else:
            for c in configs:
                print(json.dumps({"part": "probe", **head, "us": us(c), "pick": c == pick, "tc": c.tensor_cores(),
                                  "config": c.as_dict(), "problems": problems_on(spec, c, gpu)[:1]}), flush=True)


if __name__ == "__main__":
    main()
