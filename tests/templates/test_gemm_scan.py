"""The GEMM scan (a tensor-core GEMM and an update a step): its CPU twin against the reference scan
for every cell form it takes, sequences ragged and some empty, batches past one CTA tile of rows,
16-bit layers and TF32; its CUDA build (a host loop of launches: the transpose of R, the states'
start, then each direction's GEMM and the update a step); what it refuses."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tvm

from persist_rnn.bench.layer_models import cuda_source
from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.gemm_scan import (GEMM_SCAN, gemm_precision, gemm_scan, gemm_scan_problem, gemm_scan_slots,
                                     wgmma_step_problem)
from tir_templates.reference import reference_scan
from tir_templates.spec import Activation, CellSpec
from templates.llvm_runs import run_on_llvm
from test_cuda_codegen import cuda_source as codegen_source, nvcc_stats

STEPS = 4

CASES = [
    # (cell, direction, hidden, batch, dtype, build precision, extra spec flags)
    ("lstm", "bidirectional", 20, 3, "float32", "fp32", dict(peepholes=True, clip=5.0)),
    ("lstm", "reverse", 16, 66, "float32", "fp32", dict(input_forget=True)),  # two tiles of 64 rows
    ("gru", "forward", 36, 5, "float32", "fp32", {}),
    ("gru", "bidirectional", 12, 2, "float32", "tf32", dict(activations=(Activation("HardSigmoid", 0.2, 0.5),
                                                                          Activation("Softsign")) * 2)),
    ("rnn", "forward", 24, 4, "float32", "fp32", {}),
    ("lstm", "forward", 32, 3, "float16", "fp32", {}),
    ("gru", "reverse", 16, 6, "bfloat16", "fp32", {}),
]

#: the bound of Y against the reference's fp32 sums, over Y's scale: 3xTF32 is fp32's (the sums'
#: order differs), TF32 rounds both operands to 10 mantissa bits, fp16 and bf16 round h(t-1) to
#: 10 and 7 bits (R is 16-bit values already); sums of at most 36 products, 4 steps
BOUNDS = {"fp32": 1e-5, "tf32": 2e-3, "float16": 2e-3, "bfloat16": 1.5e-2}


@pytest.mark.parametrize("cell,direction,hidden,batch,dtype,precision,flags", CASES, ids=str)
def test_emulated_gemm_scan_matches_the_reference(cell, direction, hidden, batch, dtype, precision, flags):
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=1, dtype=dtype, **flags)
    arrays = kernel_arrays(spec, batch, STEPS, seed=7, slots=gemm_scan_slots(spec, batch))
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged
    arrays[3][0] = 0  # an empty sequence: zero final states
    if dtype != "float32":  # a 16-bit layer's weights are 16-bit values
        arrays[1] = arrays[1].astype(dtype).astype("float32")
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(gemm_scan(spec, batch, precision=precision, emulate=True), [a.copy() for a in arrays])
    bound = BOUNDS[dtype if dtype != "float32" else precision]
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
        g, w = g.astype("float32"), w.astype("float32")
        assert np.abs(g - w).max() <= bound * np.abs(w).max(), name
    assert not got[7][:, :, 0].any()  # the empty row's Y is zero


@pytest.mark.parametrize("cell,hidden,batch,dtype,tile", [
    ("lstm", 20, 70, "float32", "64x80"),  # 80 gate columns: one tile wide, two 64-row tiles
    ("gru", 36, 66, "float16", "64x96"),  # 108 columns: a second, ragged tile
    ("lstm", 40, 65, "bfloat16", "64x128"),  # 160 columns: a ragged second tile
], ids=str)
def test_emulated_gemm_scan_in_wider_tiles_matches_the_reference(cell, hidden, batch, dtype, tile):
    """The step GEMM in the tiles `gemm_scan_cost.step_plan` gives where 64 x 64 tiles would need
    two waves: each tile's 4 warps of 32 x 40 (48, 64) columns, ragged edges zero-padded."""
    spec = CellSpec(cell, 8, hidden, linear_before_reset=1, dtype=dtype)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=gemm_scan_slots(spec, batch))
    if dtype != "float32":
        arrays[1] = arrays[1].astype(dtype).astype("float32")
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    plan = {"bk": 64, "k_groups": 2, "stages": 0, "tile": tile}
    got = run_on_llvm(gemm_scan(spec, batch, emulate=True, plan=plan), [a.copy() for a in arrays])
    g, w = got[7].astype("float32"), want[7].astype("float32")
    assert np.abs(g - w).max() <= BOUNDS[dtype if dtype != "float32" else "fp32"] * np.abs(w).max()


@pytest.mark.parametrize("cell,direction,hidden,batch,dtype,wgmma", [
    ("lstm", "forward", 128, 5, "float16", {"bm": 64, "tile_n": 128, "splits": 2}),
    ("gru", "bidirectional", 192, 3, "bfloat16", {"bm": 128, "tile_n": 96, "splits": 3}),  # a k-tile a split
    ("rnn", "reverse", 64, 70, "float16", {"bm": 64, "tile_n": 128, "splits": 1}),  # two tiles of 64 rows
    ("lstm", "bidirectional", 72, 4, "bfloat16", {"bm": 64, "tile_n": 96, "splits": 2}),  # ragged k-tile, columns
    ("gru", "forward", 384, 6, "float16", {"bm": 64, "tile_n": 128, "splits": 1, "stages": 5}),  # a ring of 5, 6 k-tiles
    ("lstm", "reverse", 128, 3, "bfloat16", {"bm": 64, "tile_n": 128, "splits": 1, "stages": 4}),  # more slots than k-tiles
], ids=str)
def test_emulated_gemm_scan_on_wgmma_matches_the_reference(cell, direction, hidden, batch, dtype, wgmma):
    """The step GEMM on the wgmma tensor cores (projection_wgmma.split_k_launch's twin): h(t-1) and
    R in 16-bit pairs, each split of K's k-tiles its own partial sums, which the update adds."""
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=1, dtype=dtype)
    arrays = kernel_arrays(spec, batch, STEPS, seed=7, slots=gemm_scan_slots(spec, batch, wgmma))
    arrays[3] = np.arange(batch, dtype="int32") % (STEPS + 1)  # ragged, row 0 empty
    arrays[1] = (arrays[1] / (0.3 * hidden ** 0.5)).astype(dtype).astype("float32")  # not chaotic
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(gemm_scan(spec, batch, emulate=True, wgmma=wgmma), [a.copy() for a in arrays])
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
        g, w = g.astype("float32"), w.astype("float32")
        assert np.abs(g - w).max() <= BOUNDS[dtype] * np.abs(w).max(), name
    assert not got[7][:, :, 0].any()


def test_what_the_wgmma_step_refuses():
    plan = {"bm": 64, "tile_n": 128, "splits": 2}
    assert "fp16 and bf16" in wgmma_step_problem(CellSpec("lstm", 8, 128), plan)
    assert "hidden_size 132 is not a multiple of 8" in wgmma_step_problem(CellSpec("lstm", 8, 132, dtype="float16"), plan)
    assert "do not divide" in wgmma_step_problem(CellSpec("lstm", 8, 192, dtype="float16"), plan)  # 3 k-tiles
    assert "rows one of" in wgmma_step_problem(CellSpec("lstm", 8, 128, dtype="float16"), dict(plan, bm=32))
    assert not wgmma_step_problem(CellSpec("gru", 8, 128, dtype="bfloat16"), plan)
    assert "stages >= 2" in wgmma_step_problem(CellSpec("gru", 8, 128, dtype="float16"), dict(plan, stages=1))
    assert not wgmma_step_problem(CellSpec("gru", 8, 1280, dtype="float16"), dict(plan, stages=9))  # 216 KiB
    assert "past an sm_90 CTA's 232448" in wgmma_step_problem(CellSpec("gru", 8, 1280, dtype="float16"),
                                                                dict(plan, stages=10))
    with pytest.raises(ValueError, match="fp16 and bf16"):
        gemm_scan(CellSpec("lstm", 8, 128), 4, wgmma=plan)


def test_the_wgmma_steps_exchange_buffer_holds_each_splits_gates_and_16_bit_pairs():
    spec = CellSpec("lstm", 8, 2048, dtype="float16")
    # h, 4 splits of 4 gates, then h(t-1) (64 * 1024 words) and R (8192 * 1024 words) in slots of 64 * 2048
    assert gemm_scan_slots(spec, 64, {"bm": 64, "tile_n": 128, "splits": 4}) == 1 + 16 + 65


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_wgmma_step_builds_for_sm_90a_without_spills(tmp_path):
    """Start, pack, a wgmma GEMM a direction, update: each launched early; the GEMM's warpgroup
    keeps its 64 accumulators (64 x 128 columns) in registers."""
    spec = CellSpec("lstm", 64, 2048, "bidirectional", dtype="float16")
    source = codegen_source(gemm_scan(spec, 64, wgmma={"bm": 64, "tile_n": 128, "splits": 4}), "sm_90a")
    heads = [line for line in source.splitlines() if line.startswith('extern "C" __global__') and "{" in line]
    assert len(heads) == 5
    assert source.count("prnn_griddep_launch();\n  prnn_griddep_wait();") == 5
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in source
    assert "mma.sync" not in source
    assert nvcc_stats(source, "sm_90a", tmp_path) == [0] * 5


def test_gemm_precision_follows_the_layer_and_the_build():
    assert gemm_precision(CellSpec("lstm", 8, 16)) == "3xtf32"
    assert gemm_precision(CellSpec("lstm", 8, 16), "tf32") == "tf32"
    assert gemm_precision(CellSpec("gru", 8, 16, dtype="float16")) == "f16"
    assert gemm_precision(CellSpec("gru", 8, 16, dtype="bfloat16")) == "bf16"


def test_what_the_gemm_scan_refuses():
    assert "linear_before_reset=0" in gemm_scan_problem(CellSpec("gru", 8, 16, linear_before_reset=0), 4)
    assert "run time" in gemm_scan_problem(CellSpec("lstm", 8, 16), None)
    assert "multiple of 4" in gemm_scan_problem(CellSpec("lstm", 8, 18), 4)
    with pytest.raises(ValueError, match="linear_before_reset=0"):
        gemm_scan(CellSpec("gru", 8, 16, linear_before_reset=0), 4)


def test_the_exchange_buffer_holds_h_the_gates_and_r_transposed():
    spec = CellSpec("lstm", 8, 1280)
    assert gemm_scan_slots(spec, 128) == 1 + 4 + 40  # R^T: 4 * 1280 * 1280 words in slots of 128 * 1280
    assert gemm_scan_slots(CellSpec("gru", 8, 100), 7) == 1 + 3 + 43


def test_the_early_launch_is_asked_for_only_where_the_pass_asks_it():
    spec = CellSpec("lstm", 8, 16)
    tag = "tirx.use_programtic_dependent_launch"
    assert tag in list(gemm_scan(spec, 4, early_launch=True).attrs["tirx.kernel_launch_params"])
    assert "tirx.kernel_launch_params" not in gemm_scan(spec, 4).attrs


def test_a_call_with_another_batch_is_refused():
    spec = CellSpec("lstm", 8, 16)
    arrays = kernel_arrays(spec, 3, STEPS, slots=gemm_scan_slots(spec, 4))
    with pytest.raises(Exception, match="built for another batch size"):
        run_on_llvm(gemm_scan(spec, 4, emulate=True), arrays)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_builds_for_cuda_as_a_host_loop_of_launches(arch):
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    for spec, batch, kernels in ((CellSpec("lstm", 64, 1280), 128, 4),
                                 (CellSpec("gru", 64, 2048, "bidirectional", linear_before_reset=1), 16, 5),
                                 (CellSpec("lstm", 64, 1024, dtype="bfloat16"), 32, 4)):
        func = gemm_scan(spec, batch).with_attr("global_symbol", "main")
        assert func.attrs["persist_rnn.lowering"] == GEMM_SCAN
        source = cuda_source(tvm.compile(tvm.IRModule({"main": func}), target=target))
        heads = [line for line in source.splitlines() if line.startswith('extern "C" __global__') and "{" in line]
        assert len(heads) == kernels  # transpose, start, a GEMM a direction (one kernel each), update
        # each lets the next start and waits for the one before, before it touches anything
        assert source.count("prnn_griddep_launch();\n  prnn_griddep_wait();") == kernels
        assert "mma.sync.aligned" in source and "__syncthreads" in source
        mma = "bf16" if spec.dtype == "bfloat16" else "tf32"
        assert f".{mma}.{mma}.f32" in source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("tile,warp_n_tiles", [("64x80", 5), ("64x96", 6), ("64x128", 8)])
@pytest.mark.parametrize("dtype,arch", [("float32", "sm_90"), ("float16", "sm_80")], ids=str)
def test_wider_step_tiles_compile_without_spills(tile, warp_n_tiles, dtype, arch, tmp_path):
    """A warp of a wider tile takes 2 x 5 (6, 8) mma tiles a k-slice (3xTF32: three mma each), its
    group half of a 64-column k-tile's slices; ptxas keeps it all in registers."""
    spec = CellSpec("lstm", 64, 2048, dtype=dtype)
    plan = {"bk": 64, "k_groups": 2, "stages": 0, "tile": tile}
    source = codegen_source(gemm_scan(spec, 128, plan=plan), arch)
    if dtype == "float32":
        mma, slices, passes = "m16n8k8_row_col_f32_tf32_tf32_f32", 64 // 8 // 2, 3
    else:
        mma, slices, passes = "m16n8k16_row_col_f32_f16_f16_f32", 64 // 16 // 2, 1
    assert source.count(f"tvm_builtin_ptx_mma_sync_aligned_{mma}(acc") == passes * slices * 2 * warp_n_tiles
    assert max(nvcc_stats(source, arch, tmp_path)) == 0
