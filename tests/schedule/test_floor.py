"""The physical floor (schedule/floor.py) is a floor: no time measured on the H100, ours or
cuDNN's at the same precision, lies below it."""
from __future__ import annotations

import json
import pathlib

import pytest

from persist_rnn.bench.torch_layers import PRECISIONS
from persist_rnn.schedule.floor import MEASURED_SYNC_US, floor_ms, least_sync_us
from persist_rnn.schedule.gpu import gpu_model
from tir_templates.spec import CellSpec

DATA = pathlib.Path(__file__).parents[2] / "docs" / "data"
H100 = gpu_model("sm_90")


def _spec(row, precision="fp32"):
    return CellSpec(row["cell"].lower(), row["hidden"], row["hidden"], linear_before_reset=True,
                    dtype=PRECISIONS[precision][1])  # the model's dtype at `precision`


def _measured():
    """(layer row, precision, ms) of every whole-layer time measured on the H100 at T=100."""
    for row in map(json.loads, (DATA / "tf32-h100.jsonl").read_text().splitlines()):
        yield row, "fp32", row["fp32_ms"]
        yield row, "fp32", row["cudnn_fp32_graph_ms"]
        yield row, "tf32", row["tf32_ms"]
        yield row, "tf32", row["cudnn_tf32_best_ms"]
    for row in map(json.loads, (DATA / "batch1-h100.jsonl").read_text().splitlines()):
        for key in ("tuned_ms", "dsmem_ms", "retuned_ms", "cudnn_best_ms"):
            if key in row:
                yield row, "fp32", row[key]
    for path in sorted(DATA.glob("*-h100.jsonl")):  # `bench --precision` and `benchmarks/offgrid_picks.py` rows
        for row in (json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")):
            if row.get("part") in ("precision", "offgrid_pick") and row.get("seq_len") == 100:
                yield row, row["precision"], row["ours_ms"]
                yield row, row["precision"], row["best_cudnn_ms"]


@pytest.mark.parametrize("row,precision,ms", list(_measured()), ids=lambda v: f"{v['cell']}{v['hidden']}B{v['batch']}"
                         if isinstance(v, dict) else str(v))
def test_no_measured_layer_beats_its_floor(row, precision, ms):
    floor = floor_ms(_spec(row, precision), row["batch"], row["seq_len"], H100, precision)
    assert floor["floor_ms"] <= ms
    assert floor["floor_ms"] * 1e3 == pytest.approx(100 * floor["floor_step_us"] + floor["floor_gemm_us"])


def test_the_floor_waits_as_the_cheapest_measured_step():
    """A step's wait is the least of the calibrated barrier and what a step was measured to
    spend: our H=256 dsmem layers (~0.16 µs a step for the exchange) ran under a floor that took
    the cluster barrier (0.71 µs)."""
    mid = floor_ms(CellSpec("gru", 256, 256, linear_before_reset=True), 1, 100, H100)
    assert mid["floor_barrier_us"] == pytest.approx(MEASURED_SYNC_US["sm_90"]["cluster"])
    assert mid["floor_barrier_us"] < H100.barrier_us(16, "cluster")
    a100 = gpu_model("sm_80")  # nothing measured there: the calibration's cheapest
    assert least_sync_us(a100, "sm_80", 32, "grid", "stamped") == min(a100.barrier_us(32, "grid"),
                                                                       a100.barrier_us(32, "stamped"))


def test_floor_parts_follow_the_layer():
    """One SM holds H=64's weights (no barrier); H=1024's need a grid of them (a barrier and an
    L2 exchange); fp16 halves the weights' bytes and the tensor cores' time."""
    small = floor_ms(CellSpec("lstm", 64, 64), 1, 100, H100)
    big = floor_ms(CellSpec("lstm", 1024, 1024), 20, 100, H100)
    assert small["floor_barrier_us"] == 0 and small["floor_exchange_us"] == 0
    assert 0 < big["floor_barrier_us"] <= H100.barrier_us(132, "grid") and big["floor_exchange_us"] > 0
    half = floor_ms(CellSpec("lstm", 1024, 1024, dtype="float16"), 20, 100, H100, "fp16")
    assert half["floor_gemm_us"] == pytest.approx(floor_ms(CellSpec("lstm", 1024, 1024), 20, 100, H100, "tf32")["floor_gemm_us"] / 2)
