"""What a step of the GEMM scan (tir_templates/gemm_scan.py) costs, so that the planner can weigh
it against the persistent configs and the streamed scan.

A step is each direction's GEMM, B x H times H x G*H on the tensor cores (gemm_scan.STEP_PLAN in
CTA tiles of 64 rows by 64 to 128 columns, `step_plan`), then the update, each its own launch. The
GEMM's grid is a CTA a tile, and a wave of tiles takes a time proportional to K (its k-tiles run
one after another, latency more than the mma's rate: TF32 is barely faster than 3xTF32's three
mma); tiles past a wave double the step, so where 64 x 64 tiles would need two waves, wider tiles
that fill one are faster (`TILE_WAVE`). Fitted on kernels alone on the H200
(`benchmarks/gemm_scan_layers.py`, docs/data/gemm-scan-h200.jsonl, runs B-D; the tiles, run E),
us a step:
- 3xTF32: LSTM H=1280 B=64 and GRU H=1280 B=128 (one wave) 37.1-38.1, LSTM H=2048 B=16 54.5;
  two waves: LSTM H=1280 B=128 65.3, LSTM H=4096 B=16 180;
- TF32: LSTM H=1280 B=64 30.4, LSTM H=1536 B=32 35.6;
- 16 bits: fp16 GRU H=1280 B=128 24.6, LSTM H=2048 B=16 and B=32 39.4 and 40.3; bf16 LSTM
  H=4096 B=16 (two waves) 94.9.
On sm_90a a 16-bit layer's step GEMM runs on the wgmma tensor cores instead (`wgmma_step`), priced
by the weights it streams, the partial sums it writes and the k-tiles its CTAs take one after
another (`wgmma_scan_us`), K split as many ways as that prices least.
"""
from __future__ import annotations

import math

from tir_templates.gemm_scan import STEP_PLAN, gemm_precision, ring_stages, wgmma_step_problem
from tir_templates.projection_mma import warp_grid
from tir_templates.projection_wgmma import deepest_ring, wgmma_shared_bytes
from tir_templates.spec import CellSpec

from .gpu import MAX_SHARED_BYTES

#: a wave of the step GEMM's CTA tiles, 64 rows by 64-128 columns, against one of 64 x 64 tiles:
#: kernels alone on the H200, 3xTF32, LSTM H=1280 B=64, one wave of each, 37.3, 48.3, 48.9 and
#: 59.2 us a step with the launches and the update (run E). Where 64 x 64 tiles took two waves, the
#: widest that fits one ran LSTM H=1280 B=128 in 50.4 us against 65.1 (64 x 80), GRU H=2048
#: B=128 73.3 against 98.8 (64 x 96), LSTM H=2048 B=128 93.6 against 100.4 (64 x 128)
TILE_WAVE = {"64x64": 1.0, "64x80": 1.32, "64x96": 1.34, "64x128": 1.64}
#: the least batch whose step GEMM takes wider tiles. Below it they ran faster too (fp32 LSTM
#: H=4096 B=16 166 against 180 us, GRU H=3072 B=32 96 against 147; bf16 LSTM H=4096 B=16 the
#: same), but their price would give the scan fp32 layers whose persistent kernels ran faster
#: (LSTM H=4096 B=16 145.5 us, GRU H=4096 B=16 106.9, GRU H=3072 B=32 92.1, against 166.5, 151.1
#: and 95.9): the model prices those kernels at 1.43-1.52x their step (run F)
WIDE_TILES_FROM = 64
#: microseconds a wave of 64 x 64 tiles takes per column of K, by the GEMM's precision
WAVE_US_PER_K = {"3xtf32": 0.0234, "tf32": 0.019, "f16": 0.015, "bf16": 0.015}
#: microseconds a GEMM launch adds (the one before ending, this one filling the GPU)
LAUNCH_US = 2.5
#: the update's fixed part (its launch included), and its bytes a microsecond (it reads the gates
#: and xw(t), writes h, c and Y)
UPDATE_US, UPDATE_BYTES_PER_US = 3.0, 3.0e6


def _waves(spec: CellSpec, batch: int, num_sms: int, tile: str) -> float:
    """Waves of `tile`'s CTAs the step GEMM of one direction takes, each priced as TILE_WAVE says."""
    bm, bn, *_ = warp_grid(tile)
    tiles = math.ceil(batch / bm) * math.ceil(spec.num_gates * spec.hidden_size / bn)
    return math.ceil(tiles / num_sms) * TILE_WAVE[tile]


def step_tile(spec: CellSpec, batch: int, num_sms: int) -> str:
    """The step GEMM's CTA tile whose waves take the least time, the narrowest of equals; 64 x 64
    where the batch leaves the tiles' 64 rows part empty (`WIDE_TILES_FROM`)."""
    if batch < WIDE_TILES_FROM:
        return "64x64"
    return min(TILE_WAVE, key=lambda tile: (_waves(spec, batch, num_sms, tile), TILE_WAVE[tile]))


def step_plan(spec: CellSpec, batch: int, num_sms: int) -> dict:
    """projection_mma's plan of the step GEMM on `num_sms` SMs: STEP_PLAN in `step_tile`'s tiles."""
    tile = step_tile(spec, batch, num_sms)
    return dict(STEP_PLAN) if tile == "64x64" else {**STEP_PLAN, "tile": tile}


def step_launched_early(plan: dict) -> bool:
    """Whether the scan of the step GEMM `plan` (`step_plan`'s) has its kernels launched early
    (sm_90 on; gemm_scan's `early_launch`): where the GEMM takes wider tiles. Kernels alone on the
    H200 (runs H and I), early against one after another: in wider tiles 1.03-1.06x faster (LSTM
    H=1280 B=128 47.7 against 50.4 us a step; GRU H=2048 B=128, LSTM H=2048 B=128, GRU H=1536
    B=128); in 64 x 64 tiles 0.59-0.95x (LSTM H=1280 B=64 60.7 against 36.9; LSTM H=1536 and 2048
    B=64, fp16 LSTM H=2048 B=32, bf16 LSTM H=4096 B=16)."""
    return plan.get("tile", "64x64") != "64x64"


#: the wgmma step's CTA tile: 64 rows (one warpgroup) by 128 columns. Tiles of 128 rows were never
#: the fastest plan of 24 16-bit layers on the H200 (docs/data/gemm-scan-h200.jsonl, runs J and K)
WGMMA_TILE = {"bm": 64, "tile_n": 128}
#: the most ways the wgmma step splits K (each split's partial sums a slot of the exchange buffer)
MAX_SPLITS = 8


def ring_depth(spec: CellSpec, splits: int) -> int:
    """The k-tiles the wgmma step's ring holds with K split `splits` ways: a split's k-tiles all in
    flight at once, up to what an sm_90 CTA's shared memory holds (9 of 64 + 128 rows). The ring
    hides each k-tile's trip from L2 or HBM, the step's bound (kernels alone on the H200, run R of
    docs/data/gemm-scan-h200.jsonl: a ring of 9 against 3, the same tiles and splits, fp16 GRU
    H=1280 B=128 24.6 -> 16.3 us a step, LSTM H=3072 B=32 45.5 -> 33.5, bf16 LSTM H=4096 B=16 62.7
    -> 47.9), more than the CTAs an SM could hold beside it with a shallower ring."""
    split_k_tiles = math.ceil(spec.hidden_size / 64) // splits
    return min(split_k_tiles + 1, deepest_ring(WGMMA_TILE["bm"], WGMMA_TILE["tile_n"]))


def wgmma_ctas_per_sm(plan: dict) -> int:
    """CTAs of the wgmma step `plan` an SM holds at once: as many rings as fit the shared memory an
    sm_90 SM gives its CTAs (wgmma exists on sm_90a alone)."""
    return MAX_SHARED_BYTES[90] // wgmma_shared_bytes(ring_stages(plan), plan["tile_n"], plan["bm"])


#: what a direction's wgmma step costs, in µs per unit of each of `wgmma_terms`: fixed (its two
#: launches from the host loop), per MiB of 16-bit R it streams, per MB of partial sums the GEMM
#: writes and the update reads, per k-tile of a split (a CTA's k-tiles, one after another) in each
#: wave of CTAs, and per CTA an SM runs (each fills its ring from memory before its first mma and
#: stores its tile after the last). Relative least squares on 24 16-bit layers' steps, every split
#: of K each, in rings of `ring_depth` (kernels alone on the H200, `benchmarks/gemm_scan_layers.py
#: --wgmma auto`, run S of docs/data/gemm-scan-h200.jsonl; `python -m
#: persist_rnn.schedule.wgmma_step_fit`): median error 5%. On run T's 17 other layers, median error 4%, and the split
#: priced least ran within 1.023x of the fastest (geomean; at most 1.16x), against 1.030x for K
#: never split and 1.090x for K split in two
WGMMA_STEP_US = {"fixed": 6.54, "per_mib": 0.155, "per_sums_mb": 0.576, "per_wave_k_tile": 0.310,
                 "per_cta_an_sm": 1.89}


def wgmma_terms(spec: CellSpec, batch: int, plan: dict, num_sms: int) -> dict:
    """The units of a direction's step on the wgmma step `plan` that WGMMA_STEP_US prices."""
    G, H = spec.num_gates, spec.hidden_size
    ctas = math.ceil(batch / plan["bm"]) * math.ceil(G * H / plan["tile_n"]) * plan["splits"]
    return {"fixed": 1.0,
            "per_mib": G * H * H * 2 / 2 ** 20,
            "per_sums_mb": batch * G * H * 4 * (plan["splits"] + 1) / 1e6,
            "per_wave_k_tile": math.ceil(ctas / (num_sms * wgmma_ctas_per_sm(plan))) * math.ceil(H / 64) / plan["splits"],
            "per_cta_an_sm": ctas / num_sms}


def wgmma_plans(spec: CellSpec) -> list[dict]:
    """The wgmma step plans (gemm_scan's `wgmma`) that can run `spec`: WGMMA_TILE, K split 1 to
    MAX_SPLITS ways where its k-tiles divide so (`wgmma_step_problem`), each in a ring of
    `ring_depth` k-tiles."""
    plans = [dict(WGMMA_TILE, splits=splits, stages=ring_depth(spec, splits)) for splits in range(1, MAX_SPLITS + 1)]
    return [plan for plan in plans if not wgmma_step_problem(spec, plan)]


def wgmma_scan_us(spec: CellSpec, batch: int, plan: dict, num_sms: int) -> float:
    """Predicted microseconds of one step of the GEMM scan on the wgmma step `plan` on `num_sms` SMs."""
    terms = wgmma_terms(spec, batch, plan, num_sms)
    return spec.num_directions * sum(WGMMA_STEP_US[name] * units for name, units in terms.items())


def wgmma_step(spec: CellSpec, batch: int, num_sms: int, sm90a: bool) -> dict | None:
    """The wgmma step plan (gemm_scan's `wgmma`) a GEMM scan of `spec` at `batch` rows takes in a
    build for sm_90a (`sm90a`): of `wgmma_plans`, the one priced least (`wgmma_scan_us`), the fewest
    splits of equals; None off sm_90a, for fp32 layers, or where the step cannot take the layer."""
    plans = wgmma_plans(spec) if sm90a else []
    return min(plans, key=lambda plan: (round(wgmma_scan_us(spec, batch, plan, num_sms), 6), plan["splits"]),
               default=None)


def gemm_scan_us(spec: CellSpec, batch: int, num_sms: int, precision: str = "fp32", sm90a: bool = False) -> float:
    """Predicted microseconds of one step of the GEMM scan at `batch` rows on `num_sms` SMs (on the
    wgmma step where a build for sm_90a takes it: `wgmma_step`)."""
    wgmma = wgmma_step(spec, batch, num_sms, sm90a)
    if wgmma:
        return wgmma_scan_us(spec, batch, wgmma, num_sms)
    H, D = spec.hidden_size, spec.num_directions
    waves = _waves(spec, batch, num_sms, step_tile(spec, batch, num_sms))
    gemm = waves * H * WAVE_US_PER_K[gemm_precision(spec, precision)]
    update = UPDATE_US + D * batch * H * (2 * spec.num_gates + 3) * 4 / UPDATE_BYTES_PER_US
    return D * (gemm + LAUNCH_US) + update
