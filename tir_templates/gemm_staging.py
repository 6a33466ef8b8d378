"""How a projection GEMM's CTA brings one k-tile of x and w_t on chip: global loads into registers
(`fetch`, issued a k-tile ahead), then registers into shared memory (`stage`). The FMA GEMM
(`projection.py`) and the tensor-core GEMM (`projection_mma.py`) share it; their shared tiles'
layouts differ, each chosen so that a warp's stores and its reads hit distinct banks:
- FMA (threads read 4 rows of x at one k): x k-major, each k-vector's rows XOR-swizzled. A warp
  stores VK-wide vectors of x from 32 / (BK / VK) rows at BK / VK values of k, a multiple of 32
  floats apart: without the swizzle they share banks (16-way at 32 x 32 x 64 tiles).
- tensor cores (`mma_tiles`): x row-major, rows padded by 4 floats, w_t rows by 8, so that a
  quarter-warp's 16-byte stores are contiguous and an A (B) fragment's 8 x 4 (4 x 8) lanes hit 32
  banks. Stored transposed, x cost an 8-way conflict on each of a k-tile's 16 scalar stores a
  thread, and the fragments' reads were 4-way: ncu showed the GEMM bound by shared memory
  (docs/data/ncu-projection-mma-h200.txt).
The tiles are flat buffers indexed by `x_word` and `w_word`: TVM compacts a 2-D shared buffer to
the region it accesses, which would drop padding columns that nothing reads.
`copy_async` brings the same vectors into the same words without registers (cp.async, sm_80 on),
for the tensor-core GEMM's ring of k-tiles in flight; its CPU twin copies them in place.
`copy_pairs` does so for 16-bit operands already laid out as the pair tiles hold them: an fp16 or
bf16 layer's x, whose neighbours along k are a pair, and w_t packed as pairs along k once, when the
model is built (`pack_pairs`): no registers, no conversions, half the bytes of fp32 operands.
With `w_nk` the packed w_t comes as its transpose, (N, K / 2) words (`pack_pairs_nk`), and its tile
holds a row of pairs a column of out, laid out as x's: both operands' fragments are then whole
16-byte rows of 8 x 8 matrices, which `ldmatrix` loads four at a time (projection_mma.py).
"""
from __future__ import annotations

import types

from tvm.script import tirx as T

from .persistent.dot_mma import f16_pair, pair_convert

#: floats of padding per shared row of x (row-major) and of w_t with the tensor cores' tiles
X_ROW_PAD, W_ROW_PAD = 4, 8

CP_ASYNC = r"""
__device__ __forceinline__ void prnn_cp_async16(void* dst, const void* src, int bytes) {
  // 16 bytes global -> shared through L2 only (.cg), no registers; the bytes past `bytes` are zeros
  unsigned int to = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(to), "l"(src), "r"(bytes) : "memory");
}
"""
CP_COMMIT = r"""
__device__ __forceinline__ void prnn_cp_commit() {
  // the copies this thread issued since the last commit form one group
  asm volatile("cp.async.commit_group;" ::: "memory");
}
"""
CP_WAIT = r"""
__device__ __forceinline__ void prnn_cp_wait_%d() {
  // until at most %d of this thread's groups are still in flight
  asm volatile("cp.async.wait_group %d;" ::: "memory");
}
"""


def commit_copies():
    """Close this thread's group of async copies."""
    return T.cuda.func_call("prnn_cp_commit", source_code=CP_COMMIT)


def wait_copies(pending: int):
    """Wait until at most `pending` of this thread's groups of async copies are in flight."""
    return T.cuda.func_call(f"prnn_cp_wait_{pending}", source_code=CP_WAIT % (pending, pending, pending))


def packs_pairs(K: int, N: int, BK: int, BN: int, NT: int) -> bool:
    """Whether a tensor-core tile can be staged as 16-bit pairs (`gemm_staging`'s `pack`): float4
    loads of both operands, and an even number of w_t vectors a thread, taken two rows at a time."""
    return K % 4 == 0 and N % 4 == 0 and BK * BN // (NT * 4) % 2 == 0


def pack_pairs(w_t, bf16: bool):
    """w_t (K, N) of 16-bit values (numpy, K even) as (K / 2, N) uint32 words, rows 2i and 2i + 1
    in the low and high halves of row i: the pairs along k an m16n8k16 B fragment register holds.
    Rounded to nearest even, as `cvt.rn` rounds them at staging (exact for 16-bit values)."""
    import ml_dtypes
    import numpy as np

    bits = np.asarray(w_t, "float32").astype(ml_dtypes.bfloat16 if bf16 else np.float16).view(np.uint16).astype(np.uint32)
    return bits[0::2] | (bits[1::2] << np.uint32(16))


def pack_pairs_nk(w_t, bf16: bool):
    """`pack_pairs(w_t)` transposed, (N, K / 2) uint32 words: a column of out's pairs along k in a
    row, as x holds them (`gemm_staging`'s `w_nk`)."""
    import numpy as np

    return np.ascontiguousarray(pack_pairs(w_t, bf16).T)


def copies_pairs(K: int, N: int, BM: int, BN: int, BK: int, NT: int, w_nk: bool = False) -> bool:
    """Whether a tile's 16-bit operands can be copied as they lie in global memory (`copy_pairs`):
    rows of x and of the packed w_t (`w_nk`: of its transpose) that are whole 16-byte vectors, as
    many a thread."""
    w_copies = BN * BK // 8 if w_nk else BK // 2 * BN // 4
    return K % 8 == 0 and N % 4 == 0 and BM * BK // 8 % NT == 0 and w_copies % NT == 0


def gemm_staging(K: int, N: int, BM: int, BN: int, BK: int, NT: int, mma_tiles: bool = False,
                 pack: str | None = None, emulate: bool = False, w_nk: bool = False) -> types.SimpleNamespace:
    """The staging of a BM x BN CTA tile by NT threads, BK columns of x a round: `fetch(x, w, ra,
    rb, reg, by, bx, t, kt, n_m)`, `stage(a_s, b_s, ra, rb, reg, t)`, the shared tiles' sizes
    `x_words` and `w_words`, the words `x_word(row, k)` and `w_word(k, column)` (FMA: 4 rows of x
    from a multiple of 4 are 4 contiguous words), and the register counts A_LOADS * VK (x) and
    B_LOADS * VN (w_t) a thread holds, beside the k-slice BK and thread count NT it was made for.

    `pack` ("f16" or "bf16", tensor-core tiles where `packs_pairs`): the tiles hold the operands
    as 16-bit pairs along k (uint32 words), rounded once at staging, so that an m16n8k16 fragment
    register is one word read, against two fp32 reads and a convert on every use, which left the
    16-bit GEMM waiting on shared memory (docs/design.md, *The input projection*).
    x_word(row, kp) and w_word(kp, column) then index k-pairs kp = k // 2, each word value k in
    its low half and k + 1 in its high half; a thread's w_t vectors come two rows (k, k + 1) at
    the same columns, which it packs: on the GPU one `cvt.rn.{f16,bf16}x2.f32` a pair, in the CPU
    twin (`emulate`) the same rounding in integer arithmetic (`f16_pair`). `copy_pairs(x, wp, ...)`
    copies 16-bit x and the packed w_t into those tiles (`copies_pairs`); `w_nk`: the packed w_t
    transposed (`pack_pairs_nk`), its tile then a row of pairs a column, w_word(kp, column) in it
    as x_word(column, kp) in x's."""
    VK = 4 if K % 4 == 0 else 1  # x loads along K, float4 when rows stay 16-byte aligned
    VN = 4 if N % 4 == 0 else 1  # w_t loads and out stores along N
    A_LOADS = BM * BK // (NT * VK)  # x vectors a thread fetches per k-tile
    B_LOADS = BK * BN // (NT * VN)
    assert pack is None or (mma_tiles and (packs_pairs(K, N, BK, BN, NT) or copies_pairs(K, N, BM, BN, BK, NT, w_nk))), \
        "16-bit pairs need tensor-core tiles, and packs_pairs or copies_pairs"
    assert not w_nk or pack is not None, "w_t transposed comes as pairs"
    pairs = pack is not None  # (a bool: TVMScript's `if` takes no None)
    convert = pair_convert(pack == "bf16")
    k_vectors = BK // VK  # a row's vectors of x per k-tile: consecutive threads take them
    # k-major swizzle: XOR the row's group of 4 by a multiple of `step` / 4 per k-vector, so the
    # 32 // k_vectors rows that a warp stores land in distinct banks for each of its k-vectors
    # (32 // step different offsets, all below 32 <= BM)
    step = max(4, 32 // k_vectors)
    x_stride, w_stride = (BK + X_ROW_PAD, BN + W_ROW_PAD) if mma_tiles else (BM, BN)
    if pairs:  # a row of x holds BK / 2 pairs (4 words of padding: a fragment's 8 x 4 lanes hit 32 banks)
        x_stride = BK // 2 + X_ROW_PAD
    x_words, w_words = (BM * x_stride, BK // (2 if pairs else 1) * w_stride) if mma_tiles else (BK * BM, BK * BN)
    if w_nk:  # a row of pairs a column of out, padded as x's rows
        w_words = BN * x_stride

    def x_word(row, k):
        if mma_tiles:
            return row * x_stride + k
        return k * BM + (row // 4 ^ step // 4 * (k // VK % (32 // step))) * 4 + row % 4

    def w_word(k, col):
        if w_nk:
            return col * x_stride + k
        return k * w_stride + col

    def x_vector(e, t):
        """(row, k) within the tile of thread t's e-th vector of x: VK consecutive k of one row."""
        return (e * NT + t) // (BK // VK), (e * NT + t) % (BK // VK) * VK

    def w_vector(e, t):
        """(k, column) within the tile of thread t's e-th vector of w_t: VN consecutive columns
        (`pack`: vectors 2i and 2i + 1 at rows 2r and 2r + 1 of the same columns)."""
        if pairs:
            i = e // 2 * NT + t
            return i // (BN // VN) * 2 + e % 2, i % (BN // VN) * VN
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
    def pair(dst, v, lo, hi):
        """dst[v] = lo and hi rounded to 16 bits, lo in the low half."""
        if emulate:
            dst[v] = f16_pair(lo, hi, pack == "bf16")
        else:
            convert(dst[v], hi, lo)  # the first source goes to the high half

    @T.macro
    def stage_pairs(a_s, b_s, ra, rb, reg, t):
        """x's 4-vectors as two pairs each, w_t's vectors of rows 2r and 2r + 1 as 4 pairs, each
        vector's pairs stored at once."""
        words = T.alloc_buffer((VN,), "uint32", scope="local")
        for e in T.unroll(A_LOADS):
            for v in T.unroll(2):
                pair(words, v, ra[reg, e * VK + 2 * v], ra[reg, e * VK + 2 * v + 1])
            for v in T.vectorized(2):
                a_s[x_word(x_vector(e, t)[0], x_vector(e, t)[1] // 2) + v] = words[v]
        for e in T.unroll(B_LOADS // 2):
            for v in T.unroll(VN):
                pair(words, v, rb[reg, 2 * e * VN + v], rb[reg, (2 * e + 1) * VN + v])
            for v in T.vectorized(VN):
                b_s[w_word(w_vector(2 * e, t)[0] // 2, w_vector(2 * e, t)[1]) + v] = words[v]

    @T.macro
    def stage_values(a_s, b_s, ra, rb, reg, t):
        for e in T.unroll(A_LOADS):
            if mma_tiles:
                for v in T.vectorized(VK):
                    a_s[x_word(x_vector(e, t)[0], x_vector(e, t)[1]) + v] = ra[reg, e * VK + v]
            else:
                for v in T.unroll(VK):
                    a_s[x_word(x_vector(e, t)[0], x_vector(e, t)[1] + v)] = ra[reg, e * VK + v]
        for e in T.unroll(B_LOADS):
            for v in T.vectorized(VN):
                b_s[w_word(w_vector(e, t)[0], w_vector(e, t)[1]) + v] = rb[reg, e * VN + v]

    @T.macro
    def stage(a_s, b_s, ra, rb, reg, t):
        """Registers into shared memory: x row-major (`mma_tiles`) or k-major, w_t as it is;
        `pack`: both as 16-bit pairs along k."""
        if pairs:
            stage_pairs(a_s, b_s, ra, rb, reg, t)
        else:
            stage_values(a_s, b_s, ra, rb, reg, t)

    @T.macro
    def copy_vectors(src, dst, off, loads, vector, word, row0, col0, n_rows, n_cols, t, emulate, halves=False):
        """Thread t's `loads` 16-byte vectors of one operand's tile at (row0, col0) into the shared
        words `word(...)` + off, zeros outside n_rows x n_cols (a vector is wholly in or out):
        4 words, or (`halves`) 8 16-bit values, which the CPU twin packs into 4 pairs."""
        for e in T.unroll(loads):
            inside = T.And(row0 + vector(e, t)[0] < n_rows, col0 + vector(e, t)[1] < n_cols)
            if emulate:
                for v in range(4):
                    if not inside:
                        dst[off + word(vector(e, t)[0], vector(e, t)[1]) + v] = T.Cast(dst.dtype, T.float32(0))
                    elif halves:
                        dst[off + word(vector(e, t)[0], vector(e, t)[1]) + v] = f16_pair(
                            T.Cast("float32", src[row0 + vector(e, t)[0], col0 + vector(e, t)[1] + 2 * v]),
                            T.Cast("float32", src[row0 + vector(e, t)[0], col0 + vector(e, t)[1] + 2 * v + 1]),
                            pack == "bf16")
                    else:
                        dst[off + word(vector(e, t)[0], vector(e, t)[1]) + v] = src[row0 + vector(e, t)[0], col0 + vector(e, t)[1] + v]
            else:
                T.cuda.func_call("prnn_cp_async16", T.address_of(dst[off + word(vector(e, t)[0], vector(e, t)[1])]),
                                 T.address_of(src[T.if_then_else(inside, row0 + vector(e, t)[0], 0),
                                                  T.if_then_else(inside, col0 + vector(e, t)[1], 0)]),
                                 T.if_then_else(inside, 16, 0), source_code=CP_ASYNC)

    @T.macro
    def copy_async(x, w, a_s, b_s, a_off, b_off, by, bx, t, kt, n_m, emulate):
        """Thread t's share of k-tile kt of x and w_t straight into the shared tiles at word
        offsets a_off and b_off (tensor-core tiles, VK = VN = 4; serially in place: `emulate`)."""
        copy_vectors(x, a_s, a_off, A_LOADS, x_vector, x_word, by * BM, kt * BK, n_m, K, t, emulate)
        copy_vectors(w, b_s, b_off, B_LOADS, w_vector, w_word, kt * BK, bx * BN, K, N, t, emulate)

    #: 16-byte copies a thread makes per k-tile of 16-bit x (8 values of a row) and of the packed
    #: w_t (4 columns of a row of pairs; `w_nk`: 4 pairs of a column), where `copies_pairs`
    X_PAIR_COPIES, W_PAIR_COPIES = BM * BK // 8 // NT, (BN * BK // 8 if w_nk else BK // 2 * BN // 4) // NT

    def x_pair_vector(e, t):
        """(row, k) within the tile of thread t's e-th copy of 16-bit x: 8 values from k."""
        return (e * NT + t) // (BK // 8), (e * NT + t) % (BK // 8) * 8

    def w_pair_vector(e, t):
        """(pair row, column) within the tile of thread t's e-th copy of the packed w_t: 4 words."""
        return (e * NT + t) // (BN // 4), (e * NT + t) % (BN // 4) * 4

    def x_pair_word(row, k):
        """The pair tile's word that holds x's values k and k + 1 of `row` (k even)."""
        return x_word(row, k // 2)

    def w_nk_vector(e, t):
        """(column, pair) within the tile of thread t's e-th copy of the transposed packed w_t: 4 words."""
        return (e * NT + t) // (BK // 8), (e * NT + t) % (BK // 8) * 4

    def w_nk_word(col, kp):
        return w_word(kp, col)

    @T.macro
    def copy_pairs(x, wp, a_s, b_s, a_off, b_off, by, bx, t, kt, n_m, emulate):
        """Thread t's share of k-tile kt straight into the pair tiles at word offsets a_off and
        b_off: x (M, K) in 16 bits, whose neighbours along k already are the pairs, and w_t
        packed as pairs along k (`wp`, (K / 2, N) words; `w_nk`: (N, K / 2))."""
        copy_vectors(x, a_s, a_off, X_PAIR_COPIES, x_pair_vector, x_pair_word, by * BM, kt * BK, n_m, K, t, emulate, True)
        if w_nk:
            copy_vectors(wp, b_s, b_off, W_PAIR_COPIES, w_nk_vector, w_nk_word, bx * BN, kt * BK // 2, N, K // 2, t, emulate)
        else:
            copy_vectors(wp, b_s, b_off, W_PAIR_COPIES, w_pair_vector, w_word, kt * BK // 2, bx * BN, K // 2, N, t, emulate)

    return types.SimpleNamespace(fetch=fetch, stage=stage, copy_async=copy_async, copy_pairs=copy_pairs,
                                 x_words=x_words, w_words=w_words, x_word=x_word,
                                 w_word=w_word, x_vector=x_vector, w_vector=w_vector, VK=VK, VN=VN,
                                 A_LOADS=A_LOADS, B_LOADS=B_LOADS, BK=BK, NT=NT)
