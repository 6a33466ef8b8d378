"""Time candidate persistent kernels on the GPU that is present (top-K of the cost model).

Candidates are compiled in subprocesses on every core (CUDA compilation dominates), each
(layer, config) once a process, and each is loaded and timed in this process on random inputs as
soon as its build finishes: the median of repeated launches.

A layer whose weights (R, and the W that its input GEMM streams just before the kernel) outgrow
half of the GPU's L2 starts its kernel with R mostly evicted, and back-to-back launches of the
kernel alone keep R in L2: they ranked LSTM H=1024 B=1's configs unlike the whole layers did on the
H100 (docs/data/flush-rank-h100.jsonl). Such a layer's candidates are timed cold, with L2 flushed
before each launch, as Triton's `do_bench` and nvbench's cold runs time kernels.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import ml_dtypes  # noqa: F401  (numpy then knows "bfloat16", a bf16 layer's Y and Y_h)
import numpy as np
import tvm

from tir_templates.config import Config
from tir_templates.persistent import persistent_kernel
from tir_templates.signature import EXCHANGE_SLOTS, WORKSPACE_WORDS, batch_extent
from tir_templates.spec import CellSpec

MEASURE_STEPS = 50
#: bytes written before a cold launch: several times the L2 of the H100 (50 MB) and H200 (60 MB)
FLUSH_BYTES = 256 << 20
_FLUSH = "persist_rnn.flush_l2"


def kernel_arrays(spec: CellSpec, batch: int, seq_len: int, seed: int = 0, slots: int = EXCHANGE_SLOTS,
                  words: int = WORKSPACE_WORDS) -> list[np.ndarray]:
    """Random inputs and zeroed outputs in the order every recurrence kernel takes them (`slots`:
    the exchange buffer's, `Config.exchange_slots`; `words`: the workspace's, `Config.workspace_words`);
    operands the spec broadcasts have batch extent 1.
    Y, Y_h and an LSTM's Y_c in the layer's dtype, as the persistent kernels take them
    (tir_templates/signature.py; `as_params` converts them for another kernel)."""
    rng = np.random.default_rng(seed)
    D, H, G = spec.num_directions, spec.hidden_size, spec.num_gates
    f = lambda *shape: (rng.standard_normal(shape) * 0.3).astype("float32")
    lens_b, h0_b, c0_b = (batch_extent(spec, op, batch) for op in ("lens", "h0", "c0"))
    return [f(seq_len, batch, D, G * H), f(D, G * H, H), f(D, G * H), np.full(lens_b, seq_len, "int32"),
            f(D, h0_b, H), f(D, c0_b, H), f(D, 3 * H), np.zeros((seq_len, D, batch, H), spec.dtype),
            np.zeros((D, batch, H), spec.dtype), np.zeros((D, batch, H), spec.dtype if spec.cell == "lstm" else "float32"),
            np.zeros((slots, D, batch, H), "float32"), np.zeros(words, "uint32")]


def as_params(func: tvm.tirx.PrimFunc, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """`arrays` converted to the dtypes of `func`'s parameters (the reference scan keeps Y_h in
    float32, the persistent kernels write it in the layer's dtype)."""
    return [a.astype(str(p.dtype)) for a, p in zip(arrays, func.params)]


def build_kernel(func: tvm.tirx.PrimFunc, target: tvm.target.Target):
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    return tvm.compile(mod, target=target)


def _build_in_subprocess(spec: CellSpec, cfg: Config, target: tvm.target.Target, path: str) -> tuple[str, float]:
    """Compile one candidate in a fresh interpreter (build_worker): (path, seconds it took);
    raises with its last stderr lines."""
    cmd = [sys.executable, "-m", "persist_rnn.schedule.build_worker", spec.to_json(), json.dumps(cfg.as_dict()),
           str(target), path]
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join(res.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"building candidate {cfg.as_dict()} failed:\n{tail}")
    return path, time.perf_counter() - start


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's or `taskset`'s share, which
    `os.cpu_count` ignores)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 2


class Builds:
    """Candidate kernels compiled in the background on every core, each (layer, config, target)
    once: a tune submits every bucket's and every layer's candidates up front, and times each
    as soon as it is built while the rest still compile. Threads only wait on build_worker
    subprocesses."""

    def __init__(self, workers: int | None = None):
        self._pool = cf.ThreadPoolExecutor(workers or usable_cores())
        self._dir = tempfile.mkdtemp(prefix="persist_rnn_measure_")
        self._futures: dict[tuple, cf.Future] = {}

    def submit(self, spec: CellSpec, configs: list[Config], target: tvm.target.Target) -> list[cf.Future]:
        """One future a config, (path, build seconds); a config already submitted keeps its future."""
        out = []
        for cfg in configs:
            key = (spec.to_json(), json.dumps(cfg.as_dict(), sort_keys=True), str(target))
            if key not in self._futures:
                path = os.path.join(self._dir, f"cand{len(self._futures)}.so")
                self._futures[key] = self._pool.submit(_build_in_subprocess, spec, cfg, target, path)
            out.append(self._futures[key])
        return out


_builds: list[Builds] = []  # this process's, made on first use


def builds() -> Builds:
    """The process's background builds (`Builds`), shared by every measurement it makes."""
    if not _builds:
        _builds.append(Builds())
    return _builds[0]


def built_as_completed(spec: CellSpec, configs: list[Config], target: tvm.target.Target):
    """(config, loaded module or the build's RuntimeError, build seconds) for each config, in the
    order their builds finish."""
    futures = builds().submit(spec, configs, target)
    by_future = dict(zip(futures, configs))
    for fut in cf.as_completed(by_future):
        try:
            path, seconds = fut.result()
        except RuntimeError as err:
            yield by_future[fut], err, 0.0
            continue
        yield by_future[fut], tvm.runtime.load_module(path), seconds


def build_many(spec: CellSpec, configs: list[Config], target: tvm.target.Target, workers: int | None = None,
               skip_failures: bool = False):
    """Compiled modules of `configs`, in order; compiled `workers` at a time, each in a process
    of its own (build_worker). With `skip_failures`, a config that does not compile gives None
    instead of raising."""
    workers = workers or max(1, min(len(configs), usable_cores() - 1))
    if workers == 1 or len(configs) == 1:
        return [build_kernel(persistent_kernel(spec, c), target) for c in configs]
    done = []
    for fut in Builds(workers).submit(spec, configs, target):
        try:
            done.append(fut.result()[0])
        except RuntimeError:
            if not skip_failures:
                raise
            done.append(None)
    return [tvm.runtime.load_module(p) if p else None for p in done]


def time_kernel(lib, dev, arrays, repeats: int = 5, number: int = 5, cold: bool = False) -> float:
    """Median microseconds of one launch: the device's own timer (CUDA events on a GPU) around
    `number` back-to-back launches, `repeats` times. Host-side clocks would add the launch and
    synchronisation latency, several microseconds of noise on a 50-step kernel. `cold`: one launch
    a timing, after FLUSH_BYTES are copied on the device (the copy is not timed), 3 x `repeats` times."""
    mod = getattr(lib, "mod", lib)  # tvm.compile's Executable or a loaded runtime Module
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    if cold:
        _register_flush(dev)
        timer = mod.time_evaluator("main", dev, number=1, repeat=3 * repeats, f_preproc=_FLUSH)
    else:
        timer = mod.time_evaluator("main", dev, number=number, repeat=repeats)
    return float(timer(*args).median * 1e6)


_flushed_on = []  # the device whose buffers the registered flush copies


def _register_flush(dev) -> None:
    """The global function `time_evaluator` calls before each timing of a cold launch: a device
    copy of FLUSH_BYTES, on the stream the timer's events are recorded on, so it lands before.
    Registered once a device: a tuning run times every candidate with the same two buffers."""
    if _flushed_on == [str(dev)]:
        return
    src, dst = (tvm.runtime.empty((FLUSH_BYTES // 4,), "float32", dev) for _ in range(2))

    def flush(*_kernel_args) -> None:  # returns nothing: the evaluator takes no object back
        src.copyto(dst)

    tvm.register_global_func(_FLUSH, flush, override=True)
    _flushed_on[:] = [str(dev)]


def evicted_by_projection(spec: CellSpec, l2_bytes: int) -> bool:
    """Whether the layer's weights, R and its input GEMM's W at the layer's width, outgrow half of
    an L2 of `l2_bytes` (0: unknown, taken as not), so that R is mostly gone when the kernel starts."""
    D, G, H = spec.num_directions, spec.num_gates, spec.hidden_size
    weights = D * G * H * (H + spec.input_size) * spec.dtype_bytes
    return l2_bytes > 0 and weights > l2_bytes // 2


def timing(spec: CellSpec, dev) -> str:
    """How `measure_configs` times this layer's candidates on `dev`: "cold" or "warm"."""
    return "cold" if evicted_by_projection(spec, getattr(dev, "l2_cache_size_bytes", 0) or 0) else "warm"


@dataclasses.dataclass
class Timed:
    """One candidate as `measure_configs` reports it to its progress callback."""
    config: Config
    us_per_step: float | None  # None: it did not build or the GPU refused to launch it
    build_s: float
    error: str = ""


def measure_configs(spec: CellSpec, configs: list[Config], target, dev, batch: int,
                    seq_len: int = MEASURE_STEPS, progress=None) -> list[tuple[float, Config]]:
    """(microseconds per step, config) for each config that runs, fastest first. Each is timed
    as soon as its build finishes (`built_as_completed`), and `progress` gets a `Timed` for it. A
    candidate that does not build or that the GPU refuses to launch is left out with a warning
    naming it and the error (the others are still worth choosing from); if none runs, the first
    error is raised."""
    cold = timing(spec, dev) == "cold"
    out, errors = [], []
    for cfg, lib, build_s in built_as_completed(spec, configs, target):
        us = None
        try:
            if isinstance(lib, Exception):
                raise lib
            arrays = kernel_arrays(spec, batch, seq_len, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec))
            us = time_kernel(lib, dev, arrays, cold=cold) / seq_len
            out.append((us, cfg))
        except RuntimeError as err:  # a failed build, or TVM's error for a refused launch (tvm.error.InternalError)
            warnings.warn(f"candidate {cfg.as_dict()} failed on {dev} and is left out: {str(err).strip()}")
            errors.append(err)
        if progress is not None:
            progress(Timed(cfg, us, build_s, str(errors[-1]).strip().splitlines()[0] if us is None and errors else ""))
    if not out and errors:
        raise errors[0]
    out.sort(key=lambda x: x[0])
    return out
