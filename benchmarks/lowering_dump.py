"""The lowering and config the planner gives 16-bit layers past the chip (H = 2048-4096, B =
1-128, fp16 both directions, bf16 forward) in a build for sm_90a, the default on a Hopper GPU, with
measure off and no tuning log: one line a layer, `CELL HIDDEN BATCH PRECISION DIRECTION LOWERING
CONFIG-JSON`. Run it before and after a change to the model to see which layers move;
`streamed_fragments.py --before` times them. No GPU needed.

    python benchmarks/lowering_dump.py > lowerings.txt
"""
from __future__ import annotations

import json
import os
import sys

import tvm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.torch_layers import PRECISIONS  # noqa: E402
from persist_rnn.schedule.planner import choose  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402

LAYERS = [(cell, hidden, batch, precision, direction)
          for cell in ("LSTM", "GRU") for hidden in (2048, 2560, 3072, 3584, 4096)
          for batch in (1, 2, 4, 8, 16, 32, 64, 128)
          for precision, direction in (("fp16", "forward"), ("bf16", "forward"), ("fp16", "bidirectional"))]


def main():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    for cell, hidden, batch, precision, direction in LAYERS:
        build_precision, dtype, _ = PRECISIONS[precision]
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype, direction=direction)
        plan = choose(spec, target, batch, measure=False, precision=build_precision)
        lowering = plan.lowering or ("persistent" if plan.config else "reference")
        config = json.dumps(plan.config.as_dict() if plan.config else None, sort_keys=True)
        print(cell, hidden, batch, precision, direction, lowering, config, flush=True)


if __name__ == "__main__":
    main()
