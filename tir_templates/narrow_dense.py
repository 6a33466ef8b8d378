"""A dense layer with a narrow output, out = x @ w_t + b with N <= 32 columns (a classifier's
head, per-frame logits): one warp per row of x, read top to bottom in `row_program`:
    each lane multiplies its strided k's of the row with those rows of w_t, keeping all N sums,
    then a warp shuffle sums each column over the lanes, and lane c stores column c.

Why not the tiled GEMM (projection.py): its CTA computes a 64 x 64 tile over K in 64 / TT-wide
slices with two barriers each, so a head of 4 columns wastes 15/16 of the tile, and at a batch
of 1 one CTA works through K alone: the text classifier's head (B x 256 @ 256 x 4) took 11.8 us
a call that way on the H100, against 1.5 us for TVM's GEMV built for B=1. Here a row is a
warp's K / 32 loads and FMAs per column and five shuffles, whatever M is; x is read once.

Signature: x (M, K), w_t (K, N), b (N,) -> out (M, N), all float32, M symbolic.
`emulated_narrow_dense_kernel` computes the same lane sums serially on the CPU (the shuffle's
order of adding them aside).
"""
from __future__ import annotations


import tvm
from tvm.script import tirx as T

from .gemm_signature import gemm_func

#: the widest output this kernel takes: one warp's lanes store one column each
MAX_N = 32
#: warps (rows) per CTA
WARPS = 4


def narrow_dense_kernel(K: int, N: int, emulate: bool = False) -> tvm.tirx.PrimFunc:
    """The kernel for x (M, K) @ w_t (K, N) + b, N <= MAX_N (serially on the CPU: `emulate`)."""
    if not 1 <= N <= MAX_N:
        raise ValueError(f"narrow_dense_kernel: N={N} outside [1, {MAX_N}]")
    KI = (K + 31) // 32  # k's per lane

    @T.macro
    def lane_sums(x, w, acc, xk, reg, m, lane):
        """Lane `lane`'s partial sums of row m, one per column, over k = lane, lane + 32, ...,
        into row `reg` of acc (x's element in xk's)."""
        for c in T.unroll(N):
            acc[reg, c] = T.float32(0)
        for i in range(KI):
            if i * 32 + lane < K:
                xk[reg] = x[m, i * 32 + lane]  # a warp's 32 loads: one row's consecutive k
                for c in T.unroll(N):
                    acc[reg, c] = acc[reg, c] + xk[reg] * w[i * 32 + lane, c]

    @T.macro
    def row_program(x, w, b, out, m, lane):
        """Row m, lane `lane`'s view (the CUDA kernel's body for one warp)."""
        acc = T.alloc_buffer((1, N), "float32", scope="local")
        xk = T.alloc_buffer((1,), "float32", scope="local")
        lane_sums(x, w, acc, xk, 0, m, lane)
        for c in T.unroll(N):
            acc[0, c] = T.cuda.warp_sum(acc[0, c], 32)  # every lane gets every column's sum
        for c in T.unroll(N):
            if lane == c:
                out[m, c] = acc[0, c] + b[c]

    @T.macro
    def emulated_rows(x, w, b, out, n_m):
        """Each row's lanes one after another, then their partial sums added in lane order."""
        for m in range(n_m):
            acc = T.alloc_buffer((32, N), "float32")
            xk = T.alloc_buffer((32,), "float32")
            total = T.alloc_buffer((N,), "float32")
            for lane in range(32):
                lane_sums(x, w, acc, xk, lane, m, lane)
            for c in range(N):
                total[c] = T.float32(0)
                for lane in range(32):
                    total[c] = total[c] + acc[lane, c]
                out[m, c] = total[c] + b[c]

    @T.macro
    def launch(x, w, b, out, n_m):
        if emulate:
            emulated_rows(x, w, b, out, n_m)
        else:
            for bx in T.thread_binding((n_m + WARPS - 1) // WARPS, thread="blockIdx.x"):
                for tx in T.thread_binding(32 * WARPS, thread="threadIdx.x"):
                    if bx * WARPS + tx // 32 < n_m:  # the same for the whole warp: its shuffle is whole
                        row_program(x, w, b, out, bx * WARPS + tx // 32, tx % 32)

    return gemm_func(K, N, launch, {"tile": "a warp per row"})


def emulated_narrow_dense_kernel(K: int, N: int) -> tvm.tirx.PrimFunc:
    """The same sums, serially on the CPU (llvm): for tests."""
    return narrow_dense_kernel(K, N, emulate=True)
