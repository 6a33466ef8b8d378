"""The input-projection GEMM alone on the GPU: TVM's default schedule of the projection reference
against the tiled template with each tile, on the grid's shapes (M = T*B, K = I, N = G*H).

    python benchmarks/projection_sweep.py [--tiles 64x64x4 64x64x4x64 mma mma_f16 ...] [--shapes 100x256x768 ...] [--no-default] \
        > docs/data/projection-sweep-h100.jsonl

One JSON line per shape: microseconds per call through TVM's VM (key "None": the default
schedule; else the tile, BM x BN x thread tile [x k-slice], or "mma": the tensor-core GEMM at
3xTF32; "mma_f16", "mma_bf16", "mma_tf32": at that precision, on fp32 operands, so
the 16-bit ones show their rounding in the error; a part "_bk64" or "_bk128": that many columns of
x a k-tile; "_g2": the k-tile's slices split between 2 groups of 4 warps; "_s3": 3 k-tiles in flight by cp.async;
"_unpaired": 16-bit operands staged as fp32 values, rounded where each fragment takes them, not as pairs;
"_t128x128": a CTA per 128 x 128 tile of out, projection_mma.CTA_TILES; "_wp": x in 16 bits and
w_t packed as pairs, copied as they lie, with "_s3" its k-tiles in flight; "_ld": with "_wp", w_t
packed transposed and the fragments loaded by ldmatrix; "wgmma_f16", "wgmma_bf16_s4_n256": the wgmma GEMM,
projection_wgmma.py, with that many k-tiles in its ring and columns a CTA, built for sm_90a), the kernel's own median duration in a CUPTI
trace (key + "_gpu"; a short GEMM's VM call is bound by the VM's dispatch) and each one's max
error relative to a float64 numpy product. Needs
torch (CUDA events) and a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.gpu_timing import cuda_ms, kernel_trace
from persist_rnn.bench.layer_models import projection_module
from tir_templates.projection import TILES, projection_kernel, projection_reference
from tir_templates.gemm_staging import pack_pairs, pack_pairs_nk
from tir_templates.projection_mma import HALF_DTYPES, projection_mma_kernel
from tir_templates.projection_wgmma import projection_wgmma_kernel

SHAPES = [(100, 64, 256), (1000, 64, 256), (2000, 64, 256), (1000, 64, 192), (100, 256, 1024), (1000, 256, 1024),
          (2000, 256, 1024), (100, 1024, 4096), (1000, 1024, 4096), (2000, 1024, 4096), (1000, 1024, 3072),
          (2000, 1024, 3072), (2000, 256, 768)]


def mma_variant(name: str) -> dict:
    """projection_mma_kernel's arguments from a tensor-core variant's name: "mma" -> 3xTF32 as
    built by default, "mma_f16_bk64_g2" -> f16, 64 columns of x a k-tile shared by 2 groups of warps."""
    args = {"precision": "3xtf32"}
    for part in name.split("_")[1:]:
        if part.startswith("bk"):
            args["bk"] = int(part[2:])
        elif part.startswith("g") and part[1:].isdigit():
            args["k_groups"] = int(part[1:])
        elif part.startswith("s") and part[1:].isdigit():
            args["stages"] = int(part[1:])
        elif part.startswith("t") and part[1:2].isdigit():
            args["tile"] = part[1:]
        elif part == "wp":
            args["w_pairs"] = True
        elif part == "ld":
            args["ldmatrix"] = True
        elif part == "unpaired":
            args["pairs"] = False
        else:
            args["precision"] = part
    if args.get("w_pairs"):
        args["x_dtype"] = HALF_DTYPES[args["precision"]]
    return args


def wgmma_variant(name: str) -> dict:
    """projection_wgmma_kernel's arguments from a variant's name: "wgmma_bf16_s4_n256" -> bf16, 4
    stages, a CTA per 128 x 256 of out."""
    args = {"precision": name.split("_")[1]}
    for part in name.split("_")[2:]:
        args["stages" if part[0] == "s" else "tile_n"] = int(part[1:])
    return args


def packs_transposed(tile) -> bool:
    """Whether the variant takes w_t packed transposed (pack_pairs_nk)."""
    return str(tile).startswith("wgmma") or str(tile).startswith("mma") and bool(mma_variant(tile).get("ldmatrix"))


def built(M, K, N, tile, build_dir=None, load=True):
    """The variant's executable, compiled for sm_90 (the wgmma GEMM's for sm_90a); with `build_dir`, loaded from there where an
    earlier call (`--build-only`, on a machine without a GPU) exported it, else exported there
    (`load` False: only made sure of; a machine without CUDA cannot load it)."""
    import tvm

    path = os.path.join(build_dir, f"{M}x{K}x{N}_{tile}.so".replace(" ", "").replace(",", "x")) if build_dir else None
    if path and os.path.exists(path):
        return tvm.runtime.load_module(path) if load else None
    func = (projection_reference(K, N) if tile is None
            else projection_wgmma_kernel(K, N, **wgmma_variant(tile)) if str(tile).startswith("wgmma")
            else projection_mma_kernel(K, N, **mma_variant(tile)) if str(tile).startswith("mma")
            else projection_kernel(K, N, tile))
    arch = "sm_90a" if str(tile).startswith("wgmma") else "sm_90"
    with tvm.transform.PassContext(opt_level=3):
        ex = tvm.compile(projection_module(func, M, K, N), target=tvm.target.Target({"kind": "cuda", "arch": arch}))
    if path:
        ex.export_library(path)
    return ex


def time_variant(M, K, N, tile, operands, build_dir=None):
    """(µs per VM call, µs of the kernel alone, relative error) of one variant on `operands`."""
    import tvm
    from tvm import relax

    ex = built(M, K, N, tile, build_dir)
    want = operands[0].astype("float64") @ operands[1] + operands[2]
    wgmma = str(tile).startswith("wgmma")
    if wgmma or str(tile).startswith("mma") and mma_variant(tile).get("w_pairs"):  # as the 16-bit GEMM takes them
        bf16 = (wgmma_variant(tile) if wgmma else mma_variant(tile))["precision"] == "bf16"
        x16 = operands[0].astype(ml_dtypes.bfloat16 if bf16 else np.float16)
        pack = pack_pairs_nk if packs_transposed(tile) else pack_pairs
        operands = [x16, pack(operands[1], bf16), operands[2]]
    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(ex, dev)
    args = [tvm.runtime.tensor(a, dev) for a in operands]
    err = float(np.abs(vm["main"](*args).numpy() - want).max() / np.abs(want).max())
    call = lambda: vm["main"](*args)
    gpu_us = float(np.median([e["dur"] for e in kernel_trace(call, 20, dev.sync)]))
    return cuda_ms(call) * 1000, gpu_us, err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", nargs="+", default=["x".join(map(str, t)) for t in TILES])
    ap.add_argument("--shapes", nargs="+", help="M x K x N of each GEMM (default: the grid's)")
    ap.add_argument("--no-default", action="store_true", help="skip TVM's default schedule")
    ap.add_argument("--build-dir", help="executables exported here, or loaded from here where present")
    ap.add_argument("--build-only", action="store_true", help="only compile into --build-dir (no GPU needed)")
    args = ap.parse_args()
    tiles = ([] if args.no_default else [None]) + [t if t.startswith(("mma", "wgmma")) else tuple(int(v) for v in t.split("x"))
                                                   for t in args.tiles]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    for M, K, N in shapes:
        rng = np.random.default_rng(0)
        operands = [rng.standard_normal(s).astype("float32") for s in ((M, K), (K, N), (N,))]
        row = {"shape": [M, K, N]}
        for tile in tiles:
            if args.build_only:
                built(M, K, N, tile, args.build_dir, load=False)
                continue
            us, gpu_us, err = time_variant(M, K, N, tile, operands, args.build_dir)
            row[str(tile)], row[str(tile) + "_gpu"], row[str(tile) + "_err"] = round(us, 1), round(gpu_us, 1), err
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
