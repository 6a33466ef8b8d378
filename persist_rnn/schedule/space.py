"""The config space of the persistent kernel, pruned to what can run on a given GPU."""
from __future__ import annotations

from tir_templates.config import Config, problems
from tir_templates.spec import CellSpec

from .gpu import GPUModel

GROUP_SIZES = (1, 2, 4, 8, 16, 32)
BATCH_CHUNKS = (1, 2, 4, 8, 16, 32)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidate_configs(spec: CellSpec, gpu: GPUModel, batch: int | None) -> list[Config]:
    """Every config that passes `problems` for `spec` on `gpu` at batch size `batch`
    (None: unknown at compile time, chunks up to 8)."""
    H, G, D = spec.hidden_size, spec.num_gates, spec.num_directions
    chunks = sorted({c for c in BATCH_CHUNKS if batch is None or c < batch} | ({batch} if batch else {8}))
    weight_dtypes = ("float16",) if spec.dtype in ("float16", "bfloat16") else ("float32",)
    out = []
    for tw in _divisors(H, H):
        if D * (H // tw) > gpu.num_sms:
            continue
        for ws in GROUP_SIZES:
            if H % ws:
                continue
            for rpg in _divisors(G * tw, 16):
                for bc in chunks:
                    for wdt in weight_dtypes:
                        cfg = Config(tw, ws, rpg, bc, wdt)
                        if not problems(spec, cfg, gpu.num_sms):
                            out.append(cfg)
    return out
