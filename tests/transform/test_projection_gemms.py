"""The projections' GEMMs (transform/projection_gemms.py): a 16-bit layer's GEMM takes w_t packed as
pairs where w_t is a constant at its call sites, under a GlobalVar of its new type; elsewhere w_t
stays as it is, and so does its GEMM's plan."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from persist_rnn.transform.call_sites import call_args, call_tir_sites
from persist_rnn.transform.projection_gemms import projection_gemm, tile_projections
from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.gemm_staging import pack_pairs, pack_pairs_nk
from tir_templates.projection import projection_reference
from tir_templates.projection_mma import plan_shared_bytes

M, K, N = 2000, 512, 1024  # past a wave, K >= 512: the tensor cores (tensor_cores_pay)


def module(w_constant: bool, rows=M, depth=K) -> tvm.IRModule:
    """main(x fp16, [w_t fp32,] b) -> the projection reference of an fp16 layer, w_t a constant or a
    parameter; `rows` an int or a name (symbolic), `depth` its K."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((depth, N)).astype(np.float16).astype("float32")
    bb = relax.BlockBuilder()
    rows = tvm.tirx.Var(rows, "int64") if isinstance(rows, str) else rows
    x = relax.Var("x", relax.TensorType((rows, depth), "float16"))
    b = relax.Var("b", relax.TensorType((N,), "float32"))
    w_param = relax.Var("w_t", relax.TensorType((depth, N), "float32"))
    with bb.function("main", [x, b] if w_constant else [x, w_param, b]):
        with bb.dataflow():
            gv = bb.add_func(projection_reference(depth, N, "float16"), "projection")
            out = bb.emit_output(relax.call_tir(gv, [x, relax.const(w) if w_constant else w_param, b],
                                                relax.TensorType((rows, N), "float32")))
        bb.emit_func_output(out)
    return bb.get(), w


def gemm_info(mod) -> dict:
    [info] = [json.loads(str(f.attrs[PROJECTION_ATTR])) for f in mod.functions.values()
              if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and PROJECTION_ATTR in f.attrs]
    return info


def test_a_constant_w_t_is_packed_at_its_call_site_and_the_module_stays_well_formed():
    mod, w = module(w_constant=True)
    out = tile_projections(mod, 132, "fp32")
    assert gemm_info(out)["w_pairs"] and gemm_info(out)["stages"] == 3
    [(_, call)] = list(call_tir_sites(out))
    w_arg = call_args(call)[1]
    assert isinstance(w_arg, tvm.ir.expr.Constant) and str(w_arg.value.dtype) == "uint32"
    np.testing.assert_array_equal(w_arg.value.numpy(), pack_pairs(w, False))
    assert relax.analysis.check_well_formed(out)  # the call site matches its callee's new type
    assert [gv.name_hint for gv in out.functions if gv.name_hint == "projection"] == ["projection"]


def test_a_w_t_that_is_a_parameter_keeps_its_gemm_through_registers():
    mod, _ = module(w_constant=False)
    out = tile_projections(mod, 132, "fp32")
    info = gemm_info(out)
    assert info["mma"] == "f16" and "w_pairs" not in info and info["stages"] == 0 and info["pairs"]
    [(_, call)] = list(call_tir_sites(out))
    assert isinstance(call_args(call)[1], relax.Var)
    assert relax.analysis.check_well_formed(out)


def test_symbolic_rows_pick_the_pairs_plan_at_run_time_where_k_is_deep():
    """A symbolic batch: K >= 256 the pairs GEMM whose host picks the plan by the rows, w_t packed;
    a shallower K the FMA GEMM by rows, w_t as it is."""
    out = tile_projections(module(w_constant=True, rows="m")[0], 132, "fp32")
    info = gemm_info(out)
    assert info["w_pairs"] and info["plan"] == "by rows, 132 SMs"
    [(_, call)] = list(call_tir_sites(out))
    assert str(call_args(call)[1].value.dtype) == "uint32"
    assert relax.analysis.check_well_formed(out)
    shallow = tile_projections(module(w_constant=True, rows="m", depth=192)[0], 132, "fp32")
    assert gemm_info(shallow)["tile"] == "by rows, 132 SMs" and "mma" not in gemm_info(shallow)


@pytest.mark.parametrize("M", [None, 100, 3200])
def test_a_gpu_with_less_shared_memory_gets_the_plans_it_takes(M):
    """On 99 KiB of shared memory a CTA (sm_86, sm_89) a 16-bit GEMM that copies pairs keeps only
    the plans that fit: one wave of 4 groups and 128 x 128 tiles take 104-107 KB, so these grids
    take the plan through registers, and symbolic rows a GEMM of no pairs; on the H100's 227 KB,
    pairs."""
    K, N = 768, 3072
    for limit in (232448, 101376):
        kernel, packs = projection_gemm(M, K, N, "float16", "float16", True, 132, "fp32", limit)
        info = json.loads(kernel.attrs[PROJECTION_ATTR])
        assert packs == (limit == 232448)
        if M is not None:
            plan = {"bk": info["bk"], "k_groups": info["k_groups"], "stages": info["stages"],
                    "tile": info.get("cta_tile", "64x64")}
            assert plan_shared_bytes(K, N, "f16", plan) <= limit, plan


@pytest.mark.parametrize("rows,depth,pairs", [(3200, 384, True), (1600, 256, True), (400, 320, True),
                                              (100, 256, True), (64, 384, True), (1600, 192, False)])
def test_a_16_bit_gemm_copying_pairs_takes_the_tensor_cores_from_k_256(rows, depth, pairs):
    """Known rows, 256 <= K < 512: a 16-bit GEMM whose x and w_t are copied as pairs goes to the
    tensor cores at any rows (pairs_pay); at a shallower K, the FMA GEMM."""
    out = tile_projections(module(w_constant=True, rows=rows, depth=depth)[0], 132, "fp32")
    info = gemm_info(out)
    assert bool(info.get("w_pairs")) == pairs and ("mma" in info) == pairs, info
    assert relax.analysis.check_well_formed(out)


def test_an_fp32_gemm_below_k_512_stays_on_the_fma_units():
    """fp32 operands (3xTF32 on the tensor cores) keep tensor_cores_pay's K >= 512."""
    kernel, packs = projection_gemm(3200, 384, 1536, "float32", "float32", True, 132, "fp32")
    assert not packs and "mma" not in json.loads(kernel.attrs[PROJECTION_ATTR])


@pytest.mark.parametrize("depth,rows,mma", [(384, 6400, True), (192, 12800, True), (128, 12800, False),
                                            (384, 64, False)])
def test_a_tf32_build_takes_the_tensor_cores_from_k_192(depth, rows, mma):
    """At precision "tf32" (one mma a product) an fp32 GEMM on a full grid goes to the tensor cores
    from K = 192 (TF32_MIN_K); shallower, or one wave of the FMA GEMM's 32 x 32 tiles (64 x 1152),
    the FMA units."""
    kernel, packs = projection_gemm(rows, depth, 1152, "float32", "float32", True, 132, "tf32")
    info = json.loads(kernel.attrs[PROJECTION_ATTR])
    assert not packs and (info.get("mma") == "tf32") == mma, info


def test_a_build_for_sm_90a_takes_the_wgmma_gemm_where_it_pays():
    """With wgmma (sm_90a) a 16-bit GEMM copying pairs takes the wgmma GEMM from K = 512 on a grid
    of a 128 x 128 tile an SM, its w_t packed transposed (pack_pairs_nk); one wave's rows, or
    sm_90, keep the pairs GEMM."""
    kernel, packs = projection_gemm(3200, 768, 3072, "float16", "float16", True, 132, "fp32", wgmma=True)
    assert packs and json.loads(kernel.attrs[PROJECTION_ATTR])["wgmma"]
    for rows, wgmma in ((100, True), (3200, False)):
        kernel, packs = projection_gemm(rows, 768, 3072, "float16", "float16", True, 132, "fp32", wgmma=wgmma)
        assert packs and "wgmma" not in json.loads(kernel.attrs[PROJECTION_ATTR])
    mod, w = module(w_constant=True, rows=3200, depth=512)
    out = tile_projections(mod, 132, "fp32", wgmma=True)
    assert gemm_info(out).get("wgmma")
    [(_, call)] = list(call_tir_sites(out))
    np.testing.assert_array_equal(call_args(call)[1].value.numpy(), pack_pairs_nk(w, False))
    assert relax.analysis.check_well_formed(out)


def test_symbolic_rows_on_sm_90a_take_the_wgmma_gemm_by_rows_from_k_512():
    """Rows known only at run time on sm_90a: from K = 512 the wgmma GEMM by rows (the ldmatrix pairs
    plans below a CTA an SM), w_t packed transposed; a shallower K, or sm_90, the pairs GEMM by rows."""
    kernel, packs = projection_gemm(None, 1024, 4096, "float16", "float16", True, 132, "fp32", wgmma=True)
    info = json.loads(kernel.attrs[PROJECTION_ATTR])
    assert packs and info["wgmma"] and info["w_nk"] and info["plan"] == "by rows, 132 SMs"
    for depth, wgmma in ((384, True), (1024, False)):
        kernel, packs = projection_gemm(None, depth, 4096, "float16", "float16", True, 132, "fp32", wgmma=wgmma)
        info = json.loads(kernel.attrs[PROJECTION_ATTR])
        assert packs and "wgmma" not in info and "w_nk" not in info and info["plan"] == "by rows, 132 SMs"
    mod, w = module(w_constant=True, rows="m", depth=512)
    out = tile_projections(mod, 132, "fp32", wgmma=True)
    assert gemm_info(out).get("wgmma")
    [(_, call)] = list(call_tir_sites(out))
    np.testing.assert_array_equal(call_args(call)[1].value.numpy(), pack_pairs_nk(w, False))
    assert relax.analysis.check_well_formed(out)


@pytest.mark.parametrize("K,operands,precision,mma", [(40, "bfloat16", "fp32", False), (80, "bfloat16", "fp32", True),
                                                       (264, "float16", "fp32", False), (36, "float32", "tf32", False),
                                                       (40, "float32", "tf32", True)])
def test_the_tensor_cores_take_whole_k_slices_only(K, operands, precision, mma):
    """A GEMM whose K ends inside a k-slice (16 columns at 16 bits, 8 at TF32) goes to the FMA
    GEMM at any rows: on the H200 the pairs GEMM of bf16 layers with 40 inputs gave wrong outputs
    where K = 80 matched."""
    for M in (48, 320, None):
        kernel, packs = projection_gemm(M, K, 3072, operands, operands, True, 132, precision)
        info = json.loads(kernel.attrs[PROJECTION_ATTR])
        if not mma:
            assert "mma" not in info and not packs, (M, info)
    kernel, _ = projection_gemm(48, K, 3072, operands, operands, True, 132, precision)
    assert ("mma" in json.loads(kernel.attrs[PROJECTION_ATTR])) == mma
