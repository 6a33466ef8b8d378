"""The 16-bit projection GEMM whose operands are copied as they lie (`w_pairs`): x in its 16 bits,
w_t packed as pairs along k when the model is built. The packing against the mma's B fragment, the
CPU twin against numpy (exact for 16-bit operands), the plans, the refusals, and nvcc."""
from __future__ import annotations

import json
import shutil

import ml_dtypes
import numpy as np
import pytest
import tvm

from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.gemm_staging import pack_pairs, pack_pairs_nk
from tir_templates.projection_mma import (
    HALF_DTYPES,
    PAIRS_PLANS,
    a_fragment_f16,
    a_row_ldmatrix,
    b_fragment_f16,
    b_row_ldmatrix,
    emulated_pairs_gemm_by_rows,
    emulated_projection_mma_kernel,
    gemm_plan,
    pairs_gemm_by_rows,
    projection_mma_kernel,
)

HALF = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def run_pairs_on_cpu(func, x, w_packed, b, N) -> np.ndarray:
    """out = func(x, w_packed, b) built for llvm (the kernel's serial twin), NaN where it writes nothing."""
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.tensor(np.full((x.shape[0], N), np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w_packed), tvm.runtime.tensor(b), out)
    return out.numpy()


def sixteen_bit_operands(M, K, N, precision):
    """x in the precision's 16 bits, w_t as fp32 holding 16-bit values (as the importer gives it), b."""
    rng = np.random.default_rng(M + K + N)
    half = HALF[precision]
    return (rng.standard_normal((M, K)).astype(half), rng.standard_normal((K, N)).astype(half).astype("float32"),
            rng.standard_normal(N).astype("float32"))


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_packed_pairs_hold_rows_2i_and_2i_plus_1_low_half_first(precision):
    """Word (i, n) holds w_t[2i, n] in its low half and w_t[2i + 1, n] in its high half, as an
    m16n8k16 B fragment register holds k and k + 1 (the twin below reads them through the kernels'
    own decoding, `f16_half`)."""
    _, w, _ = sixteen_bit_operands(8, 6, 5, precision)
    words = pack_pairs(w, precision == "bf16")
    assert words.shape == (3, 5) and words.dtype == np.uint32
    for e in (0, 1):
        half_bits = ((words >> np.uint32(16 * e)) & np.uint32(0xFFFF)).astype(np.uint16)
        np.testing.assert_array_equal(half_bits.view(HALF[precision]).astype("float32"), w[e::2])


def test_ldmatrix_rows_give_the_mma_fragments():
    """ldmatrix.x4: lane l receives, in register i, words l % 4 of the 16-byte row that lane
    8 i + l / 4 gave. With the rows `a_row_ldmatrix` and `b_row_ldmatrix` give, that is the pair
    (row, k / 2) of the m16n8k16 A fragment's register i, and (k / 2, column) of the B fragments of
    two n-tiles (registers 0-1 the first's, 2-3 the second's), as the PTX ISA's figures place them."""
    for lane in range(32):
        for reg in range(4):
            row, pair = a_row_ldmatrix(8 * reg + lane // 4)
            a_row, a_k = a_fragment_f16(lane, reg, 0)
            assert (row, pair + lane % 4) == (a_row, a_k // 2)
            pair, column = b_row_ldmatrix(8 * reg + lane // 4)
            b_k, b_column = b_fragment_f16(lane, reg % 2, 0)
            assert (pair + lane % 4, column) == (b_k // 2, b_column + reg // 2 * 8)


def test_pairs_nk_are_the_packed_pairs_transposed():
    _, w, _ = sixteen_bit_operands(8, 6, 5, "f16")
    words = pack_pairs_nk(w, False)
    assert words.shape == (5, 3) and words.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(words, pack_pairs(w, False).T)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("M,K,N,tile,bk,stages,k_groups", [
    (100, 64, 256, "64x64", 32, 3, 1),
    (130, 48, 132, "128x128x64x64", 64, 3, 1),  # the big tiles' plan; ragged M and N, K short of a k-tile
    (100, 200, 72, "64x64", 64, 3, 4),          # one wave: 4 groups of warps
], ids=str)
def test_emulated_ldmatrix_pairs_gemm_is_exact_for_16_bit_operands(M, K, N, tile, bk, stages, k_groups, precision):
    """w_t packed transposed (`pack_pairs_nk`): each column's pairs copied into a row of its tile,
    zeros past the edges, the products read from there as the mma defines them."""
    x, w, b = sixteen_bit_operands(M, K, N, precision)
    func = emulated_projection_mma_kernel(K, N, precision, bk, k_groups, stages, x_dtype=HALF_DTYPES[precision],
                                          tile=tile, w_pairs=True, ldmatrix=True)
    assert json.loads(str(func.attrs[PROJECTION_ATTR]))["ldmatrix"]
    want = x.astype("float64") @ w + b
    got = run_pairs_on_cpu(func, x, pack_pairs_nk(w, precision == "bf16"), b, N)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("M,K,N,tile,bk,stages,k_groups", [
    (100, 64, 256, "64x64", 32, 3, 1),       # whole tiles along N, ragged M
    (65, 40, 192, "64x64", 32, 2, 1),        # K short of a k-tile: its last vectors zero-filled
    (130, 48, 132, "128x128x64", 32, 3, 1),  # 128 x 128 tiles, 8 warps; ragged M and N
    (130, 48, 132, "128x128x64x64", 64, 3, 1),  # 128 x 128 tiles, 4 warps of 64 x 64 (the plan)
    (37, 96, 68, "128x64", 64, 2, 1),        # 64-column k-tiles, 128 x 64 tiles
    (100, 200, 72, "64x64", 64, 3, 4),       # one wave: 4 groups of warps share a k-tile's copies
], ids=str)
def test_emulated_pairs_gemm_is_exact_for_16_bit_operands(M, K, N, tile, bk, stages, k_groups, precision):
    """Every thread's 16-byte copies of x and of the packed w_t into the ring of pair tiles, zeros
    past the edges, and the products as the mma reads them: exact products, fp32 sums (1e-6)."""
    x, w, b = sixteen_bit_operands(M, K, N, precision)
    func = emulated_projection_mma_kernel(K, N, precision, bk, k_groups, stages, x_dtype=HALF_DTYPES[precision],
                                          tile=tile, w_pairs=True)
    info = json.loads(str(func.attrs[PROJECTION_ATTR]))
    assert info["w_pairs"] and info["pairs"] and info["stages"] == stages
    want = x.astype("float64") @ w + b
    got = run_pairs_on_cpu(func, x, pack_pairs(w, precision == "bf16"), b, N)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6


@pytest.mark.parametrize("args,says", [
    (dict(precision="3xtf32", x_dtype="float32", stages=3), "16-bit operands"),
    (dict(precision="f16", x_dtype="bfloat16", stages=3), "x in bfloat16"),
    (dict(precision="f16", x_dtype="float16", stages=0), "stages >= 2"),
    (dict(precision="f16", x_dtype="float16", stages=3, K=36), "K=36"),
    (dict(precision="bf16", x_dtype="bfloat16", stages=3, N=66), "N=66"),
    (dict(precision="f16", x_dtype="float16", stages=3, bk=64, tile="64x80", ldmatrix=True), "40 columns wide"),
], ids=str)
def test_a_pairs_gemm_its_copies_cannot_run_is_refused(args, says):
    """16-bit precision, x in those 16 bits, k-tiles in flight, whole 16-byte vectors."""
    K, N = args.pop("K", 64), args.pop("N", 64)
    with pytest.raises(ValueError, match=says):
        projection_mma_kernel(K, N, w_pairs=True, **args)


def test_ldmatrix_without_the_pairs_copies_is_refused():
    with pytest.raises(ValueError, match="w_pairs=True"):
        projection_mma_kernel(64, 64, "f16", 64, 1, 3, x_dtype="float16", ldmatrix=True)


def test_pairs_plans_follow_the_measured_grid():
    """3 k-tiles in flight; one wave of 64 x 64 tiles keeps its 4 groups of warps; a grid of 128 x
    128 tiles that fills 132 SMs at 2 CTAs each takes those tiles; between, 64 x 64 tiles; shapes
    the copies cannot take, and fp32 operands, keep the plan through registers."""
    pairs = dict(pairs_copied=True)
    assert gemm_plan(100, 1024, 4096, 132, "f16", **pairs) == {"bk": 64, "k_groups": 4, "stages": 3, "w_pairs": True}
    assert gemm_plan(2000, 1024, 4096, 132, "bf16", **pairs) == {
        "bk": 64, "k_groups": 1, "stages": 3, "tile": "128x128x64x64", "w_pairs": True}  # 512 CTAs of 128 x 128
    assert gemm_plan(800, 768, 3072, 132, "f16", **pairs) == {"bk": 32, "k_groups": 1, "stages": 3, "w_pairs": True}
    assert gemm_plan(2000, 1020, 4096, 132, "f16", **pairs) == gemm_plan(2000, 1020, 4096, 132, "f16")  # K % 8
    assert gemm_plan(2000, 1024, 4096, 132, "3xtf32", **pairs) == gemm_plan(2000, 1024, 4096, 132, "3xtf32")
    assert "w_pairs" not in gemm_plan(2000, 1024, 4096, 132, "f16")


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_emulated_pairs_gemm_by_rows_runs_the_plan_of_the_runtime_rows(precision):
    """Rows known only at run time (a symbolic batch): one kernel a plan, the host picks by the rows
    as `gemm_plan` would (on 4 SMs: 20 rows one wave, 100 between, 600 the 128 x 128 tiles), each
    exact for 16-bit operands."""
    K, N = 64, 256
    func = emulated_pairs_gemm_by_rows(K, N, precision, num_sms=4)
    assert [gemm_plan(M, K, N, 4, precision, pairs_copied=True) for M in (20, 100, 600)] == [
        PAIRS_PLANS["one wave"], PAIRS_PLANS["between"], PAIRS_PLANS["big tiles"]]
    for M in (20, 100, 600):
        x, w, b = sixteen_bit_operands(M, K, N, precision)
        got = run_pairs_on_cpu(func, x, pack_pairs(w, precision == "bf16"), b, N)
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6, M


def test_a_pairs_gemm_by_rows_that_a_plan_cannot_copy_is_refused():
    with pytest.raises(ValueError, match="K=1020"):
        pairs_gemm_by_rows(1020, 4096, "f16")
    with pytest.raises(ValueError, match="16-bit operands"):
        pairs_gemm_by_rows(1024, 4096, "3xtf32")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
@pytest.mark.parametrize("M,arch", [(100, "sm_90"), (2000, "sm_90"), (800, "sm_80")], ids=str)
@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_pairs_plans_compile_without_spills(M, arch, precision, tmp_path):
    """Each plan: 16-byte copies only (cp.async of the first 2 k-tiles and one a loop round), no
    conversion anywhere, the m16n8k16 mma of each warp's tiles, and no spills."""
    from test_cuda_codegen import cuda_source, nvcc_stats  # (beside this file; the GPU tests import this module)

    K, N = 1024, 4096
    plan = gemm_plan(M, K, N, 132, precision, pairs_copied=True)
    source = cuda_source(projection_mma_kernel(K, N, precision, **plan, x_dtype=HALF_DTYPES[precision]), arch)
    assert "cvt" not in source.replace("__cvta", "")  # nothing converted: the operands come as the mma reads them
    copies = source.count("prnn_cp_async16((")
    assert copies > 0 and copies % plan["stages"] == 0
    mma = source.count(f"tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_{precision}_{precision}_f32(acc")
    warp_tiles = {"128x128x64": 4 * 4, "128x128x64x64": 4 * 8}.get(plan.get("tile"), 2 * 4)
    assert mma == plan["bk"] // 16 // plan["k_groups"] * warp_tiles
    assert max(nvcc_stats(source, arch, tmp_path)) == 0
