"""What a step of the streamed scan (tir_templates/streamed.py) costs, so that the planner can
weigh it against a persistent kernel that streams part of its weights (`Config.global_runs`).

The scan reads every recurrent weight from global memory once per tile of BATCH_TILE batch rows
and multiplies it with each row of the tile on the FMA units, a kernel a step. Its two rates are
measured, not fitted to a model of the SM: on the H100 (docs/data/streamed-layers-h100.jsonl,
run B) LSTM and GRU at H=2048 and 4096 read their weights at 2.4-2.85 TB/s at B=1, and at B=16
ran 2.4-3.3 multiply-adds a picosecond (docs/data/streamed-layers-h200.jsonl: GRU H=4096 B=16
on the H200, 2.9).
"""
from __future__ import annotations

import math

from tir_templates.spec import CellSpec
from tir_templates.streamed import BATCH_TILE

#: bytes of weights a microsecond the scan reads at B=1 (the least of the layers above, ~2.4 TB/s,
#: rounded up: the larger layers read faster)
SCAN_BYTES_PER_US = 2.6e6
#: multiply-adds a microsecond the scan's lanes run at B=16 (the layers above: 2.4e6-3.3e6)
SCAN_FMA_PER_US = 2.9e6


def streamed_scan_us(spec: CellSpec, batch: int | None) -> float:
    """Predicted microseconds of one step of the streamed scan at `batch` (None: one tile)."""
    weights = spec.num_directions * spec.num_gates * spec.hidden_size ** 2
    rows = batch or 1
    read = math.ceil(rows / BATCH_TILE) * weights * 4 / SCAN_BYTES_PER_US
    return max(read, weights * rows / SCAN_FMA_PER_US)
