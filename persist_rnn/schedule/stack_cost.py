"""The cost model of a stack of layers: one wavefront kernel against a kernel a layer.

A wavefront CTA's step is priced in the per-layer model's terms (`cost_model.py`, the same fitted
weights): its dot products over [h below ; h] (layers above the first hold [W | R], K = 2H),
the shuffle-sums a batch row, its cell updates, the layer below's h words from L2, and the
exchange of its own h in the cluster (the calibrated dsmem exchange). The layers run as a
pipeline, so a wavefront step takes the slowest layer's step, and the stack T + L - 1 of them.
A batch in tiles prices a tile's rows (the tiles run side by side), and once more for each wave
of clusters past those the GPU holds at once (`waves`).
A kernel a layer takes each layer's step (its planned config, `cost_model.step_us`) T times.

The fitted weights price a B=1 step of either kernel above what the H100 and H200 measured
(the per-layer more so), and the two errors do not cancel exactly: on the stacks measured so far
the predicted ratio (a kernel a layer / the wavefront) ran 1.0-1.5x above the measured one. So
the wavefront is chosen only where the model predicts it `FUSE_MARGIN` times faster
(`tests/schedule/test_stack_cost.py` checks that choice against every measured stack).
Plain arithmetic: no TVM, no GPU.
"""
from __future__ import annotations

import dataclasses
import math

from tir_templates.config import Config
from tir_templates.spec import CellSpec
from tir_templates.wavefront.plan import LANES, StackConfig, parts

from .cost_model import UPDATE_INSTR, step_us
from .gpu import GPUModel

#: the predicted ratio (a kernel a layer / the wavefront) above which the wavefront is chosen
FUSE_MARGIN = 1.3
#: time steps a stack is priced at when its sequence length is known only at run time
DEFAULT_STEPS = 100
#: shuffle rounds of a warp-wide sum (32 lanes)
SHUFFLES = int(math.log2(LANES))


def wavefront_features(specs: list[CellSpec], cfg: StackConfig, layer: int) -> dict:
    """What one step of a CTA of `layer` costs, in the units of `cost_model.features`. A config
    with lane updates is priced as its twin that meets in shared memory. Lane updates save
    shuffles and a __syncthreads. On the H100 at B=1 that paid for 2 x GRU H=256 (1.11x) and
    3 x LSTM H=256 (1.03x) but not for 3 x LSTM H=128 (0.97x; docs/data/wavefront-stacks-measured.jsonl),
    which these features cannot tell apart. So the model ranks a lane config right after its
    twin, and `tune`, which times the model's first two, measures both."""
    cfg = dataclasses.replace(cfg, lane_updates=False)
    rows = cfg.batch_chunk  # a CTA's batch rows: the batch, or its tile's (the tiles run side by side)
    spec = specs[layer]
    H, G = spec.hidden_size, spec.num_gates
    warps = cfg.threads // LANES
    per_scheduler = max(1.0, warps / 4)
    kpl = H // LANES * (2 if layer else 1)  # columns a lane holds a row: [W | R] above the first layer
    input_words = math.ceil(rows * H / cfg.threads) if layer else 0  # issued, then issued again if early
    pairs = math.ceil(rows * (H // cfg.cluster) / cfg.threads)
    return {
        "chunks": 1,
        "l2_loads": 1 if layer else 0,
        "load_issue": 2 * input_words * per_scheduler,
        "fma_issue": kpl * cfg.rows_per_group * rows * per_scheduler,
        "lds_wavefronts": warps * kpl * rows,  # a warp's 32 lanes read 32 consecutive floats: one wavefront
        "lds_issue": kpl * rows * per_scheduler,
        "shuffle_issue": cfg.rows_per_group * parts(spec, layer) * rows * SHUFFLES * per_scheduler,
        "update_issue": pairs * UPDATE_INSTR[spec.cell] * (G + 1) / 5 * per_scheduler,
    }


def wavefront_step_us(specs: list[CellSpec], cfg: StackConfig, gpu: GPUModel) -> list[float]:
    """Predicted microseconds of one step of each layer's CTAs in the wavefront kernel."""
    exchange = gpu.weights.get("barrier_us", 1.0) * gpu.barrier_us(cfg.cluster, "dsmem")
    out = []
    for layer in range(len(specs)):
        f = wavefront_features(specs, cfg, layer)
        cycles = sum(gpu.weights.get(k, 0.0) * v for k, v in f.items())
        out.append(exchange + cycles / (gpu.clock_ghz * 1e3))
    return out


def waves(specs: list[CellSpec], cfg: StackConfig, gpu: GPUModel) -> int:
    """How many times over the launch's clusters (a layer's a batch tile) fill the GPU: the
    clusters past those resident at once start only as earlier ones finish (their tickets come
    last, so nothing waits for them), and their tiles run after."""
    return math.ceil(cfg.batch_tiles * len(specs) / gpu.clusters_at_once(cfg.cluster))


def wavefront_us(specs: list[CellSpec], cfg: StackConfig, gpu: GPUModel, steps: int | None) -> float:
    """Predicted microseconds of the wavefront kernel's steps over `steps` time steps
    (DEFAULT_STEPS if None): T + L - 1 of the slowest layer's, once a wave of tiles."""
    n_t = steps or DEFAULT_STEPS
    return waves(specs, cfg, gpu) * (n_t + len(specs) - 1) * max(wavefront_step_us(specs, cfg, gpu))


def stack_us(specs: list[CellSpec], cfg: StackConfig, layer_configs: list[Config], gpu: GPUModel, batch: int,
             steps: int | None) -> tuple[float, float]:
    """(the wavefront kernel, a kernel a layer): predicted microseconds of the stack's recurrent
    steps over `steps` time steps (DEFAULT_STEPS if None)."""
    n_t = steps or DEFAULT_STEPS
    fused = wavefront_us(specs, cfg, gpu, steps)
    per_layer = n_t * sum(step_us(spec, c, gpu, batch) for spec, c in zip(specs, layer_configs))
    return fused, per_layer
