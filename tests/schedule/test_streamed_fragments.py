"""16-bit layers past the chip: tensor-core configs that read their last k-tiles' A fragments each
step (`space.streamed_fragments_variant`), and where the planner takes them."""
from __future__ import annotations

import dataclasses

import pytest
import tvm

from persist_rnn.schedule.cost_model import overlapped_step_us, step_us, streamed_weights_us
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import plan_layer
from persist_rnn.schedule.space import (STREAMED_MIN_SPLITS, fragment_registers, problems_on,
                                        streamed_fragments_variant)
from tir_templates.config import Config, register_cap_of
from tir_templates.gemm_scan import GEMM_SCAN
from tir_templates.signature import WORKSPACE_WORDS
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
HOPPER = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
LSTM_2560 = CellSpec("lstm", 2560, 2560, dtype="float16")  # 50 MiB of weights: past registers and shared memory


def test_the_variant_fills_shared_memory_and_streams_the_fewest_k_tiles_that_fit_the_registers():
    cfg = Config(20, 32, 16, 16, "float16", mma_k_split=2)  # 80 k-tiles a warp
    fit = streamed_fragments_variant(LSTM_2560, cfg, H100)
    assert fit is not None and fit.smem_runs and fit.global_runs and not problems_on(LSTM_2560, fit, H100)
    assert fit.weight_regs(LSTM_2560) == 4 * (80 - fit.smem_runs - fit.global_runs)
    assert fragment_registers(LSTM_2560, fit) <= register_cap_of(fit.threads(LSTM_2560))  # what ptxas gives
    fewer = dataclasses.replace(fit, smem_runs=fit.smem_runs + 1, global_runs=fit.global_runs - 1)
    more_shared = dataclasses.replace(fit, smem_runs=fit.smem_runs + 1)
    assert problems_on(LSTM_2560, more_shared, H100)  # shared memory holds no more
    assert problems_on(LSTM_2560, fewer, H100) or fragment_registers(LSTM_2560, fewer) > register_cap_of(320)


def test_the_variant_needs_a_16_bit_layers_mma_and_two_column_splits():
    assert STREAMED_MIN_SPLITS == 2
    assert streamed_fragments_variant(LSTM_2560, Config(20, 32, 16, 16, "float16", mma_k_split=1), H100) is None
    fp32 = CellSpec("lstm", 2560, 2560)
    assert streamed_fragments_variant(fp32, Config(20, 32, 16, 16, mma_k_split=2), H100) is None
    assert streamed_fragments_variant(LSTM_2560, Config(20, 8, 4, 16, "float16"), H100) is None  # FMA units


def test_its_workspace_and_streamed_bytes_count_a_warps_packed_pairs():
    cfg = Config(20, 32, 16, 16, "float16", mma_k_split=2, smem_runs=27, global_runs=34)
    threads = cfg.threads(LSTM_2560)
    assert threads == 320 and cfg.num_ctas(LSTM_2560) == 128
    assert cfg.workspace_words(LSTM_2560) == WORKSPACE_WORDS + 128 * 320 * 34 * 4
    assert cfg.global_weight_bytes(LSTM_2560) == 320 * 34 * 16
    assert streamed_weights_us(LSTM_2560, cfg, H100, 16) > 0
    assert dataclasses.replace(cfg, global_runs=0).workspace_words(LSTM_2560) == WORKSPACE_WORDS


def test_past_the_chip_a_16_bit_layer_takes_them_where_priced_under_the_gemm_scan():
    """Kernels alone on the H200 (docs/data/streamed-fragments-h200.jsonl): fp16 LSTM H=2560 B=16's
    pick 10.3 us a step against the GEMM scan's 31.0; fp16 LSTM H=3072 B=32's 30.7 against 39.7,
    weighed at the longer of its step on chip and its reads (run D). At bf16 LSTM H=4096 B=16 and
    bf16 GRU H=3072 B=64 the scan (53.7 and 36.8) beat the best of them (68.9 and 56.5, run C), and
    the planner keeps it."""
    plan = plan_layer(LSTM_2560, HOPPER, batch=16, measure=False)
    assert plan.lowering != GEMM_SCAN and plan.config.f16_mma() and plan.config.global_runs
    assert plan.config.mma_k_split >= STREAMED_MIN_SPLITS
    lstm_3072 = plan_layer(CellSpec("lstm", 3072, 3072, dtype="float16"), HOPPER, batch=32, measure=False)
    assert lstm_3072.lowering != GEMM_SCAN and lstm_3072.config.global_runs
    for spec, batch in ((CellSpec("lstm", 4096, 4096, dtype="bfloat16"), 16),
                        (CellSpec("gru", 3072, 3072, linear_before_reset=True, dtype="bfloat16"), 64)):
        assert plan_layer(spec, HOPPER, batch=batch, measure=False).lowering == GEMM_SCAN


def test_against_the_gemm_scan_a_streamed_config_is_priced_at_its_longer_part():
    """The step on chip and the reads overlap: against the scan, the longer of the two, where the
    ranking adds them; in batch tiles of a grid (whose reads did not overlap) and for every other
    config, the sum."""
    cfg = Config(24, 32, 16, 16, "float16", mma_k_split=2, smem_runs=19, global_runs=58)
    lstm_3072 = CellSpec("lstm", 3072, 3072, dtype="float16")
    summed, streamed = step_us(lstm_3072, cfg, H100, 32), streamed_weights_us(lstm_3072, cfg, H100, 32)
    assert 0 < streamed < summed
    assert overlapped_step_us(lstm_3072, cfg, H100, 32) == pytest.approx(max(summed - streamed, streamed))
    tiled = dataclasses.replace(cfg, batch_tile=16)
    assert overlapped_step_us(lstm_3072, tiled, H100, 32) == step_us(lstm_3072, tiled, H100, 32)
    on_chip = Config(20, 32, 16, 16, "float16", mma_k_split=2, smem_runs=27)
    assert overlapped_step_us(LSTM_2560, on_chip, H100, 16, 12.5) == 12.5


def test_past_the_chip_the_fma_units_and_streamed_fragments_are_weighed_at_the_longer_part():
    """Kernels alone on the H200 (docs/data/streamed-fragments-h200.jsonl, run F): fp16 LSTM H=4096
    B=1's FMA-unit pick (global runs) 52.4 us a step, its streamed pick 33.4; at B=2 the sum priced
    the two kinds alike and the GEMM scan took the layer (50.4 against 33.3). fp32 layers, whose
    tensor-core configs are not 16-bit mma, and 16-bit layers held on chip at B=1 keep their picks."""
    lstm_4096 = CellSpec("lstm", 4096, 4096, dtype="float16")
    for batch in (1, 2):
        plan = plan_layer(lstm_4096, HOPPER, batch=batch, measure=False)
        assert plan.lowering != GEMM_SCAN and plan.config.f16_mma() and plan.config.global_runs, batch
    fp32 = plan_layer(CellSpec("lstm", 4096, 4096), HOPPER, batch=1, measure=False)
    assert not fp32.config.tensor_cores() and fp32.config.global_runs
    on_chip = plan_layer(CellSpec("lstm", 2048, 2048, dtype="float16"), HOPPER, batch=1, measure=False)
    assert not on_chip.config.tensor_cores() and not on_chip.config.global_runs


def test_a_layer_whose_weights_fit_on_chip_reads_none_each_step():
    plan = plan_layer(CellSpec("lstm", 2048, 2048, dtype="float16"), HOPPER, batch=16, measure=False)
    assert plan.config.f16_mma() and plan.config.smem_runs and not plan.config.global_runs


def test_a_compile_on_a_gpu_does_not_time_streaming_fma_configs_priced_far_past_the_best():
    """LSTM H=2560 B=16 fp16: its FMA-unit configs read weights from global memory each step and
    are priced 2.5x its streamed-fragments pick (they ran 4.4x slower, and each takes nvcc over a
    minute); the compile on a GPU times the tensor-core candidates alone (28.7 s on the H200)."""
    from persist_rnn.schedule.planner import STREAMING_CANDIDATE_RATIO, _ranked, measured_candidates

    _, ranked = _ranked(LSTM_2560, H100, 16, False, "fp32")
    best_us = ranked[0][0]
    fma = [(us, c) for us, c in ranked if not c.tensor_cores()]
    assert fma and all(c.global_runs and us > STREAMING_CANDIDATE_RATIO * best_us for us, c in fma)
    chosen = measured_candidates(LSTM_2560, H100, 16, ranked, 5, "fp32", False)
    assert chosen and all(c.tensor_cores() and c.global_runs for c in chosen)
    assert ranked[0][1] in chosen
