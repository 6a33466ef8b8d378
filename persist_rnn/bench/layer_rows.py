"""The command line shared by the per-layer benchmarks (benchmarks/batch1.py, tf32.py,
streamed_layers.py): layers named CELL:H:B, one JSON line per layer appended to `--out` as soon as
it is measured (a run cut short keeps what it measured)."""
from __future__ import annotations

import argparse
import json


def run_layer_rows(description: str, default_layers, layer_row, hidden=(), options=()) -> None:
    """Parse `--out`, `--layers CELL:H:B ...` (default `default_layers`) and `options` (argparse
    (flags, kwargs) pairs, handed to `layer_row` as keywords by their dest), then append
    layer_row(cell, hidden, batch, **options) for each layer to `--out`, printing each row without
    the keys in `hidden` (the bulky per-algorithm tables)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", nargs="*", help="CELL:H:B (default: the benchmark's own set)")
    dests = []
    for flags, kwargs in options:
        dests.append(ap.add_argument(*flags, **kwargs).dest)
    args = ap.parse_args()
    layers = [(c, int(h), int(b)) for c, h, b in (s.split(":") for s in args.layers)] if args.layers else default_layers
    extra = {d: getattr(args, d) for d in dests}
    with open(args.out, "a") as f:
        for cell, hidden_size, batch in layers:
            row = layer_row(cell, hidden_size, batch, **extra)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k not in hidden}), flush=True)
