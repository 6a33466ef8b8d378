"""The input projection on the tensor cores: fragment maps against the PTX ISA's figures, the CPU
twin against numpy at each precision, and nvcc without spills."""
from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest

from persist_rnn.schedule.precision import TOLERANCE
from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.gemm_staging import gemm_staging
from tir_templates.projection_mma import (
    BK,
    BM,
    BN,
    NT,
    a_fragment,
    a_fragment_f16,
    b_fragment,
    b_fragment_f16,
    c_fragment,
    emulated_projection_mma_kernel,
    gemm_plan,
    projection_mma_kernel,
)

from test_cuda_codegen import cuda_source, nvcc_stats
from test_projection import most_lanes_on_one_bank, operands, run_on_cpu

#: (M, K, N): ragged M and N; K not a multiple of the 32-column k-slice; K and N not multiples of 4
SHAPES = [(100, 64, 256), (65, 40, 192), (37, 12, 20), (130, 6, 18)]


def test_fragments_follow_the_ptx_figures():
    """m16n8k8 .tf32 (PTX ISA 9.7.14.5.x): A's a0..a3 of lane l are (l/4, l%4), (l/4+8, l%4),
    (l/4, l%4+4), (l/4+8, l%4+4); B's b0, b1 are (k l%4, column l/4) and (l%4+4, l/4); C's c0..c3
    are (l/4, 2(l%4)), (l/4, 2(l%4)+1), (l/4+8, 2(l%4)), (l/4+8, 2(l%4)+1). Each covers its tile once."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        assert [a_fragment(lane, r) for r in range(4)] == [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
        assert [b_fragment(lane, r) for r in range(2)] == [(t, g), (t + 4, g)]
        assert [c_fragment(lane, r) for r in range(4)] == [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
    for frag, regs, shape in ((a_fragment, 4, (16, 8)), (b_fragment, 2, (8, 8)), (c_fragment, 4, (16, 8))):
        held = sorted(frag(lane, r) for lane, r in itertools.product(range(32), range(regs)))
        assert held == sorted(itertools.product(range(shape[0]), range(shape[1])))


def test_stores_and_fragment_reads_hit_distinct_banks():
    """x row-major with rows of BK + 4 floats, w_t's rows BN + 8: each quarter-warp's 16-byte stores
    cover the 32 banks once (what a 128-bit shared store needs to take one pass), and an A or B
    fragment's 32 lanes read 32 banks. Before: x stored transposed (8-way conflicts) and both
    fragments' reads 4-way, the padding dropped by TVM's buffer compaction."""
    st = gemm_staging(1024, 4096, BM, BN, BK, NT, mma_tiles=True)
    assert st.VK == st.VN == 4
    for e in range(st.A_LOADS):
        for quarter in range(NT // 8):
            lanes = range(quarter * 8, quarter * 8 + 8)
            words = [st.x_word(*st.x_vector(e, t)) + v for t in lanes for v in range(4)]
            assert words[0] % 4 == 0 and sorted(w % 32 for w in words) == list(range(32)), (e, quarter)
    for e in range(st.B_LOADS):
        for quarter in range(NT // 8):
            words = [st.w_word(*st.w_vector(e, t)) + v for t in range(quarter * 8, quarter * 8 + 8) for v in range(4)]
            assert words[0] % 4 == 0 and sorted(w % 32 for w in words) == list(range(32)), (e, quarter)
    for j in range(4):
        assert most_lanes_on_one_bank([st.x_word(*a_fragment(lane, j)) for lane in range(32)]) == 1
    for j in range(2):
        assert most_lanes_on_one_bank([st.w_word(*b_fragment(lane, j)) for lane in range(32)]) == 1


@pytest.mark.parametrize("bk,threads", [(32, 128), (64, 256), (64, 512)], ids=str)
def test_16_bit_pairs_stage_and_read_on_distinct_banks(bk, threads):
    """16-bit operands staged as pairs along k (the f16/bf16 plans through registers): x's rows of
    bk / 2 + 4 words, w_t's k-pairs of BN + 8. A thread's two w_t vectors of a pair are rows 2r and
    2r + 1 of the same columns; every word of both tiles is stored once; each quarter-warp's 16-byte
    stores of w_t and each half-warp's 8-byte stores of x take one pass (bk 32: two rows of x a
    half-warp, 2-way on 4 banks); an m16n8k16 fragment register is one word, its 32 lanes on 32 banks."""
    st = gemm_staging(1024, 4096, BM, BN, bk, threads, mma_tiles=True, pack="f16")
    x_stored = [st.x_word(st.x_vector(e, t)[0], st.x_vector(e, t)[1] // 2) + v
                for e in range(st.A_LOADS) for t in range(threads) for v in range(2)]
    assert sorted(x_stored) == sorted(st.x_word(r, kp) for r in range(BM) for kp in range(bk // 2))
    w_stored = []
    for e in range(0, st.B_LOADS, 2):
        for t in range(threads):
            (k0, c0), (k1, c1) = st.w_vector(e, t), st.w_vector(e + 1, t)
            assert k0 % 2 == 0 and (k1, c1) == (k0 + 1, c0)
            w_stored += [st.w_word(k0 // 2, c0) + v for v in range(4)]
    assert sorted(w_stored) == sorted(st.w_word(kp, c) for kp in range(bk // 2) for c in range(BN))
    for e in range(0, st.B_LOADS, 2):
        for quarter in range(threads // 8):
            words = [st.w_word(st.w_vector(e, t)[0] // 2, st.w_vector(e, t)[1]) + v for t in range(quarter * 8, quarter * 8 + 8) for v in range(4)]
            assert words[0] % 4 == 0 and sorted(w % 32 for w in words) == list(range(32))
    for e in range(st.A_LOADS):
        for half in range(threads // 16):
            words = [st.x_word(st.x_vector(e, t)[0], st.x_vector(e, t)[1] // 2) + v for t in range(half * 16, half * 16 + 16) for v in range(2)]
            assert words[0] % 2 == 0 and most_lanes_on_one_bank(words) == (2 if bk == 32 else 1)
    for j in range(4):
        assert most_lanes_on_one_bank([st.x_word(a_fragment_f16(lane, j, 0)[0], a_fragment_f16(lane, j, 0)[1] // 2)
                                       for lane in range(32)]) == 1
    for j in range(2):
        assert most_lanes_on_one_bank([st.w_word(b_fragment_f16(lane, j, 0)[0] // 2, b_fragment_f16(lane, j, 0)[1])
                                       for lane in range(32)]) == 1


def test_16_bit_fragments_follow_the_ptx_figures():
    """m16n8k16 .f16/.bf16 (PTX ISA 9.7.14.5.x): A's a0..a3 of lane l hold (l/4, 2(l%4) + {0, 1}),
    (l/4+8, ...), (l/4, 2(l%4) + 8 + {0, 1}), (l/4+8, ...), the lower k in the low half; B's b0, b1
    hold (k 2(l%4) + {0, 1}, column l/4) and (k 2(l%4) + 8 + {0, 1}, l/4). Each covers its tile once."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        assert [a_fragment_f16(lane, r, e) for r in range(4) for e in range(2)] == [
            (g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
            (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
        assert [b_fragment_f16(lane, r, e) for r in range(2) for e in range(2)] == [
            (2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
    for frag, regs, shape in ((a_fragment_f16, 4, (16, 16)), (b_fragment_f16, 2, (16, 8))):
        held = sorted(frag(lane, r, e) for lane, r, e in itertools.product(range(32), range(regs), range(2)))
        assert held == sorted(itertools.product(range(shape[0]), range(shape[1])))


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("M,K,N", SHAPES, ids=str)
def test_emulated_16_bit_projection_is_exact_for_16_bit_operands(M, K, N, precision):
    """The fp16 (bf16) GEMM on operands that are fp16 (bf16) values, as an fp16 (bf16) model's x and
    W are: the products are exact and accumulate in fp32, so fp32's bound holds (1e-6 here); on
    fp32 operands it would round them (the pass never gives it those)."""
    import ml_dtypes

    half = np.float16 if precision == "f16" else ml_dtypes.bfloat16
    x, w, b = (a.astype(half).astype("float32") for a in operands(M, K, N))
    want = x.astype("float64") @ w + b
    func = emulated_projection_mma_kernel(K, N, precision)
    assert json.loads(str(func.attrs[PROJECTION_ATTR]))["pairs"] == (K % 4 == 0 and N % 4 == 0)  # staged as pairs
    assert np.abs(run_on_cpu(func, x, w, b) - want).max() / np.abs(want).max() <= 1e-6
    x, w, b = operands(M, K, N)
    want = x.astype("float64") @ w + b
    assert np.abs(run_on_cpu(func, x, w, b) - want).max() / np.abs(want).max() > 1e-5


@pytest.mark.parametrize("precision", ["3xtf32", "tf32"])
@pytest.mark.parametrize("M,K,N", SHAPES, ids=str)
def test_emulated_projection_mma_matches_numpy(M, K, N, precision):
    """Loads, staging and bounds, the products as the mma takes them: 3xTF32 to fp32's 1e-4 of the
    output scale; TF32 within its bound and off the exact product by more than fp32 would be."""
    x, w, b = operands(M, K, N)
    want = x.astype("float64") @ w + b
    err = np.abs(run_on_cpu(emulated_projection_mma_kernel(K, N, precision), x, w, b) - want).max() / np.abs(want).max()
    if precision == "3xtf32":
        assert err <= 1e-6
    else:
        assert 1e-5 < err <= TOLERANCE["tf32"], err


@pytest.mark.parametrize("precision,bk,k_groups", [("3xtf32", 64, 2), ("f16", 64, 4)], ids=str)
def test_emulated_warp_groups_stage_the_whole_k_tile(precision, bk, k_groups):
    """With 2 or 4 groups of four warps, 256 or 512 threads stage a 64-column k-tile (their products
    and the groups' sum are checked on the GPU: the emulation takes the products from shared
    memory, not a group's slices)."""
    M, K, N = 100, 200, 72
    x, w, b = operands(M, K, N)
    if precision == "f16":
        x, w, b = (a.astype(np.float16).astype("float32") for a in (x, w, b))
    want = x.astype("float64") @ w + b
    got = run_on_cpu(emulated_projection_mma_kernel(K, N, precision, bk, k_groups), x, w, b)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6


def test_gemm_plans_follow_the_measured_grid():
    """A grid of at most one wave of 64 x 64 tiles gets 64-column k-tiles shared by 2 groups of warps
    (4 at 16 bits, whose k-slices are twice as deep); a larger grid one group, through registers
    (16-bit operands staged as pairs beat k-tiles in flight by cp.async); a split that does not
    divide the k-tile, or copies of rows that are not whole 16-byte vectors, are refused."""
    assert gemm_plan(100, 1024, 4096, 132, "3xtf32") == {"bk": 64, "k_groups": 2, "stages": 0}  # LSTM H=1024 B=1
    assert gemm_plan(100, 1024, 3072, 132, "bf16") == {"bk": 64, "k_groups": 4, "stages": 0}
    assert gemm_plan(300, 1024, 4096, 132, "tf32") == {"bk": BK, "k_groups": 1, "stages": 0}  # 320 CTAs
    assert gemm_plan(100, 1024, 4096, 108, "3xtf32") == {"bk": BK, "k_groups": 1, "stages": 0}  # the A100: past a wave
    assert gemm_plan(2000, 1024, 4096, 132, "f16") == {"bk": BK, "k_groups": 1, "stages": 0}
    with pytest.raises(ValueError, match="4 k-groups"):
        projection_mma_kernel(64, 64, "f16", 32, 4)
    with pytest.raises(ValueError, match="16-byte copies"):
        projection_mma_kernel(62, 64, "f16", stages=3)


@pytest.mark.parametrize("precision,stages,k_groups", [("f16", 3, 1), ("bf16", 2, 1), ("3xtf32", 4, 2)], ids=str)
def test_emulated_ring_of_k_tiles_matches_numpy(precision, stages, k_groups):
    """k-tiles copied into a ring of `stages` shared slots, each as the GPU issues it (zeros past
    the operands' edges), the products of a k-tile from its slot after the copy that overwrites
    the slot read the k-tile before: exact for 16-bit operands, 3xTF32 to fp32's accuracy."""
    import ml_dtypes

    half = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(precision)
    for M, K, N in ((100, 64, 256), (65, 40, 192), (130, 12, 20)):
        x, w, b = (a if half is None else a.astype(half).astype("float32") for a in operands(M, K, N))
        want = x.astype("float64") @ w + b
        func = emulated_projection_mma_kernel(K, N, precision, BK, k_groups, stages)
        assert np.abs(run_on_cpu(func, x, w, b) - want).max() / np.abs(want).max() <= 1e-6, (M, K, N)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
@pytest.mark.parametrize("precision,bk,k_groups,stages,arch", [("3xtf32", 64, 2, 0, "sm_90"), ("bf16", 64, 4, 0, "sm_80"),
                                                              ("f16", 32, 1, 3, "sm_80")], ids=str)
def test_gemm_plans_compile_without_spills(precision, bk, k_groups, stages, arch, tmp_path):
    """Each group's half (quarter) of a 64-column k-tile: the same mma a k-slice as one group, its
    share of the slices, and the partial sums written by groups 1.. and added by group 0; with
    cp.async, the copies of the first STAGES - 1 k-tiles and of one a loop round (16-byte vectors,
    4 a thread of each operand at 128 threads), one sync a round and a wait for all but STAGES - 2
    groups."""
    source = cuda_source(projection_mma_kernel(1024, 4096, precision, bk, k_groups, stages), arch)
    if precision in ("f16", "bf16"):
        calls = source.count(f"tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_{precision}_{precision}_f32(acc")
        assert calls == bk // 16 // k_groups * 2 * 4
        # staged as pairs through registers: one convert a pair at staging, none where a fragment
        # register is taken (the ring's tiles hold fp32: two values and a convert a register)
        cvt = f"tvm_builtin_ptx_cvt_{precision}x2_f32_rn_{precision}x2_f32("
        converts = source.count(cvt) - source.count(cvt + "uint32_t&")  # calls, not the helper's definition
        st = gemm_staging(1024, 4096, BM, BN, bk, NT * k_groups, mma_tiles=True, pack=None if stages else precision)
        if stages:
            # fp32 tiles: each k-slice's 8 A and 8 B fragment registers converted where they are taken
            assert source.count(cvt + "words") == 0 and converts == 16 * (bk // 16 // k_groups)
        else:
            assert converts == source.count(cvt + "words") == 2 * st.A_LOADS + 2 * st.B_LOADS
    else:
        calls = source.count("tvm_builtin_ptx_mma_sync_aligned_m16n8k8_row_col_f32_tf32_tf32_f32(acc")
        assert calls == 3 * bk // 8 // k_groups * 2 * 4
    if k_groups > 1:
        assert "if (128 <= ((int)threadIdx.x))" in source and "if (((int)threadIdx.x) < 128)" in source
    if stages:
        assert source.count("prnn_cp_async16((") == stages * (4 + 4)
        assert "prnn_cp_wait_1();\n    __syncthreads();" in source
    assert max(nvcc_stats(source, arch, tmp_path)) == 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
@pytest.mark.parametrize("precision", ["3xtf32", "tf32", "f16", "bf16"])
@pytest.mark.parametrize("K,N,arch", [(1024, 4096, "sm_90"), (256, 768, "sm_80"), (40, 192, "sm_90")], ids=str)
def test_projection_mma_compiles_without_spills(K, N, arch, precision, tmp_path):
    """Per 32-column k-slice, unrolled: 2 x 4 tiles of 4 m16n8k8 slices, three mma each at 3xTF32
    and one at TF32; 2 m16n8k16 slices at 16 bits."""
    source = cuda_source(projection_mma_kernel(K, N, precision), arch)
    if precision in ("f16", "bf16"):
        calls = source.count(f"tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_{precision}_{precision}_f32(acc")
        assert calls == (32 // 16) * 2 * 4
    else:
        calls = source.count("tvm_builtin_ptx_mma_sync_aligned_m16n8k8_row_col_f32_tf32_tf32_f32(acc")
        assert calls == (1 if precision == "tf32" else 3) * (32 // 8) * 2 * 4
    assert max(nvcc_stats(source, arch, tmp_path)) == 0
