"""Time candidate persistent kernels on the GPU that is present (top-K of the cost model)."""
from __future__ import annotations

import time

import numpy as np
import tvm

from tir_templates.config import Config
from tir_templates.persistent import persistent_kernel
from tir_templates.reference import WORKSPACE_WORDS
from tir_templates.spec import CellSpec

MEASURE_STEPS = 50


def kernel_arrays(spec: CellSpec, batch: int, seq_len: int, seed: int = 0) -> list[np.ndarray]:
    """Random inputs and zeroed outputs in the order every recurrence kernel takes them."""
    rng = np.random.default_rng(seed)
    D, H, G = spec.num_directions, spec.hidden_size, spec.num_gates
    f = lambda *shape: (rng.standard_normal(shape) * 0.3).astype("float32")  # noqa: E731
    return [f(seq_len, batch, D, G * H), f(D, G * H, H), f(D, G * H), np.full(batch, seq_len, "int32"),
            f(D, batch, H), f(D, batch, H), f(D, 3 * H), np.zeros((seq_len, D, batch, H), "float32"),
            np.zeros((D, batch, H), "float32"), np.zeros((D, batch, H), "float32"),
            np.zeros((3, D, batch, H), "float32"), np.zeros(WORKSPACE_WORDS, "uint32")]


def build_kernel(func: tvm.tirx.PrimFunc, target: tvm.target.Target):
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    return tvm.compile(mod, target=target)


def time_kernel(lib, dev, arrays, repeats: int = 20) -> float:
    """Median microseconds of one launch."""
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*args)  # warm-up (and module load)
    dev.sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lib["main"](*args)
        dev.sync()
        times.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(times))


def measure_configs(spec: CellSpec, configs: list[Config], target, dev, batch: int,
                    seq_len: int = MEASURE_STEPS, progress=None) -> list[tuple[float, Config]]:
    """(microseconds per step, config) for each config that builds and runs, fastest first."""
    arrays = kernel_arrays(spec, batch, seq_len)
    out = []
    for cfg in configs:
        lib = build_kernel(persistent_kernel(spec, cfg), target)
        out.append((time_kernel(lib, dev, arrays) / seq_len, cfg))
        if progress is not None:
            progress(cfg)
    out.sort(key=lambda x: x[0])
    return out
