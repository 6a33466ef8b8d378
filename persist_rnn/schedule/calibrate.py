"""`persist-rnn calibrate`: measure this GPU once and store what the cost model needs.

A calibration (`gpu.GPUModel`, one JSON file per architecture) holds device facts, the grid
barrier's cost against the number of CTAs, and the cost model's weights. On a GPU:
- the facts come from the driver (name, SM count, clock);
- the barriers are timed with kernels that do nothing but cross them: `prnn_grid_barrier` (the
  persistent kernels' own) at CTA counts up to the SM count, and on Hopper the thread-block
  cluster barrier at 2, 4, 8 and 16 CTAs (16 is past the portable size: a GPU that cannot
  launch it keeps clusters of up to 8);
- on Hopper, how many clusters of each size run at once, one CTA an SM (`resident_clusters`:
  the stack cost model's waves of batch tiles);
- a sample of the pruned config space of a few workloads is compiled and timed (the persistent
  kernel itself), and the weights are fitted to it (`fit.fit_weights`).
Without a GPU, recorded sweeps are fitted instead (`read_sweeps`, `fit_and_write`): the shipped
H100 calibration is reproduced that way from `docs/data/sweep-h100-*.jsonl`.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random

import numpy as np
import tvm
from tvm.script import tirx as T

from tir_templates.config import MAX_CLUSTER, MAX_PORTABLE_CLUSTER
from tir_templates.persistent import GRID_BARRIER
from tir_templates.signature import WORKSPACE_WORDS
from tir_templates.spec import CellSpec

from ..errors import PersistRNNError
from ..targets import as_target
from .cost_model import features, step_us
from .fit import fit_weights, ranking_quality, summary
from .gpu import GPUModel, gpu_model, present_device
from .measure import MEASURE_STEPS, build_kernel, build_many, kernel_arrays, time_kernel
from .space import candidate_configs

#: workloads whose configs are sampled (cell, hidden, batch): GRNN's grid, small and large ends
WORKLOADS = tuple(itertools.product(("lstm", "gru"), (64, 256, 1024), (1, 10, 20)))
BARRIER_STEPS = 2000
BARRIER_THREADS = 256


def barrier_kernel(ctas: int, steps: int = BARRIER_STEPS, cluster: bool = False) -> tvm.tirx.PrimFunc:
    """`steps` barriers across `ctas` CTAs and nothing else: the grid barrier (counter zeroed
    first, as in the persistent kernels), or with `cluster` the CTAs' thread-block cluster barrier."""

    @T.prim_func(private=True)
    def grid_main(ws: T.Buffer((WORKSPACE_WORDS,), "uint32")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        for _zb in T.thread_binding(1, thread="blockIdx.x"):
            for zt in T.thread_binding(WORKSPACE_WORDS, thread="threadIdx.x"):
                ws[zt] = T.uint32(0)
        for _cta in T.thread_binding(ctas, thread="blockIdx.x"):
            for _tx in T.thread_binding(BARRIER_THREADS, thread="threadIdx.x"):
                for k in range(steps):
                    T.tvm_storage_sync("shared")  # as the kernels' step barrier starts
                    T.cuda.func_call("prnn_grid_barrier", T.address_of(ws[0]), T.Cast("uint32", (k + 1) * ctas),
                                     source_code=GRID_BARRIER)

    @T.prim_func(private=True)
    def cluster_main(ws: T.Buffer((WORKSPACE_WORDS,), "uint32")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        for _cta in T.thread_binding(ctas, thread="blockIdx.x"):
            for _rank in T.thread_binding(ctas, thread="clusterCtaIdx.x"):
                for _tx in T.thread_binding(BARRIER_THREADS, thread="threadIdx.x"):
                    for _k in range(steps):
                        T.cuda.cluster_sync()

    return cluster_main if cluster else grid_main


#: how long each cluster of the residency kernel holds its SMs: far longer than the launch takes
#: to start every cluster that fits, so that those all overlap
RESIDENCY_SPIN_NS = 50_000
#: the residency kernel's shared memory a CTA: over half an SM's, so that one CTA holds an SM (as
#: the wavefront's CTAs do, by their registers)
RESIDENCY_SHARED_FLOATS = 30 * 1024

GLOBAL_TIMER = r"""
__device__ __forceinline__ unsigned long long prnn_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
"""


def _now():
    return T.cuda.func_call("prnn_globaltimer", source_code=GLOBAL_TIMER, return_type="uint64")


def residency_kernel(cluster: int, clusters: int, spin_ns: int = RESIDENCY_SPIN_NS) -> tvm.tirx.PrimFunc:
    """`clusters` clusters of `cluster` CTAs, one CTA an SM, each holding its SMs for `spin_ns`
    nanoseconds; CTA rank 0 of each writes when its cluster ran (globaltimer: start, end) to
    `times`. Clusters past those the GPU holds at once start only as others end."""

    @T.prim_func(private=True)
    def main(times: T.Buffer((clusters, 2), "uint64")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        for cta in T.thread_binding(clusters * cluster, thread="blockIdx.x"):
            for _rank in T.thread_binding(cluster, thread="clusterCtaIdx.x"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    pad = T.alloc_buffer((RESIDENCY_SHARED_FLOATS,), "float32", scope="shared.dyn")
                    start = T.alloc_buffer((1,), "uint64", scope="local")
                    for i in range(RESIDENCY_SHARED_FLOATS // 32):  # all of it touched: TVM keeps it whole
                        pad[i * 32 + tx] = T.float32(0)
                    start[0] = _now()
                    while _now() - start[0] < T.uint64(spin_ns):
                        T.evaluate(0)
                    T.cuda.cluster_sync()
                    if cta % cluster == 0 and tx == 0:
                        times[cta // cluster, 0] = start[0]
                        times[cta // cluster, 1] = _now()

    return main


def most_at_once(intervals) -> int:
    """The most of the (start, end) intervals that overlap at one time (an end before a start at
    the same time)."""
    events = sorted([(int(s), 1) for s, _ in intervals] + [(int(e), -1) for _, e in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def resident_clusters(dev, target, sizes, num_sms: int) -> dict:
    """Clusters of each size in `sizes` (one CTA an SM) that the GPU keeps resident at once
    (`GPUModel.resident_clusters`): twice as many as its SMs could hold are launched, and the
    most whose runs overlap are counted. A cluster must fit one GPC, so on the H100 7 clusters of
    16 CTAs run at once, not 132 // 16 = 8."""
    out = {}
    for size in sizes:
        clusters = 2 * (num_sms // size) + 1
        lib = build_kernel(residency_kernel(size, clusters), target)
        times = tvm.runtime.tensor(np.zeros((clusters, 2), "uint64"), dev)
        lib["main"](times)
        dev.sync()
        out[str(size)] = most_at_once(times.numpy())
    return out


def barrier_costs(dev, target, ctas_list, cluster: bool = False) -> dict:
    """Microseconds per barrier at each CTA count of `ctas_list` (one CTA per SM)."""
    out = {}
    for ctas in ctas_list:
        lib = build_kernel(barrier_kernel(ctas, cluster=cluster), target)
        out[str(ctas)] = round(time_kernel(lib, dev, [np.zeros(WORKSPACE_WORDS, "uint32")], repeats=5) / BARRIER_STEPS, 3)
    return out


def sample_configs(spec: CellSpec, gpu: GPUModel, batch: int, limit: int, seed: int = 0):
    """Up to `limit` configs: the current model's best half, and a random spread of the rest (so
    that a badly calibrated model cannot hide the region it ranks poorly)."""
    configs = candidate_configs(spec, gpu, batch)
    if len(configs) <= limit:
        return configs
    ranked = sorted(configs, key=lambda c: step_us(spec, c, gpu, batch))
    rest = ranked[limit // 2:]
    return ranked[:limit // 2] + random.Random(seed).sample(rest, limit - limit // 2)


def sweep_rows(spec: CellSpec, configs, gpu: GPUModel, target, dev, batch: int) -> list[dict]:
    """Compile and time `configs` of one workload: one JSON-able row each (what `fit` reads)."""
    libs = build_many(spec, configs, target, skip_failures=True)
    rows = []
    for cfg, lib in zip(configs, libs):
        if lib is None:
            continue
        arrays = kernel_arrays(spec, batch, MEASURE_STEPS, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec))
        us = time_kernel(lib, dev, arrays) / MEASURE_STEPS
        rows.append({"cell": spec.cell, "hidden": spec.hidden_size, "batch": batch, "config": cfg.as_dict(),
                     "measured_us": us, "model_us": step_us(spec, cfg, gpu, batch),
                     "features": features(spec, cfg, gpu, batch)})
    return rows


def device_arch(dev) -> str:
    """"sm_90" for a device of compute capability 9.0."""
    return "sm_" + str(dev.compute_version).replace(".", "")


def device_model(dev, base: GPUModel) -> GPUModel:
    """`base` with the facts of the present device."""
    hopper_or_later = int(str(dev.compute_version).split(".")[0]) >= 9  # thread-block clusters
    return dataclasses.replace(base, name=str(dev.device_name), arch=device_arch(dev),
                               num_sms=int(dev.multi_processor_count), clock_ghz=float(dev.max_clock_rate) / 1e6,
                               max_cluster_ctas=MAX_CLUSTER if hopper_or_later else 0)


def measure_device(configs_per_workload: int = 40, log=print, sweep_out: str | None = None) -> tuple[GPUModel, list]:
    """Device facts, barrier costs and a config sweep of the present GPU: (model, sweep rows)."""
    dev = present_device()
    if dev is None:
        raise PersistRNNError("calibrate needs a CUDA GPU to measure; without one, pass recorded sweeps "
                              "(persist-rnn calibrate SWEEP.jsonl ...) to fit them")
    gpu = device_model(dev, gpu_model(device_arch(dev)))
    target = as_target({"kind": "cuda", "arch": gpu.arch})
    n = gpu.num_sms
    clusters = [c for c in (2, 4, 8) if c <= gpu.max_cluster_ctas]
    cluster_us = barrier_costs(dev, target, clusters, cluster=True)
    if gpu.max_cluster_ctas > MAX_PORTABLE_CLUSTER:
        try:
            cluster_us.update(barrier_costs(dev, target, [gpu.max_cluster_ctas], cluster=True))
        except RuntimeError as err:  # a refused launch (tvm.error.InternalError): the space stops at 8
            log(f"clusters of {gpu.max_cluster_ctas} CTAs do not launch here ({str(err).splitlines()[0]}); "
                f"clusters stay at {MAX_PORTABLE_CLUSTER} CTAs")
            gpu = dataclasses.replace(gpu, max_cluster_ctas=MAX_PORTABLE_CLUSTER)
    sizes = [c for c in (2, 4, 8, MAX_CLUSTER) if c <= gpu.max_cluster_ctas]
    gpu = dataclasses.replace(gpu, grid_barrier_us=barrier_costs(dev, target, sorted({1, min(8, n), min(32, n), n})),
                              cluster_barrier_us=cluster_us,
                              resident_clusters=resident_clusters(dev, target, sizes, n) if sizes else {})
    log(f"{gpu.name} ({gpu.arch}, {n} SMs, {gpu.clock_ghz:.2f} GHz): grid barrier "
        + ", ".join(f"{k} CTAs {v} us" for k, v in gpu.grid_barrier_us.items())
        + "; cluster barrier " + (", ".join(f"{k} CTAs {v} us" for k, v in gpu.cluster_barrier_us.items()) or "none")
        + "; resident at once " + (", ".join(f"{v} clusters of {k}" for k, v in gpu.resident_clusters.items()) or "none"))
    rows = []
    for cell, hidden, batch in WORKLOADS:
        spec = CellSpec(cell, hidden, hidden, linear_before_reset=(cell == "gru"))
        got = sweep_rows(spec, sample_configs(spec, gpu, batch, configs_per_workload), gpu, target, dev, batch)
        log(f"  {cell} H={hidden} B={batch}: {len(got)} configs timed")
        rows += got
        if sweep_out:
            with open(sweep_out, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in got)
    return gpu, rows


def read_sweeps(paths) -> list[dict]:
    rows = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    rows.append({k: row[k] for k in ("cell", "hidden", "batch", "config", "measured_us")})
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise PersistRNNError(f"{path}:{n}: not a sweep row ({err})") from None
    if not rows:
        raise PersistRNNError("the sweeps hold no rows")
    return rows


def fit_and_write(gpu: GPUModel, rows: list, out_dir: str, provenance: str) -> tuple[str, str]:
    """Fit the weights to `rows`, write `<out_dir>/<arch>.json`: (path, ranking summary)."""
    fitted = dataclasses.replace(gpu, weights=fit_weights(rows, gpu),
                                 provenance=f"{provenance}; weights fitted to {len(rows)} measured configs")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{fitted.arch}.json")
    with open(path, "w") as f:
        json.dump(dataclasses.asdict(fitted), f, indent=1)
    return path, summary(ranking_quality(rows, fitted))
