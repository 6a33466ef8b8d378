"""A GRNN-style analytical model (EuroSys'19, section 7) of one persistent-kernel launch.

Per time step: the grid barrier, then for every batch chunk the phases of the kernel, each
costed as a latency (what one thread waits for) plus issue slots (per-thread instructions times
the warps that share one of the SM's four schedulers):
  load h(t-1) from L2 (skipped when a single resident CTA keeps h in shared memory),
  partial dot products (FMAs and shared loads), shuffle reduction, gate update, CTA syncs.
Plain arithmetic over CellSpec, Config and GPUModel: no TVM, no GPU.
"""
from __future__ import annotations

import math

from tir_templates.config import Config
from tir_templates.spec import CellSpec

from .gpu import GPUModel

#: instructions of one (batch row, unit) gate update, per cell (transcendentals included)
UPDATE_INSTR = {"lstm": 110, "gru": 90, "rnn": 40}


def phase_cycles(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> dict:
    """Cycles of each phase of one batch chunk (plus 'chunks', the chunk count)."""
    H, G = spec.hidden_size, spec.num_gates
    nt = cfg.threads(spec)
    warps_per_scheduler = max(1.0, nt / 32 / 4)
    kpl = cfg.cols_per_lane(spec)
    bc = cfg.batch_chunk
    chunks = math.ceil(batch / bc)
    resident = cfg.barrier(spec) == "cta" and chunks == 1
    vec = 4 if H % 4 == 0 else 1
    load_instr = 6 * math.ceil(bc * H / vec / nt) + 3 * math.ceil(bc * cfg.tile_units / nt) * (G + 1)
    load = 0.0 if resident else gpu.l2_latency_cycles + load_instr * warps_per_scheduler
    fma = kpl * bc * (cfg.rows_per_group + 1) * (1.25 if cfg.weight_dtype == "float16" else 1.0)
    dot = gpu.dot_latency_cycles + fma * warps_per_scheduler
    levels = math.log2(cfg.group_size) if cfg.group_size > 1 else 0.0
    reduce = levels * gpu.shuffle_latency_cycles + 2 * cfg.rows_per_group * bc * levels * warps_per_scheduler
    updates = math.ceil(bc * cfg.tile_units / nt)
    update = gpu.update_latency_cycles + updates * UPDATE_INSTR[spec.cell] * warps_per_scheduler
    return {"load": load, "dot": dot, "reduce": reduce, "update": update,
            "sync": 3 * gpu.sync_cycles, "chunks": chunks}


def step_us(spec: CellSpec, cfg: Config, gpu: GPUModel, batch: int) -> float:
    """Predicted microseconds of one time step."""
    ph = phase_cycles(spec, cfg, gpu, batch)
    per_chunk = sum(v for k, v in ph.items() if k != "chunks")
    barrier = gpu.barrier_us(cfg.ctas_per_direction(spec)) if cfg.barrier(spec) == "grid" else 0.0
    return barrier + ph["chunks"] * per_chunk / (gpu.clock_ghz * 1e3)


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
