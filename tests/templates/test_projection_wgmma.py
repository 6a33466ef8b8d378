"""The wgmma GEMM (tir_templates/projection_wgmma.py): the accumulators' layout against the PTX
ISA's, the 128-byte swizzle, the plan's rule, the refusals, the CPU twin against numpy, and its
CUDA through nvcc for sm_90a (the kernel against numpy on the GPU: tests/gpu/test_persistent_gpu.py)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import tvm

from persist_rnn.bench.layer_models import cuda_source, projection_module
from templates.test_projection_pairs import run_pairs_on_cpu, sixteen_bit_operands
from tir_templates.gemm_staging import pack_pairs_nk
from tir_templates.projection_mma import c_fragment
from tir_templates.projection_mma import fits_one_wave
from tir_templates.projection_wgmma import (
    by_rows_pays,
    d_fragment,
    emulated_projection_wgmma_kernel,
    emulated_wgmma_gemm_by_rows,
    projection_wgmma_kernel,
    swizzled_word,
    wgmma_arch,
    wgmma_fills,
    wgmma_gemm_by_rows,
    wgmma_pays,
    wgmma_plan,
    wgmma_shared_bytes,
)


def test_the_accumulators_cover_the_warpgroups_64_rows_once():
    """wgmma .m64nNk16 D: warp w holds rows 16 w .. 16 w + 15; accumulator i of a lane is the
    m16n8 C fragment's register i % 4 of the (i / 4)-th 8 columns. Every (row, column) of 64 x 128
    once over 4 warps x 32 lanes x 64 accumulators."""
    seen = {d_fragment(w, lane, i) for w in range(4) for lane in range(32) for i in range(64)}
    assert seen == {(r, c) for r in range(64) for c in range(128)}
    assert d_fragment(2, 5, 6) == (32 + c_fragment(5, 2)[0], 8 + c_fragment(5, 2)[1])


def test_the_swizzle_keeps_each_row_and_permutes_its_chunks():
    """Chunk c of row r at chunk c ^ (r % 8) of the same 32-word row; 8 consecutive rows' chunk c
    land on 8 different 16-byte bank groups (address bits 4-6 XOR bits 7-9)."""
    for row in range(16):
        words = sorted(swizzled_word(row, c) for c in range(8))
        assert words == [row * 32 + 4 * c for c in range(8)]
    for c in range(8):
        assert len({swizzled_word(row, c) % 32 for row in range(8)}) == 8


def test_the_plan_pays_from_k_512_on_a_grid_of_a_cta_an_sm():
    assert wgmma_pays(3200, 768, 3072, 132) and wgmma_pays(800, 768, 3072, 132)
    assert not wgmma_pays(100, 1024, 4096, 132)  # 32 CTAs: the pairs GEMM's one-wave plan
    assert not wgmma_pays(3200, 384, 1536, 132)  # K < 512: a tie
    assert not wgmma_pays(None, 1024, 4096, 132)  # rows known at run time
    assert wgmma_arch("sm_90a") and not wgmma_arch("sm_90") and not wgmma_arch("sm_100a")
    assert wgmma_shared_bytes(3, 128) == 3 * 32768 + 1024


@pytest.mark.parametrize("args,says", [
    (dict(precision="3xtf32"), "16-bit operands"),
    (dict(K=100), "K=100"),
    (dict(stages=1), "stages >= 2"),
    (dict(tile_n=64), "128 x 64"),
], ids=str)
def test_a_wgmma_gemm_it_cannot_build_is_refused(args, says):
    K = args.pop("K", 512)
    with pytest.raises(ValueError, match=says):
        projection_wgmma_kernel(K, 256, **args)


def _nvcc_sm_90a(source: str, tmp_path):
    """nvcc's cubin for sm_90a of `source`, its resource usage in stderr (the build must pass)."""
    (tmp_path / "k.cu").write_text(source)
    res = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "--resource-usage", "-o", str(tmp_path / "k.cubin"),
                          str(tmp_path / "k.cu")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


@pytest.mark.parametrize("precision,tile_n", [("f16", 128), ("bf16", 256), ("f16", 160), ("bf16", 96)])
def test_the_wgmma_gemm_compiles_for_sm_90a(precision, tile_n, tmp_path):
    """Its CUDA: the wgmma of the tile's width, its fences, and nvcc for sm_90a without spills."""
    func = projection_wgmma_kernel(768, 3072, precision, 3, tile_n)
    with tvm.transform.PassContext(opt_level=3):
        built = tvm.compile(projection_module(func, 3200, 768, 3072), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    source = cuda_source(built)
    assert f"wgmma.mma_async.sync.aligned.m64n{tile_n}k16.f32.{precision}.{precision}" in source
    assert "fence.proxy.async.shared::cta" in source and "wgmma.wait_group.sync.aligned 0" in source
    if shutil.which("nvcc") is None:
        return
    res = _nvcc_sm_90a(source, tmp_path)
    assert "0 bytes spill stores" in res.stderr and "serialized" not in res.stderr, res.stderr[-2000:]
    if tile_n <= 160:  # two CTAs of 256 threads an SM: at most 128 registers a thread
        assert int(re.search(r"Used (\d+) registers", res.stderr).group(1)) <= 128, res.stderr[-2000:]


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("M,K,N,tile_n", [(130, 200, 72, 128), (37, 96, 260, 256), (129, 64, 128, 128), (150, 72, 330, 160), (40, 64, 200, 96)], ids=str)
def test_emulated_wgmma_gemm_is_exact_for_16_bit_operands(M, K, N, tile_n, precision):
    """The CPU twin: every thread's 16-byte copies into the swizzled ring, zeros past the edges
    (M, N off the tiles, K off the k-tiles), each accumulator where `d_fragment` puts it: exact
    products, fp32 sums (1e-6 of the output scale)."""
    x, w, b = sixteen_bit_operands(M, K, N, precision)
    func = emulated_projection_wgmma_kernel(K, N, precision, 3, tile_n)
    got = run_pairs_on_cpu(func, x, pack_pairs_nk(w, precision == "bf16"), b, N)
    want = x.astype("float64") @ w + b
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6


def test_the_plan_takes_the_tile_width_whose_waves_end_first():
    """On 132 SMs, two CTAs an SM: (3200, 768) x (768, 3072)'s 600 tiles of 128 columns take three
    waves, its 500 of 160 two; (800, 768) x (768, 3072) is one wave at any width, the narrowest
    shortest; (6400, 1024) x (1024, 4096) has 160 columns only 1.4% sooner, within the margin."""
    assert wgmma_plan(3200, 3072, 132) == {"stages": 3, "tile_n": 160}
    assert wgmma_plan(800, 3072, 132) == {"stages": 3, "tile_n": 96}
    assert wgmma_plan(6400, 4096, 132) == {"stages": 3, "tile_n": 128}
    assert wgmma_plan(2000, 4096, 132) == {"stages": 3, "tile_n": 128}  # 512 tiles: two waves of 128


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_emulated_wgmma_gemm_by_rows_runs_the_kernel_of_the_runtime_rows(precision):
    """Rows known only at run time (a symbolic batch), on 4 SMs: 20 rows the pairs GEMM's one-wave
    plan, 70 its between plan (both by ldmatrix from the transposed w_t), 200 and 600 the wgmma GEMM;
    each exact for 16-bit operands."""
    K, N = 512, 256
    assert by_rows_pays(K, N) and not by_rows_pays(384, N) and not by_rows_pays(516, N)
    assert [(fits_one_wave(M, N, 4), wgmma_fills(M, N, 4)) for M in (20, 70, 200, 600)] == [
        (True, False), (False, False), (False, True), (False, True)]
    func = emulated_wgmma_gemm_by_rows(K, N, precision, num_sms=4)
    for M in (20, 70, 200, 600):
        x, w, b = sixteen_bit_operands(M, K, N, precision)
        got = run_pairs_on_cpu(func, x, pack_pairs_nk(w, precision == "bf16"), b, N)
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() / np.abs(want).max() <= 1e-6, M


def test_the_wgmma_gemm_by_rows_compiles_for_sm_90a(tmp_path):
    """Its three kernels: the wgmma GEMM and the two ldmatrix plans, through nvcc without spills."""
    func = wgmma_gemm_by_rows(1024, 4096, "f16")
    with tvm.transform.PassContext(opt_level=3):
        built = tvm.compile(projection_module(func, tvm.tirx.Var("m", "int64"), 1024, 4096), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    source = cuda_source(built)
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in source and "ldmatrix" in source
    assert len(re.findall(r'extern "C" __global__ void [^;{]*\{', source)) == 3
    if shutil.which("nvcc") is None:
        return
    assert _nvcc_sm_90a(source, tmp_path).stderr.count("0 bytes spill stores") == 3
