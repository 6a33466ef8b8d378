"""A layer's physical floor: the time no persistent kernel on this GPU can beat (issue 20).

    floor = T x (barrier + max(dot products at peak, L2 time of the h exchange)) + GEMM at peak

- The recurrent weights must stay on chip, so a direction needs at least
  ceil(weight bytes / on-chip bytes of an SM) SMs; the barrier is then none (one SM), in a
  cluster the cheapest of the cluster barrier and the dsmem exchange (h through distributed
  shared memory, no L2 exchange), or in a grid the cheapest of the grid barrier and the wait on
  stamped words, for that many CTAs (every CTA reads h(t-1) from L2). Each is the least of the
  calibration's figure and what a step was measured to spend on it (`MEASURED_SYNC_US`).
- The step's dot products at the peak of the SMs that hold the weights, on the best unit the
  precision allows: the FMA units, or the tensor cores with the batch padded to the mma's 8
  columns (fp32: 3xTF32, three TF32 mma; TF32; fp16). More SMs than the weights need may hold
  them too: the floor takes the SM count (up to the GPU's) with the least step time.
- The input GEMM (T B x I times I x G H) at the tensor cores' peak for the precision (fp32 as
  3xTF32).
Peaks are per SM and clock from NVIDIA's data sheets (dense); L2 bandwidth is the commonly measured
figure. Plain arithmetic: no GPU.
"""
from __future__ import annotations

import math

from tir_templates.spec import CellSpec

from .gpu import GPUModel

#: multiply-adds per SM per clock: FMA units (fp32), tensor cores at TF32 and at fp16 (dense)
MACS_PER_SM_CLOCK = {"sm_90": {"fma": 128, "tf32": 1024, "fp16": 2048},
                     "sm_80": {"fma": 64, "tf32": 512, "fp16": 1024}}
#: registers (256 KiB) and shared memory (228 KiB on the H100, 164 on the A100) of one SM
ON_CHIP_BYTES = {"sm_90": (256 + 228) * 1024, "sm_80": (256 + 164) * 1024}
#: L2 read bandwidth, bytes per second
L2_BYTES_PER_S = {"sm_90": 5.5e12, "sm_80": 4.0e12}
MMA_N = 8
#: the least a batch-1 step was measured to spend waiting for the other CTAs, by the ablations of
#: `benchmarks/step_budget.py` (H100, docs/data/step-budget-split-h100.jsonl): in a
#: dsmem cluster of 16 CTAs the sends and the wait together (GRU H=256, 0.161 µs; the cluster
#: barrier's calibrated 0.71 is what the floor took before, and our H=256 layers ran under it);
#: in a grid of 128 CTAs the wait on stamped words without their L2 trip (GRU H=1024, 0.241)
MEASURED_SYNC_US = {"sm_90": {"cluster": 0.161, "grid": 0.241}}


def least_sync_us(gpu: GPUModel, arch: str, ctas: int, *kinds: str) -> float:
    """The cheapest way `ctas` CTAs wait for each other once a step: the least of the calibrated
    `kinds` (gpu.barrier_us) and the measured least (`MEASURED_SYNC_US`, for the first kind)."""
    measured = MEASURED_SYNC_US.get(arch, {}).get(kinds[0], float("inf"))
    return min(measured, *(gpu.barrier_us(ctas, kind) for kind in kinds))


def floor_ms(spec: CellSpec, batch: int, seq_len: int, gpu: GPUModel, precision: str = "fp32") -> dict:
    """The layer's floor in ms and its parts (per-step µs), for `precision` "fp32", "tf32", "fp16"
    or "bf16" (the weights' bytes and the units allowed follow it; bf16 as fp16: 2 bytes, the same
    dense tensor-core rate)."""
    precision = "fp16" if precision == "bf16" else precision
    arch = gpu.arch if gpu.arch in MACS_PER_SM_CLOCK else "sm_90"
    rate = {k: v * gpu.num_sms * gpu.clock_ghz * 1e9 for k, v in MACS_PER_SM_CLOCK[arch].items()}  # MAC/s
    H, G, D = spec.hidden_size, spec.num_gates, spec.num_directions
    weight_bytes = G * H * H * (2 if precision == "fp16" else 4)
    fewest = math.ceil(weight_bytes / ON_CHIP_BYTES[arch])

    def step(sms, tiles):
        """(barrier, dot, exchange) µs of a step on `sms` SMs a direction, for each of `tiles`
        tiles of the batch (batch rows never meet: each tile holds the weights again)."""
        rows = math.ceil(batch / tiles)
        if sms == 1:
            barrier, exchange_bytes = 0.0, 0
        elif sms <= max(gpu.max_cluster_ctas, 1):
            barrier, exchange_bytes = least_sync_us(gpu, arch, sms, "cluster", "dsmem"), 0
        else:
            barrier, exchange_bytes = least_sync_us(gpu, arch, sms * D, "grid", "stamped"), sms * D * rows * H * 4
        tensor = {"fp32": 3, "tf32": 1, "fp16": 1}[precision] * math.ceil(rows / MMA_N) * MMA_N * G * H * H
        dot = min(rows * G * H * H / (rate["fma"] * sms / gpu.num_sms),
                  tensor / ((rate["fp16"] if precision == "fp16" else rate["tf32"]) * sms / gpu.num_sms)) * 1e6
        return barrier, dot, exchange_bytes / L2_BYTES_PER_S[arch] * 1e6

    def step_us_on(shape):
        barrier, dot, exchange = step(*shape)
        return barrier + max(dot, exchange)

    counts = {fewest, max(fewest, gpu.num_sms // D), *(n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n >= fewest)}
    shapes = [(n, t) for n in counts for t in range(1, batch + 1) if n * t * D <= gpu.num_sms]
    barrier_us, dot_us, exchange_us = step(*min(shapes, key=step_us_on, default=(fewest, 1)))  # default: not on chip
    gemm_macs = seq_len * batch * D * G * H * spec.input_size
    gemm_rate = {"fp32": rate["tf32"] / 3, "tf32": rate["tf32"], "fp16": rate["fp16"]}[precision]
    gemm_us = gemm_macs / gemm_rate * 1e6
    step_us = barrier_us + max(dot_us, exchange_us)
    return {"floor_ms": (seq_len * step_us + gemm_us) / 1e3, "floor_step_us": step_us, "floor_barrier_us": barrier_us,
            "floor_dot_us": dot_us, "floor_exchange_us": exchange_us, "floor_gemm_us": gemm_us}
