"""What a step of the GEMM scan (tir_templates/gemm_scan.py) costs, so that the planner can weigh
it against the persistent configs and the streamed scan.

A step is each direction's GEMM, B x H times H x G*H on the tensor cores in CTA tiles of 64 x 64
(gemm_scan.STEP_PLAN), then the update, each its own launch. The GEMM's grid is a CTA a tile, and
a wave of tiles takes a time proportional to K (its k-tiles run one after another, latency more
than the mma's rate: TF32 is barely faster than 3xTF32's three mma); tiles past a wave double
the step. Fitted on kernels alone on the H200 (`benchmarks/gemm_scan_layers.py`,
docs/data/gemm-scan-h200.jsonl, runs B-D), us a step:
- 3xTF32: LSTM H=1280 B=64 and GRU H=1280 B=128 (one wave) 37.1-38.1, LSTM H=2048 B=16 54.5;
  two waves: LSTM H=1280 B=128 65.3, LSTM H=4096 B=16 180;
- TF32: LSTM H=1280 B=64 30.4, LSTM H=1536 B=32 35.6;
- 16 bits: fp16 GRU H=1280 B=128 24.6, LSTM H=2048 B=16 and B=32 39.4 and 40.3; bf16 LSTM
  H=4096 B=16 (two waves) 94.9.
"""
from __future__ import annotations

import math

from tir_templates.gemm_scan import gemm_precision
from tir_templates.projection_mma import BM, BN
from tir_templates.spec import CellSpec

#: microseconds a wave of 64 x 64 tiles takes per column of K, by the GEMM's precision
WAVE_US_PER_K = {"3xtf32": 0.0234, "tf32": 0.019, "f16": 0.015, "bf16": 0.015}
#: microseconds a GEMM launch adds (the one before ending, this one filling the GPU)
LAUNCH_US = 2.5
#: the update's fixed part (its launch included), and its bytes a microsecond (it reads the gates
#: and xw(t), writes h, c and Y)
UPDATE_US, UPDATE_BYTES_PER_US = 3.0, 3.0e6


def gemm_scan_us(spec: CellSpec, batch: int, num_sms: int, precision: str = "fp32") -> float:
    """Predicted microseconds of one step of the GEMM scan at `batch` rows on `num_sms` SMs."""
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    waves = math.ceil(math.ceil(batch / BM) * math.ceil(G * H / BN) / num_sms)
    gemm = waves * H * WAVE_US_PER_K[gemm_precision(spec, precision)]
    update = UPDATE_US + D * batch * H * (2 * G + 3) * 4 / UPDATE_BYTES_PER_US
    return D * (gemm + LAUNCH_US) + update
