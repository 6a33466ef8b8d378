"""Choose how one recurrent layer is lowered: tuning log, else cost model (+ measurement).

Kernel variants not yet run on a GPU are only built when asked for (`unverified`, or a forced
config), also when a tuning log holds one. Order of preference: a forced config; a matching tuning-log record; the cost model's ranking of
the pruned space, whose top-K are measured when a GPU is present. Whatever cannot be made
persistent returns no kernel and the reason, and keeps the reference scan. A batch known only at
run time gets that choice for each batch bucket (`plan_buckets`) and one kernel holding them all.
"""
from __future__ import annotations

import dataclasses
import math

import tvm

from tir_templates.config import HALF_DTYPES, MMA_M, Config
from tir_templates.gemm_scan import GEMM_SCAN, gemm_scan_problem, wgmma_step_problem
from tir_templates.projection_wgmma import wgmma_arch
from tir_templates.persistent import (
    UnsupportedLayer,
    persistent_kernel,
    unverified_reason,
)
from tir_templates.persistent.buckets import bucketed_kernel, reads_packed_r
from tir_templates.spec import CellSpec

from . import tuning_log
from .cost_model import overlapped_step_us, prices_tensor_cores, rank, step_us
from .gemm_scan_cost import WGMMA_TILE, gemm_scan_us, wgmma_step
from .gpu import gpu_model, present_device
from .measure import builds, measure_configs, timing
from .precision import checked as checked_precision, precision_problem
from .space import (bounded_by_batch, candidate_configs, fullest_if_wide, fullest_shared_fragments, most_common_problem,
                    no_tensor_cores, problems_on, shared_fragment_fits, shared_fragments_variant, unmeasured_variant)
from .streamed_cost import streamed_scan_us


#: the batch buckets of a layer whose batch is known only at run time
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclasses.dataclass
class Plan:
    kernel: tvm.tirx.PrimFunc | None
    config: Config | None = None
    source: str = ""  # "tuning_log" | "cost_model" | "measured"
    reason: str = ""  # why not persistent; for a persistent plan, why its step has no tensor cores where it might
    time_us: float | None = None
    #: a batch known only at run time: one dict per bucket (max_batch, None for the last; config;
    #: source; time_us), each bucket's kernel inside `kernel`
    buckets: list[dict] = dataclasses.field(default_factory=list)
    #: with no kernel: the scan a kernel a step that the pass builds instead, GEMM_SCAN where the
    #: cost model prices it shortest (`gemm_scan_note`), else "" (the streamed scan or the reference)
    lowering: str = ""
    #: the GEMM scan's wgmma step plan (gemm_scan's `wgmma`, `gemm_scan_cost.wgmma_step`), the one its
    #: price was decided on; None where the step GEMM runs on mma.sync
    wgmma: dict | None = None


def named_arch(target: tvm.target.Target) -> str | None:
    """The CUDA architecture as the target names it ("sm_90a"), or None."""
    arch = target.attrs.get("arch") if target.attrs is not None else None
    return str(arch) if arch else None


def target_arch(target: tvm.target.Target) -> str:
    """The target's CUDA architecture as the schedules, calibrations and tuning logs know it: its
    arch-specific form ("sm_90a", which only decides whether the wgmma GEMM may be built:
    `projection_wgmma.wgmma_arch`) is the architecture itself."""
    arch = named_arch(target)
    return arch.removesuffix("a") if arch else "sm_90"


def plan_layer(spec: CellSpec, target: tvm.target.Target, *, batch: int | None = None, tuning_log_path=None,
               config=None, top_k: int = 5, measure=None, progress=None, unverified: bool = False,
               buckets: tuple[int, ...] = BATCH_BUCKETS, precision: str = "fp32") -> Plan:
    """The layer's kernel for `batch`, or, with batch None (known only at run time), one kernel
    per bucket of `buckets`. `measure`: time the top-K candidates (default: when a GPU is
    present, and for buckets only when asked, as `persist-rnn tune` does). `precision`: what
    the recurrent step may be computed at (precision.py)."""
    precision = checked_precision(precision)
    if target.kind.name != "cuda":
        return Plan(None, reason=f"target {target.kind.name}: the persistent kernel is CUDA only")
    gpu = gpu_model(target_arch(target))
    if config is not None:
        cfg = config if isinstance(config, Config) else Config.from_dict(config)
        bad = problems_on(spec, cfg, gpu) + [p for p in [precision_problem(cfg, precision)] if p]
        if bad:
            return Plan(None, reason="the forced config cannot run: " + "; ".join(bad))
        return _kernel(spec, cfg, "", None)  # forced by the caller: no search
    if batch is None and buckets:
        return plan_buckets(spec, target, buckets, tuning_log_path=tuning_log_path, top_k=top_k,
                            measure=bool(measure), progress=progress, unverified=unverified, precision=precision)
    plan = choose(spec, target, batch, tuning_log_path=tuning_log_path, top_k=top_k, measure=measure,
                  progress=progress, unverified=unverified, precision=precision)
    if plan.config is None:
        return plan
    built = _kernel(spec, plan.config, plan.source, plan.time_us)
    if built.kernel is not None:
        built.reason = tensor_core_note(spec, gpu, batch, precision, [plan.config])
    return built


def tensor_core_note(spec: CellSpec, gpu, batch: int | None, precision: str, configs: list[Config]) -> str:
    """For a layer whose step could want the tensor cores (16-bit, or a build at TF32) but got the
    FMA units because no tensor-core config runs it: the FMA units, and why (space.no_tensor_cores)."""
    wants = spec.dtype in HALF_DTYPES or precision == "tf32"
    if not wants or any(c.tensor_cores() for c in configs):
        return ""
    why = no_tensor_cores(spec, gpu, batch, precision)
    return f"FMA units: no tensor-core config runs this layer ({why})" if why else ""


def choose(spec: CellSpec, target: tvm.target.Target, batch: int | None, *, tuning_log_path=None, top_k: int = 5,
           measure=None, progress=None, unverified: bool = False, precision: str = "fp32",
           int8: bool | None = None, bucket: bool = False, open_ended: bool = False) -> Plan:
    """`plan_layer`'s choice of config for one batch, without building the kernel; `int8`: only
    configs that hold the weights as int8 (True) or only others (False); `bucket`: a batch bucket
    of a symbolic batch (`wgmma_scan_priced`); `open_ended`: a bucket that also takes every larger
    batch, planned at `batch` with no config bounded by the batch (`space.bounded_by_batch`)."""
    gpu = gpu_model(target_arch(target))
    sm90a = wgmma_scan_priced(target, bucket)
    wl = tuning_log.workload(spec, batch, gpu.arch, precision, open_ended=open_ended)
    rec = _logged(spec, gpu, wl, tuning_log_path, measure, unverified, precision)
    if rec is not None and int8 in (None, rec.config.int8_weights()):
        return Plan(None, rec.config, "tuning_log", time_us=rec.time_us)
    fitting, ranked = _ranked(spec, gpu, batch, unverified, precision, open_ended)
    if int8 is not None:
        ranked = [(t, c) for t, c in ranked if c.int8_weights() == int8]
    if not ranked:
        kib = spec.num_gates * spec.hidden_size ** 2 * spec.num_directions * spec.dtype_bytes // 1024
        why = (f"{kib} KiB of recurrent weights over at most {gpu.num_sms} co-resident CTAs do not fit their registers "
               "and shared memory")
        if fitting:  # only with a variant not yet run on a GPU
            example = next((c for c in fitting if c.smem_runs), fitting[0])
            why = f"no verified persistent config fits {gpu.name}: {why}; " + unverified_reason(spec, example)
        else:
            why = (f"no persistent config fits {gpu.name} ({kib} KiB of recurrent weights, at most {gpu.num_sms} "
                   f"co-resident CTAs): every config of the space is pruned, most often because "
                   f"{most_common_problem(spec, gpu, batch)}")
        gemm = gemm_scan_note(spec, None, batch, gpu, precision, sm90a)
        return gemm_scan_plan(spec, batch, gpu, f"{gemm}; {why}", sm90a) if gemm else Plan(None, reason=why)
    scan = scan_plan(spec, ranked, batch, gpu, precision, sm90a)
    if scan is not None:
        return scan
    dev = present_device() if measure is None or measure else None
    if dev is not None and batch is not None:
        timed = measure_configs(spec, measured_candidates(spec, gpu, batch, ranked, top_k, precision, unverified,
                                                          open_ended), target, dev, batch, progress=progress)
        best_us, best = timed[0]
        plan = Plan(None, best, "measured", time_us=best_us)
        how = timing(spec, dev)
    else:
        # the model prices no spills: a 16-bit pick takes shared fragments where they paid when timed
        pick = model_pick(spec, ranked, gpu, batch)
        lead = shared_fragments_lead(spec, gpu, batch, fitting, ranked, pick, precision, unverified, open_ended)
        plan = Plan(None, lead or unmeasured_variant(spec, pick, gpu) or pick, "cost_model")
        how = "warm"
    if tuning_log_path:
        tuning_log.append(tuning_log_path, tuning_log.Record(wl, plan.config, plan.time_us, plan.source, timing=how))
    return plan


def scan_plan(spec: CellSpec, ranked: list[tuple[float, Config]], batch: int | None, gpu,
              precision: str, sm90a: bool = False) -> Plan | None:
    """The scan a kernel a step that `choose` takes over the persistent configs `ranked` (best
    first), decided before any measurement: the GEMM scan (`gemm_scan_note`), else the streamed
    scan (`streamed_scan_note`); None where a persistent config runs the layer."""
    gemm = gemm_scan_note(spec, past_chip_lead(spec, ranked, gpu, batch) or ranked[0], batch, gpu, precision, sm90a)
    if gemm:
        return gemm_scan_plan(spec, batch, gpu, gemm, sm90a)
    scan = streamed_scan_note(spec, ranked, batch)
    return Plan(None, reason=scan) if scan else None


def gemm_scan_plan(spec: CellSpec, batch: int, gpu, reason: str, sm90a: bool) -> Plan:
    """The GEMM scan's plan, with the wgmma step its price was decided on (`Plan.wgmma`)."""
    return Plan(None, reason=reason, lowering=GEMM_SCAN, wgmma=wgmma_step(spec, batch, gpu.num_sms, sm90a))


def streamed_scan_note(spec: CellSpec, ranked: list[tuple[float, Config]], batch: int | None) -> str:
    """Why the streamed scan (a kernel a step) runs the layer instead: where no config holds its
    weights on chip, so that even the model's best reads some from global memory each step
    (`Config.global_runs`), and the scan's step is predicted shorter (streamed_cost.py). Empty
    otherwise. The model decides this before any measurement: the measured top-K are persistent
    configs only."""
    if batch is None or not ranked or not ranked[0][1].global_runs:
        return ""
    best_us, best = ranked[0]
    scan_us = streamed_scan_us(spec, batch)
    if scan_us >= best_us:
        return ""
    return (f"the streamed scan's step ({scan_us:.1f} us predicted) is shorter than the best persistent config's "
            f"({best_us:.1f} us), which reads {best.global_runs} of each lane's runs of weights from global memory "
            "each step: no config holds the weights on chip")


#: the share of a streaming persistent config's predicted step that the GEMM scan's must stay
#: under, by the layer's dtype. fp32: such configs ran 0.66-1.02x their price on the six fp32
#: layers the scan was timed against, the scan 0.91-1.12x its own (docs/data/gemm-scan-h200.jsonl,
#: runs C, D and F: LSTM H=4096 B=16, priced 218 us, ran 146, the scan 166). 16 bits, the scan on
#: the wgmma step: it ran 0.87-1.21x its price (runs S-U), the streaming configs 0.40-2.79x theirs
#: (docs/data/streamed-fragments-h200.jsonl), so the scan may be priced up to 1.1x such a config's.
#: Of the five layers timed both ways whose prices lie within 1.12x (run U; streamed-fragments runs
#: D and E; run S), that decides four as timed: fp16 GRU H=3072 B=16 (priced 1.02x the config's)
#: ran the scan 32.4 us a step against 42.2, H=4096 B=16 (1.03x) 39.2 against 47.4, bidirectional
#: fp16 LSTM H=3584 B=2 (1.09x) 71.8 against 125.3, and fp16 LSTM H=3072 B=32 (1.11x) keeps its
#: config, 30.7 against 33.6; GRU H=3072 B=32 (1.00x) goes to the scan, which ran 33.5 (bf16, run
#: T) where the config ran 28.1 (fp16, streamed-fragments run E)
STREAMING_MARGINS = {"float32": 0.85, "float16": 1.1, "bfloat16": 1.1}


def gemm_scan_note(spec: CellSpec, best: tuple[float, Config] | None, batch: int | None, gpu,
                   precision: str, sm90a: bool = False) -> str:
    """Why the GEMM scan (a tensor-core GEMM and an update a step) runs the layer: where no
    persistent config holds its weights on chip (the model's best, `best`, reads some from global
    memory each step, or none fits), and the scan's step is predicted shorter (gemm_scan_cost.py)
    than the streamed scan's and, by STREAMING_MARGINS, than that config's. Decided before any
    measurement, as the streamed scan is: a measuring compile times persistent configs only.
    Empty otherwise, or where the scan cannot take the layer (`gemm_scan_problem`). `sm90a`: a
    build for sm_90a, whose 16-bit scans run the wgmma step (`gemm_scan_cost.wgmma_step`). Against
    configs that hold the weights on chip the scan was slower where the model expected it faster
    (fp16 LSTM H=2048 B=16: 39.4 against 29.6 us a step), and on wgmma too (fp16 LSTM H=2048 B=64:
    30.5 against 16.7), so it is not weighed there."""
    if gemm_scan_problem(spec, batch) or (best is not None and not best[1].global_runs):
        return ""
    gemm_us = gemm_scan_us(spec, batch, gpu.num_sms, precision, sm90a)
    rivals = [("the streamed scan's", streamed_scan_us(spec, batch), 1.0)]
    if best is not None:
        margin = STREAMING_MARGINS[spec.dtype]
        by = f", by {1 / margin:.2f}x" if margin < 1 else f", or within {margin:.2f}x of it" if margin > 1 else ""
        rivals.append((f"the best persistent config's, reading {best[1].global_runs} of each lane's runs of weights "
                       f"from global memory{by}", overlapped_step_us(spec, best[1], gpu, batch, best[0]), margin))
    if any(us * margin <= gemm_us for _, us, margin in rivals):
        return ""
    against = " and ".join(f"{name} ({us:.1f} us)" for name, us, _ in rivals)
    wgmma = wgmma_step(spec, batch, gpu.num_sms, sm90a)
    ways = "" if not wgmma else ", K whole" if wgmma["splits"] == 1 else f", K split {wgmma['splits']} ways"
    on = f" (the GEMM on the wgmma tensor cores{ways})" if wgmma else ""
    if sm90a and not on and spec.dtype in HALF_DTYPES:  # a 16-bit layer the wgmma step cannot take
        on = f" (the GEMM on mma.sync: {wgmma_step_problem(spec, dict(WGMMA_TILE, splits=1))})"
    return (f"a tensor-core GEMM and an update a step{on}: its step ({gemm_us:.1f} us predicted) is shorter than "
            f"{against}; no config holds the weights on chip")


def model_pick(spec: CellSpec, ranked: list[tuple[float, Config]], gpu, batch: int | None) -> Config:
    """The cost model's choice without measurements: its first, but a tensor-core config only
    where the calibration prices them, and at batch 1 only where no FMA-unit config holds the
    weights on chip. At B=1 the mma's 8 columns carry one batch row, and the model prices that
    right (GRU H=2048 fp16: 4.17 predicted, 4.19 us a step measured) but overprices the FMA units'
    shared-memory weights there: on the H200 the FMA-unit config was 1.23-1.41x faster on each of
    the three layers where both fit (LSTM H=1536 fp16 and bf16, GRU H=2048 fp16), and at B=2 the
    two were within 4% (docs/data/tc-registers-h200.jsonl). Past the chip the kinds are weighed
    at the longer part (`past_chip_lead`)."""
    priced = prices_tensor_cores(gpu)
    usable = [(t, c) for t, c in ranked if priced or not c.tensor_cores()]
    if batch == 1 and any(not c.tensor_cores() and not c.global_runs for _, c in usable):
        usable = [(t, c) for t, c in usable if not c.tensor_cores()]
    lead = past_chip_lead(spec, usable, gpu, batch)
    return lead[1] if lead else usable[0][1] if usable else ranked[0][1]


def past_chip_lead(spec: CellSpec, ranked: list[tuple[float, Config]], gpu,
                   batch: int | None) -> tuple[float, Config] | None:
    """Where the model's best reads weights from global memory each step (no config holds them on
    chip): of the best FMA-unit config and the best tensor-core config of `ranked` (each first by
    the summed price), the one whose step is the shorter where reads and mma overlap
    (`overlapped_step_us`), with its summed price; None on chip. FMA-unit configs that read global
    runs ran 2-8x slower than the 16-bit streamed-fragments configs of the same layers (7 layers,
    B=4-64, kernels alone on the H200: docs/data/streamed-fragments-h200.jsonl, run A), where the
    sum priced them alike (LSTM H=4096 B=2 fp16: 48.1 us each)."""
    if batch is None or not ranked or not ranked[0][1].global_runs:
        return None
    firsts = [next(((t, c) for t, c in ranked if c.tensor_cores() == kind), None) for kind in (False, True)]
    return min((first for first in firsts if first is not None),
               key=lambda first: overlapped_step_us(spec, first[1], gpu, batch, first[0]))


#: a 16-bit config with A fragments in shared memory, of those offered beside configs that fit in
#: registers (`space.shared_fragment_fits`), replaces the measure-off pick only where priced at most
#: this share of the pick's price, and (SHARED_BESIDE_PADDING) its gate rows nearly fill its
#: 16-row tiles. Kernel alone on the H200, every such config timed within that bound ran faster
#: than the pick: 24 layers priced 0.64-1.00x it, 1.16-2.11x (LSTM H=1088 B=48 fp16, priced 0.95x,
#: 13.59 -> 6.45 us a step; LSTM H=1120 B=20 fp16, priced 1.00x, 5.70 -> 4.44)
#: (docs/data/lstm2048-shared-fragments-h200.jsonl, runs E, H and I)
SHARED_BESIDE_MARGIN = 1.0
#: the share of a shared-fragments config's 16-row tiles' rows that must stay under it as zero rows
#: (a GRU's 3 x tile_units gate rows that are not whole tiles) for it to replace the measure-off pick:
#: the four GRU configs with that many or more ran slower than their picks, whatever their price
#: (GRU H=1472 B=56 fp16, priced 0.80x, 11 of 80 rows zero, 12.65 -> 15.51 us a step; GRU H=1536
#: B=32 fp16, 8 of 80, 0.79x; GRU H=1408 B=16 fp16, 14 of 80, 0.70x; GRU H=1600 B=28 fp16, 5 of 80,
#: 0.95x), and LSTM H=1120 B=56 fp16's, 4 of 144, 1.18x faster (runs E, I and J). In the sweeps, GRU
#: shared-fragments configs in batch tiles with zero rows ran 0.68x their price, without 0.58x (33 and 21)
SHARED_BESIDE_PADDING = 1 / 16
#: the GPUs whose measure-off picks the rule moves: those it was timed on (the H200). On sm_80 it
#: would move eight LSTM H=1280-1536 picks, untimed. It moves a symbolic batch's bucket picks as a
#: static build's: LSTM H=1280 fp16 symbolic, whole on the H200, B=64 1.333 -> 0.931 ms (the static
#: build's 0.930), B=32 0.695 -> 0.656 (docs/data/symbolic-16bit-h200.jsonl, run D)
SHARED_BESIDE_ARCHS = ("sm_90",)
#: n-tiles a chunk of such a config spans from which it takes as many k-tiles there as shared memory
#: holds (`space.fullest_if_wide`; a pick elsewhere does from FULLEST_N_TILES). Kernel alone on the
#: H200, of 14 fp16 layers whose lead spans two n-tiles 10 ran 1.01-1.15x faster so, 4 0.93-0.99x
#: (geomean 1.06x); on 9 more drawn after (fp16 and bf16), all 9 1.06-1.49x (LSTM H=1120 B=44 fp16
#: 8.00 -> 5.35 us a step); with one n-tile, 2 of 2 slower (0.91x, 0.96x)
#: (docs/data/fullest-shared-fragments-h200.jsonl, runs D and E)
SHARED_BESIDE_FULLEST_N_TILES = 2


def shared_fragments_lead(spec: CellSpec, gpu, batch: int | None, fitting: list[Config],
                          ranked: list[tuple[float, Config]], pick: Config, precision: str,
                          unverified: bool, open_ended: bool = False) -> Config | None:
    """The measure-off choice for a 16-bit layer whose pick is a tensor-core config: the model's
    best config with A fragments in shared memory of those the space offers beside configs that
    fit (`best_shared_beside`), where priced at most SHARED_BESIDE_MARGIN times the pick and its
    zero rows under SHARED_BESIDE_PADDING, on SHARED_BESIDE_ARCHS, with as many k-tiles there as
    shared memory holds from SHARED_BESIDE_FULLEST_N_TILES n-tiles (`space.fullest_if_wide`;
    `open_ended`: of those that run every larger batch); None
    otherwise. Whole layers on the H200, measure off: LSTM H=1280 B=64 fp16 0.68x -> 0.98x cuDNN's
    best, LSTM H=1024 B=128 fp16 0.82x -> 1.29x (docs/data/lstm2048-shared-fragments-h200.jsonl, run G)."""
    if (batch is None or spec.dtype not in HALF_DTYPES or not pick.tensor_cores()
            or gpu.arch not in SHARED_BESIDE_ARCHS):
        return None
    price = next((t for t, c in ranked if c == pick), None)
    lead = best_shared_beside(spec, gpu, batch, precision, unverified, fitting, open_ended)
    if price is None or lead is None or lead[0] > SHARED_BESIDE_MARGIN * price:
        return None
    best = lead[1]
    rows = best.row_tiles(spec) * MMA_M
    if rows - best.row_gates(spec) * best.tile_units >= SHARED_BESIDE_PADDING * rows:
        return None
    return fullest_if_wide(spec, best, gpu, SHARED_BESIDE_FULLEST_N_TILES)


def best_shared_beside(spec: CellSpec, gpu, batch: int, precision: str, unverified: bool,
                       present: list[Config], open_ended: bool = False) -> tuple[float, Config] | None:
    """The model's best 16-bit tensor-core config with A fragments in shared memory of those
    `space.shared_fragment_fits` offers that `present` lacks (and this build may run, and with
    `open_ended` that runs every larger batch too), with its price; None where there is none."""
    wider = [c for c in shared_fragment_fits(spec, gpu, batch, precision)
             if c not in present and (unverified or not unverified_reason(spec, c))
             and not (open_ended and bounded_by_batch(spec, c))]
    return rank(spec, wider, gpu, batch)[0] if wider else None


def _logged(spec, gpu, wl, tuning_log_path, measure, unverified, precision):
    """The tuning log's record for `wl` where `choose` takes it as it is: one it may build (for an
    open-ended bucket, one that runs every larger batch), and a measured one when asked to measure
    (tune re-measures the cost model's guesses)."""
    if not tuning_log_path:
        return None
    rec = tuning_log.lookup(tuning_log_path, wl)
    usable = (rec is not None and (unverified or not unverified_reason(spec, rec.config))
              and not precision_problem(rec.config, precision)
              and not (wl.get("open_ended") and bounded_by_batch(spec, rec.config)))
    settled = rec is not None and (rec.source == "measured" or measure is not True)
    return rec if usable and settled and not problems_on(spec, rec.config, gpu) else None


def _ranked(spec, gpu, batch, unverified, precision, open_ended=False):
    """(the configs that fit, the usable ones ranked by the cost model, best first); with
    `open_ended`, only those that run every batch past `batch` too."""
    fitting = [c for c in candidate_configs(spec, gpu, batch, precision)
               if not (open_ended and bounded_by_batch(spec, c))]
    usable = [c for c in fitting if unverified or not unverified_reason(spec, c)]
    return fitting, rank(spec, usable, gpu, batch) if batch is not None else rank_for_any_batch(spec, usable, gpu)


def wgmma_scan_priced(target: tvm.target.Target, bucket: bool) -> bool:
    """Whether `choose` prices a 16-bit GEMM scan's step on wgmma: in a build for sm_90a, except
    for a bucket of a symbolic batch, which no GEMM scan serves (the scan needs the batch at build
    time, and such a bucket takes its neighbour's config): there the mma.sync step's price leaves
    the buckets of 16-bit layers of H=2560-4096 at B=4-32 their own persistent configs."""
    return wgmma_arch(named_arch(target)) and not bucket


def prefetch_builds(spec: CellSpec, target: tvm.target.Target, batches, *, tuning_log_path=None, top_k: int = 5,
                    unverified: bool = False, precision: str = "fp32", bucket: bool = False) -> int:
    """Start compiling, in the background (`measure.Builds`), every candidate that a measuring
    `choose` will time for each of `batches` (`bucket`: batch buckets of a symbolic batch), so
    that a tune's buckets and layers build on every core at once; returns how many were
    submitted. None where `choose` takes a scan a kernel a step, which it decides before measuring."""
    gpu = gpu_model(target_arch(target))
    submitted = 0
    for batch in batches:
        wl = tuning_log.workload(spec, batch, gpu.arch, precision)
        if _logged(spec, gpu, wl, tuning_log_path, True, unverified, precision) is None:
            ranked = _ranked(spec, gpu, batch, unverified, precision)[1]
            if not ranked or scan_plan(spec, ranked, batch, gpu, precision, wgmma_scan_priced(target, bucket)) is not None:
                continue
            submitted += len(builds().submit(spec, measured_candidates(spec, gpu, batch, ranked, top_k, precision,
                                                                       unverified), target))
    return submitted


#: the batches a layer whose batch is symbolic is planned for: its one config should do well at each
#: (the fallback when buckets are not asked for)
ANY_BATCH = (1, 2, 4, 8, 16, 32, 64)


def one_launch_kind(spec: CellSpec, chosen: list) -> list:
    """(bound, Plan) per bucket, without the grid-barrier buckets when cluster buckets are there
    too, or when the last bucket's CTAs grow with the batch (batch tiles of one CTA or a cluster).
    A bucketed kernel launches cooperatively when a bucket meets at a grid barrier (all its
    CTAs must be resident: transform/persistent_rnn.py), and TVM's launch flag is the whole
    function's, every bucket's; a cluster kernel launched cooperatively is refused by the driver
    (on the H100 the text classifier built with its static builds' tuning log failed at B=32 with
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, a cluster bucket of 128 CTAs), and so is a grid larger
    than the GPU holds (grid batch tiles past their bound raised on the H200:
    docs/data/gpu-open-ended-bucket-h200.log), which the last bucket's tiles reach at a large enough
    batch; outside a cooperative launch they run in waves. The cost model's own picks never pair
    such a last bucket with grid buckets (234 layers: LSTM, GRU and RNN, one and two directions,
    fp32, TF32 and fp16, H of 24-1024); a tuning log can. The grid buckets' batches go to the next
    bucket's config, which runs every smaller batch."""
    barriers = {p.config.barrier(spec) for _, p in chosen}
    last = chosen[-1][1].config
    grows = bool(last.batch_tile) and last.barrier(spec) != "grid"  # (grid tiles: `space.bounded_by_batch`)
    if "grid" in barriers and ("cluster" in barriers or grows):
        return [(b, p) for b, p in chosen if p.config.barrier(spec) != "grid"]
    return chosen


def plan_buckets(spec: CellSpec, target: tvm.target.Target, buckets: tuple[int, ...], *, tuning_log_path=None,
                 top_k: int = 5, measure: bool = False, progress=None, unverified: bool = False,
                 precision: str = "fp32") -> Plan:
    """One config per batch bucket (batch <= its bound; the last takes every larger batch too),
    each chosen as for a static build of its bound; neighbours with one config share a kernel. A
    bucket with no config of its own is served by its neighbour's. Where the last bound's config
    runs no larger batch (`space.bounded_by_batch`: batch tiles of a grid), one more bucket takes
    the batches past it, planned at twice that bound without such configs (`open_ended`).
    Where some buckets hold int8 weights, R comes packed to all of them (`int8_rows.py`): the
    others read it back as they load their weights, except a config that reads R every step
    (global runs); then the kind most buckets chose serves them all."""
    if measure and present_device() is not None:
        prefetch_builds(spec, target, sorted(buckets), tuning_log_path=tuning_log_path, top_k=top_k,
                        unverified=unverified, precision=precision, bucket=True)

    def planned(b, open_ended=False, int8=None):
        return choose(spec, target, b, tuning_log_path=tuning_log_path, top_k=top_k, measure=measure,
                      progress=progress, unverified=unverified, precision=precision, int8=int8, bucket=True,
                      open_ended=open_ended)
    chosen = [(b, False, planned(b)) for b in sorted(buckets)]
    served = [p.config for _, _, p in chosen if p.config is not None]
    if served and bounded_by_batch(spec, served[-1]):
        past = planned(2 * chosen[-1][0], open_ended=True)
        chosen.append((2 * chosen[-1][0], True, past if past.config is not None else planned(None, open_ended=True)))
    int8 = [p.config.int8_weights() for _, _, p in chosen if p.config is not None]
    packed_r = any(int8) and not all(int8)
    if packed_r and not all(reads_packed_r(p.config) for _, _, p in chosen if p.config is not None):
        packed_r, kind = False, 2 * sum(int8) > len(int8)
        chosen = [(b, o, p if p.config is None or p.config.int8_weights() == kind else planned(b, o, kind))
                  for b, o, p in chosen]
    chosen = [(b, p) for b, _, p in chosen]
    usable = [(b, p) for b, p in chosen if p.config is not None]
    if not usable:  # (the GEMM scan holds R^T in slots of a batch known at build time: not here)
        return dataclasses.replace(chosen[0][1], lowering="")
    usable = one_launch_kind(spec, usable)
    merged: list[tuple[int, Plan]] = []
    for b, p in usable:
        if merged and merged[-1][1].config == p.config:
            merged[-1] = (b, merged[-1][1])
        else:
            merged.append((b, p))
    if bounded_by_batch(spec, merged[-1][1].config):
        return Plan(None, reason=f"no config for every batch past {merged[-1][0]}: {merged[-1][1].config.as_dict()} "
                                 "adds batch tiles of a grid, which the GPU holds only up to that batch")
    rows = [dict(max_batch=b if i < len(merged) - 1 else None, config=p.config.as_dict(), source=p.source,
                 time_us=p.time_us) for i, (b, p) in enumerate(merged)]
    try:
        kernel = bucketed_kernel(spec, [(r["max_batch"], p.config) for r, (_, p) in zip(rows, merged)],
                                 packed_r=packed_r and any(p.config.int8_weights() for _, p in merged))
    except UnsupportedLayer as err:
        return Plan(None, reason=str(err))
    sources = {p.source for _, p in merged}
    note = tensor_core_note(spec, gpu_model(target_arch(target)), max(buckets), precision, [p.config for _, p in merged])
    return Plan(kernel, merged[0][1].config, sources.pop() if len(sources) == 1 else "mixed", buckets=rows, reason=note)


def waves(spec: CellSpec, cfg: Config, gpu, batch: int) -> int:
    """Rounds the GPU runs one launch in: batch tiles add CTAs (or clusters, of which fewer run at
    once than the SMs would hold: `GPUModel.clusters_at_once`) as the batch grows."""
    tiles = math.ceil(batch / cfg.batch_tile) if cfg.batch_tile else 1
    per_direction = cfg.ctas_per_direction(spec)
    if cfg.cluster and per_direction > 1:
        return math.ceil(spec.num_directions * tiles / gpu.clusters_at_once(per_direction))
    return math.ceil(cfg.num_ctas(spec) * tiles / gpu.num_sms)


def rank_for_any_batch(spec: CellSpec, configs: list[Config], gpu) -> list[tuple[float, Config]]:
    """(score, config), best first, for a batch known only at run time: the geometric mean over
    ANY_BATCH of each config's predicted step time (times its waves) over the best config's at
    that batch. A symbolic-batch model was up to 5.9x slower than its static build on the H100
    when planned for one guessed batch (8, no batch tiles)."""
    if not configs:
        return []
    times = {b: {c: step_us(spec, c, gpu, b) * waves(spec, c, gpu, b) for c in configs} for b in ANY_BATCH}
    best = {b: min(t.values()) for b, t in times.items()}

    def score(c):
        return math.exp(sum(math.log(times[b][c] / best[b]) for b in ANY_BATCH) / len(ANY_BATCH))
    scored = sorted(((score(c), c.num_ctas(spec), c) for c in configs), key=lambda x: (x[0], x[1]))
    return [(s, c) for s, _, c in scored]


def to_measure(ranked: list[tuple[float, Config]], top_k: int, spec: CellSpec | None = None,
               gpu=None) -> list[Config]:
    """The model's top K of the FMA-unit configs (but not those that read weights from global
    memory each step priced past STREAMING_CANDIDATE_RATIO times the model's best), plus its best
    TENSOR_CORE_CANDIDATES tensor-core configs (the model's first pick is always among them) and
    (given `spec`) its best tensor-core config of each way the CTAs meet that those lack
    (`meeting_kinds`), and (given `spec` and `gpu`) each of those with its A fragments partly in
    shared memory where its registers spill (`space.shared_fragments_variant`: the model does not
    price spills, so timing decides)."""
    best_us = ranked[0][0] if ranked else 0.0
    simt = [c for us, c in ranked if not c.tensor_cores()
            and not (c.global_runs and us > STREAMING_CANDIDATE_RATIO * best_us)][:top_k]
    ranked_tensor = [c for _, c in ranked if c.tensor_cores()]
    tensor = ranked_tensor[:TENSOR_CORE_CANDIDATES]
    if spec is not None:
        tensor += meeting_kinds(spec, ranked_tensor, tensor)
    if spec is not None and gpu is not None:
        tensor += [v for v in (shared_fragments_variant(spec, c, gpu) for c in tensor) if v is not None]
    return simt + tensor


def measured_candidates(spec: CellSpec, gpu, batch: int, ranked: list[tuple[float, Config]], top_k: int,
                        precision: str, unverified: bool, open_ended: bool = False) -> list[Config]:
    """What a compile on a GPU times at `batch`: `to_measure`'s configs, and the model's best
    16-bit tensor-core config with A fragments in shared memory of those the space offers only
    where registers hold no tensor-core config (`space.shared_fragment_fits`). Beside configs
    that fit, the model priced them too well at GRU H=1536 B=32 fp16 (its step ran 0.79x) and
    too poorly at LSTM H=1280 B=64 fp16 (its whole layer 0.565x -> 0.738x cuDNN's best), so
    timing decides: LSTM H=1280 B=64's compile took it, GRU H=1536 B=32's did not
    (docs/data/lstm2048-shared-fragments-h200.jsonl, runs A-D; measure off, one priced no more
    than the pick: `shared_fragments_lead`). And each of those with A
    fragments in shared memory also with as many as shared memory holds
    (`space.fullest_shared_fragments`): LSTM H=1280 B=64 fp16's compile took such a config, its
    whole layer 0.74x -> 0.98x cuDNN's best (docs/data/offgrid-heldout-h200.jsonl, run O)."""
    chosen = to_measure(ranked, top_k, spec, gpu)
    shared = best_shared_beside(spec, gpu, batch, precision, unverified, chosen, open_ended)
    chosen = chosen + [shared[1]] if shared else chosen
    fullest = (fullest_shared_fragments(spec, c, gpu) for c in chosen)
    return chosen + [c for c in dict.fromkeys(fullest) if c is not None and c not in chosen]


#: tensor-core configs measured besides the model's top K (when the space has any)
TENSOR_CORE_CANDIDATES = 2
#: an FMA-unit config that reads weights from global memory each step is timed only if priced
#: within this many times the model's best: beside the streamed-fragments configs of 16-bit layers
#: past the chip they ran 3-8x slower, kernel alone on the H200 (LSTM H=2560 B=16 fp16 47.1 against
#: 10.7 us a step, GRU H=3072 B=8 fp16 82.9 against 9.8: docs/data/streamed-fragments-h200.jsonl),
#: and each takes nvcc over a minute to build (their runs of global weights unrolled)
STREAMING_CANDIDATE_RATIO = 2.0


def meeting_kinds(spec: CellSpec, ranked_tensor: list[Config], chosen: list[Config]) -> list[Config]:
    """The first of `ranked_tensor` (best first) of each way a direction's CTAs meet (a grid
    counter, a cluster barrier, one CTA: `Config.barrier`) that no config of `chosen` has. The
    model ranks these kinds against each other less well than configs of one kind: LSTM H=512
    B=32 fp16, kernel alone on the H200, ran 2.08 us a step in grid batch tiles (its pick, priced
    2.76) and 1.90 in cluster batch tiles (priced 3.03), a config the top-5 compile did not time
    (docs/data/meeting-kinds-h200.jsonl)."""
    seen = {c.barrier(spec) for c in chosen}
    out = []
    for cfg in ranked_tensor:
        if cfg.barrier(spec) not in seen:
            seen.add(cfg.barrier(spec))
            out.append(cfg)
    return out


def _kernel(spec: CellSpec, cfg: Config, source: str, time_us) -> Plan:
    try:
        return Plan(persistent_kernel(spec, cfg), cfg, source, time_us=time_us)
    except UnsupportedLayer as err:
        return Plan(None, reason=str(err))
