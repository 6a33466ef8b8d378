"""The 16-bit input projection on Hopper's warpgroup tensor cores: wgmma.mma_async (sm_90a).

The pairs GEMM (`projection_mma.py`) runs mma.sync, one warp's 16 x 8 x 16 product an instruction,
its fragments read from shared memory into registers first; on the H200 it reaches about 250
TFLOP/s, and more warps, other tiles or ldmatrix did not move it. A wgmma takes both operands from
shared memory, described once (`DESCRIPTOR`), and computes four warps' 64 x BN x 16 product an
instruction, its accumulators in registers. Read top to bottom in `tile_program`:
    a CTA per 128 x BN tile of out (BN 96, 128, 160 or 256, `wgmma_plan`), two warpgroups of 64
    rows each;
    per k-tile of 64 columns: 16-byte cp.async copies of x (M, K) in its 16 bits and of w_t packed
    transposed (`gemm_staging.pack_pairs_nk`: (N, K / 2) words, each column of out's pairs along
    k in a row) into a ring of STAGES tiles, STAGES - 1 ahead, each tile rows of 128 bytes under
    the 128-byte swizzle the descriptors name (`swizzled_word`);
    wait for the k-tile, make the copies visible to the tensor cores (`fence.proxy.async`), sync;
    four wgmma of k = 16 a warpgroup, committed and waited for before the slot is copied over;
    then out = acc + b from the accumulators (`d_fragment`, the PTX ISA's layout).
Both operands are K-major, so neither is transposed; products of 16-bit values are exact and the
sums are fp32, as in the pairs GEMM. A build for sm_90a takes it where it pays (`wgmma_pays`);
where the rows are known only at run time (a symbolic batch), `wgmma_gemm_by_rows` launches it
for rows that fill the GPU and the pairs GEMM's ldmatrix plans, which read the same w_t, for fewer.
`emulated_projection_wgmma_kernel` runs the same copies into the same swizzled words serially on
the CPU, and each thread's accumulators as `d_fragment` places them, read back through the swizzle.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .built_once import built_once
from .early_launch import after_previous_kernel, allow_next_kernel
from .gemm_signature import gemm_func, launch_by_rows, tile_grid
from .gemm_staging import CP_ASYNC, commit_copies, wait_copies
from .persistent.dot_mma import f16_half, f16_pair
from .projection_mma import HALF_DTYPES, c_fragment, fits_one_wave, pairs_plan_copies, pairs_plan_launch

BM, BK = 128, 64  # the CTA's rows of out, and the k-columns of a tile of the ring
#: the CTA's columns of out a kernel may be built with (a warpgroup's wgmma is m64nBNk16)
TILE_N = (96, 128, 160, 256)
NT = 256  # two warpgroups, each 64 of the BM rows
ROW_WORDS = BK // 2  # a tile row: 64 16-bit values, 128 bytes
ALIGN_WORDS = 256  # the swizzle repeats every 8 rows (1024 bytes): tiles start on such a boundary

#: a K-major tile of 128-byte rows under the 128-byte swizzle, as a wgmma descriptor: start address,
#: leading offset unused (1), 8-row groups 1024 bytes apart (stride), swizzle mode 1
DESCRIPTOR = r"""
  unsigned long long %s = (((unsigned int)__cvta_generic_to_shared(%s) & 0x3FFFF) >> 4)
      | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);"""

SMEM_WORD = r"""
__device__ __forceinline__ unsigned int prnn_smem_word(const void* p) {
  // the shared-memory word address of p (alignment of the ring)
  return ((unsigned int)__cvta_generic_to_shared(p)) >> 2;
}
"""

FENCE_PROXY_ASYNC = r"""
__device__ __forceinline__ void prnn_fence_proxy_async() {
  // this thread's cp.async writes to shared memory made visible to the tensor cores' reads
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
"""


#: the plan a layer's GEMM takes where `wgmma_pays`: 3 k-tiles in the ring, 128 x 128 tiles (two
#: CTAs an SM; 128 x 256 tiles, one an SM, were 8-15% slower: docs/data/projection-wgmma-h200.jsonl)
WGMMA_PLAN = {"stages": 3, "tile_n": 128}
#: the least K at which it pays (at K = 384 it tied the pairs GEMM)
WGMMA_MIN_K = 512
#: the tile widths `wgmma_plan` weighs, each with a tile's time relative to a 128-column tile's (all
#: three hold two CTAs an SM), fit kernel alone on the H200 (docs/data/projection-wgmma-h200.jsonl,
#: run E): 96 columns from the one-wave (800, 768) x (768, 3072) (18.6 against 21.9 us), 160 from
#: (3200, 768) x (768, 3072) (two waves of 160 in 59.6 us against three of 128 in 64.8)
WAVE_TILES_N = {96: 0.85, 128: 1.0, 160: 1.38}
#: how much sooner another width's waves must end for the plan to leave WGMMA_PLAN's: the wave
#: model's error on run E's 13 shapes (at (6400, 1024) x (1024, 4096) it has 160 columns 1.4%
#: sooner; they ran 0.8% later)
WAVE_MARGIN = 0.95


def wgmma_arch(arch: str | None) -> bool:
    """Whether code for CUDA architecture `arch` may use wgmma: Hopper's arch-specific form, sm_90a."""
    return arch == "sm_90a"


def wgmma_fills(M, N: int, num_sms: int):
    """Whether M rows' grid of 128 x 128 tiles holds a CTA for every SM (M an int, or the runtime
    rows)."""
    return (M + BM - 1) // BM * ((N + WGMMA_PLAN["tile_n"] - 1) // WGMMA_PLAN["tile_n"]) >= num_sms


def wgmma_pays(M: int | None, K: int, N: int, num_sms: int) -> bool:
    """Whether a 16-bit GEMM of M rows (known when the model is built) whose x and w_t are copied
    as they lie goes to this kernel rather than the pairs GEMM: K >= WGMMA_MIN_K and a grid of 128 x
    128 tiles of at least one CTA an SM. Kernel alone on the H200 against the pairs GEMM's plan
    (docs/data/projection-wgmma-h200.jsonl): (800, 768) x (768, 3072) 27.0 -> 21.6 us, (3200, 768) x
    (768, 3072) 70.9 -> 64.8, (6400, 1024) x (1024, 4096) 206.3 -> 156.0, (3200, 512) x (512, 2048)
    40.5 -> 38.2; with fewer CTAs than SMs it lost ((100, 1024) x (1024, 4096) 9.5 -> 14.6)."""
    return M is not None and _takes_k(K) and wgmma_fills(M, N, num_sms)


def _takes_k(K: int) -> bool:
    """Whether K is deep enough for the wgmma GEMM to pay (WGMMA_MIN_K) and in whole 16-byte copies."""
    return K >= WGMMA_MIN_K and K % 8 == 0


def by_rows_pays(K: int, N: int) -> bool:
    """Whether a 16-bit GEMM of K and N whose x and w_t are copied as they lie, its rows known only
    at run time, takes `wgmma_gemm_by_rows`: K >= WGMMA_MIN_K, in whole 16-byte copies, and the
    ldmatrix plans of the pairs GEMM that serve fewer rows copy it too."""
    return _takes_k(K) and all(pairs_plan_copies(K, N, name, ldmatrix=True) for name in BY_ROWS_PAIRS_PLANS)


def wgmma_plan(M: int, N: int, num_sms: int) -> dict:
    """The plan of a GEMM of M x N out: WGMMA_PLAN, or the tile width of WAVE_TILES_N whose waves
    of two CTAs an SM end first where they end WAVE_MARGIN sooner. (3200, 768) x (768, 3072) on
    132 SMs: 600 tiles of 128 columns are 2.27 waves, three wave-times; 500 of 160 columns two,
    each 1.38 times as long."""
    def waves_time(tile_n):
        tiles = (M + BM - 1) // BM * ((N + tile_n - 1) // tile_n)
        return (tiles + 2 * num_sms - 1) // (2 * num_sms) * WAVE_TILES_N[tile_n]
    base = WGMMA_PLAN["tile_n"]
    best = min(WAVE_TILES_N, key=waves_time)
    return dict(WGMMA_PLAN, tile_n=best if waves_time(best) <= WAVE_MARGIN * waves_time(base) else base)


def wgmma_shared_bytes(stages: int, tile_n: int, bm: int = BM) -> int:
    """Shared memory a CTA allocates: the ring and a 1024-byte boundary's slack."""
    return 4 * (stages * (bm + tile_n) * ROW_WORDS + ALIGN_WORDS)


def _accumulators(count: int) -> str:
    """The asm operands of accumulators d[0..count): read and written, so that the compiler keeps
    them in place around the asynchronous wgmma."""
    return ", ".join(f'"+f"(d[{i}])' for i in range(count))


def wgmma_source(kind: str, n: int) -> str:
    """prnn_wgmma_<kind>_n<n>(d, a, b): d (64 x n of fp32 over the warpgroup) += a (64 x 16) b (16 x n),
    a and b K-major tiles in shared memory."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    return f"""
__device__ __forceinline__ void prnn_wgmma_{kind}_n{n}(float* d, const void* a, const void* b) {{{DESCRIPTOR % ("da", "a")}{DESCRIPTOR % ("db", "b")}
  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{regs}}}, %{n // 2}, %{n // 2 + 1}, 1, 1, 1, 0, 0;"
               : {_accumulators(n // 2)} : "l"(da), "l"(db));
}}
"""


def fence_source(n: int) -> str:
    """prnn_wgmma_fence_n<n>(d): before a warpgroup's wgmma."""
    return f"""
__device__ __forceinline__ void prnn_wgmma_fence_n{n}(float* d) {{
  asm volatile("wgmma.fence.sync.aligned;" : {_accumulators(n // 2)} :: "memory");
}}
"""


def commit_wait_source(n: int) -> str:
    """prnn_wgmma_commit_wait_n<n>(d): close the warpgroup's batch of wgmma and wait for it."""
    return f"""
__device__ __forceinline__ void prnn_wgmma_commit_wait_n{n}(float* d) {{
  asm volatile("wgmma.commit_group.sync.aligned;\\n\\twgmma.wait_group.sync.aligned 0;" : {_accumulators(n // 2)} :: "memory");
}}
"""


def swizzled_word(row, chunk):
    """The word of a tile at which 16-byte chunk `chunk` (0-7) of `row` starts: rows of 32 words,
    chunk c of row r at chunk c ^ (r % 8), the 128-byte swizzle (address bits 4-6 XOR bits 7-9)."""
    return row * ROW_WORDS + (chunk ^ (row % 8)) * 4


def d_fragment(warp: int, lane: int, i: int) -> tuple[int, int]:
    """(row, column) within a warpgroup's 64 x BN of out of its accumulator i of `lane` of `warp`
    (0-3): each warp 16 rows, each 8 columns an m16n8 C fragment (PTX ISA, wgmma .m64nNk16 D)."""
    row, col = c_fragment(lane, i % 4)
    return 16 * warp + row, 8 * (i // 4) + col


def _launch(K: int, N: int, dtype: str, BN: int, STAGES: int, emulate: bool, bm: int = BM, splits: int = 1,
            x_words: bool = False, early: bool = False):
    """The macro launch(x, w, b, out, n_m): a CTA of a warpgroup per 64 of its `bm` rows per bm x BN
    tile of out (serially, on the CPU: `emulate`). `splits` > 1 (the GEMM scan's step,
    `split_k_launch`): a CTA per tile and per split of K's k-tiles (`splits` dividing them:
    `split_k_problem`), each writing its partial sums to its own (n_m, N) of out, (splits * n_m, N),
    b added by split 0. `x_words`: x comes as 32-bit
    words of two 16-bit values, (n_m, K / 2), any 32-bit dtype. `early`: launched early, it waits
    for the kernel ahead before touching anything (early_launch.py)."""
    KT = (K + BK - 1) // BK
    KTS = KT // splits  # k-tiles a split
    NT = 2 * bm  # threads: a warpgroup per 64 rows
    ACC = BN // 2  # accumulators a thread holds: 64 x BN over a warpgroup's 128 threads
    X_WORDS, W_WORDS = bm * ROW_WORDS, BN * ROW_WORDS  # a slot's tiles
    SLOT = X_WORDS + W_WORDS
    kind = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    bf16 = dtype == "bfloat16"

    def k_tile(split, kt):
        """K's k-tile that is k-tile kt of its `split`."""
        return kt if splits == 1 else split * KTS + kt

    def word(src, row, col):
        """src's 32-bit word at (row, col) as the ring holds it (the CPU twin's copy)."""
        return src[row, col] if src.dtype == "uint32" else T.reinterpret("uint32", src[row, col])

    @T.macro
    def copy_rows(src, s, off, rows, row0, n_rows, t, kt, words):
        """Thread t's 16-byte chunks of k-tile kt of `rows` rows of src from row0 into the tile at
        word `off`, 8 a row, zeros past n_rows and K (`words`: src holds 32-bit words, 4 a chunk;
        else 16-bit values, which the CPU twin packs two a word as the copy lays them)."""
        for e in T.unroll(rows * 8 // NT):
            row = (e * NT + t) // 8
            chunk = (e * NT + t) % 8
            inside = T.And(row0 + row < n_rows, kt * BK + chunk * 8 < K)
            col = kt * ROW_WORDS + chunk * 4 if words else kt * BK + chunk * 8
            if emulate:
                for v in range(4):
                    if not inside:
                        s[off + swizzled_word(row, chunk) + v] = T.uint32(0)
                    elif words:
                        s[off + swizzled_word(row, chunk) + v] = word(src, row0 + row, col + v)
                    else:
                        s[off + swizzled_word(row, chunk) + v] = f16_pair(
                            T.Cast("float32", src[row0 + row, col + 2 * v]), T.Cast("float32", src[row0 + row, col + 2 * v + 1]), bf16)
            else:
                T.cuda.func_call("prnn_cp_async16", s.access_ptr("w", offset=off + swizzled_word(row, chunk)),
                                 T.address_of(src[T.if_then_else(inside, row0 + row, 0), T.if_then_else(inside, col, 0)]),
                                 T.if_then_else(inside, 16, 0), source_code=CP_ASYNC)

    @T.macro
    def copy_tile(x, wp, s, base, by, bx, t, split, kt, n_m):
        """Thread t's share of k-tile kt of `split` of x and of the packed w_t into ring slot kt % STAGES."""
        copy_rows(x, s, base + kt % STAGES * SLOT, bm, by * bm, n_m, t, k_tile(split, kt), x_words)
        copy_rows(wp, s, base + kt % STAGES * SLOT + X_WORDS, BN, bx * BN, N, t, k_tile(split, kt), True)

    def tile_place(t, i):
        """(row, column) within the CTA's tile of out of thread t's accumulator i: its warpgroup's
        64 rows, then `d_fragment`."""
        row, col = d_fragment(t % 128 // 32, t % 32, i)
        return t // 128 * 64 + row, col

    def out_row(split, row, n_m):
        """The row of out that holds `split`'s sums of `row`."""
        return row if splits == 1 else split * n_m + row

    def bias(b, split, col):
        """b at col for split 0's sums, nothing for the other splits'."""
        return b[col] if splits == 1 else T.if_then_else(split == 0, b[col], T.float32(0))

    @T.macro
    def store_one(out, b, value, by, bx, t, split, i, n_m):
        """out = value + b at thread t's accumulator i's place, where it exists."""
        row = by * bm + tile_place(t, i)[0]
        col = bx * BN + tile_place(t, i)[1]
        if T.And(row < n_m, col < N):
            out[out_row(split, row, n_m), col] = value + bias(b, split, col)

    @T.macro
    def store(out, b, acc, by, bx, t, split, n_m):
        """out = acc + b for the rows and columns that exist."""
        for i in T.unroll(ACC):
            store_one(out, b, acc[i], by, bx, t, split, i, n_m)

    @T.macro
    def tile_program(x, wp, b, out, by, bx, t, split, n_m):
        s = T.alloc_buffer((wgmma_shared_bytes(STAGES, BN, bm) // 4,), "uint32", scope="shared.dyn")
        acc = T.alloc_buffer((ACC,), "float32", scope="local")
        if early:
            after_previous_kernel()
        else:
            T.evaluate(allow_next_kernel())
        # the ring's first word on a 1024-byte boundary, as the swizzle's descriptors need. The
        # address and the wgmma's operands are passed as accesses of no kind (access_ptr("")): the
        # sync after each k-tile's wait orders every read and write of the ring, and TVM, seeing
        # reads, would put a second __syncthreads between a k-tile's copies and its wgmma (1.02-1.04x
        # kernel alone without it, run I of docs/data/projection-wgmma-h200.jsonl) and refuse the
        # kernel inside a host branch (`wgmma_gemm_by_rows`)
        base = (ALIGN_WORDS - T.cuda.func_call("prnn_smem_word", s.access_ptr(""), source_code=SMEM_WORD,
                                               return_type="uint32") % ALIGN_WORDS) % ALIGN_WORDS
        for i in T.unroll(ACC):
            acc[i] = T.float32(0)
        for st in T.unroll(STAGES - 1):
            if st < KTS:
                copy_tile(x, wp, s, base, by, bx, t, split, st, n_m)
            T.evaluate(commit_copies())
        for kt in range(KTS):
            T.evaluate(wait_copies(STAGES - 2))
            T.cuda.func_call("prnn_fence_proxy_async", source_code=FENCE_PROXY_ASYNC)
            T.tvm_storage_sync("shared")  # k-tile kt is in; the slot of k-tile kt - 1 is free
            if kt + STAGES - 1 < KTS:
                copy_tile(x, wp, s, base, by, bx, t, split, kt + STAGES - 1, n_m)
            T.evaluate(commit_copies())
            T.cuda.func_call(f"prnn_wgmma_fence_n{BN}", T.address_of(acc[0]), source_code=fence_source(BN))
            for ks in T.unroll(BK // 16):
                T.cuda.func_call(f"prnn_wgmma_{kind}_n{BN}", T.address_of(acc[0]),
                                 s.access_ptr("", offset=base + kt % STAGES * SLOT + t // 128 * 64 * ROW_WORDS + ks * 8),
                                 s.access_ptr("", offset=base + kt % STAGES * SLOT + X_WORDS + ks * 8),
                                 source_code=wgmma_source(kind, BN))
            T.cuda.func_call(f"prnn_wgmma_commit_wait_n{BN}", T.address_of(acc[0]), source_code=commit_wait_source(BN))
        store(out, b, acc, by, bx, t, split, n_m)

    @T.macro
    def block_program(x, wp, b, out, by, bx, t, n_m):
        if BN == 160:  # two CTAs an SM only within 128 registers a thread (ptxas takes 136 unbounded)
            with T.attr(0, "tirx.launch_bounds_min_blocks_per_sm", 2):
                tile_program(x, wp, b, out, by, bx, t, 0, n_m)
        else:
            tile_program(x, wp, b, out, by, bx, t, 0, n_m)

    def value(s, off, row, k):
        """The 16-bit value at k (0-63) of `row` of the tile at word `off`, through the swizzle."""
        return f16_half(s[off + swizzled_word(row, k // 8) + k % 8 // 2], k % 2, bf16)

    @T.macro
    def emulated_tile(x, wp, b, out, by, bx, split, n_m):
        """A CTA's threads as serial loops: each k-tile's copies into its ring slot, then each
        thread's accumulators += the k-tile's products of the rows and columns `d_fragment` gives
        it, read from the slot as the wgmma's descriptors do."""
        s = T.alloc_buffer((STAGES * SLOT,), "uint32")
        acc = T.alloc_buffer((NT, ACC), "float32")
        for t, i in T.grid(NT, ACC):
            acc[t, i] = T.float32(0)
        for kt in range(KTS):
            for t in range(NT):
                copy_tile(x, wp, s, 0, by, bx, t, split, kt, n_m)
            for t, i, k in T.grid(NT, ACC, BK):
                acc[t, i] = acc[t, i] + (
                    value(s, kt % STAGES * SLOT, tile_place(t, i)[0], k)
                    * value(s, kt % STAGES * SLOT + X_WORDS, tile_place(t, i)[1], k))
        for t, i in T.grid(NT, ACC):
            store_one(out, b, acc[t, i], by, bx, t, split, i, n_m)

    @T.macro
    def emulated_blocks(x, wp, b, out, n_m):
        """The CTAs one after another (`emulated_tile`)."""
        for by in range((n_m + bm - 1) // bm):
            for bx in range((N + BN - 1) // BN):
                emulated_tile(x, wp, b, out, by, bx, 0, n_m)

    if splits == 1:
        return tile_grid(N, bm, BN, NT, block_program, emulated_blocks, emulate)

    @T.macro
    def split_launch(x, wp, b, out, n_m):
        if emulate:
            for split in range(splits):
                for by in range((n_m + bm - 1) // bm):
                    for bx in range((N + BN - 1) // BN):
                        emulated_tile(x, wp, b, out, by, bx, split, n_m)
        else:
            for split in T.thread_binding(splits, thread="blockIdx.z"):
                for by in T.thread_binding((n_m + bm - 1) // bm, thread="blockIdx.y"):
                    for bx in T.thread_binding((N + BN - 1) // BN, thread="blockIdx.x"):
                        for t in T.thread_binding(NT, thread="threadIdx.x"):
                            tile_program(x, wp, b, out, by, bx, t, split, n_m)

    return split_launch


def _build(K: int, N: int, precision: str, stages: int, tile_n: int, emulate: bool) -> tvm.tirx.PrimFunc:
    dtype = HALF_DTYPES.get(precision)
    if dtype is None:
        raise ValueError(f"the wgmma GEMM takes 16-bit operands: precision 'f16' or 'bf16', not {precision!r}")
    if K % 8:
        raise ValueError(f"the wgmma GEMM copies 16-byte chunks of x's rows: K={K} must be a multiple of 8")
    if stages < 2:
        raise ValueError(f"the wgmma GEMM copies k-tiles ahead: stages >= 2, not {stages}")
    if tile_n not in TILE_N:
        raise ValueError(f"the wgmma GEMM's tile of out is 128 x {TILE_N}, not 128 x {tile_n}")
    info = {"mma": precision, "wgmma": True, "stages": stages, "tile_n": tile_n, "w_pairs": True, "w_nk": True}
    return gemm_func(K, N, _launch(K, N, dtype, tile_n, stages, emulate), info, dtype, w_pairs=True, w_nk=True)


#: the rows of out a CTA may take in the GEMM scan's step (`split_k_launch`): a warpgroup per 64
SCAN_TILE_M = (64, 128)


#: the most shared memory an sm_90 CTA may take (227 KiB; schedule/gpu.py's MAX_SHARED_BYTES[90]):
#: wgmma exists on sm_90a alone, so it bounds the step's ring
SM90_SHARED_BYTES = 232448


def deepest_ring(bm: int, tile_n: int) -> int:
    """The most k-tiles a ring of `bm` + `tile_n` rows holds within an sm_90 CTA's shared memory."""
    return (SM90_SHARED_BYTES // 4 - ALIGN_WORDS) // ((bm + tile_n) * ROW_WORDS)


def split_k_problem(K: int, N: int, bm: int, tile_n: int, splits: int, stages: int = WGMMA_PLAN["stages"]) -> str:
    """Why `split_k_launch` cannot run a GEMM of K and N so (empty when it can)."""
    k_tiles = (K + BK - 1) // BK
    if K % 8:
        return f"K={K} is not a multiple of 8 (16-byte copies of x's rows)"
    if bm not in SCAN_TILE_M or tile_n not in TILE_N:
        return f"a CTA tile of {bm} x {tile_n}: rows one of {SCAN_TILE_M}, columns one of {TILE_N}"
    if splits < 1 or k_tiles % splits:
        return f"{splits} splits do not divide K={K}'s {k_tiles} k-tiles of {BK}"
    if stages < 2:
        return f"a ring of {stages} k-tiles: the step copies k-tiles ahead, stages >= 2"
    if wgmma_shared_bytes(stages, tile_n, bm) > SM90_SHARED_BYTES:
        return (f"a ring of {stages} k-tiles of {bm} + {tile_n} rows takes {wgmma_shared_bytes(stages, tile_n, bm)} "
                f"bytes of shared memory, past an sm_90 CTA's {SM90_SHARED_BYTES}")
    return ""


def split_k_launch(K: int, N: int, precision: str, bm: int, tile_n: int, splits: int, emulate: bool = False,
                   early: bool = False, stages: int = WGMMA_PLAN["stages"]):
    """The macro launch(x, w, b, out, n_m) of the GEMM scan's step (gemm_scan.py): x, h(t-1) in
    16-bit pairs as 32-bit words (n_m, K / 2); w, R packed so ((N, K / 2) words, `pack_pairs_nk`'s
    layout: R is w_t transposed); out, `splits` partial sums of (n_m, N) one after another, b in
    the first. A CTA per bm x tile_n tile of out and split of K: at the scan's few rows, splitting K
    gives the GPU CTAs enough where the tiles alone leave SMs idle, each a shorter chain of
    k-tiles. `early`: each CTA waits for the kernel ahead before touching anything. `stages`: the
    k-tiles its ring holds, stages - 1 of them in flight while the tensor cores take one."""
    dtype = HALF_DTYPES.get(precision)
    problem = (split_k_problem(K, N, bm, tile_n, splits, stages)
               or ("" if dtype else f"precision {precision!r} is not 16-bit"))
    if problem:
        raise ValueError(f"the wgmma step GEMM cannot run: {problem}")
    return _launch(K, N, dtype, tile_n, stages, emulate, bm=bm, splits=splits, x_words=True, early=early)


#: the pairs GEMM's plans that serve the rows too few for a CTA an SM, w_t read transposed
BY_ROWS_PAIRS_PLANS = ("one wave", "between")


def _build_by_rows(K: int, N: int, precision: str, num_sms: int, emulate: bool) -> tvm.tirx.PrimFunc:
    """The 16-bit GEMM whose kernel waits for the runtime rows (a symbolic batch): the wgmma GEMM's
    WGMMA_PLAN where its tiles hold a CTA for every SM (`wgmma_fills`), else the pairs GEMM's plan
    for the rows with its fragments by ldmatrix, which reads the same transposed w_t."""
    dtype = HALF_DTYPES.get(precision)
    if dtype is None or not by_rows_pays(K, N):
        raise ValueError(f"the wgmma GEMM by rows takes 16-bit operands, K >= {WGMMA_MIN_K} (a multiple of 8) and "
                         f"the ldmatrix plans' copies: not {precision} with K={K}, N={N}")
    wgmma = _launch(K, N, dtype, WGMMA_PLAN["tile_n"], WGMMA_PLAN["stages"], emulate)
    one_wave, between = (pairs_plan_launch(K, N, precision, name, emulate, ldmatrix=True) for name in BY_ROWS_PAIRS_PLANS)
    launch = launch_by_rows([(lambda n_m: wgmma_fills(n_m, N, num_sms), wgmma),
                             (lambda n_m: fits_one_wave(n_m, N, num_sms), one_wave)], between)

    info = {"mma": precision, "wgmma": True, "plan": f"by rows, {num_sms} SMs", "w_pairs": True, "w_nk": True}
    return gemm_func(K, N, launch, info, dtype, w_pairs=True, w_nk=True)


@built_once
def wgmma_gemm_by_rows(K: int, N: int, precision: str, num_sms: int = 132) -> tvm.tirx.PrimFunc:
    """The wgmma GEMM for rows known only at run time, the pairs GEMM's ldmatrix plans below a CTA
    an SM (`_build_by_rows`); w given as the packed w_t transposed (`pack_pairs_nk`)."""
    return _build_by_rows(K, N, precision, num_sms, emulate=False)


@built_once
def emulated_wgmma_gemm_by_rows(K: int, N: int, precision: str, num_sms: int = 132) -> tvm.tirx.PrimFunc:
    """The same dispatch over the CPU twins: for tests."""
    return _build_by_rows(K, N, precision, num_sms, emulate=True)


@built_once
def projection_wgmma_kernel(K: int, N: int, precision: str = "f16", stages: int = 3,
                            tile_n: int = 128) -> tvm.tirx.PrimFunc:
    """The wgmma GEMM for x (M, K) in the 16 bits of `precision` ("f16", "bf16") @ w_t, w given as
    the packed w_t transposed (`pack_pairs_nk`), + b; a CTA per 128 x `tile_n` of out, `stages`
    k-tiles of 64 columns in its ring."""
    return _build(K, N, precision, stages, tile_n, emulate=False)


@built_once
def emulated_projection_wgmma_kernel(K: int, N: int, precision: str = "f16", stages: int = 3,
                                     tile_n: int = 128) -> tvm.tirx.PrimFunc:
    """The same copies and accumulators run serially on the CPU (llvm): for tests."""
    return _build(K, N, precision, stages, tile_n, emulate=True)
