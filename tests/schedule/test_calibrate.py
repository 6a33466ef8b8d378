"""`persist-rnn calibrate` on a GPU, with the device and its kernels stood in for: which cluster sizes
it times, and what it keeps when the non-portable 16-CTA cluster does not launch."""
from __future__ import annotations

import types

import pytest

from persist_rnn.schedule import calibrate


def _h100():
    return types.SimpleNamespace(compute_version="9.0", device_name="NVIDIA H100 80GB HBM3",
                                 multi_processor_count=132, max_clock_rate=1980000)


@pytest.mark.parametrize("sixteen_launches", [True, False])
def test_clusters_of_sixteen_are_timed_or_dropped(monkeypatch, sixteen_launches):
    timed = []

    def barrier_costs(dev, target, ctas_list, cluster=False):
        if cluster and 16 in ctas_list and not sixteen_launches:
            raise RuntimeError("CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES\nmore")
        timed.append((cluster, tuple(ctas_list)))
        return {str(c): 0.5 for c in ctas_list}

    def resident_clusters(dev, target, sizes, num_sms):  # as the H100 counts them
        return {str(c): {2: 66, 4: 30, 8: 15, 16: 7}[c] for c in sizes}

    monkeypatch.setattr(calibrate, "present_device", _h100)
    monkeypatch.setattr(calibrate, "barrier_costs", barrier_costs)
    monkeypatch.setattr(calibrate, "resident_clusters", resident_clusters)
    monkeypatch.setattr(calibrate, "WORKLOADS", ())  # no config sweep: only the device facts and barriers
    lines = []
    gpu, rows = calibrate.measure_device(log=lines.append)
    assert rows == [] and (True, (2, 4, 8)) in timed
    if sixteen_launches:
        assert gpu.max_cluster_ctas == 16 and sorted(gpu.cluster_barrier_us, key=int) == ["2", "4", "8", "16"]
        assert gpu.resident_clusters == {"2": 66, "4": 30, "8": 15, "16": 7} and gpu.clusters_at_once(16) == 7
    else:
        assert gpu.max_cluster_ctas == 8 and sorted(gpu.cluster_barrier_us, key=int) == ["2", "4", "8"]
        assert sorted(gpu.resident_clusters, key=int) == ["2", "4", "8"]  # no clusters of 16 counted
        assert any("clusters of 16 CTAs do not launch here (CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES)" in line
                   for line in lines)
