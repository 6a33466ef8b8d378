"""The tuner on the GPU (marked gpu): a layer whose weights outgrow half of L2 has its candidates
timed cold, L2 flushed before each launch, and its record says so (schedule/measure.py)."""
from __future__ import annotations

import pytest
import tvm

from persist_rnn.schedule import tuning_log
from persist_rnn.schedule.measure import MEASURE_STEPS, build_many, kernel_arrays, time_kernel, timing
from persist_rnn.schedule.planner import plan_layer
from tir_templates.config import Config
from tir_templates.spec import CellSpec

pytestmark = pytest.mark.gpu


def test_a_layer_past_half_of_l2_is_timed_cold_and_recorded_so(tmp_path):
    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    spec = CellSpec("lstm", 1024, 1024)  # 32 MB of R and W: past half of an H100's or H200's L2
    assert timing(spec, dev) == "cold" and timing(CellSpec("lstm", 256, 256), dev) == "warm"
    cfg = Config(8, 32, 2, 1, stamped=True)
    lib, = build_many(spec, [cfg], target)
    arrays = kernel_arrays(spec, 1, MEASURE_STEPS, slots=cfg.exchange_slots(spec))
    warm, cold = time_kernel(lib, dev, arrays), time_kernel(lib, dev, arrays, cold=True)
    print(f"warm {warm:.1f} us, cold {cold:.1f} us")
    assert cold > 1.1 * warm  # R from HBM after the flush (H100: ~94 against ~70 us)
    log = str(tmp_path / "tune.jsonl")
    plan = plan_layer(spec, target, batch=1, tuning_log_path=log, measure=True, top_k=2)
    rec, = tuning_log.read(log)
    assert (rec.source, rec.timing, rec.config) == ("measured", "cold", plan.config)


def test_calibrate_counts_the_clusters_resident_at_once():
    """`persist-rnn calibrate`'s count of clusters that run at once (one CTA an SM), which the
    stack cost model's waves of batch tiles read: on an H100 what cudaOccupancyMaxActiveClusters
    said (benchmarks/resident_clusters.cu: the shipped sm_90 calibration), on any GPU at most its
    SMs' share and at least one."""
    from persist_rnn.schedule.calibrate import resident_clusters
    from persist_rnn.schedule.gpu import gpu_model

    dev, target = tvm.cuda(0), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    n = dev.multi_processor_count
    got = resident_clusters(dev, target, [2, 4, 8, 16], n)
    print(dev.device_name, got)
    assert all(1 <= v <= n // int(k) for k, v in got.items())
    if "H100" in dev.device_name and n == 132:
        assert got == gpu_model("sm_90").resident_clusters
