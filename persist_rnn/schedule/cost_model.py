"""A GRNN-style analytical model (EuroSys'19, section 7) of one persistent-kernel time step.

The step is the grid barrier plus, for every batch chunk, the kernel's phases (twice over for
the two-phase GRU of linear_before_reset=0: two barriers, two loads of a vector, and the dot
products split between the phases when each work group's rows lie in one gate, else repeated;
with GRNN's partial sums instead, one barrier, but every CTA sums all CTAs' partials of r and z
(counted as loads), computes r for every unit and multiplies its h(t) slice by its columns of
R_z and R_r (counted as FMAs)). The weights were fitted on LSTM and GRU linear_before_reset=1
measurements only; the GRU linear_before_reset=0 terms reuse them. Each phase is
counted in what bounds it on one SM - warp-instruction issue slots per scheduler, shared-memory
wavefronts, dependent latencies - as `features`; the step time is a weighted sum of them whose
weights (cycles per unit) are fitted to measurements of the GPU (`persist_rnn.schedule.fit`)
and stored in its calibration file. Plain arithmetic: no TVM, no GPU.
"""
from __future__ import annotations

import math

from tir_templates.config import Config, two_phase
from tir_templates.spec import CellSpec

from .gpu import GPUModel

#: instructions of one (batch row, unit) gate update, per cell (transcendentals included)
UPDATE_INSTR = {"lstm": 110, "gru": 90, "rnn": 40}
#: instructions that turn one int8 weight into a float (a byte permute, a subtraction), priced as FMAs
INT8_DEQUANT_INSTR = 2
#: FMA-issue slots one warp's mma is priced at: the default `mma_issue` weight (`weights_of`);
#: where a calibration does not carry it, the planner measures tensor-core configs rather than
#: trusting the price
MMA_ISSUE_SLOTS = 8
FEATURES = ("barrier_us", "chunks", "l2_loads", "load_issue", "fma_issue", "lds_wavefronts", "lds_issue",
            "shuffle_issue", "update_issue", "mma_issue", "mma_chain")
#: the version of the model and of the planner's rules for a pick without measurements: a tuning
#: log's unmeasured picks ("cost_model" records) made by another version are not used
#: (`tuning_log.lookup`). 1: records without the field; 2: clusters that run at once, tensor-core
#: configs held to their fragments in registers, FMA units at batch 1; 3: tensor-core configs in
#: batch tiles, several pairs a thread only in them, 16-bit and int8 layers' weights read from
#: global memory; 4: a chained mma priced, its latency hidden by the other warps of its scheduler
#: (docs/cost-model.md); 5: an FMA-unit warp of few sums priced at the scheduler that holds the most warps;
#: 6: 16-bit tensor-core steps with stamped halves, priced as the FMA units' stamped words;
#: 7: 16-bit tensor-core configs with A fragments in shared memory where registers hold none
#: (`space._shared_fragments`); 8: a quantized fp32 layer's 16-bit mma configs (fp16 weights and h,
#: `config.tensor_core_dtypes`); 9: a 16-bit GEMM scan's step on wgmma in a build for sm_90a
#: (`gemm_scan_cost.wgmma_scan_us`), which moves layers from persistent configs to the scan; 10: that
#: step priced on the split of K it takes (`gemm_scan_cost.wgmma_step`), which moves more; 11: a
#: pick of 4 n-tiles a chunk whose A fragments go to shared memory takes as many k-tiles there as
#: shared memory holds (`space.FULLEST_N_TILES`); 12: 16-bit tensor-core configs of a layer past the chip
#: that read their last k-tiles' A fragments each step (`space.streamed_fragments_variant`); 13: such a
#: config weighed against the GEMM scan at the longer of its step on chip and its reads (`overlapped_step_us`);
#: 14: past the chip, the best FMA-unit and tensor-core configs weighed so against each other, at B=1 too
#: (`planner.past_chip_lead`); 15: a 16-bit measure-off pick gives way to shared fragments beside configs
#: that fit where priced no more than it and their rows nearly fill their tiles
#: (`planner.shared_fragments_lead`); 16: so does a symbolic batch's bucket pick, and such a config of
#: two n-tiles a chunk takes as many k-tiles in shared memory as it holds; 17: the wgmma step in rings
#: of `gemm_scan_cost.ring_depth` k-tiles, priced per CTA an SM runs too (`WGMMA_STEP_US`), and a 16-bit
#: scan taken where priced up to 1.1x a streaming config (`planner.STREAMING_MARGINS`)
MODEL_VERSION = 17
#: the most sums (rows x batch rows of a chunk) an FMA-unit warp may keep and be priced at the
#: scheduler that holds the most warps: of the 40 measure-off picks that rule moved on the H200,
#: the 30 at 16 or fewer ran 1.115x faster (geomean), the 10 above 0.943x
#: (docs/data/scheduler-warps-h200.jsonl)
SCHEDULER_MAX_SUMS = 16
#: the tensor-core terms: an mma's issue cost and its accumulation chain (judged, and refittable, on a
#: side-by-side sweep: `fit.tensor_core_report`)
MMA_FEATURES = ("mma_issue", "mma_chain")


def features(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> dict:
    """What one time step costs, phase by phase, in the units the fitted weights multiply (of one
    CTA: with batch tiles, each CTA sees one tile of the batch)."""
    H, G = spec.hidden_size, spec.num_gates
    batch = min(batch, cfg.batch_tile) if cfg.batch_tile else batch
    nt = cfg.threads(spec)
    warps = nt / 32
    # warps sharing one of the SM's four schedulers, the mean; an FMA-unit warp that keeps at most
    # SCHEDULER_MAX_SUMS sums (rows x its chunk's batch rows) waits for the scheduler holding the
    # most warps, ceil(warps / 4) (docs/cost-model.md, *Warps a scheduler holds*)
    few_sums = not cfg.tensor_cores() and cfg.rows_per_group * cfg.batch_chunk <= SCHEDULER_MAX_SUMS
    per_scheduler = max(1.0, math.ceil(warps / 4) if few_sums else warps / 4)
    kpl = cfg.cols_per_lane(spec)
    dv = 4 if kpl % 4 == 0 else 1
    bc = cfg.batch_chunk
    partial = cfg.partial_sums(spec)
    phases = 2 if two_phase(spec) and not partial else 1
    chunks = math.ceil(batch / bc)
    # h stays in shared memory all sequence: a resident CTA, or a dsmem cluster (one chunk only)
    resident = cfg.h_on_chip(spec) and chunks == 1 and phases == 1 and not partial
    barrier = "dsmem" if resident and cfg.barrier(spec) == "cluster" else cfg.barrier(spec)
    barrier = "stamped" if cfg.stamped and barrier == "grid" else barrier
    dots = weight_passes(spec, cfg, batch)  # passes of the dot products over all rows
    # stamped words: one 8-byte load a unit (stamped halves: a pair of units)
    vec = (2 if cfg.stamped_halves(spec) else 1) if cfg.stamped else 4 if H % 4 == 0 else 1
    unique_bytes = 4 * dv * min(32, cfg.group_size)  # distinct h bytes one warp-wide shared load touches
    smem_w = cfg.smem_runs * dv * cfg.rows_per_group  # weights a thread reads from shared memory per chunk
    lds_per_thread = kpl // dv * bc
    updates = math.ceil(bc * cfg.tile_units / nt)
    fp16 = 1.25 if cfg.weight_dtype == "float16" else 1.0
    fma = kpl * cfg.rows_per_group * bc * fp16
    if cfg.int8_weights():  # each weight a byte permute and a subtraction, once a chunk (int8_rows.py)
        fma = kpl * cfg.rows_per_group * (bc + INT8_DEQUANT_INSTR)
    # partial sums: per thread, the summed partials of r (all units) and z, and its rows of R_z, R_r
    partial_loads = math.ceil(bc * (H + cfg.tile_units) / nt) * cfg.ctas_per_direction(spec) if partial else 0
    partial_fma = cfg.partial_rows(spec) * cfg.tile_units * bc * fp16
    if cfg.tensor_cores():  # per warp and chunk: 3 (TF32: 1) mma per (k-tile, n-tile), 2 shared loads,
        # the splits (3xTF32: A's 4 registers and B's 2 per n-tile, two instructions each; TF32: B's cvt)
        mmas = cfg.mma_passes() * cfg.k_tiles_per_warp(spec) * cfg.n_tiles()
        # (fp16: B's two registers packed from four fp32 values, ~4 instructions each)
        splits = 8 * cfg.n_tiles() if cfg.f16_mma() else 2 * cfg.n_tiles() if cfg.tf32() else 8 + 4 * cfg.n_tiles()
        fma = cfg.k_tiles_per_warp(spec) * splits
        lds_per_thread = 2 * cfg.k_tiles_per_warp(spec) * cfg.n_tiles()
        unique_bytes, smem_w = 128, 4 * cfg.smem_runs  # an A fragment's 4 words a k-tile held in shared memory
        # each n-tile's mma accumulate in turn, in each of the warp's sets of C fragments (Config.acc_sets);
        # the other warps of its scheduler hide the chain's latency, the more of them the more
        # (per scheduler squared: ranked 57 of 67 measured pairs of column splits right, docs/cost-model.md)
        mma_chain = math.ceil(cfg.k_tiles_per_warp(spec) / cfg.acc_sets()) * cfg.mma_passes() / per_scheduler ** 2
    else:
        mmas = mma_chain = 0
    return {
        "barrier_us": 0.0 if barrier == "cta" else phases * gpu.barrier_us(cfg.ctas_per_direction(spec), barrier),
        "chunks": phases * chunks,
        "l2_loads": 0 if resident else phases * chunks,
        "load_issue": 0 if resident else chunks * (phases * math.ceil(bc * H / vec / nt) + partial_loads) * per_scheduler,
        "fma_issue": (dots * fma + chunks * partial_fma) * per_scheduler,
        "lds_wavefronts": dots * warps * (lds_per_thread * math.ceil(unique_bytes / 128) + smem_w),
        "lds_issue": dots * (lds_per_thread + smem_w) * per_scheduler,
        "shuffle_issue": 0 if cfg.tensor_cores() else (phases * chunks * cfg.rows_per_group * bc
                                                        * math.log2(max(cfg.group_size, 1)) * per_scheduler),
        "update_issue": chunks * (updates * UPDATE_INSTR[spec.cell] * (G + 1) / 5
                                  + (math.ceil(bc * H / nt) * UPDATE_INSTR["rnn"] if partial else 0)) * per_scheduler,
        "mma_issue": dots * mmas * per_scheduler,
        "mma_chain": dots * mma_chain,
    }


def weight_passes(spec: CellSpec, cfg: Config, batch: int) -> int:
    """Passes of a step's dot products over all the CTA's weight rows: one a batch chunk (of the
    CTA's tile), twice in the two-phase GRU unless each work group's rows lie in one gate (then a
    group skips the phase not its own)."""
    tile = min(batch, cfg.batch_tile) if cfg.batch_tile else batch
    phases = 2 if two_phase(spec) and not cfg.partial_sums(spec) else 1
    split = phases == 1 or cfg.tile_units % cfg.rows_per_group == 0
    return math.ceil(tile / cfg.batch_chunk) * (1 if split else phases)


def weights_of(gpu: GPUModel) -> dict:
    """The GPU's weights; where its calibration does not carry the tensor-core terms, an mma
    costs MMA_ISSUE_SLOTS FMA issue slots and its chain nothing extra."""
    w = dict(gpu.weights)
    w.setdefault("mma_issue", MMA_ISSUE_SLOTS * w.get("fma_issue", 0.0))
    w.setdefault("mma_chain", 0.0)
    return w


def prices_tensor_cores(gpu: GPUModel) -> bool:
    """Whether the GPU's calibration carries the tensor-core terms, which a side-by-side sweep of
    tensor-core and FMA-unit configs validated there (docs/cost-model.md), so that a tensor-core
    config may be chosen on the model's word."""
    return all(k in gpu.weights for k in MMA_FEATURES)


def step_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> float:
    """Predicted microseconds of one time step."""
    f, w = features(spec, cfg, gpu, batch), weights_of(gpu)
    cycles = sum(w.get(k, 0.0) * v for k, v in f.items() if k != "barrier_us")
    return w.get("barrier_us", 1.0) * f["barrier_us"] + cycles / (gpu.clock_ghz * 1e3) + streamed_weights_us(
        spec, cfg, gpu, batch)


def overlapped_step_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int, summed_us: float | None = None) -> float:
    """The step of a streamed-fragments config (16-bit mma, `global_runs`) with its reads
    overlapping its mma: the longer of the two, where `step_us` adds them; what the GEMM scan is
    weighed against (`planner.gemm_scan_note`). Kernels alone on the H200, 39 timings of such
    configs on 16 layers ran 0.67-1.72x the longer (geomean 0.95x), 0.40-1.17x the sum (0.62x);
    but the sum ordered a layer's configs better (29 of 43 pairs against 23), so ranking keeps it.
    In batch tiles of a grid the reads did not overlap (6 timings, 1.2-2.8x the longer, 0.74-1.50x
    the sum): the sum there (docs/data/streamed-fragments-h200.jsonl, runs A, C and D). Other
    configs: the sum, `summed_us` where given (the ranked price), else `step_us`."""
    summed = step_us(spec, cfg, gpu, batch) if summed_us is None else summed_us
    if not (cfg.f16_mma() and cfg.global_runs) or cfg.batch_tile:
        return summed
    streamed = streamed_weights_us(spec, cfg, gpu, batch)
    return max(summed - streamed, streamed)


def streamed_weights_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> float:
    """Microseconds a step spends reading the weights of `Config.global_runs` from global memory:
    every CTA reads its share once per pass over its rows (`weight_passes`), all CTAs at once, at
    L2's bandwidth when all of it stays in L2 (`GPUModel.l2_holds`), else at HBM's. Not a fitted
    term: the sweeps hold no such config; the bandwidths are the GPU's (gpu.py)."""
    if not cfg.global_runs:
        return 0.0
    total = cfg.num_ctas(spec) * cfg.global_weight_bytes(spec)
    per_us = gpu.l2_bytes_per_us if gpu.l2_holds(total) else gpu.hbm_bytes_per_us
    return weight_passes(spec, cfg, batch) * total / per_us


def rank(spec: CellSpec, configs: list[Config], gpu: GPUModel, batch: int) -> list[tuple[float, Config]]:
    """(predicted step time, config), fastest first; ties broken towards fewer CTAs."""
    scored = [(step_us(spec, c, gpu, batch), c.num_ctas(spec), c) for c in configs]
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(t, c) for t, _, c in scored]
