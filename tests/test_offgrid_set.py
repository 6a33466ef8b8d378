"""`persist-rnn bench --parts offgrid` samples the off-grid set so that, for each cell, every hidden
size, batch and precision of issue 52's list appears, and no layer lands on the reference scan's
cliff (fp32 / TF32 at H=2048), which the part could not time. Measuring it needs the GPU box."""
from __future__ import annotations

from persist_rnn.bench.offgrid import BATCH, HIDDEN, PRECISIONS, offgrid_set, offgrid_summary


def test_every_hidden_batch_and_precision_appears_for_both_cells():
    layers = offgrid_set()
    assert len(layers) == len(set(layers))
    for cell in ("LSTM", "GRU"):
        mine = [layer for layer in layers if layer[0] == cell]
        assert {h for _, h, _, _ in mine} == set(HIDDEN)
        assert {b for _, _, b, _ in mine} == set(BATCH)
        assert {p for _, _, _, p in mine} == set(PRECISIONS)
    assert not [layer for layer in layers if layer[1] >= 2048 and layer[3] in ("fp32", "tf32")]


def test_the_summary_holds_the_floors_numbers():
    rows = [{"best_cudnn_over_ours": 2.0, "best_cudnn_over_measured": 2.0},
            {"best_cudnn_over_ours": 0.5, "best_cudnn_over_measured": 1.25}]
    summary = offgrid_summary(rows)
    assert summary["measure_off_least"] == 0.5 and abs(summary["measure_off_geomean"] - 1.0) < 1e-12
    assert summary["top5_least"] == 1.25 and summary["measure_off_at_1x"] == 1
    assert summary["pick_regret_worst"] == 2.5 and summary["pick_within_1_15"] == 1  # 1.25 / 0.5: the pick 2.5x slower
