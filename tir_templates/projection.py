"""The input projection xw = x @ w_t + b of every step at once: one fp32 GEMM before the recurrence.

`projection_reference` is what the importer emits (a plain TE matmul that TVM's default schedule
handles on any target); on CUDA the PersistentRNN pass swaps in `projection_kernel`, a tiled GEMM
read top to bottom in `block_program`:
    per k-tile: registers -> shared memory (x transposed), sync, next tile's global loads issued,
    8 x 8 outer products per thread from float4 shared reads, sync
    then out = acc + b.
Each CTA computes a BM x BN tile of out, each thread an 8 x 8 block of it, as four 4 x 4 quarters
half a tile apart (so that a warp's float4 shared reads are contiguous). TVM's default CUDA
schedule gives a thread 4 x 4 of a 32 x 64 tile and ran at ~18 TFLOP/s on the H100, half of an
H=1024 layer's time. `emulated_projection_kernel` runs the same macros serially on the CPU.

Signature: x (M, K), w_t (K, N), b (N,) -> out (M, N), all float32, M = T*B symbolic.
"""
from __future__ import annotations

import json

import tvm
from tvm import te
from tvm.script import tirx as T

from .early_launch import allow_next_kernel

#: function attribute of a projection, reference or kernel: {"K": ..., "N": ...}
PROJECTION_ATTR = "persist_rnn.projection"
#: k-slice of a tile per shared-memory round
BK = 8
#: (BM, BN) the kernel can be built with
TILES = ((128, 128), (64, 64))


def projection_reference(K: int, N: int) -> tvm.tirx.PrimFunc:
    """The plain projection (TE): what the importer emits, scheduled by TVM's default rules."""
    m = tvm.tirx.Var("m", "int64")
    k_, n_ = tvm.tirx.IntImm("int64", K), tvm.tirx.IntImm("int64", N)  # one index type: dlight needs it
    x = te.placeholder((m, k_), "float32", name="x")
    w = te.placeholder((k_, n_), "float32", name="w_t")
    b = te.placeholder((n_,), "float32", name="b")
    k = te.reduce_axis((tvm.tirx.IntImm("int64", 0), k_), name="k")
    mm = te.compute((m, n_), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="mm")
    out = te.compute((m, n_), lambda i, j: mm[i, j] + b[j], name="xw")
    func = te.create_prim_func([x, w, b, out]).without_attr("global_symbol")  # private, as the kernels
    return func.with_attr(PROJECTION_ATTR, json.dumps({"K": K, "N": N}))


def choose_tile(M: int | None, N: int, num_sms: int) -> tuple[int, int]:
    """128 x 128 tiles when their CTAs fill whole waves (two CTAs an SM) to 90% or more, or M is
    unknown; else 64 x 64, whose many small CTAs balance well. On the H100, 64 x 64 was the faster
    of the two for every grid GEMM but (1000, 1024) x (1024, 4096) (218 against 254 us), where 256
    CTAs of 128 x 128 fill the 264 slots."""
    if M is None:
        return TILES[0]
    waves = -(-M // 128) * -(-N // 128) / (2 * num_sms)
    return TILES[0] if waves >= 0.9 and waves / -(-waves // 1) >= 0.9 else TILES[1]


def _build(K: int, N: int, tile: tuple[int, int], emulate: bool) -> tvm.tirx.PrimFunc:
    BM, BN = tile
    NTX, NTY = BN // 8, BM // 8  # threads across a tile's columns and rows
    NT = NTX * NTY
    VK = 4 if K % 4 == 0 else 1  # x loads along K, float4 when rows stay 16-byte aligned
    VN = 4 if N % 4 == 0 else 1  # w_t loads and out stores along N
    A_LOADS = BM * BK // (NT * VK)  # x vectors a thread fetches per k-tile
    B_LOADS = BK * BN // (NT * VN)
    KT = (K + BK - 1) // BK

    def rows(t, i):
        """Row of the tile that thread t's i-th accumulator row is (two quarters BM/2 apart)."""
        return (i // 4) * (BM // 2) + (t // NTX) * 4 + i % 4

    def cols(t, j):
        return (j // 4) * (BN // 2) + (t % NTX) * 4 + j % 4

    def x_vector(e, t):
        """(row, k) within the tile of thread t's e-th vector of x: VK consecutive k of one row."""
        return (e * NT + t) // (BK // VK), (e * NT + t) % (BK // VK) * VK

    def w_vector(e, t):
        """(k, column) within the tile of thread t's e-th vector of w_t: VN consecutive columns."""
        return (e * NT + t) // (BN // VN), (e * NT + t) % (BN // VN) * VN

    @T.macro
    def fetch_vectors(src, dst, reg, loads, vec, vector, row0, col0, n_rows, n_cols, t):
        """Thread t's `loads` vectors of one operand's tile at (row0, col0) into registers (zeros
        outside n_rows x n_cols): `vector(e, t)` places the e-th, `vec` wide along the columns."""
        for e in T.unroll(loads):
            if T.And(row0 + vector(e, t)[0] < n_rows, col0 + vector(e, t)[1] < n_cols):
                for v in T.vectorized(vec):
                    dst[reg, e * vec + v] = src[row0 + vector(e, t)[0], col0 + vector(e, t)[1] + v]
            else:
                for v in T.vectorized(vec):
                    dst[reg, e * vec + v] = T.float32(0)

    @T.macro
    def fetch(x, w, ra, rb, reg, by, bx, t, kt, n_m):
        """Thread t's share of k-tile kt of x and w_t into its registers (zeros outside). A vector
        is wholly inside or outside: VK divides K and VN divides N."""
        fetch_vectors(x, ra, reg, A_LOADS, VK, x_vector, by * BM, kt * BK, n_m, K, t)
        fetch_vectors(w, rb, reg, B_LOADS, VN, w_vector, kt * BK, bx * BN, K, N, t)

    @T.macro
    def stage(a_s, b_s, ra, rb, reg, t):
        """Registers into shared memory: x transposed (k-major), w_t as it is."""
        for e in T.unroll(A_LOADS):
            for v in T.unroll(VK):
                a_s[x_vector(e, t)[1] + v, x_vector(e, t)[0]] = ra[reg, e * VK + v]
        for e in T.unroll(B_LOADS):
            for v in T.vectorized(VN):
                b_s[w_vector(e, t)[0], w_vector(e, t)[1] + v] = rb[reg, e * VN + v]

    @T.macro
    def outer_products(a_s, b_s, acc, av, bv, reg, t):
        """BK rank-1 updates of thread t's 8 x 8 accumulators, float4 reads of shared memory."""
        for kk in T.unroll(BK):
            for h in T.unroll(2):
                for v in T.vectorized(4):
                    av[reg, h * 4 + v] = a_s[kk, rows(t, h * 4 + v)]
                for v in T.vectorized(4):
                    bv[reg, h * 4 + v] = b_s[kk, cols(t, h * 4 + v)]
            for i in T.unroll(8):
                for j in T.unroll(8):
                    acc[reg, i * 8 + j] = acc[reg, i * 8 + j] + av[reg, i] * bv[reg, j]

    @T.macro
    def store(out, b, acc, reg, by, bx, t, n_m):
        """out = acc + b, for the rows and columns that exist."""
        for i in T.unroll(8):
            if by * BM + rows(t, i) < n_m:
                for jv in T.unroll(8 // VN):
                    if bx * BN + cols(t, jv * VN) < N:
                        for v in T.vectorized(VN):
                            out[by * BM + rows(t, i), bx * BN + cols(t, jv * VN + v)] = (
                                acc[reg, i * 8 + jv * VN + v] + b[bx * BN + cols(t, jv * VN + v)])

    @T.macro
    def block_program(x, w, b, out, by, bx, t, n_m):
        """One CTA's tile, thread t's view (the CUDA kernel's body)."""
        a_s = T.alloc_buffer((BK, BM), "float32", scope="shared")
        b_s = T.alloc_buffer((BK, BN), "float32", scope="shared")
        acc = T.alloc_buffer((1, 64), "float32", scope="local")
        ra = T.alloc_buffer((1, A_LOADS * VK), "float32", scope="local")
        rb = T.alloc_buffer((1, B_LOADS * VN), "float32", scope="local")
        av = T.alloc_buffer((1, 8), "float32", scope="local")
        bv = T.alloc_buffer((1, 8), "float32", scope="local")
        T.evaluate(allow_next_kernel())  # an early-launched recurrence may start (early_launch.py)
        for a in T.unroll(64):
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
                a_s = T.alloc_buffer((BK, BM), "float32")
                b_s = T.alloc_buffer((BK, BN), "float32")
                acc = T.alloc_buffer((NT, 64), "float32")
                ra = T.alloc_buffer((NT, A_LOADS * VK), "float32")
                rb = T.alloc_buffer((NT, B_LOADS * VN), "float32")
                av = T.alloc_buffer((NT, 8), "float32")
                bv = T.alloc_buffer((NT, 8), "float32")
                for t, a in T.grid(NT, 64):
                    acc[t, a] = T.float32(0)
                for kt in range(KT):
                    for t in range(NT):
                        fetch(x, w, ra, rb, t, by, bx, t, kt, n_m)
                        stage(a_s, b_s, ra, rb, t, t)
                    for t in range(NT):
                        outer_products(a_s, b_s, acc, av, bv, t, t)
                for t in range(NT):
                    store(out, b, acc, t, by, bx, t, n_m)

    @T.prim_func(private=True)
    def kernel(x_h: T.handle, w: T.Buffer((K, N), "float32"), b: T.Buffer((N,), "float32"), out_h: T.handle):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        n_m = T.int64()
        x = T.match_buffer(x_h, (n_m, K), "float32")
        out = T.match_buffer(out_h, (n_m, N), "float32")
        if emulate:
            emulated_blocks(x, w, b, out, n_m)
        else:
            for by in T.thread_binding((n_m + BM - 1) // BM, thread="blockIdx.y"):
                for bx in T.thread_binding((N + BN - 1) // BN, thread="blockIdx.x"):
                    for t in T.thread_binding(NT, thread="threadIdx.x"):
                        block_program(x, w, b, out, by, bx, t, n_m)

    return kernel.with_attr(PROJECTION_ATTR, json.dumps({"K": K, "N": N, "tile": list(tile)}))


def projection_kernel(K: int, N: int, tile: tuple[int, int] = TILES[0]) -> tvm.tirx.PrimFunc:
    """The tiled CUDA GEMM for x (M, K) @ w_t (K, N) + b."""
    return _build(K, N, tile, emulate=False)


def emulated_projection_kernel(K: int, N: int, tile: tuple[int, int] = TILES[0]) -> tvm.tirx.PrimFunc:
    """The same tiling run serially on the CPU (llvm): for tests."""
    return _build(K, N, tile, emulate=True)
