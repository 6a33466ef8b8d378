"""The input projection: the tiled GEMM's CPU twin against numpy, the reference through TVM's
default pipelines, the tile rule, and the PersistentRNN pass swapping it in on CUDA only."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from persist_rnn.frontend import from_onnx
from persist_rnn.bench.layer_models import LayerCase, make_model, projection_module
from persist_rnn.transform import PersistentRNN
from tir_templates.projection import (
    PROJECTION_ATTR,
    TILES,
    choose_tile,
    emulated_projection_kernel,
    projection_reference,
    tile_staging,
)

#: (M, K, N, tile): ragged M; N not a multiple of a tile (GRU's 192); K and N not multiples of 4 (scalar loads)
SHAPES = [(100, 64, 256, (128, 128, 8)), (65, 40, 192, (64, 64, 8)), (37, 12, 20, (64, 64, 8)),
          (130, 6, 18, (128, 128, 8)), (100, 64, 256, (64, 64, 4)), (65, 40, 192, (64, 64, 4)), (37, 6, 18, (64, 64, 4)),
          # a deeper k-slice (fewer rounds), on 64- and 32-row tiles
          (100, 256, 768, (64, 64, 4, 64)), (65, 40, 192, (32, 64, 4, 64)), (37, 6, 18, (32, 32, 4, 64))]


def operands(M, K, N):
    rng = np.random.default_rng(M + K + N)
    return [rng.standard_normal(s).astype("float32") for s in ((M, K), (K, N), (N,))]


def run_on_cpu(func, x, w, b) -> np.ndarray:
    """out = func(x, w, b) built for llvm (a kernel's serial twin), NaN where it writes nothing."""
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.tensor(np.full((x.shape[0], w.shape[1]), np.nan, "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), tvm.runtime.tensor(b), out)
    return out.numpy()


@pytest.mark.parametrize("M,K,N,tile", SHAPES, ids=str)
def test_emulated_projection_matches_numpy(M, K, N, tile):
    """Every thread's loads, shared-memory staging and outer products (8 x 8 and 4 x 4; k-slices of
    8, 16 and 64), run serially."""
    x, w, b = operands(M, K, N)
    func = emulated_projection_kernel(K, N, tile)
    np.testing.assert_allclose(run_on_cpu(func, x, w, b), x.astype("float64") @ w + b, rtol=0,
                               atol=1e-4 * np.abs(x @ w).max())


def most_lanes_on_one_bank(words) -> int:
    """The worst bank conflict of one warp-wide access: the most distinct 4-byte words in one bank."""
    banks = {}
    for w in set(words):
        banks.setdefault(w % 32, set()).add(w)
    return max(len(ws) for ws in banks.values())


@pytest.mark.parametrize("tile,conflict", [(TILES[0], 1), (TILES[1], 1), (TILES[2], 1), (TILES[3], 2)], ids=str)
def test_transposed_x_stores_spread_over_the_banks(tile, conflict):
    """Each warp's scalar stores of x into its k-major tile hit distinct banks (2-way at 32 x 32 x 64,
    where a warp covers 2 rows at 16 k-vectors; without the swizzle that was 16-way), each
    thread's float4 reads of 4 rows stay 4 contiguous words, and every (row, k) has its own word."""
    st = tile_staging(1024, 4096, tile)
    BM = tile[0]
    for warp in range(st.NT // 32):
        for e in range(st.A_LOADS):
            for v in range(st.VK):
                words = [st.x_word(st.x_vector(e, t)[0], st.x_vector(e, t)[1] + v) for t in range(warp * 32, warp * 32 + 32)]
                assert most_lanes_on_one_bank(words) <= conflict, (warp, e, v)
    for k in range(st.BK):
        assert all(st.x_word(row, k) % 4 == 0 for row in range(0, BM, 4))
        assert sorted(st.x_word(row, k) for row in range(BM)) == list(range(k * BM, (k + 1) * BM))


def test_reference_projection_runs_on_cpu_and_builds_for_cuda():
    """The importer's form: TVM's default llvm pipeline runs it, its default CUDA one (dlight) builds it."""
    M, K, N = 37, 12, 20
    x, w, b = operands(M, K, N)
    mod = projection_module(projection_reference(K, N), M, K, N)
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        tvm.compile(mod, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    got = vm["main"](*(tvm.runtime.tensor(a) for a in (x, w, b))).numpy()
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)


def test_tile_rule():
    """Whole waves of 128 x 128 CTAs (two an SM) take the big tile; ragged grids the small one,
    with 4 x 4 thread tiles when its CTAs are fewer than the SMs, and 32 x 32 tiles with a 64-deep
    k-slice when those fit one wave."""
    assert choose_tile(1000, 4096, 132) == (128, 128, 8)  # 256 CTAs of 264 slots
    assert choose_tile(1000, 3072, 132) == (64, 64, 8)  # 192: three quarters of a wave
    assert choose_tile(2000, 1024, 132) == (64, 64, 8)
    assert choose_tile(100, 4096, 132) == (64, 64, 4)  # 128 CTAs of 64 x 64
    assert choose_tile(2000, 256, 132) == (64, 64, 4)  # 128 CTAs of 64 x 64, 504 of 32 x 32
    assert choose_tile(100, 768, 132) == (32, 32, 4, 64)  # 96 CTAs of 32 x 32
    assert choose_tile(None, 256, 132) is None  # unknown M: the kernel applies the rule per call


@pytest.mark.parametrize("M,N,tile", [(20, 20, (32, 32, 4, 64)), (37, 40, (64, 64, 4)), (300, 20, (64, 64, 8)),
                                      (500, 256, (128, 128, 8))])
def test_rows_known_only_at_run_time(M, N, tile):
    """With M symbolic, one kernel holds every tile and picks by the runtime M as choose_tile
    would (here for a 2-SM GPU: each of the four tiles in turn), and matches."""
    K, sms = 12, 2
    assert choose_tile(M, N, sms) == tile
    x, w, b = operands(M, K, N)
    func = emulated_projection_kernel(K, N, None, num_sms=sms)
    np.testing.assert_allclose(run_on_cpu(func, x, w, b), x.astype("float64") @ w + b, rtol=0,
                               atol=1e-4 * np.abs(x @ w).max())


@pytest.mark.parametrize("kind", ["cuda", "llvm"])
def test_pass_swaps_projection_on_cuda_only(kind):
    """PersistentRNN replaces the projection reference by the tiled kernel for CUDA, with the
    tile of the call site's static rows; an llvm build keeps the reference."""
    case = LayerCase(op="GRU", hidden_size=16, input_size=12, seq_len=10, batch=10, linear_before_reset=1)
    model, _ = make_model(case)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"} if kind == "cuda" else {"kind": "llvm"})
    mod = PersistentRNN(target, config={"tile_units": 16, "group_size": 4, "rows_per_group": 3, "batch_chunk": 10})(
        from_onnx(model, target_kind=kind))
    shapes = [json.loads(str(f.attrs[PROJECTION_ATTR])) for _, f in mod.functions.items()
              if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and PROJECTION_ATTR in f.attrs]
    want = {"K": 12, "N": 48, "tile": [32, 32, 4, 64]} if kind == "cuda" else {"K": 12, "N": 48}
    assert shapes == [want]
