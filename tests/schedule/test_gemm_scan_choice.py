"""When the planner gives a layer the GEMM scan (a tensor-core GEMM and an update a step): only
where no config holds its weights on chip, its batch is known, and its step is priced shorter than
the streamed scan's and, by STREAMING_MARGINS (fp32 layers), than the best persistent config's;
the step GEMM's tiles fill one wave where the batch fills their rows; the pass then builds it with
the exchange buffer it needs, and the report names it and says why."""
from __future__ import annotations

import json
import pathlib
import shutil

import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, cuda_source, make_model
from persist_rnn.schedule.gemm_scan_cost import (WGMMA_STEP_US, WGMMA_TILE, gemm_scan_us, ring_depth,
                                                 step_launched_early, step_plan, step_tile, wgmma_ctas_per_sm,
                                                 wgmma_plans, wgmma_scan_us, wgmma_step)
from persist_rnn.schedule.gpu import MAX_SHARED_BYTES, gpu_model
from persist_rnn.schedule.planner import STREAMING_MARGINS, gemm_scan_note, plan_layer
from persist_rnn.schedule.streamed_cost import streamed_scan_us
from persist_rnn.schedule.wgmma_step_fit import fit_prices, judge, timed_plans
from tir_templates.config import Config
from tir_templates.gemm_scan import GEMM_SCAN
from tir_templates.projection_wgmma import SM90_SHARED_BYTES, wgmma_shared_bytes
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
HOPPER = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
DATA = pathlib.Path(__file__).resolve().parents[2] / "docs" / "data"


def test_a_layer_past_the_chip_at_a_large_batch_gets_the_gemm_scan():
    """LSTM H=1280 B=128 fp32: its best persistent config reads 5 runs of weights from global
    memory (89 us a step on the H200), the scan ran 65 (docs/data/gemm-scan-h200.jsonl)."""
    plan = plan_layer(CellSpec("lstm", 1280, 1280), CUDA, batch=128, measure=False)
    assert plan.kernel is None and plan.lowering == GEMM_SCAN
    assert "tensor-core GEMM" in plan.reason and "global memory" in plan.reason


@pytest.mark.parametrize("spec,batch", [
    (CellSpec("gru", 1280, 1280, linear_before_reset=True), 128),  # weights on chip (tensor cores)
    (CellSpec("lstm", 2048, 2048, dtype="float16"), 16),  # on chip; the scan ran 0.75x the persistent kernel
    (CellSpec("lstm", 4096, 4096), 16),  # streaming, but not by the margin: it ran 146 us, the scan 166
    (CellSpec("gru", 4096, 4096, linear_before_reset=True), 16),  # ... 107 us, the scan 151
    (CellSpec("lstm", 2048, 2048), 1),  # one row: the persistent kernel
], ids=str)
def test_other_layers_keep_their_lowering(spec, batch):
    plan = plan_layer(spec, CUDA, batch=batch, measure=False)
    assert plan.lowering == "" and plan.kernel is not None, plan.reason


def test_a_two_phase_gru_that_no_config_fits_keeps_the_streamed_scan():
    """GRU with linear_before_reset=0 needs two GEMMs a step, which the scan does not run."""
    plan = plan_layer(CellSpec("gru", 2048, 2048, linear_before_reset=False), CUDA, batch=128, measure=False)
    assert plan.kernel is None and plan.lowering == "" and "no persistent config fits" in plan.reason


def test_a_batch_known_only_at_run_time_never_gets_the_gemm_scan():
    plan = plan_layer(CellSpec("lstm", 1280, 1280), CUDA, batch=None, measure=False)
    assert plan.lowering == "" and plan.kernel is not None and plan.buckets


def test_a_16_bit_layer_streaming_fp32_weights_gets_the_scan_where_it_is_priced_shorter():
    """bf16 LSTM H=4096 B=16: its FMA-unit config streaming fp32 weights ran 144.9 us a step (priced
    135.8), the scan 94.0 (priced 129): 16-bit layers take the scan where it is priced shorter, or
    up to 1.1x longer (its streamed-fragments configs, priced shorter still, now take it on sm_90:
    52.2 us a step)."""
    spec = CellSpec("lstm", 4096, 4096, dtype="bfloat16")
    streaming = Config(32, 16, 8, 8, smem_runs=3, global_runs=59)
    note = gemm_scan_note(spec, (135.8, streaming), 16, H100, "fp32")
    assert note and "by 1." not in note and "or within 1.10x of it" in note


@pytest.mark.parametrize("cell,hidden,batch,direction,lowering", [
    ("gru", 3072, 16, "forward", GEMM_SCAN),  # priced 1.02x its config's; ran 32.4 us a step against 42.2
    ("lstm", 3584, 2, "bidirectional", GEMM_SCAN),  # 1.09x; ran 71.8 against 125.3
    ("lstm", 3072, 32, "forward", ""),  # 1.11x; the config ran 30.7, the scan 33.6
], ids=str)
def test_a_16_bit_scan_on_wgmma_wins_within_the_margin(cell, hidden, batch, direction, lowering):
    """Built for sm_90a, 16-bit layers whose streaming configs are priced near the wgmma scan (kernels
    alone on the H200: docs/data/gemm-scan-h200.jsonl runs S and U, streamed-fragments-h200.jsonl run D)."""
    spec = CellSpec(cell, hidden, hidden, direction, dtype="float16", linear_before_reset=cell == "gru")
    plan = plan_layer(spec, HOPPER, batch=batch, measure=False)
    assert plan.lowering == lowering, plan.reason


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_margin_against_a_streaming_config(dtype):
    spec, batch = CellSpec("lstm", 1280, 1280, dtype=dtype), 128
    margin = STREAMING_MARGINS[dtype]
    streaming = Config(10, 16, 2, 32, smem_runs=6, global_runs=5)
    gemm = gemm_scan_us(spec, batch, H100.num_sms)
    assert gemm < streamed_scan_us(spec, batch)
    assert gemm_scan_note(spec, (gemm / margin * 1.01, streaming), batch, H100, "fp32")
    assert not gemm_scan_note(spec, (gemm / margin * 0.99, streaming), batch, H100, "fp32")
    on_chip = Config(10, 32, 16, 32, mma_k_split=8)
    assert not gemm_scan_note(spec, (10 * gemm, on_chip), batch, H100, "fp32")  # on chip: never weighed
    assert gemm_scan_note(spec, None, batch, H100, "fp32")  # no config fits: against the streamed scan


def test_a_layer_that_no_config_fits_gets_the_gemm_scan_over_the_streamed_scan():
    """LSTM H=2048 B=128 fp32: no persistent config fits (it went to the streamed scan, priced at
    740 us a step)."""
    plan = plan_layer(CellSpec("lstm", 2048, 2048), CUDA, batch=128, measure=False)
    assert plan.kernel is None and plan.lowering == GEMM_SCAN
    assert "streamed scan's" in plan.reason and "no persistent config fits" in plan.reason


def test_the_step_price_follows_the_waves_of_tiles():
    """Past one wave of 64 x 64 tiles (LSTM H=1280 B=128: 160 tiles on 132 SMs) wider tiles fill one
    (64 x 80: 50.4 against 65.1 us a step); with the rows part empty the tiles stay 64 x 64, and
    their second wave doubles the GEMM."""
    lstm = CellSpec("lstm", 1280, 1280)
    one, wide = gemm_scan_us(lstm, 64, H100.num_sms), gemm_scan_us(lstm, 128, H100.num_sms)
    assert 1.2 < wide / one < 1.4
    big = CellSpec("lstm", 4096, 4096)  # 256 tiles of 64 x 64 at B=16: two waves on 132 SMs, one on 264
    assert 1.8 < gemm_scan_us(big, 16, H100.num_sms) / gemm_scan_us(big, 16, 2 * H100.num_sms) < 2.0
    assert gemm_scan_us(lstm, 64, H100.num_sms, "tf32") < one
    assert gemm_scan_us(CellSpec("lstm", 1280, 1280, "bidirectional"), 64, H100.num_sms) > 1.8 * one


@pytest.mark.parametrize("cell,hidden,batch,tile", [
    ("lstm", 1280, 128, "64x80"),  # 160 tiles of 64 x 64, 128 of 64 x 80 (run E: 50.4 against 65.1 us)
    ("gru", 2048, 128, "64x96"),  # 192 -> 128 (73.3 against 98.8)
    ("lstm", 2048, 128, "64x128"),  # 256 -> 128 (93.6 against 100.4)
    ("lstm", 1280, 64, "64x64"),  # one wave already (37.3 against 48.3 in 64 x 80)
    ("lstm", 4096, 16, "64x64"),  # rows part empty
])
def test_the_step_gemm_takes_the_tiles_that_fill_one_wave(cell, hidden, batch, tile):
    """... and the scan's kernels are launched early where they are wider (1.03-1.06x faster so;
    in 64 x 64 tiles 0.59-0.95x: gemm_scan_cost.step_launched_early)."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    assert step_tile(spec, batch, H100.num_sms) == tile
    plan = step_plan(spec, batch, H100.num_sms)
    assert plan.get("tile", "64x64") == tile
    assert step_launched_early(plan) == (tile != "64x64")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_pass_builds_it_with_its_exchange_buffer_and_the_report_says_why():
    case = LayerCase(op="LSTM", seq_len=3, batch=128, input_size=16, hidden_size=1280)
    model, _ = make_model(case)
    built = persist_rnn.compile(model, "cuda", tuning_log=None, measure=False)
    (layer,) = built.report()
    assert layer.lowering == GEMM_SCAN and not layer.config
    # its kernels launched early, each placed while the one before finishes
    assert layer.early_launch and "gemm_scan, early launch (a tensor-core GEMM and an update a step" in layer.line()
    # the step GEMM in 64 x 80 tiles, the shared rows of w_t 80 + 8 words apart (64 x 64: 72)
    assert "* 88)" in cuda_source(built.executable)


def test_a_tune_builds_no_persistent_candidates_for_a_layer_the_gemm_scan_takes(monkeypatch):
    """`choose` decides the scan before measuring, so the background builds would be wasted."""
    from persist_rnn.schedule import planner

    submitted = []

    class Builds:  # records what would be built, builds nothing
        def submit(self, spec, configs, target):
            submitted.append(configs)
            return configs

    monkeypatch.setattr(planner, "builds", lambda: Builds())
    assert planner.prefetch_builds(CellSpec("lstm", 1280, 1280), CUDA, (128,)) == 0 and not submitted
    assert planner.prefetch_builds(CellSpec("lstm", 1280, 1280), CUDA, (64,)) > 0  # on chip at B=64


def test_a_build_for_sm_90a_runs_a_16_bit_scans_step_on_wgmma():
    """bf16 LSTM H=4096 B=16: the scan either way, its step priced as the wgmma step where the build
    may use wgmma (kernels alone on the H200: 47.1 us against 94.7 on mma.sync, run S of
    docs/data/gemm-scan-h200.jsonl); fp32 layers and builds for sm_90 keep the mma.sync step."""
    spec = CellSpec("lstm", 4096, 4096, dtype="bfloat16")
    step = wgmma_step(spec, 16, H100.num_sms, True)
    assert step == dict(WGMMA_TILE, splits=1, stages=9) and wgmma_step(spec, 16, H100.num_sms, False) is None
    assert wgmma_step(CellSpec("lstm", 4096, 4096), 16, H100.num_sms, True) is None  # fp32
    hopper = plan_layer(spec, HOPPER, batch=16, measure=False)
    assert hopper.lowering == GEMM_SCAN and "wgmma" in hopper.reason and hopper.wgmma == step  # what the pass builds
    assert f"({wgmma_scan_us(spec, 16, step, H100.num_sms):.1f} us predicted)" in hopper.reason
    assert gemm_scan_us(spec, 16, H100.num_sms, sm90a=True) < gemm_scan_us(spec, 16, H100.num_sms)
    # on sm_90 the mma.sync step's scan is priced past the streamed-fragments configs (kernels alone
    # on the H200: 95.3 against 52.2 us a step, docs/data/streamed-fragments-h200.jsonl)
    sm90 = plan_layer(spec, CUDA, batch=16, measure=False)
    assert sm90.lowering != GEMM_SCAN and sm90.wgmma is None and sm90.config.global_runs
    assert gemm_scan_note(spec, None, 16, H100, "fp32") and "wgmma" not in gemm_scan_note(spec, None, 16, H100, "fp32")


def test_the_wgmma_step_splits_k_as_many_ways_as_prices_least():
    """Kernels alone on the H200 (docs/data/gemm-scan-h200.jsonl, run S): fp16 LSTM H=2048 B=16, 64
    CTAs unsplit, ran two splits 1.16x faster (19.3 against 22.4 us a step), fp16 GRU H=1536 B=32
    three 1.29x (12.9 against 16.6); bf16 LSTM H=4096 B=16, whose 128 CTAs nearly fill the SMs,
    ran fastest unsplit (47.1). A k-tile count that two does not divide takes a split that does
    (fp16 LSTM H=1344: 21 k-tiles), each in a ring as deep as its k-tiles or shared memory allow."""
    def splits(cell, hidden, batch, dtype="float16"):
        spec = CellSpec(cell, hidden, hidden, dtype=dtype, linear_before_reset=cell == "gru")
        step = wgmma_step(spec, batch, H100.num_sms, True)
        priced = {plan["splits"]: wgmma_scan_us(spec, batch, plan, H100.num_sms) for plan in wgmma_plans(spec)}
        assert priced[step["splits"]] == min(priced.values()) and step["bm"] == 64
        return step["splits"]

    assert splits("lstm", 2048, 16) == 2
    assert splits("gru", 1536, 32) == 3
    assert splits("lstm", 4096, 16, "bfloat16") == 1
    assert 21 % splits("lstm", 1344, 16) == 0
    plans = wgmma_plans(CellSpec("lstm", 1344, 1344, dtype="float16"))
    assert [(plan["splits"], plan["stages"]) for plan in plans] == [(1, 9), (3, 8), (7, 4)]


def test_the_wgmma_steps_rings_fit_the_shared_memory_and_hold_no_idle_slot():
    """A split of 4 k-tiles takes a ring of 5 (each k-tile in flight, one slot spare for the next
    copy's wait); past 8 k-tiles the ring is 9 deep, all an sm_90 CTA's shared memory holds."""
    assert SM90_SHARED_BYTES == MAX_SHARED_BYTES[90]  # the template's bound is the planner's
    spec = CellSpec("lstm", 1024, 1024, dtype="float16")
    assert ring_depth(spec, 4) == 5 and ring_depth(spec, 1) == 9
    for plan in wgmma_plans(CellSpec("gru", 4096, 4096, dtype="bfloat16", linear_before_reset=1)):
        assert wgmma_shared_bytes(plan["stages"], plan["tile_n"], plan["bm"]) <= MAX_SHARED_BYTES[90]
        assert wgmma_ctas_per_sm(plan) == 1


def test_the_wgmma_steps_prices_are_the_fit_of_run_s_and_pick_well_on_run_t():
    """The shipped prices are what `wgmma_step_fit` fits on run S, and on run T's layers, which that
    fit never saw, the split they price least runs within 1.03x of the fastest (geomean)."""
    rows = [json.loads(line) for line in open(DATA / "gemm-scan-h200.jsonl")]
    fit_rows = timed_plans([r for r in rows if r.get("run") == "S"], H100.num_sms)
    held_rows = timed_plans([r for r in rows if r.get("run") == "T"], H100.num_sms)
    fitted = fit_prices(fit_rows)
    assert fitted == pytest.approx(WGMMA_STEP_US, rel=0.005)
    held = judge(held_rows, WGMMA_STEP_US)
    assert held["layers"] == 17 and held["regret_geomean"] <= 1.03 and held["median_error"] <= 0.05
    assert held["regret_geomean"] < held["never_split_geomean"] < held["two_splits_geomean"]


def test_a_16_bit_scan_the_wgmma_step_cannot_take_says_why():
    """fp16 LSTM H=4092: rows of h(t-1) in whole 16-byte copies need H a multiple of 8, so its step
    stays on mma.sync, and the report says so."""
    plan = plan_layer(CellSpec("lstm", 4092, 4092, dtype="float16"), HOPPER, batch=16, measure=False)
    assert plan.lowering == GEMM_SCAN
    assert "(the GEMM on mma.sync: hidden_size 4092 is not a multiple of 8" in plan.reason


def test_the_pass_builds_the_wgmma_step_for_sm_90a():
    """fp16 LSTM H=2560 B=64: its persistent configs stream weights from global memory; priced on
    the wgmma step, the scan is shorter, and the pass builds it with that step's exchange buffer
    (h, each split's gates, h(t-1) and R in 16-bit pairs)."""
    case = LayerCase(op="LSTM", seq_len=3, batch=64, input_size=16, hidden_size=2560, dtype="float16")
    model, _ = make_model(case)
    built = persist_rnn.compile(model, HOPPER, tuning_log=None, measure=False)
    (layer,) = built.report()
    assert layer.lowering == GEMM_SCAN and "wgmma" in layer.line(), layer.line()
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in cuda_source(built.executable)


def test_a_symbolic_batchs_buckets_do_not_price_the_wgmma_step():
    """No GEMM scan serves a bucket of a symbolic batch (it needs the batch at build time); priced on
    wgmma the scan would win the B=64 bucket of fp16 LSTM H=2560 and leave it to a neighbour's
    config, untimed. Their configs are those of a build for sm_90, whose scan is priced on mma.sync."""
    spec = CellSpec("lstm", 2560, 2560, dtype="float16")
    assert plan_layer(spec, HOPPER, batch=64, measure=False).lowering == GEMM_SCAN  # a static batch: the scan
    hopper = plan_layer(spec, HOPPER, batch=None, measure=False)
    sm90 = plan_layer(spec, CUDA, batch=None, measure=False)
    assert hopper.kernel is not None and hopper.buckets == sm90.buckets
    assert len({json.dumps(row["config"], sort_keys=True) for row in hopper.buckets}) > 1  # buckets of their own
