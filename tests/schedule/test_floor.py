"""The physical floor (schedule/floor.py) is a floor: no time measured on the H100, ours or
cuDNN's at the same precision, lies below it."""
from __future__ import annotations

import json
import pathlib

import pytest

from persist_rnn.schedule.floor import floor_ms
from persist_rnn.schedule.gpu import gpu_model
from tir_templates.spec import CellSpec

DATA = pathlib.Path(__file__).parents[2] / "docs" / "data"
H100 = gpu_model("sm_90")


def _spec(row):
    return CellSpec(row["cell"].lower(), row["hidden"], row["hidden"], linear_before_reset=True)


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


@pytest.mark.parametrize("row,precision,ms", list(_measured()), ids=lambda v: f"{v['cell']}{v['hidden']}B{v['batch']}"
                         if isinstance(v, dict) else str(v))
def test_no_measured_layer_beats_its_floor(row, precision, ms):
    floor = floor_ms(_spec(row), row["batch"], row["seq_len"], H100, precision)
    assert floor["floor_ms"] <= ms
    assert floor["floor_ms"] * 1e3 == pytest.approx(100 * floor["floor_step_us"] + floor["floor_gemm_us"])


def test_floor_parts_follow_the_layer():
    """One SM holds H=64's weights (no barrier); H=1024's need a grid of them (a barrier and an
    L2 exchange); fp16 halves the weights' bytes and the tensor cores' time."""
    small = floor_ms(CellSpec("lstm", 64, 64), 1, 100, H100)
    big = floor_ms(CellSpec("lstm", 1024, 1024), 20, 100, H100)
    assert small["floor_barrier_us"] == 0 and small["floor_exchange_us"] == 0
    assert big["floor_barrier_us"] > 0.5 and big["floor_exchange_us"] > 0
    half = floor_ms(CellSpec("lstm", 1024, 1024, dtype="float16"), 20, 100, H100, "fp16")
    assert half["floor_gemm_us"] == pytest.approx(floor_ms(CellSpec("lstm", 1024, 1024), 20, 100, H100, "tf32")["floor_gemm_us"] / 2)
