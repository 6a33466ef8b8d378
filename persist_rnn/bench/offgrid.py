"""The layers of `persist-rnn bench --parts offgrid` (shapes off GRNN's grid, compiled as a user
compiles them, no tuning log) and the summary of their rows (`suite.offgrid_row`).

The set samples the product of both cells, ten hidden sizes that GRNN's grid does not hold, eight
batches and four precisions so that, for each cell, every hidden size, every batch and every
precision appears (the sample a cell walks, `offgrid_set`). `offgrid_summary` puts the floors'
numbers in one line: the least and the geometric mean of best cuDNN ÷ ours with measure off, the
least with the top 5 measured.
"""
from __future__ import annotations

import numpy as np

HIDDEN = (96, 192, 320, 384, 640, 768, 896, 1280, 1536, 2048)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
#: per cell, how far its walk through batches and precisions is shifted: the cells differ, and
#: H=2048 falls on 16 bits for both (fp32 H=2048 has a benchmark of its own,
#: benchmarks/streamed_layers.py)
_SHIFT = {"LSTM": (0, 1), "GRU": (3, 2)}


def offgrid_set() -> list[tuple[str, int, int, str]]:
    """(cell, hidden, batch, precision): for each cell, hidden size k with batch k + shift and
    precision k + shift (modulo), then the batches the hidden sizes left out, at the largest
    hidden sizes in turn."""
    out = []
    for cell, (b_shift, p_shift) in _SHIFT.items():
        rows = [(cell, h, BATCH[(k + b_shift) % len(BATCH)], PRECISIONS[(k + p_shift) % len(PRECISIONS)])
                for k, h in enumerate(HIDDEN)]
        missing = [b for b in BATCH if b not in {r[2] for r in rows}]
        rows += [(cell, HIDDEN[-1 - k], b, PRECISIONS[k % len(PRECISIONS)]) for k, b in enumerate(missing)]
        out += rows
    return out


def offgrid_summary(rows: list[dict]) -> dict:
    """The floors' numbers over the part's rows (issue 52: measure off, least >= 1.0x and geomean
    >= 1.5x; top 5 measured, least >= 1.1x), and the cost model's regret against the compile that
    timed its top 5 and two tensor-core configs (the measure-off pick's time over that compile's:
    the worst, and how many within 1.15x)."""
    off = np.array([r["best_cudnn_over_ours"] for r in rows])
    measured = np.array([r["best_cudnn_over_measured"] for r in rows])
    regret = measured / off  # = ours_ms / measured_ms
    return {"part": "offgrid_summary", "layers": len(rows), "measure_off_least": float(off.min()),
            "measure_off_geomean": float(np.exp(np.log(off).mean())), "measure_off_at_1x": int((off >= 1.0).sum()),
            "top5_least": float(measured.min()),
            "top5_geomean": float(np.exp(np.log(measured).mean())), "pick_regret_worst": float(regret.max()),
            "pick_within_1_15": int((regret <= 1.15).sum())}
