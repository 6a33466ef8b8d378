"""The layers' input projections on CUDA: each importer's projection reference becomes a tiled GEMM.

The tensor cores' GEMM (tir_templates/projection_mma.py) where it pays (`tensor_cores_pay`; a
16-bit GEMM copying pairs from K = 256, `pairs_pay`), at the layer's operands' precision, else the
FMA GEMM (tir_templates/projection.py), tiled for the call sites' rows where they are static. A
16-bit layer's GEMM whose x comes in its 16 bits and whose w_t is a constant at every call site
takes w_t packed as pairs along k (gemm_staging.pack_pairs; transposed, pack_pairs_nk, for the
wgmma GEMM of a build for sm_90a), replaced at the call sites, so that both operands are copied
into shared memory as they lie; where the rows are symbolic (a batch known at run time), that GEMM
picks its plan by the rows.
"""
from __future__ import annotations

import functools
import json

import tvm
from tvm import relax

from tir_templates.gemm_staging import pack_pairs, pack_pairs_nk
from tir_templates.projection import PROJECTION_ATTR, choose_tile, projection_kernel
from tir_templates.projection_mma import (HALF_DTYPES, PAIRS_PLANS, gemm_plan, pairs_by_rows_copy, pairs_gemm_by_rows,
                                         plan_shared_bytes, projection_mma_kernel, slice_k, tensor_cores_pay)
from tir_templates.projection_wgmma import (BY_ROWS_PAIRS_PLANS, WGMMA_PLAN, by_rows_pays, projection_wgmma_kernel,
                                            wgmma_gemm_by_rows, wgmma_pays, wgmma_plan, wgmma_shared_bytes)

from .call_sites import call_site_rows, constant_at_every_site, repack_constant_args

#: w_t, the projection signature's second operand
_W = 1
#: the least K at which a 16-bit GEMM whose x and w_t are copied as pairs goes to the tensor cores
#: below tensor_cores_pay's K of 512, at any rows: known when the model is built (`pairs_pay`), or
#: only at run time (a symbolic batch), its plan then picked by the rows (`pairs_gemm_by_rows`).
#: Symbolic LSTM H=384 and H=256 fp16, whole, against the FMA GEMM by rows, on the H200: 1.14x /
#: 1.26x / 1.50x at B = 1 / 8 / 32 (H=384), 1.04x / 1.14x / 1.33x (H=256)
#: (docs/data/symbolic-16bit-h200.jsonl, run B)
PAIRS_MIN_K = 256


def projections(mod: tvm.IRModule):
    """(GlobalVar, K, N, operands' dtype, x's dtype) of each input projection still in its
    reference form (an fp16 or bf16 layer's x comes as it is, projection_reference)."""
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and PROJECTION_ATTR in func.attrs:
            shape = json.loads(str(func.attrs[PROJECTION_ATTR]))
            if "tile" not in shape and "mma" not in shape:
                yield gv, shape["K"], shape["N"], shape.get("operands", "float32"), str(func.params[0].dtype)


def projection_precision(operands: str, precision: str) -> str:
    """The tensor-core GEMM's precision for an input projection: 16-bit operands (an fp16 or bf16
    layer's x and W) exactly on 16-bit tensor cores, fp32 operands at the build's precision
    (3xTF32 keeps fp32's accuracy)."""
    half = {dtype: mma for mma, dtype in HALF_DTYPES.items()}
    return half.get(operands, "tf32" if precision == "tf32" else "3xtf32")


def pairs_pay(K: int, copied: bool, plan: dict | None) -> bool:
    """Whether a 16-bit GEMM of rows known when the model is built (its `plan`; None where they
    are not) whose x and w_t are copied as pairs (`plan` is such a plan) goes to the tensor cores
    below tensor_cores_pay's K of 512: from K = PAIRS_MIN_K, at any rows. Kernel alone on the
    H200, the FMA GEMM against the pairs plan: (3200, 384) x (384, 1536) 98.1 -> 31.6 us, (1600,
    256) x (256, 1024) 28.2 -> 10.8, (400, 320) x (320, 1280) 18.5 -> 6.5, (100, 256) x (256, 1024)
    6.2 -> 3.9, (100, 384) x (384, 1536) 9.6 -> 4.8 (docs/data/projection-pairs-small-k-h200.jsonl,
    runs A and B). Whole layers, measure
    off: LSTM H=384 B=32 fp16 0.294 -> 0.195 ms, H=256 B=16 fp16 0.130 -> 0.112
    (docs/data/offgrid-heldout-h200.jsonl, runs A-C), H=320 B=4 bf16 0.108 -> 0.092
    (docs/data/offgrid-h200.jsonl, runs A and Q); at B=1 (100 rows) the symbolic build's pairs GEMM
    by rows, the same plan, 1.04-1.14x (`PAIRS_MIN_K`). At K = 192 the kernel alone was faster too
    ((1600, 192) x (192, 576) 12.0 -> 7.0 us), but GRU H=192 B=16 bf16 whole was slower (0.0755 ->
    0.0816 ms, run C of projection-pairs-small-k-h200.jsonl), so shallower GEMMs keep the FMA units."""
    return bool(copied and K >= PAIRS_MIN_K and plan and plan.get("w_pairs"))


def projection_gemm(M: int | None, K: int, N: int, operands: str, x_dtype: str, w_constant: bool, num_sms: int,
                    precision: str, max_shared_bytes: int = 232448, wgmma: bool = False) -> tuple[tvm.tirx.PrimFunc, bool]:
    """(the GEMM of one projection, whether it takes w_t packed as pairs): the tensor cores' where
    they pay, else the FMA GEMM; a 16-bit GEMM whose x comes in its 16 bits and whose w_t is a
    constant copies pairs, its plan picked by the rows at run time where they are symbolic, where
    a CTA's `max_shared_bytes` take its plans (else the plan through registers); on a GPU with
    `wgmma` (sm_90a), by the warpgroups' wgmma where it pays (`wgmma_pays`)."""
    mma = projection_precision(operands, precision)
    if K % slice_k(mma):
        # the tensor cores take K in whole k-slices (16 columns at 16 bits, 8 at TF32). On the H200
        # the pairs GEMM of bf16 LSTM layers with 40 inputs (H=320 B=8, H=384 B=16) gave outputs
        # 4-5x their scale off ONNX Runtime, whatever the recurrent kernel, where the FMA GEMM of
        # the same shapes matched and K = 80 matched (four layers); its CPU twin matches at K = 40,
        # so the cause lies in what the twin does not model (docs/data/conformance-sweep-h200.jsonl)
        return projection_kernel(K, N, choose_tile(M, N, num_sms), num_sms, x_dtype=x_dtype), False
    copied = HALF_DTYPES.get(mma) == x_dtype and w_constant  # x in the 16 bits of the operands
    wgmma_gemm = wgmma_plan(M, N, num_sms) if wgmma and copied and wgmma_pays(M, K, N, num_sms) else None
    if wgmma_gemm and wgmma_shared_bytes(**wgmma_gemm) <= max_shared_bytes:
        return projection_wgmma_kernel(K, N, mma, **wgmma_gemm), True
    fits = lambda plan: plan_shared_bytes(K, N, mma, plan) <= max_shared_bytes  # noqa: E731
    if (M is None and wgmma and copied and by_rows_pays(K, N)
            and wgmma_shared_bytes(**WGMMA_PLAN) <= max_shared_bytes
            and all(fits(dict(PAIRS_PLANS[name], ldmatrix=True)) for name in BY_ROWS_PAIRS_PLANS)):
        return wgmma_gemm_by_rows(K, N, mma, num_sms), True
    if (M is None and copied and K >= PAIRS_MIN_K and pairs_by_rows_copy(K, N)
            and all(fits(p) for p in PAIRS_PLANS.values())):
        return pairs_gemm_by_rows(K, N, mma, num_sms), True
    plan = gemm_plan(M, K, N, num_sms, mma, pairs_copied=copied) if M is not None else None
    if not (pairs_pay(K, copied, plan) and fits(plan)) and not tensor_cores_pay(M, K, N, num_sms, mma):
        return projection_kernel(K, N, choose_tile(M, N, num_sms), num_sms, x_dtype=x_dtype), False
    if not fits(plan):  # one wave of 4 groups, or 128 x 128 tiles, past the GPU's shared memory
        plan = gemm_plan(M, K, N, num_sms, mma)
    return projection_mma_kernel(K, N, mma, **plan, x_dtype=x_dtype), bool(plan.get("w_pairs"))


def tile_projections(mod: tvm.IRModule, num_sms: int, precision: str, max_shared_bytes: int = 232448,
                     wgmma: bool = False) -> tvm.IRModule:
    """`mod` with every projection reference replaced by its GEMM (`projection_gemm`) for a GPU of
    `num_sms` SMs and `max_shared_bytes` of shared memory a CTA (`wgmma`: built for sm_90a), and
    the w_t of the GEMMs that copy pairs packed at their call sites (transposed where the GEMM
    takes them so: `pack_pairs_nk`)."""
    todo = list(projections(mod))
    rows = call_site_rows(mod, {gv.name_hint for gv, *_ in todo})
    sixteen_bit = {gv.name_hint for gv, _, _, operands, _ in todo if operands in HALF_DTYPES.values()}
    constant_w = constant_at_every_site(mod, sixteen_bit, _W,  # only those may copy pairs: no fp32 W read back
                                        lambda w: w.dtype == "float32" and w.ndim == 2 and w.shape[0] % 2 == 0)
    packers = {}
    for gv, K, N, operands, x_dtype in todo:
        kernel, packs = projection_gemm(rows.get(gv.name_hint), K, N, operands, x_dtype, gv.name_hint in constant_w,
                                        num_sms, precision, max_shared_bytes, wgmma)
        if not packs:
            mod[gv] = kernel
            continue
        del mod[gv]  # its w_t changes type: a GlobalVar of the new type (repack_constant_args)
        builder = relax.BlockBuilder(mod)
        new_gv = builder.add_func(kernel, gv.name_hint)
        mod = builder.get()
        pack = pack_pairs_nk if json.loads(str(kernel.attrs[PROJECTION_ATTR])).get("w_nk") else pack_pairs
        packers[gv.name_hint] = (_W, functools.partial(pack, bf16=operands == "bfloat16"),
                                 "its GEMM takes w_t packed as 16-bit pairs, but a call site passes a w_t that "
                                 "is not a constant", new_gv)
    return repack_constant_args(mod, packers)
