"""A GRNN-style analytical model (EuroSys'19, section 7) of one persistent-kernel launch.

Per time step: the grid barrier, then for every batch chunk the load of h(t-1) from L2 into
shared memory, the partial dot products (bounded by FMA issue or by shared-memory loads), the
shuffle reduction, and the gate update. Plain arithmetic over CellSpec, Config and GPUModel:
no TVM, no GPU.
"""
from __future__ import annotations

import math

from tir_templates.config import Config
from tir_templates.spec import CellSpec

from .gpu import GPUModel


def step_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> float:
    """Predicted microseconds of one time step."""
    H, G = spec.hidden_size, spec.num_gates
    nt = cfg.threads(spec)
    kpl = cfg.cols_per_lane(spec)
    chunks = math.ceil(batch / cfg.batch_chunk)
    rows = min(cfg.batch_chunk, batch)  # live rows of a chunk
    cycle_us = 1e-3 / gpu.clock_ghz
    sync = gpu.barrier_us(cfg.ctas_per_direction(spec)) if cfg.barrier(spec) == "grid" else gpu.cta_sync_us
    load = gpu.l2_latency_us + 4.0 * rows * H / gpu.l2_bytes_per_us_per_sm
    fma_cycles = nt * cfg.rows_per_group * kpl * cfg.batch_chunk / gpu.fma_per_cycle_per_sm
    lds_cycles = nt * kpl * cfg.batch_chunk / gpu.shared_loads_per_cycle_per_sm
    if cfg.weight_dtype == "float16":
        fma_cycles *= 1.25  # a conversion per weight use
    shuffle_cycles = (nt / 32) * cfg.rows_per_group * cfg.batch_chunk * math.log2(cfg.group_size)
    updates = math.ceil(cfg.batch_chunk * cfg.tile_units / nt)
    update_cycles = updates * gpu.update_cycles * (1.5 if spec.cell == "lstm" else 1.0)
    per_chunk = load + gpu.chunk_overhead_us + 3 * gpu.cta_sync_us + cycle_us * (
        max(fma_cycles, lds_cycles) + shuffle_cycles + update_cycles)
    del G
    return sync + chunks * per_chunk


def layer_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int, seq_len: int) -> float:
    """Predicted microseconds of the layer: input-projection GEMM plus seq_len steps."""
    flops = 2.0 * seq_len * batch * spec.input_size * spec.num_gates * spec.hidden_size * spec.num_directions
    gemm = gpu.launch_us + flops / (gpu.gemm_tflops * 1e6)
    return gemm + gpu.launch_us + seq_len * step_us(spec, cfg, gpu, batch)


def rank(spec: CellSpec, configs: list[Config], gpu: GPUModel, batch: int) -> list[tuple[float, Config]]:
    """(predicted step time, config), fastest first; ties broken towards fewer CTAs."""
    scored = [(step_us(spec, c, gpu, batch), c.num_ctas(spec), c) for c in configs]
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(t, c) for t, _, c in scored]
