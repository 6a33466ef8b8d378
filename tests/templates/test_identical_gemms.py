"""The input-projection GEMMs' generated code is byte for byte what ran on the GPU, so that a
restructuring can prove it changed nothing: the FMA GEMM's tiles, the tensor-core GEMM's plans at
each precision (through registers, k-tiles in flight, groups of warps) and the 16-bit GEMM that
copies pairs (each plan, and by the runtime rows), and the wgmma GEMM (and by the runtime rows). The md5 of each case's CUDA
source (sm_90; the wgmma GEMM's sm_90a) and
of its CPU twin's TVMScript must equal the values recorded in `fixtures/projection_md5.json`,
recorded from code whose GEMMs passed their GPU tests on the H200 (`test_pairs_gemm_plans_match_numpy_on_gpu`,
`test_pairs_gemm_by_rows_matches_numpy_on_gpu`, `test_tensor_core_projection_matches_onnxruntime`,
`test_wgmma_gemm_matches_numpy_on_gpu`, `test_wgmma_gemm_by_rows_matches_numpy_on_gpu`).
A deliberate kernel change re-records them (`python tests/templates/test_identical_gemms.py --force`,
or `--replace NAME ...`; md5_records.py) and says so in its commit, with the GPU tests that ran since."""
from __future__ import annotations

import hashlib
import pathlib
import shutil

import pytest
import tvm

from tir_templates.projection import emulated_projection_kernel, projection_kernel
from tir_templates.projection_mma import (
    HALF_DTYPES,
    PAIRS_PLANS,
    emulated_pairs_gemm_by_rows,
    emulated_projection_mma_kernel,
    pairs_gemm_by_rows,
    projection_mma_kernel,
)
from tir_templates.projection_wgmma import (
    emulated_projection_wgmma_kernel,
    emulated_wgmma_gemm_by_rows,
    projection_wgmma_kernel,
    wgmma_gemm_by_rows,
)

from md5_records import check, record_main

RECORD = pathlib.Path(__file__).parents[1] / "fixtures" / "projection_md5.json"


def _pairs(precision: str, plan: str) -> dict:
    """projection_mma_kernel's arguments for a plan of PAIRS_PLANS."""
    args = {k: v for k, v in PAIRS_PLANS[plan].items() if k != "tile"}
    return {**args, "precision": precision, "tile": PAIRS_PLANS[plan].get("tile", "64x64"),
            "x_dtype": HALF_DTYPES[precision]}


#: name -> (kind, K, N, arguments): "fma" projection_kernel, "mma" projection_mma_kernel, "rows"
#: pairs_gemm_by_rows, "wgmma" projection_wgmma_kernel, "wgmma-rows" wgmma_gemm_by_rows
CASES = {
    "fma-64x64x8": ("fma", 1024, 4096, {"tile": (64, 64, 8)}),
    "fma-32x32x4-k64": ("fma", 256, 1024, {"tile": (32, 32, 4, 64)}),
    "fma-by-rows-x-fp16": ("fma", 512, 2048, {"tile": None, "x_dtype": "float16"}),
    "mma-3xtf32-one-wave-groups": ("mma", 1024, 4096, {"precision": "3xtf32", "bk": 64, "k_groups": 2}),
    "mma-tf32-grid": ("mma", 1024, 4096, {"precision": "tf32"}),
    "mma-f16-pairs-through-registers": ("mma", 1024, 4096, {"precision": "f16", "x_dtype": "float16"}),
    "mma-bf16-one-wave-groups": ("mma", 1024, 3072, {"precision": "bf16", "bk": 64, "k_groups": 4}),
    "mma-3xtf32-ring": ("mma", 1024, 4096, {"precision": "3xtf32", "stages": 4}),
    "pairs-f16-one-wave": ("mma", 1024, 4096, _pairs("f16", "one wave")),
    "pairs-bf16-big-tiles": ("mma", 1024, 4096, _pairs("bf16", "big tiles")),
    "pairs-f16-between-ragged": ("mma", 200, 72, _pairs("f16", "between")),
    "pairs-f16-by-rows": ("rows", 1024, 4096, {"precision": "f16"}),
    "pairs-bf16-by-rows": ("rows", 768, 3072, {"precision": "bf16"}),
    "wgmma-f16": ("wgmma", 1024, 4096, {"precision": "f16"}),
    "wgmma-bf16-256-ragged": ("wgmma", 200, 72, {"precision": "bf16", "tile_n": 256}),
    "wgmma-f16-by-rows": ("wgmma-rows", 1024, 4096, {"precision": "f16"}),
}


def digests(name: str) -> dict:
    kind, K, N, args = CASES[name]
    kernel, twin = {"fma": (projection_kernel, emulated_projection_kernel),
                    "mma": (projection_mma_kernel, emulated_projection_mma_kernel),
                    "rows": (pairs_gemm_by_rows, emulated_pairs_gemm_by_rows),
                    "wgmma": (projection_wgmma_kernel, emulated_projection_wgmma_kernel),
                    "wgmma-rows": (wgmma_gemm_by_rows, emulated_wgmma_gemm_by_rows)}[kind]
    arch = "sm_90a" if kind.startswith("wgmma") else "sm_90"
    lib = tvm.compile(tvm.IRModule({"main": kernel(K, N, **args).with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "cuda", "arch": arch}))
    md5 = lambda text: hashlib.md5(text.encode()).hexdigest()
    return {"cuda": md5(lib.mod.imports[0].inspect_source()), "twin": md5(twin(K, N, **args).script())}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
@pytest.mark.parametrize("name", list(CASES))
def test_gemm_code_unchanged(name):
    check(RECORD, name, digests)


if __name__ == "__main__":
    record_main(RECORD, CASES, digests)
