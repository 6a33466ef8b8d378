"""The config space of the persistent kernel, pruned to what can run on a given GPU.

Each config whose direction spans 2 to `max_cluster_ctas` CTAs also comes as a thread-block
cluster (Hopper), and each cluster config also exchanging h through distributed shared memory
(`Config.dsmem`) where the cell allows; each grid config also reading h(t-1) as stamped words
(`Config.stamped`, no barrier a step) where the cell and batch allow; each whose direction is one CTA or one cluster also comes with the batch split
into tiles, one CTA or cluster each (`batch_tiles`). A config that only lacks registers comes
with the fewest runs of weight columns moved to shared memory that make it fit (`_smem_weights`);
where no config holds all of a layer's weights on chip, the runs that shared memory cannot take
are read from global memory each step instead (`Config.global_runs`: L2 keeps them when they fit).
Where no 16-bit tensor-core config fits in registers, those that lack only registers come with the
fewest k-tiles of their A fragments in shared memory that make them fit (`_shared_fragments`).
Tensor-core configs (`Config.mma_k_split`, one-phase cells) split each row tile's columns over 1
to 16 warps: an fp32 layer's at 3xTF32 and, in a build at precision "tf32", at TF32 too; an fp16
layer's on its fp16 weights, a bf16 layer's on its bf16 weights; they too come in batch tiles
where one CTA or cluster holds a direction, and, for a batch known at build time, in tiles of a
grid each where it takes more CTAs (`grid_batch_tiles`). Pruning beyond `problems` (what cannot run): batch chunks are only the
smallest chunk for 1 to 4 passes over the weights (a smaller chunk with the same pass count only
wastes lanes; more passes multiply the per-chunk latencies), an FMA-unit thread holds at most
MAX_ACCUMULATORS accumulators (past them ptxas spills), and groups of 1 or 2 lanes only when
nothing wider fits (and groups of 2 for a resident CTA whose lanes update their units from weights
in registers, `candidate_configs`).
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import math

from tir_templates.config import (HALF_DTYPES, INT8, MMA_N, SPILL_SLACK, Config, dsmem_problems, problems,
                                   register_cap_of, stamped_problems, tensor_core_dtypes, two_phase)
from tir_templates.persistent.checks import unverified_reason
from tir_templates.persistent.h16_exchange import in_one_turn, load_registers
from tir_templates.spec import CellSpec

from .gpu import GPUModel
from .precision import mma_precisions

GROUP_SIZES = (4, 8, 16, 32)
NARROW_GROUPS = (1, 2)
MAX_PASSES = 4
#: passes over the weights a 16-bit tensor-core step may make where MAX_PASSES' chunks fit no
#: tensor-core config (`_deep_chunks`)
MAX_DEEP_PASSES = 16
TENSOR_CORE_SPLITS = (1, 2, 4, 8, 16)
UNKNOWN_BATCH_CHUNK = 8
#: an FMA-unit thread's accumulators (rows_per_group x batch_chunk) past which ptxas spills them
#: and the step runs far slower than the model prices it: the 17 swept configs past it ran a
#: median 1.68x (0.92-2.15x) their predicted step, the 8050 within it 0.94x (docs/data/sweep-*.jsonl,
#: docs/data/global-runs-h200.jsonl, where LSTM H=1280 B=128 fp32 with 128 spilled 3.4 KB and
#: ran 167 us a step against 85 predicted, while the next config, 64, ran 91)
MAX_ACCUMULATORS = 96
#: estimated registers past the cap from which a one-n-tile config's shared fragments pay for their
#: reads unmeasured (GRU H=2048 B=2 fp16, 34 past: 0.91x; B=4 bf16, 38 past: 1.03x; run D of
#: docs/data/tc-shared-fragments-h200.jsonl)
ONE_TILE_OVERFLOW = 36
#: n-tiles a chunk of the pick spans from which its shared-fragments variant, unmeasured, takes as
#: many k-tiles as shared memory holds (`fullest_shared_fragments`): of the 18 16-bit measure-off
#: picks of 4 n-tiles whose variant that moves, kernel alone on the H200, geomean 1.07x faster
#: (0.93-1.39x; LSTM H=1280 B=64 fp16 1.24x), where over all 65 picks it moves 0.95x; on 9 other
#: layers (H=960-1408, B=32-128), 1.07x (0.86-1.21x) (docs/data/fullest-shared-fragments-h200.jsonl,
#: runs A and C)
FULLEST_N_TILES = 4
#: column splits a streamed-fragments config takes at least (`streamed_fragments_variant`): a warp
#: reads its streamed k-tiles one turn after another, so one warp a row tile makes one long chain
#: of them. Kernel alone on the H200, against the same layer's best of two splits: LSTM H=2560
#: B=16 fp16 17.0 against 10.7 us a step, LSTM H=4096 B=4 fp16 53.9 against 39.3
#: (docs/data/streamed-fragments-h200.jsonl, run A)
STREAMED_MIN_SPLITS = 2
#: batch tiles offered when the batch is only known at run time
ANY_BATCH_TILES = (1, 2, 4, 8)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def batch_chunks(batch: int | None) -> list[int]:
    if batch is None:
        return [UNKNOWN_BATCH_CHUNK]
    return sorted({math.ceil(batch / k) for k in range(1, MAX_PASSES + 1)}, reverse=True)


def candidate_configs(spec: CellSpec, gpu: GPUModel, batch: int | None, precision: str = "fp32") -> list[Config]:
    """Every config that passes `problems` for `spec` on `gpu` at batch size `batch`
    (None: unknown at compile time, chunks of 8), in a build at `precision` (precision.py)."""
    wide, narrow = (_fitting(spec, gpu, batch, groups, precision) for groups in (GROUP_SIZES, NARROW_GROUPS))
    if not wide and not narrow:  # no config holds the weights on chip: stream the rest from global memory
        wide = _fitting(spec, gpu, batch, GROUP_SIZES, precision, stream=True)
    if not wide:
        return narrow
    # a resident CTA's step is all latency, and one shuffle level fewer pays there: on the H100
    # (template 4) LSTM H=64 ran 0.278 us a step with groups of 2 lanes, 0.293 with 4 (weights in
    # registers, the lanes updating their units; other narrow configs were not measured so)
    return wide + [c for c in narrow if c.group_size == 2 and c.resident(spec) and c.lane_updates(spec) and not c.smem_runs]


def _fitting(spec: CellSpec, gpu: GPUModel, batch: int | None, groups, precision: str = "fp32",
             stream: bool = False) -> list[Config]:
    """The configs with work groups of `groups` lanes that fit, weights moved to shared memory
    where registers alone cannot hold them (and, with `stream`, to global memory where shared
    memory cannot either)."""
    out, spilling = [], []
    for cfg in _configs(spec, gpu, batch, groups, _weight_dtypes(spec), mma_precisions(spec, precision)):
        if not cfg.tensor_cores() and cfg.rows_per_group * cfg.batch_chunk > MAX_ACCUMULATORS:
            continue
        fit = cfg if not problems_on(spec, cfg, gpu) else _smem_weights(spec, cfg, gpu, stream)
        if fit is not None:
            out.append(fit)
        elif cfg.tensor_cores():
            spilling.append(cfg)
    if not any(c.tensor_cores() for c in out):
        out += [fit for fit in (_shared_fragments(spec, cfg, gpu) for cfg in spilling) if fit is not None]
    if stream and not any(c.tensor_cores() for c in out):
        out += [fit for fit in (streamed_fragments_variant(spec, cfg, gpu) for cfg in spilling) if fit is not None]
    if groups is GROUP_SIZES and not any(c.tensor_cores() for c in out):
        out += _deep_chunks(spec, gpu, batch)
    return out


def _deep_chunks(spec: CellSpec, gpu: GPUModel, batch: int | None) -> list[Config]:
    """16-bit tensor-core configs walking the batch in chunks of 8 or 16 rows, more than
    MAX_PASSES of them, with the fewest k-tiles of A fragments in shared memory that make them fit:
    for a layer whose MAX_PASSES chunks fit no tensor-core config (LSTM H=2048 B=128 fp16, whose
    chunk of 32 rows alone takes 256 KiB of shared memory as an fp32 copy of h), which else runs
    the GEMM scan."""
    if batch is None:
        return []
    out = []
    for bc, wdt in itertools.product((16, 8), tensor_core_dtypes(spec)):
        if wdt not in HALF_DTYPES or not MAX_PASSES < math.ceil(batch / bc) <= MAX_DEEP_PASSES:
            continue
        for tw, ks in itertools.product(_divisors(spec.hidden_size, spec.hidden_size), TENSOR_CORE_SPLITS):
            if spec.num_directions * (spec.hidden_size // tw) > gpu.num_sms:
                continue
            for cfg in _stamped_twin(spec, Config(tw, 32, 16, bc, wdt, 2, mma_k_split=ks)):
                if cfg.updates_per_thread(spec) > 1:
                    continue
                fit = cfg if not problems_on(spec, cfg, gpu) else _shared_fragments(spec, cfg, gpu)
                if fit is not None:
                    out.append(fit)
    return out


def shared_fragment_fits(spec: CellSpec, gpu: GPUModel, batch: int | None, precision: str = "fp32") -> list[Config]:
    """Every 16-bit tensor-core config that lacks only registers, with its fewest k-tiles of A
    fragments in shared memory that make it fit (`_shared_fragments`), whether or not others fit
    in registers: what a compile on a GPU may time beside its candidates (`planner.to_measure`)."""
    configs = _configs(spec, gpu, batch, GROUP_SIZES, _weight_dtypes(spec), mma_precisions(spec, precision))
    return [fit for fit in (_shared_fragments(spec, c, gpu) for c in configs if c.tensor_cores()) if fit is not None]


def _shared_fragments(spec: CellSpec, cfg: Config, gpu: GPUModel) -> Config | None:
    """A 16-bit tensor-core config that lacks only registers, with the fewest of its k-tiles' A
    fragments in shared memory that make it fit (`shared_fragments_variant`), for a layer where
    registers alone hold no tensor-core config. Kernel alone on the H200, LSTM H=2048 at 16 bits
    (32 MiB of weights; 26-33 of a warp's 64 k-tiles there): 1.5-11x the FMA-unit picks it had at
    B=1-16, and 9.5 and 17 us a step at B=32 and 64 against about 40 for the GEMM scan it had
    (docs/data/lstm2048-shared-fragments-h200.jsonl). Offered beside configs that fit in registers
    too, they moved GRU H=1536 B=32's pick to one 0.77x as fast, so they are offered only here
    (a compile on a GPU times the best of them: `shared_fragment_fits`)."""
    problems = problems_on(spec, cfg, gpu)
    if not problems or not all(_REGISTERS in p for p in problems):
        return None
    return shared_fragments_variant(spec, cfg, gpu)


def _weight_dtypes(spec: CellSpec) -> tuple[str, ...]:
    """The dtypes a layer's weights may be held in, the layer's own first: fp32 always (a 16-bit
    layer's weights are exact in fp32, and where registers allow it the fp32 kernel's step is
    shorter: on the H100 an fp16 LSTM H=64 B=1 took 52 us with fp16 weights, the fp32 layer 36),
    fp16 for an fp16 layer, bf16 for a bf16 layer (its tensor-core configs only: `problems`), and
    fp16 for an fp32 layer whose weights are int8 values (`CellSpec.int8_weights`: fp16 rounds
    them by at most an eighth of their int8 step; the FMA units with fp32 h, or the 16-bit mma,
    `tensor_core_dtypes`), and
    int8 where R is exactly int8 values times a scale a row (`CellSpec.int8_rows`: a quarter of
    fp32's registers, every weight in them)."""
    if spec.dtype in HALF_DTYPES:
        return (spec.dtype, "float32")
    if spec.int8_rows:
        return ("float32", "float16", INT8)
    return ("float32", "float16") if spec.int8_weights else ("float32",)


def most_common_problem(spec: CellSpec, gpu: GPUModel, batch: int | None) -> str:
    """Why the space holds no config for `spec`: the problem that pruned the most configs."""
    counts = collections.Counter(p for groups in (GROUP_SIZES, NARROW_GROUPS)
                                 for cfg in _configs(spec, gpu, batch, groups, _weight_dtypes(spec))
                                 # the FMA-unit space speaks for the layer (bf16 weights are for the tensor cores)
                                 if not cfg.tensor_cores() and cfg.weight_dtype != "bfloat16"
                                 for p in problems_on(spec, cfg, gpu))
    return counts.most_common(1)[0][0] if counts else f"no tiling of hidden_size {spec.hidden_size} exists"


def no_tensor_cores(spec: CellSpec, gpu: GPUModel, batch: int | None, precision: str = "fp32") -> str:
    """Why the space holds no tensor-core config for `spec` that the planner may pick: the problem
    that pruned the most of them, or why those that fit wait for a GPU (empty when it holds one)."""
    kinds = mma_precisions(spec, precision)
    configs = [c for c in _configs(spec, gpu, batch, GROUP_SIZES, _weight_dtypes(spec)[:1], kinds) if c.tensor_cores()]
    fitting = [c for c in configs if not problems_on(spec, c, gpu)]
    fitting = fitting or [fit for fit in (_shared_fragments(spec, c, gpu) for c in configs) if fit is not None]
    if any(not unverified_reason(spec, c) for c in fitting):
        return ""
    if fitting:  # only variants that have not run on a GPU
        return unverified_reason(spec, fitting[0])
    counts = collections.Counter(p for c in configs for p in problems_on(spec, c, gpu))
    if not counts:
        return "no tiling of the hidden size takes a 16-row tile"
    top = counts.most_common(1)[0][0]
    if _REGISTERS in top and any(c.f16_mma() for c in configs):  # `_shared_fragments` fit none either
        top += "; with A fragments in shared memory, more than shared memory holds"
    return top


def batch_tiles(spec: CellSpec, tile_units: int, batch: int | None, gpu: GPUModel) -> list[int]:
    """Batch tiles worth trying when one CTA or one cluster holds a direction: powers of two
    below the batch, as long as every tile runs at once: every CTA gets an SM of its own and
    every cluster fits beside the others (`GPUModel.clusters_at_once`: a cluster must fit one
    GPC, so the H100 runs 7 clusters of 16 CTAs at once, not 8; on the H200 a GRU H=384 B=64
    TF32 layer in 8 tiles of such clusters took 8.3 us a step, against the 3.1 predicted for
    one wave: docs/data/offgrid-h200.jsonl). For a batch unknown until run time,
    ANY_BATCH_TILES (tiles never wait for each other, so a grid larger than the GPU runs in
    waves, slower but correct; the planner weighs the waves)."""
    per_direction = spec.hidden_size // tile_units
    if per_direction > gpu.max_cluster_ctas and per_direction > 1:
        return []
    if batch is None:
        return list(ANY_BATCH_TILES)
    tiles = [1 << k for k in range(8) if (1 << k) < batch]
    at_once = gpu.clusters_at_once(per_direction) if per_direction > 1 else gpu.num_sms
    return [t for t in tiles if spec.num_directions * math.ceil(batch / t) <= at_once]


def grid_batch_tiles(spec: CellSpec, tile_units: int, batch: int | None, gpu: GPUModel) -> list[int]:
    """Batch tiles for tensor-core CTAs of a grid, each tile's CTAs meeting at a barrier counter
    of their own, where a direction has more CTAs than a cluster holds: whole n-tiles of the mma
    (multiples of 8 rows) below the batch, for a batch known at build time (every CTA must be
    resident, since a grid barrier waits for all of a tile's), as many counters as the workspace
    has. Each CTA then reads only its tile's rows of h(t-1): on the H200 LSTM H=768 B=32 fp16 ran
    2.59 us a step in tiles of 8 rows (24 units a CTA, 128 CTAs) against 3.66 for the pick of one
    grid, GRU H=640 B=128 fp16 4.57 against 7.09, LSTM H=896 B=64 bf16 5.84 against 7.69, kernels
    alone (docs/data/grid-batch-tiles-h200.jsonl)."""
    per_direction = spec.hidden_size // tile_units
    if batch is None or per_direction <= max(1, gpu.max_cluster_ctas):  # one CTA: `batch_tiles`' own
        return []
    tiles = [MMA_N << k for k in range(5) if MMA_N << k < batch]
    return [t for t in tiles if spec.num_directions * math.ceil(batch / t) * per_direction <= gpu.num_sms]


def bounded_by_batch(spec: CellSpec, cfg: Config) -> bool:
    """Whether `cfg` runs only batches up to the one it was planned for: its batch tiles add CTAs
    as the batch grows, and they meet at a grid barrier, which needs every CTA of a tile resident
    (the kernel launches cooperatively, and the driver refuses a grid larger than the GPU holds).
    A batch bucket open to every larger batch takes none (`planner.plan_buckets`)."""
    return bool(cfg.batch_tile) and cfg.barrier(spec) == "grid"


def _smem_weights(spec: CellSpec, cfg: Config, gpu: GPUModel, stream: bool = False) -> Config | None:
    """`cfg` with the fewest runs of weight columns moved to shared memory that make it fit, if
    the registers were what it lacked (None otherwise); with `stream`, where shared memory cannot
    take them all, as many as it can take there and the rest in global memory. Tensor-core
    configs: none (their A fragments go to shared memory in `shared_fragments_variant`, and in
    `_shared_fragments` where registers hold no tensor-core config)."""
    if cfg.tensor_cores():
        return None
    problems = problems_on(spec, cfg, gpu)
    if not any(_REGISTERS in p for p in problems) or any(not _movable(p) for p in problems):
        return None  # moving weights out cannot mend what is not registers (or dynamic memory)
    # the registers a config needs fall as runs move out, so bisect for the fewest runs that
    # leave enough, then walk on from there until shared memory, which grows with each run, is
    # exceeded
    low, high = 1, cfg.cols_per_lane(spec) // cfg.column_run(spec)
    while low < high:
        mid = (low + high) // 2
        if any(_REGISTERS in p for p in problems_on(spec, dataclasses.replace(cfg, smem_runs=mid), gpu)):
            low = mid + 1
        else:
            high = mid
    for runs in range(low, cfg.cols_per_lane(spec) // cfg.column_run(spec) + 1):
        moved = dataclasses.replace(cfg, smem_runs=runs)
        problems = problems_on(spec, moved, gpu)
        if not problems:
            return moved
        if any(_SHARED_LIMIT in p for p in problems):
            return _streamed_weights(spec, moved, gpu, low) if stream else None
    return None


def _streamed_weights(spec: CellSpec, cfg: Config, gpu: GPUModel, off_registers: int) -> Config | None:
    """`cfg` with `off_registers` runs of each lane's columns out of the registers: as many in
    shared memory as it holds, the rest read from global memory each step (None if it still
    cannot run). Tensor-core configs hold their fragments in registers: none."""
    if cfg.tensor_cores():
        return None
    for smem in range(off_registers, -1, -1):
        moved = dataclasses.replace(cfg, smem_runs=smem, global_runs=off_registers - smem)
        problems = problems_on(spec, moved, gpu)
        if not problems:
            return moved
        if not any(_SHARED_LIMIT in p or _DYNAMIC in p for p in problems):
            return None
    return None


#: the words of the `problems` that moving weight runs to shared memory changes: too many registers
#: (fewer with each run), a dynamic allocation too small for TVM to raise the limit (larger with
#: each run), the shared-memory limit (exceeded for good once exceeded)
_REGISTERS, _DYNAMIC, _SHARED_LIMIT = "register", "dynamic shared memory", "bytes of shared memory (at most"


def _movable(problem: str) -> bool:
    return _REGISTERS in problem or _DYNAMIC in problem


def problems_on(spec: CellSpec, cfg: Config, gpu: GPUModel) -> list[str]:
    """`problems` with the limits of `gpu`."""
    return problems(spec, cfg, gpu.num_sms, gpu.max_shared_bytes, gpu.max_cluster_ctas)


def _configs(spec, gpu, batch, group_sizes, weight_dtypes, mma_kinds=("3xtf32",)):
    H, D = spec.hidden_size, spec.num_directions
    variants = (2, 1) if two_phase(spec) else (2,)  # GRU linear_before_reset=0: two barriers or partial sums
    for tw, barriers in itertools.product(_divisors(H, H), variants):
        if D * (H // tw) > gpu.num_sms:
            continue
        rows = Config(tw, 1, 1, 1, gru_barriers=barriers).row_gates(spec) * tw
        for ws in group_sizes:
            if H % ws:
                continue
            for rpg in _divisors(rows, 16):
                for bc in batch_chunks(batch):
                    for wdt in weight_dtypes:
                        cfg = Config(tw, ws, rpg, bc, wdt, barriers)
                        yield cfg
                        if not stamped_problems(spec, dataclasses.replace(cfg, stamped=True)):
                            yield dataclasses.replace(cfg, stamped=True)  # no barrier a step: stamped words
                        if 1 < H // tw <= gpu.max_cluster_ctas:  # the same CTAs as one cluster
                            yield from _cluster_twins(spec, dataclasses.replace(cfg, cluster=True))
                for tile, wdt in itertools.product(batch_tiles(spec, tw, batch, gpu), weight_dtypes):
                    # one CTA (or cluster) per tile of batch rows
                    tiled = Config(tw, ws, rpg, tile, wdt, barriers, cluster=H // tw > 1, batch_tile=tile)
                    yield from _cluster_twins(spec, tiled) if tiled.cluster else [tiled]
        if group_sizes is GROUP_SIZES:
            for wdt in tensor_core_dtypes(spec):  # the layer's dtype, and fp16 for a quantized fp32 layer
                kinds = mma_kinds if wdt == spec.dtype else ("3xtf32",)  # (fp16 weights: the 16-bit mma)
                yield from _tensor_core_configs(spec, tw, barriers, batch, gpu, kinds, wdt)


def _cluster_twins(spec, cfg):
    """A cluster config, and its twin exchanging h through distributed shared memory where the
    cell and tile allow it."""
    yield cfg
    if not dsmem_problems(spec, dataclasses.replace(cfg, dsmem=True)):
        yield dataclasses.replace(cfg, dsmem=True)


def _tensor_core_configs(spec, tw, barriers, batch, gpu, mma_kinds, weight_dtype):
    """The tensor-core twins of tile width `tw`: each column split, batch chunk, mma precision
    of `mma_kinds` and cluster choice (`problems` prunes what the cell, the tile or the registers
    rule out). Outside batch tiles a thread updates one (batch row, unit) pair: with more, the
    step measured 0.37-1.15x the one-pair pick on 34 layers, against 1.41-2.52x for the batch
    tiles' several (docs/data/tc-tiles-ab-h200.jsonl; the model underprices the updates)."""
    for ks, bc, kind in itertools.product(TENSOR_CORE_SPLITS, batch_chunks(batch), mma_kinds):
        cfg = Config(tw, 32, 16, bc, weight_dtype, barriers, mma_k_split=ks, mma_precision=kind)
        if cfg.updates_per_thread(spec) > 1:
            continue
        yield from _stamped_twin(spec, cfg)
        if 1 < spec.hidden_size // tw <= gpu.max_cluster_ctas:
            yield dataclasses.replace(cfg, cluster=True)
    for ks, tile, kind in itertools.product(TENSOR_CORE_SPLITS, batch_tiles(spec, tw, batch, gpu), mma_kinds):
        # one CTA or cluster per tile of batch rows, each reading only its tile's rows of h(t-1)
        yield Config(tw, 32, 16, tile, weight_dtype, barriers, cluster=spec.hidden_size // tw > 1, batch_tile=tile,
                     mma_k_split=ks, mma_precision=kind)
    for ks, tile, kind in itertools.product(TENSOR_CORE_SPLITS, grid_batch_tiles(spec, tw, batch, gpu), mma_kinds):
        # ... or a grid per tile of batch rows, its CTAs meeting at a counter of their own
        yield from _stamped_twin(spec, Config(tw, 32, 16, tile, weight_dtype, barriers, batch_tile=tile, mma_k_split=ks,
                                              mma_precision=kind))


def _stamped_twin(spec, cfg):
    """A grid tensor-core config, and its twin exchanging h as stamped halves (no barrier a step)
    where the step is a 16-bit mma's: kernel alone on the H200, LSTM H=768 fp16 in grid batch tiles
    ran 1.25x (B=16) and 1.19x (B=32) faster so (docs/data/stamped-halves-h200.jsonl, run E)."""
    yield cfg
    if not stamped_problems(spec, dataclasses.replace(cfg, stamped=True)):
        yield dataclasses.replace(cfg, stamped=True)


def shared_fragments_variant(spec: CellSpec, cfg: Config, gpu: GPUModel) -> Config | None:
    """`cfg` with its last k-tiles' 16-bit A fragments in shared memory (`smem_runs`), where its
    register estimate with the exchange's loads in flight (`fragment_registers`) passes the
    thread's cap: the fewest k-tiles that bring it within SPILL_SLACK of the cap with every load
    of h in one turn, else the fewest that bring it so with the loads it had; None where that is
    not a 16-bit mma config, or shared memory cannot take that many. GRU H=640 B=128 fp16's pick
    (176 registers estimated, 128 a thread; 556 bytes spilled) ran 10.2 us a step kernel alone,
    7.14 with 15 of its 20 k-tiles there and its 5 loads of h in one turn, 8.65 with 14 and two
    turns (docs/data/tc-shared-fragments-h200.jsonl, runs F and G)."""
    if not cfg.f16_mma() or cfg.smem_runs or fragment_registers(spec, cfg) <= cfg.register_cap(spec):
        return None
    fitting = _fragment_counts_that_fit(spec, cfg, gpu)
    within = [c for c in fitting if fragment_registers(spec, c) <= c.register_cap(spec) + SPILL_SLACK]
    one_turn = [c for c in within if in_one_turn(spec, c)]
    return (one_turn or within or [None])[0]


def streamed_fragments_variant(spec: CellSpec, cfg: Config, gpu: GPUModel) -> Config | None:
    """`cfg`, a 16-bit mma config of a layer whose weights registers and shared memory cannot
    hold, with as many k-tiles of A fragments in shared memory as it holds and the fewest of the
    rest read each step from global memory (`global_runs`: pairs the kernel packs into its
    workspace, which L2 keeps where they fit) that bring its register estimate within what ptxas
    gives its threads (`register_cap_of`: with the cap the shared-fragments rule allows, ptxas
    spilled 316-484 bytes on the first such picks); None where that is not a 16-bit mma config of
    a 16-bit layer with STREAMED_MIN_SPLITS column splits or more, or no count fits."""
    if (not cfg.f16_mma() or spec.dtype not in HALF_DTYPES or cfg.smem_runs or cfg.global_runs
            or cfg.mma_k_split < STREAMED_MIN_SPLITS):
        return None
    tiles = cfg.k_tiles_per_warp(spec)
    # the most k-tiles shared memory holds (its bound does not depend on global_runs)
    shared = next((k for k in range(tiles, -1, -1) if not any(
        _SHARED_LIMIT in p or _DYNAMIC in p for p in problems_on(spec, dataclasses.replace(cfg, smem_runs=k), gpu))), None)
    if shared is None:
        return None
    for streamed in range(1, tiles + 1):
        moved = dataclasses.replace(cfg, smem_runs=min(shared, tiles - streamed), global_runs=streamed)
        if not problems_on(spec, moved, gpu) and fragment_registers(spec, moved) <= register_cap_of(moved.threads(spec)):
            return moved
    return None


def fullest_shared_fragments(spec: CellSpec, cfg: Config, gpu: GPUModel) -> Config | None:
    """`cfg`, a 16-bit mma config with some A fragments in shared memory, with as many k-tiles
    there as shared memory holds (None where that is `cfg`): what a compile on a GPU times beside
    it, since the register estimate that picks the fewest misses some spills. Kernel alone on the
    H200, the most against the fewest on 65 16-bit layers: 14 ran 1.03-1.39x faster (LSTM H=1280
    B=64 fp16 14.24 -> 11.47 us a step, LSTM H=896 B=128 fp16 10.11 -> 7.27), 44 slower (GRU
    H=2048 B=2 fp16 0.77x) (docs/data/fullest-shared-fragments-h200.jsonl)."""
    if not cfg.f16_mma() or not cfg.smem_runs:
        return None
    most = (_fragment_counts_that_fit(spec, cfg, gpu) or [cfg])[-1]
    return most if most.smem_runs > cfg.smem_runs else None


def _fragment_counts_that_fit(spec: CellSpec, cfg: Config, gpu: GPUModel) -> list[Config]:
    """`cfg` with each count of its warp's k-tiles of A fragments in shared memory, 1 to all, that
    runs on `gpu` (`problems_on`), fewest first."""
    counts = (dataclasses.replace(cfg, smem_runs=k) for k in range(1, cfg.k_tiles_per_warp(spec) + 1))
    return [c for c in counts if not problems_on(spec, c, gpu)]


def unmeasured_variant(spec: CellSpec, cfg: Config, gpu: GPUModel) -> Config | None:
    """The shared-fragments variant a compile that measures nothing builds instead of `cfg`: where
    each fragment read from shared memory feeds two or more mma (n-tiles), or, with one, where the
    estimated overflow is ONE_TILE_OVERFLOW registers or more. Kernel alone on the H200, 23
    measure-off picks and their variants in turn: the 16 so taken ran 1.00-1.48x faster than the
    picks, the 7 left 0.91-1.00x (docs/data/tc-shared-fragments-h200.jsonl, run D); with every load
    of h in one turn where the estimate allows it, 17 of 18 taken ran 1.01-1.51x faster, GRU H=1536
    B=32 fp16 0.96x (run F). A pick whose chunk spans FULLEST_N_TILES n-tiles or more takes as many
    k-tiles there as shared memory holds."""
    variant = shared_fragments_variant(spec, cfg, gpu)
    if variant is None:
        return None
    overflow = fragment_registers(spec, cfg) - cfg.register_cap(spec)
    if cfg.n_tiles() < 2 and overflow < ONE_TILE_OVERFLOW:
        return None
    return fullest_if_wide(spec, variant, gpu)


def fullest_if_wide(spec: CellSpec, cfg: Config, gpu: GPUModel, n_tiles: int = FULLEST_N_TILES) -> Config:
    """`cfg`, a 16-bit mma config with A fragments in shared memory, with as many k-tiles there as
    shared memory holds (`fullest_shared_fragments`) where its chunk spans `n_tiles` n-tiles or
    more; else `cfg` as it is."""
    if cfg.n_tiles() >= n_tiles:
        return fullest_shared_fragments(spec, cfg, gpu) or cfg
    return cfg


def fragment_registers(spec: CellSpec, cfg: Config) -> int:
    """A tensor-core thread's registers: `Config.registers` and the 16-bit exchange's loads in
    flight (GRU H=1536 B=32 bf16 holds 32 registers of them: estimated 176 + 32 against 168 a
    thread, it spilled 284 bytes, and with 2 of 24 k-tiles in shared memory still 212)."""
    return cfg.registers(spec) + load_registers(spec, cfg)
