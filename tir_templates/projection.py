"""The input projection xw = x @ w_t + b of every step at once: one fp32 GEMM before the recurrence.

`projection_reference` is what the importer emits (a plain TE matmul that TVM's default schedule
handles on any target); on CUDA the PersistentRNN pass swaps in `projection_kernel`, a tiled GEMM
read top to bottom in `block_program`:
    per k-tile: registers -> shared memory (x transposed, rows swizzled: `gemm_staging`), sync,
    next tile's global loads issued,
    TT x TT outer products per thread from float4 shared reads, sync
    then out = acc + b.
Each CTA computes a BM x BN tile of out, each thread a TT x TT block of it (TT = 8: four 4 x 4
quarters half a tile apart, so that a warp's float4 shared reads are contiguous; TT = 4: one).
The 4 x 4 thread tile (four times the warps) is for GEMMs whose 64 x 64 grid leaves SMs empty
(`choose_tile`). TVM's default CUDA
schedule gives a thread 4 x 4 of a 32 x 64 tile and ran at ~18 TFLOP/s on the H100, half of an
H=1024 layer's time. `emulated_projection_kernel` runs the same macros serially on the CPU.

Signature: x (M, K), w_t (K, N), b (N,) -> out (M, N), float32 (x in a 16-bit layer's own dtype),
M = T*B symbolic.
"""
from __future__ import annotations

import json

import tvm
from tvm import te
from tvm.script import tirx as T

from .built_once import built_once
from .early_launch import allow_next_kernel
from .gemm_signature import OPAQUE, PROJECTION_ATTR, gemm_func, tile_grid
from .gemm_staging import gemm_staging
from .persistent.layout import both

#: (BM, BN, TT[, BK]) the kernel can be built with: CTA tile BM x BN, thread tile TT x TT, k-slice
#: BK a shared-memory round (default 64 // TT)
TILES = ((128, 128, 8), (64, 64, 8), (64, 64, 4), (32, 32, 4, 64))


def projection_reference(K: int, N: int, operands: str = "float32") -> tvm.tirx.PrimFunc:
    """The plain projection (TE): what the importer emits, scheduled by TVM's default rules.
    `operands`: "float16" or "bfloat16" where x and w_t hold values of that dtype (an fp16 or
    bf16 layer's), which the PersistentRNN pass may multiply on 16-bit tensor cores; x then comes
    in that dtype (the layer's input as it is, no cast kernel before the GEMM), w_t as fp32."""
    m = tvm.tirx.Var("m", "int64")
    k_, n_ = tvm.tirx.IntImm("int64", K), tvm.tirx.IntImm("int64", N)  # one index type: dlight needs it
    x = te.placeholder((m, k_), operands, name="x")
    w = te.placeholder((k_, n_), "float32", name="w_t")
    b = te.placeholder((n_,), "float32", name="b")
    k = te.reduce_axis((tvm.tirx.IntImm("int64", 0), k_), name="k")
    # a 16-bit x widened first: dlight's tensor-core Matmul rule crashed TVM (a segfault in Tensorize)
    # on an fp16 x read straight into a product with the fp32 w_t
    wide = x if operands == "float32" else te.compute((m, k_), lambda i, kk: x[i, kk].astype("float32"), name="x_wide")
    mm = te.compute((m, n_), lambda i, j: te.sum(wide[i, k] * w[k, j], axis=k), name="mm")
    out = te.compute((m, n_), lambda i, j: mm[i, j] + b[j], name="xw")
    func = te.create_prim_func([x, w, b, out]).without_attr("global_symbol")  # private, as the kernels
    info = {"K": K, "N": N, **({"operands": operands} if operands != "float32" else {})}
    return func.with_attr(PROJECTION_ATTR, json.dumps(info)).with_attr("op_pattern", OPAQUE)


def choose_tile(M: int | None, N: int, num_sms: int) -> tuple[int, ...] | None:
    """128 x 128 tiles when their CTAs fill whole waves (two CTAs an SM) to 90% or more; else
    64 x 64, whose many small CTAs balance well, with 4 x 4 thread tiles when even those CTAs
    would not give every SM one, and 32 x 32 tiles taking K 64 columns a round when those fit one
    wave (`one_small_wave`). None when M is unknown: the kernel then applies this rule to the
    runtime M (`projection_kernel`). On the H100 (kernel alone,
    docs/data/projection-tiles-h100.jsonl), 64 x 64 beat 128 x 128 for every grid GEMM but
    (1000, 1024) x (1024, 4096) (252 against 215 us), where 256 CTAs of 128 x 128 fill the 264
    slots; 4 x 4 thread tiles won exactly where the 64 x 64 grid has fewer CTAs than SMs
    ((100, 1024) x (1024, 4096): 46.9 against 51.8 us; (100, 64) x (64, 256): 4.2 against 4.6)
    and lost everywhere else (by up to 1.4x). Among those few-CTA GEMMs, 32 x 32 x 64 took
    (100, 256) x (256, 768) in 7.3 us against 12.9 and (100, 64) x (64, 256) in 2.9 against 4.3,
    and lost past one wave ((100, 1024) x (1024, 4096): 69.2 against 47.2, where the tensor-core
    GEMM takes 41.4; docs/data/projection-small-m-h100.jsonl)."""
    if M is None:
        return None
    if fills_waves(M, N, num_sms):
        return TILES[0]
    if few_ctas(M, N, num_sms):
        return TILES[3] if one_small_wave(M, N, num_sms) else TILES[2]
    return TILES[1]


def fills_waves(M, N, num_sms):
    """Whether 128 x 128 CTAs fill whole waves of two CTAs an SM to 90% or more (M an int or a
    TIR expression): c CTAs, S slots, c >= 0.9 S and c >= 0.9 S ceil(c / S)."""
    c, slots = (M + 127) // 128 * ((N + 127) // 128), 2 * num_sms
    return both(10 * c >= 9 * slots, 10 * c >= 9 * slots * ((c + slots - 1) // slots))


def few_ctas(M, N, num_sms):
    """Whether a 64 x 64 grid has fewer CTAs than SMs (M an int or a TIR expression)."""
    return (M + 63) // 64 * ((N + 63) // 64) < num_sms


def one_small_wave(M, N, num_sms):
    """Whether a 32 x 32 grid has at most a CTA an SM (M an int or a TIR expression)."""
    return (M + 31) // 32 * ((N + 31) // 32) <= num_sms


def tile_staging(K: int, N: int, tile: tuple[int, ...]):
    """`gemm_staging` of a tile (BM, BN, TT[, BK])."""
    BM, BN, TT = tile[:3]
    # k-slice per shared-memory round: by default one x and one w_t vector per thread at TT = 4; a
    # deeper one takes fewer rounds (each a global load's latency and two syncs) for a short K loop
    BK = tile[3] if len(tile) > 3 else 64 // TT
    return gemm_staging(K, N, BM, BN, BK, (BN // TT) * (BM // TT))


def _tile_launch(K: int, N: int, tile: tuple[int, ...], emulate: bool):
    """The macro launch(x, w, b, out, n_m) that runs the GEMM with `tile`, (BM, BN, TT) or
    (BM, BN, TT, BK) (serially: `emulate`)."""
    BM, BN, TT = tile[:3]
    Q = TT // 4  # 4 x 4 quarters of a thread's block along each side
    NTX = BN // TT  # threads across a tile's columns
    staging = tile_staging(K, N, tile)
    BK, NT = staging.BK, staging.NT
    fetch, stage, x_word, w_word, VN = staging.fetch, staging.stage, staging.x_word, staging.w_word, staging.VN
    A_LOADS, B_LOADS, VK = staging.A_LOADS, staging.B_LOADS, staging.VK
    KT = (K + BK - 1) // BK

    def rows(t, i):
        """Row of the tile that thread t's i-th accumulator row is (Q quarters BM/Q apart)."""
        return (i // 4) * (BM // Q) + (t // NTX) * 4 + i % 4

    def cols(t, j):
        return (j // 4) * (BN // Q) + (t % NTX) * 4 + j % 4

    @T.macro
    def outer_products(a_s, b_s, acc, av, bv, reg, t):
        """BK rank-1 updates of thread t's TT x TT accumulators, float4 reads of shared memory."""
        for kk in T.unroll(BK):
            for h in T.unroll(Q):
                for v in T.vectorized(4):
                    av[reg, h * 4 + v] = a_s[x_word(rows(t, h * 4), kk) + v]
                for v in T.vectorized(4):
                    bv[reg, h * 4 + v] = b_s[w_word(kk, cols(t, h * 4)) + v]
            for i in T.unroll(TT):
                for j in T.unroll(TT):
                    acc[reg, i * TT + j] = acc[reg, i * TT + j] + av[reg, i] * bv[reg, j]

    @T.macro
    def store(out, b, acc, reg, by, bx, t, n_m):
        """out = acc + b, for the rows and columns that exist."""
        for i in T.unroll(TT):
            if by * BM + rows(t, i) < n_m:
                for jv in T.unroll(TT // VN):
                    if bx * BN + cols(t, jv * VN) < N:
                        for v in T.vectorized(VN):
                            out[by * BM + rows(t, i), bx * BN + cols(t, jv * VN + v)] = (
                                acc[reg, i * TT + jv * VN + v] + b[bx * BN + cols(t, jv * VN + v)])

    @T.macro
    def block_program(x, w, b, out, by, bx, t, n_m):
        """One CTA's tile, thread t's view (the CUDA kernel's body)."""
        a_s = T.alloc_buffer((staging.x_words,), "float32", scope="shared")
        b_s = T.alloc_buffer((staging.w_words,), "float32", scope="shared")
        acc = T.alloc_buffer((1, TT * TT), "float32", scope="local")
        ra = T.alloc_buffer((1, A_LOADS * VK), "float32", scope="local")
        rb = T.alloc_buffer((1, B_LOADS * VN), "float32", scope="local")
        av = T.alloc_buffer((1, TT), "float32", scope="local")
        bv = T.alloc_buffer((1, TT), "float32", scope="local")
        T.evaluate(allow_next_kernel())  # an early-launched recurrence may start (early_launch.py)
        for a in T.unroll(TT * TT):
            acc[0, a] = T.float32(0)
        fetch(x, w, ra, rb, 0, by, bx, t, 0, n_m)
        for kt in range(KT):
            stage(a_s, b_s, ra, rb, 0, t)
            T.tvm_storage_sync("shared")
            if kt + 1 < KT:  # the next tile's loads are in flight during this tile's FMAs
                fetch(x, w, ra, rb, 0, by, bx, t, kt + 1, n_m)
            outer_products(a_s, b_s, acc, av, bv, 0, t)
            T.tvm_storage_sync("shared")
        store(out, b, acc, 0, by, bx, t, n_m)

    @T.macro
    def emulated_blocks(x, w, b, out, n_m):
        """The CTAs one after another, threads as serial loops, a sync as a phase boundary."""
        for by in range((n_m + BM - 1) // BM):
            for bx in range((N + BN - 1) // BN):
                a_s = T.alloc_buffer((staging.x_words,), "float32")
                b_s = T.alloc_buffer((staging.w_words,), "float32")
                acc = T.alloc_buffer((NT, TT * TT), "float32")
                ra = T.alloc_buffer((NT, A_LOADS * VK), "float32")
                rb = T.alloc_buffer((NT, B_LOADS * VN), "float32")
                av = T.alloc_buffer((NT, TT), "float32")
                bv = T.alloc_buffer((NT, TT), "float32")
                for t, a in T.grid(NT, TT * TT):
                    acc[t, a] = T.float32(0)
                for kt in range(KT):
                    for t in range(NT):
                        fetch(x, w, ra, rb, t, by, bx, t, kt, n_m)
                        stage(a_s, b_s, ra, rb, t, t)
                    for t in range(NT):
                        outer_products(a_s, b_s, acc, av, bv, t, t)
                for t in range(NT):
                    store(out, b, acc, t, by, bx, t, n_m)

    return tile_grid(N, BM, BN, NT, block_program, emulated_blocks, emulate)


def _build(K: int, N: int, tile: tuple[int, int, int] | None, num_sms: int, emulate: bool,
           x_dtype: str) -> tvm.tirx.PrimFunc:
    """The projection PrimFunc with `tile`, or (None) the tile `choose_tile` picks for the runtime M."""
    if tile is not None:
        launch = _tile_launch(K, N, tile, emulate)
    else:  # M known only at run time: each tile's kernel, the host picks one by M
        big, small, small4, deep = (_tile_launch(K, N, t, emulate) for t in TILES)

        @T.macro
        def launch(x, w, b, out, n_m):
            if fills_waves(n_m, N, num_sms):
                big(x, w, b, out, n_m)
            elif few_ctas(n_m, N, num_sms):
                if one_small_wave(n_m, N, num_sms):
                    deep(x, w, b, out, n_m)
                else:
                    small4(x, w, b, out, n_m)
            else:
                small(x, w, b, out, n_m)

    return gemm_func(K, N, launch, {"tile": list(tile) if tile is not None else f"by rows, {num_sms} SMs"}, x_dtype)


@built_once
def projection_kernel(K: int, N: int, tile: tuple[int, ...] | None = TILES[0],
                      num_sms: int = 132, x_dtype: str = "float32") -> tvm.tirx.PrimFunc:
    """The tiled CUDA GEMM for x (M, K) @ w_t (K, N) + b; `tile` None: chosen per call from the
    runtime M by `choose_tile`'s rule for a GPU of `num_sms` SMs; x in `x_dtype` (gemm_func)."""
    return _build(K, N, tile, num_sms, emulate=False, x_dtype=x_dtype)


@built_once
def emulated_projection_kernel(K: int, N: int, tile: tuple[int, ...] | None = TILES[0],
                               num_sms: int = 132, x_dtype: str = "float32") -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm): for tests."""
    return _build(K, N, tile, num_sms, emulate=True, x_dtype=x_dtype)
