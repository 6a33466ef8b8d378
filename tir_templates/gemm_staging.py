"""How a projection GEMM's CTA brings one k-tile of x and w_t on chip: global loads into registers
(`fetch`, issued a k-tile ahead), then registers into shared memory (`stage`: x transposed,
k-major, w_t as it is). The FMA GEMM (`projection.py`) and the tensor-core GEMM
(`projection_mma.py`) share it; only their shared tiles' padding and their products differ.
"""
from __future__ import annotations

import types

from tvm.script import tirx as T


def gemm_staging(K: int, N: int, BM: int, BN: int, BK: int, NT: int) -> types.SimpleNamespace:
    """The staging of a BM x BN CTA tile by NT threads, BK columns of x a round: `fetch(x, w, ra,
    rb, reg, by, bx, t, kt, n_m)`, `stage(a_s, b_s, ra, rb, reg, t)`, and the register counts
    A_LOADS * VK (x) and B_LOADS * VN (w_t) a thread holds."""
    VK = 4 if K % 4 == 0 else 1  # x loads along K, float4 when rows stay 16-byte aligned
    VN = 4 if N % 4 == 0 else 1  # w_t loads and out stores along N
    A_LOADS = BM * BK // (NT * VK)  # x vectors a thread fetches per k-tile
    B_LOADS = BK * BN // (NT * VN)

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

    return types.SimpleNamespace(fetch=fetch, stage=stage, VK=VK, VN=VN, A_LOADS=A_LOADS, B_LOADS=B_LOADS)
