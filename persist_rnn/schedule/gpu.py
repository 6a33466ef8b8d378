"""The GPU the cost model reasons about: SM count, clocks and measured synchronisation costs.

A calibration is a JSON file per architecture (`calibration/<arch>.json`); the shipped H100 one
lets a machine without a GPU still rank configs sensibly. `persist-rnn calibrate` re-measures
and writes to the user's calibration directory, which is read before the shipped files (and
$PERSIST_RNN_CALIBRATION before both).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from importlib import resources

import numpy as np

CALIBRATION_ENV = "PERSIST_RNN_CALIBRATION"  # a directory of <arch>.json overriding the shipped ones


@dataclasses.dataclass(frozen=True)
class GPUModel:
    name: str
    arch: str
    num_sms: int
    clock_ghz: float
    grid_barrier_us: dict  # CTAs -> microseconds per barrier
    weights: dict  # cost-model feature -> cycles per unit (barrier_us: a plain factor)
    max_shared_bytes: int = 48 * 1024  # per CTA, with dynamic shared memory
    provenance: str = ""
    max_cluster_ctas: int = 0  # thread-block clusters of up to this many CTAs (0: none)
    cluster_barrier_us: dict = dataclasses.field(default_factory=dict)  # CTAs -> microseconds
    dsmem_exchange_us: dict = dataclasses.field(default_factory=dict)  # CTAs -> microseconds
    stamped_exchange_us: dict = dataclasses.field(default_factory=dict)  # CTAs -> microseconds
    #: cluster size -> clusters of one CTA an SM resident at once (cudaOccupancyMaxActiveClusters:
    #: a cluster must fit one GPC, so 16-CTA clusters fill 112 of the H100's 132 SMs)
    resident_clusters: dict = dataclasses.field(default_factory=dict)
    #: global memory: L2's size and the bandwidths a kernel reads weights at from L2 and from HBM
    #: (bytes per microsecond; defaults: the H100 SXM's 50 MiB of L2 and 3.35 TB/s of HBM3,
    #: its L2 about twice that). What `Config.global_runs` streams each step costs at these.
    l2_bytes: int = 50 * 2**20
    l2_bytes_per_us: float = 6.5e6
    hbm_bytes_per_us: float = 3.0e6

    def l2_holds(self, streamed_bytes: int) -> bool:
        """Whether weights streamed every step stay in L2 between steps: half of it, as the H100's
        L2 is two partitions and an SM's reads of the far one may keep a copy in its near one."""
        return streamed_bytes <= self.l2_bytes // 2

    def clusters_at_once(self, cluster: int) -> int:
        """Clusters of `cluster` CTAs (one an SM) that run at once: measured; else as many as of the
        next larger measured size (a cluster fits wherever a larger one does, and a GPC holds
        one cluster of 12 no more than one of 16); else num_sms // cluster."""
        measured = {int(k): int(v) for k, v in self.resident_clusters.items()}
        larger = [size for size in measured if size >= cluster]
        if larger:
            return measured[min(larger)]
        return self.num_sms // max(cluster, 1)

    def barrier_us(self, ctas: int, kind: str = "grid") -> float:
        """Cost of a "grid" or "cluster" barrier across `ctas` CTAs, of a "dsmem" exchange of h
        (the stores, and the wait for the peers' bytes, that replace a cluster's barrier), or of
        the wait on "stamped" words that replaces a grid barrier, interpolated (log-scale) between
        measured points. A calibration without dsmem (stamped) points prices the exchange as the
        cluster (grid) barrier."""
        table = {"cluster": self.cluster_barrier_us, "dsmem": self.dsmem_exchange_us or self.cluster_barrier_us,
                 "stamped": self.stamped_exchange_us or self.grid_barrier_us}.get(kind, self.grid_barrier_us)
        pts = sorted((int(k), float(v)) for k, v in table.items())
        xs, ys = [np.log(k) for k, _ in pts], [v for _, v in pts]
        return float(np.interp(np.log(max(ctas, 1)), xs, ys))


def user_calibration_dir() -> str:
    """Where `persist-rnn calibrate` writes by default."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "persist_rnn", "calibration")


def _calibration_text(arch: str) -> str | None:
    for folder in (os.environ.get(CALIBRATION_ENV), user_calibration_dir()):
        if folder and os.path.exists(os.path.join(folder, f"{arch}.json")):
            with open(os.path.join(folder, f"{arch}.json")) as f:
                return f.read()
    res = resources.files(__package__) / "calibration" / f"{arch}.json"
    return res.read_text() if res.is_file() else None


#: shared memory a CTA may take, by compute capability (the CUDA C++ Programming Guide's technical
#: specifications): an architecture without a calibration of its own gets its own limit
MAX_SHARED_BYTES = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 120: 101376}
#: the shipped calibrations, by compute capability
SHIPPED = (80, 90)


def compute_capability(arch: str) -> int:
    """86 of "sm_86", 90 of "sm_90a"."""
    return int("".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit()) or 90)


def gpu_model(arch: str | None) -> GPUModel:
    """The calibration for `arch` ("sm_90", ...), with the SM count of the GPU present where it is
    of that architecture (`on_present_gpu`). An architecture without one takes the closest
    earlier shipped one's, with its own shared memory a CTA where that is less: sm_86 and sm_89
    the A100's with 99 KiB (no thread-block clusters: Hopper brought them), sm_100 the H100's."""
    return on_present_gpu(_calibrated(arch or "sm_90"), arch or "sm_90", present_gpu())


def _calibrated(arch: str) -> GPUModel:
    fields = {f.name for f in dataclasses.fields(GPUModel)}
    text = _calibration_text(arch)
    if text is not None:
        return GPUModel(**{k: v for k, v in json.loads(text).items() if k in fields})
    cc = compute_capability(arch)
    base = f"sm_{max([c for c in SHIPPED if c <= cc] or [SHIPPED[-1]])}"
    model = GPUModel(**{k: v for k, v in json.loads(_calibration_text(base)).items() if k in fields})
    limit = MAX_SHARED_BYTES.get(cc, MAX_SHARED_BYTES.get(cc // 10 * 10, model.max_shared_bytes))
    if limit >= model.max_shared_bytes:  # the same model (and tuning-log key) as the base's
        return model
    return dataclasses.replace(model, name=f"{model.name}, for {arch}", arch=arch, max_shared_bytes=limit)


def present_device():
    """tvm.cuda(0) when a CUDA GPU is present, else None."""
    import tvm

    try:
        dev = tvm.cuda(0)
        return dev if dev.exist else None
    except Exception:  # TVM built without CUDA, or no driver
        return None


@dataclasses.dataclass(frozen=True)
class PresentGPU:
    """What the driver says of the CUDA GPU present."""
    name: str
    arch: str  # "sm_90"
    num_sms: int


@functools.lru_cache(maxsize=1)
def present_gpu() -> PresentGPU | None:
    """The GPU present (tvm.cuda(0)), else None; asked once a process."""
    dev = present_device()
    if dev is None:
        return None
    return PresentGPU(str(dev.device_name), "sm_" + str(dev.compute_version).replace(".", ""), int(dev.multi_processor_count))


def on_present_gpu(model: GPUModel, arch: str, present: PresentGPU | None) -> GPUModel:
    """`model` for `arch` with the SM count of the GPU present, where it is of that architecture and
    its count differs from the calibration's: an H100 PCIe has 114 SMs where the SXM's calibration
    says 132, and a persistent kernel launches up to one CTA an SM, all resident at once. Clusters
    that run at once shrink with the SMs (a cluster keeps to one GPC)."""
    if present is None or present.arch != arch or present.num_sms == model.num_sms:
        return model
    clusters = {k: max(1, int(v) * present.num_sms // model.num_sms) for k, v in model.resident_clusters.items()}
    return dataclasses.replace(model, name=f"{present.name} ({present.num_sms} SMs; the {model.name}'s calibration)",
                               num_sms=present.num_sms, resident_clusters=clusters)
