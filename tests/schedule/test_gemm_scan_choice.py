"""When the planner gives a layer the GEMM scan (a tensor-core GEMM and an update a step): only
where no config holds its weights on chip, its batch is known, and its step is priced shorter than
the streamed scan's and, by STREAMING_MARGIN, than the best persistent config's; the pass then
builds it with the exchange buffer it needs, and the report names it and says why."""
from __future__ import annotations

import shutil

import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model
from persist_rnn.schedule.gemm_scan_cost import gemm_scan_us
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import STREAMING_MARGIN, gemm_scan_note, plan_layer
from persist_rnn.schedule.streamed_cost import streamed_scan_us
from tir_templates.config import Config
from tir_templates.gemm_scan import GEMM_SCAN
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def test_a_layer_past_the_chip_at_a_large_batch_gets_the_gemm_scan():
    """LSTM H=1280 B=128 fp32: its best persistent config reads 5 runs of weights from global
    memory (89 us a step on the H200), the scan ran 65 (docs/data/gemm-scan-h200.jsonl)."""
    plan = plan_layer(CellSpec("lstm", 1280, 1280), CUDA, batch=128, measure=False)
    assert plan.kernel is None and plan.lowering == GEMM_SCAN
    assert "tensor-core GEMM" in plan.reason and "global memory" in plan.reason


@pytest.mark.parametrize("spec,batch", [
    (CellSpec("gru", 1280, 1280, linear_before_reset=True), 128),  # weights on chip (tensor cores)
    (CellSpec("lstm", 2048, 2048, dtype="float16"), 16),  # on chip; the scan ran 0.75x the persistent kernel
    (CellSpec("lstm", 4096, 4096), 16),  # streaming, but not by the margin: it ran 143 us, the scan 180
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


def test_the_margin_against_a_streaming_config():
    spec, batch = CellSpec("lstm", 1280, 1280), 128
    streaming = Config(10, 16, 2, 32, smem_runs=6, global_runs=5)
    gemm = gemm_scan_us(spec, batch, H100.num_sms)
    assert gemm < streamed_scan_us(spec, batch)
    assert gemm_scan_note(spec, (gemm / STREAMING_MARGIN * 1.01, streaming), batch, H100, "fp32")
    assert not gemm_scan_note(spec, (gemm / STREAMING_MARGIN * 0.99, streaming), batch, H100, "fp32")
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
    """Past one wave of 64 x 64 tiles (LSTM H=1280 B=128: 160 tiles on 132 SMs) a step takes two."""
    lstm = CellSpec("lstm", 1280, 1280)
    one, two = gemm_scan_us(lstm, 64, H100.num_sms), gemm_scan_us(lstm, 128, H100.num_sms)
    assert 1.6 < two / one < 2.0
    assert gemm_scan_us(lstm, 64, H100.num_sms, "tf32") < one
    assert gemm_scan_us(CellSpec("lstm", 1280, 1280, "bidirectional"), 64, H100.num_sms) > 1.8 * one


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_pass_builds_it_with_its_exchange_buffer_and_the_report_says_why():
    case = LayerCase(op="LSTM", seq_len=3, batch=128, input_size=16, hidden_size=1280)
    model, _ = make_model(case)
    built = persist_rnn.compile(model, "cuda", tuning_log=None, measure=False)
    (layer,) = built.report()
    assert layer.lowering == GEMM_SCAN and not layer.config
    assert "gemm_scan (a tensor-core GEMM and an update a step" in layer.line()


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
