"""The cost model's measure-off pick (no tuning log) for a range of layers, one line each:
`CELL HIDDEN BATCH PRECISION CONFIG-JSON` (null: no persistent config). Run it before and after a
change to see which picks move; `pick_ab.py --before` times them. No GPU needed.

    python benchmarks/picks_dump.py > picks.txt
    python benchmarks/picks_dump.py --layers LSTM:1408:64:fp16 GRU:960:128:fp16 > picks.txt   # these only
"""
from __future__ import annotations

import argparse
import json

from persist_rnn.bench.offgrid import offgrid_set
from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.planner import choose
from persist_rnn.targets import as_target
from tir_templates.spec import CellSpec


def layers():
    """The off-grid set, GRNN's grid at every precision, and hidden sizes 512-2048 at 16 bits."""
    out = list(offgrid_set())
    out += [(c, h, b, p) for p in PRECISIONS for c in ("LSTM", "GRU") for h in (64, 256, 1024) for b in (1, 10, 20)]
    out += [(c, h, b, p) for c in ("LSTM", "GRU") for h in (512, 768, 1024, 1280, 1536, 2048)
            for b in (1, 2, 4, 8, 16, 32, 64) for p in ("fp16", "bf16", "fp32", "tf32")]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION (default: the set, the grid and more)")
    args = ap.parse_args()
    chosen = [(c, int(h), int(b), p) for c, h, b, p in (t.split(":") for t in args.layers)] if args.layers else layers()
    target = as_target("cuda")
    for cell, hidden, batch, precision in chosen:
        build_precision, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
        plan = choose(spec, target, batch, measure=False, precision=build_precision)
        print(cell, hidden, batch, precision, json.dumps(plan.config.as_dict() if plan.config else None, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
