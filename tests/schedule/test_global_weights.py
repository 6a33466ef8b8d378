"""Weights read from global memory each step (`Config.global_runs`): offered only where no config
holds a layer's weights on chip, priced by the bandwidth they are read at, weighed against the
streamed scan, and picked by default only where they have matched on a GPU."""
from __future__ import annotations

import dataclasses
import shutil

import pytest
import tvm

from persist_rnn.schedule.cost_model import rank, step_us, streamed_weights_us
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import plan_layer, streamed_scan_note
from persist_rnn.schedule.space import MAX_ACCUMULATORS, candidate_configs, problems_on
from tir_templates.config import Config, problems
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


@pytest.mark.parametrize("hidden,streams", [(1024, False), (2048, True)])
def test_weights_stream_only_where_no_config_holds_them_on_chip(hidden, streams):
    spec = CellSpec("lstm", hidden, hidden)
    configs = candidate_configs(spec, H100, 1)
    assert configs and all(bool(c.global_runs) == streams for c in configs)
    for c in configs:
        assert not problems_on(spec, c, H100)
        if streams:  # as many runs in shared memory as it holds: one more would not fit
            more = dataclasses.replace(c, smem_runs=c.smem_runs + 1, global_runs=c.global_runs - 1)
            assert problems_on(spec, more, H100)


@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 1280, 128), ("lstm", 64, 20), ("gru", 256, 20)])
def test_no_fma_config_holds_more_accumulators_than_ptxas_keeps(cell, hidden, batch):
    """Past MAX_ACCUMULATORS a thread's accumulators spill (LSTM H=1280 B=128 fp32: the model's
    pick held 128 and ran 1.97x its price, docs/data/global-runs-h200.jsonl); tensor-core configs
    hold theirs as C fragments and keep their own limit."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru")
    configs = candidate_configs(spec, H100, batch)
    fma = [c for c in configs if not c.tensor_cores()]
    assert fma and all(c.rows_per_group * c.batch_chunk <= MAX_ACCUMULATORS for c in fma)
    if hidden == 1280:  # the pick is the config measured at 91 us a step, 5 runs in global memory
        pick = rank(spec, configs, H100, batch)[0][1]
        assert (pick.group_size, pick.rows_per_group, pick.batch_chunk, pick.global_runs) == (16, 2, 32, 5)


def test_runs_of_three_homes_never_exceed_a_lanes_columns():
    spec = CellSpec("lstm", 256, 256)
    runs = Config(16, 8, 4, 2).cols_per_lane(spec) // 4
    assert not problems(spec, Config(16, 8, 4, 2, smem_runs=2, global_runs=runs - 2), 132, 232448)
    too_many = problems(spec, Config(16, 8, 4, 2, smem_runs=2, global_runs=runs - 1), 132, 232448)
    assert any("global_runs" in p for p in too_many)
    mma = problems(spec, Config(16, 32, 16, 2, mma_k_split=2, global_runs=1), 132, 232448)
    assert any("only with a 16-bit layer's mma" in p for p in mma)  # fp32 A fragments: never from R each step
    fp32_mma = problems(spec, Config(16, 32, 16, 2, mma_k_split=2, smem_runs=1), 132, 232448)
    assert any("only with the 16-bit mma" in p for p in fp32_mma)  # A fragments in shared memory: 16-bit only
    f16 = CellSpec("lstm", 256, 256, dtype="float16")
    assert not problems(f16, Config(16, 32, 16, 2, "float16", mma_k_split=2, smem_runs=8), 132, 232448)
    assert any("at most the warp's 8 k-tiles" in p
               for p in problems(f16, Config(16, 32, 16, 2, "float16", mma_k_split=2, smem_runs=9), 132, 232448))
    # 16-bit A fragments read from R each step: after those in shared memory, within the warp's k-tiles
    assert not problems(f16, Config(16, 32, 16, 2, "float16", mma_k_split=2, smem_runs=3, global_runs=5), 132, 232448)
    assert any("after its smem_runs, at most the warp's 8 k-tiles" in p
               for p in problems(f16, Config(16, 32, 16, 2, "float16", mma_k_split=2, smem_runs=3, global_runs=6),
                                 132, 232448))


def test_streamed_weights_cost_what_their_bytes_take_at_l2_or_hbm():
    spec = CellSpec("lstm", 2048, 2048)
    cfg = plan_layer(spec, CUDA, batch=1, measure=False).config
    total = cfg.num_ctas(spec) * cfg.global_weight_bytes(spec)
    per_us = H100.l2_bytes_per_us if H100.l2_holds(total) else H100.hbm_bytes_per_us
    assert streamed_weights_us(spec, cfg, H100, 1) == pytest.approx(total / per_us)
    assert streamed_weights_us(spec, dataclasses.replace(cfg, global_runs=0), H100, 1) == 0.0
    # two passes over the batch chunks read the streamed weights twice
    two = dataclasses.replace(cfg, batch_chunk=1)
    assert streamed_weights_us(spec, two, H100, 2) == pytest.approx(2 * streamed_weights_us(spec, two, H100, 1))
    assert not H100.l2_holds(H100.l2_bytes) and H100.l2_holds(H100.l2_bytes // 4)


def test_the_streamed_scan_wins_only_where_it_is_predicted_shorter():
    spec = CellSpec("lstm", 2048, 2048)
    cfg = plan_layer(spec, CUDA, batch=1, measure=False).config
    assert cfg.global_runs and step_us(spec, cfg, H100, 1) < 1e3
    assert streamed_scan_note(spec, [(step_us(spec, cfg, H100, 1), cfg)], 1) == ""
    note = streamed_scan_note(spec, [(1e4, cfg)], 1)
    assert "streamed scan's step" in note and "global memory" in note
    on_chip = dataclasses.replace(cfg, global_runs=0)
    assert streamed_scan_note(spec, [(1e4, on_chip)], 1) == ""  # weights on chip: never the scan


@pytest.mark.parametrize("spec", [CellSpec("lstm", 2048, 2048, "bidirectional"),
                                  CellSpec("gru", 2048, 2048, "bidirectional", linear_before_reset=False),
                                  CellSpec("gru", 2048, 2048, linear_before_reset=True)], ids=str)
def test_fp32_layers_too_large_for_the_chip_run_persistent_by_default(spec):
    """Forward, bidirectional and two-phase fp32 layers: the forms that matched ONNX Runtime on
    the H200 (docs/data/gpu-global-weights-h200.log)."""
    plan = plan_layer(spec, CUDA, batch=1, measure=False)
    assert plan.kernel is not None and plan.config.global_runs, plan.reason


def test_16_bit_layers_past_the_chip_read_weights_from_global_memory():
    """fp16 H=4096: 134 MB of fp16 weights, on no chip (docs/data/gpu-global16-h200.log)."""
    plan = plan_layer(CellSpec("lstm", 4096, 4096, dtype="float16"), CUDA, batch=1, measure=False)
    assert plan.kernel is not None and plan.config.global_runs, plan.reason


def test_int8_layers_past_the_chip_read_fp16_weights_from_global_memory():
    """An fp32 layer holding its int8 weights in fp16 reads half the bytes of fp32 each step
    (docs/data/gpu-int8-global-h200.log)."""
    plan = plan_layer(CellSpec("lstm", 4096, 4096, int8_weights=True), CUDA, batch=1, measure=False)
    assert plan.config.global_runs and plan.config.weight_dtype == "float16", plan.config


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_streaming_kernel_compiles_for_sm_90(tmp_path):
    from templates.test_cuda_codegen import cuda_source, nvcc_stats

    plan = plan_layer(CellSpec("gru", 2048, 2048, linear_before_reset=True), CUDA, batch=1, measure=False)
    assert plan.kernel is not None and plan.config.global_runs > 0, plan.reason
    source = cuda_source(plan.kernel, "sm_90")
    assert "float4*)(r_ptr" in source.replace(" ", "")  # the streamed runs: 16-byte loads of R
    assert max(nvcc_stats(source, "sm_90", tmp_path)) <= 64


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("spec,cfg", [
    (CellSpec("gru", 256, 256, "bidirectional", linear_before_reset=False), Config(32, 8, 4, 5, global_runs=8)),
    (CellSpec("gru", 256, 256, linear_before_reset=False), Config(32, 8, 1, 5, smem_runs=1, global_runs=7)),
    (CellSpec("lstm", 256, 256), Config(32, 8, 4, 2, smem_runs=1, global_runs=7)),
], ids=["two-phase-all-global", "two-phase-shared-and-global", "lstm-shared-and-global"])
def test_kernels_with_no_weights_in_registers_compile_for_sm_90(spec, cfg):
    """Every run of a lane's columns off the registers: the kernel holds no register array (TVM
    compacts one that nothing reads to zero elements, which its CUDA codegen refused for the
    two-phase GRU: GRU H=2048 bidirectional linear_before_reset=0 picked such a bucket)."""
    from templates.test_cuda_codegen import cuda_source

    from tir_templates.persistent import persistent_kernel

    assert cfg.weight_regs(spec) == 0 and not problems(spec, cfg, 132, 232448)
    source = cuda_source(persistent_kernel(spec, cfg), "sm_90")
    assert "wreg" not in source and "r_ptr" in source


def test_many_global_runs_are_read_in_a_loop_of_unrolled_turns():
    """Up to GLOBAL_UNROLL_FMAS the global runs are unrolled whole (every layer timed so far);
    past it, turns of GLOBAL_TURN_FMAS: LSTM H=4096 B=16's 59 runs of 256 FMAs in 4 turns of 16."""
    from tir_templates.persistent.layout import Layout, global_runs_unrolled

    assert global_runs_unrolled(21, 256) == 21 and global_runs_unrolled(106, 16) == 106
    assert global_runs_unrolled(59, 256) == 16 and global_runs_unrolled(3, 8192) == 1
    spec = CellSpec("lstm", 4096, 4096)
    cfg = plan_layer(spec, CUDA, batch=16, measure=False).config
    assert Layout(spec, cfg).GU < cfg.global_runs, cfg
    assert Layout(CellSpec("lstm", 2048, 2048), plan_layer(CellSpec("lstm", 2048, 2048), CUDA, batch=16,
                                                             measure=False).config).GU == 21


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("spec", [CellSpec("lstm", 2048, 2048, "bidirectional"),
                                  CellSpec("gru", 2048, 2048, "bidirectional", linear_before_reset=False),
                                  CellSpec("gru", 4096, 4096, linear_before_reset=True)], ids=str)
def test_every_bucket_of_a_layer_past_the_chip_builds_for_sm_90(spec):
    """A symbolic batch plans a kernel per bucket (batch 1 to 64 and past it), each layer past the
    chip with weights in global memory: the CUDA of the whole bucketed kernel generates (what the
    GRU H=2048 bidirectional linear_before_reset=0 layer's did not, its last bucket holding no
    weight in registers)."""
    from templates.test_cuda_codegen import cuda_source

    plan = plan_layer(spec, CUDA, batch=None, measure=False)
    assert plan.kernel is not None and all(b["config"]["global_runs"] for b in plan.buckets), plan.reason
    assert "r_ptr" in cuda_source(plan.kernel, "sm_90")
