"""The input projection xw = x @ w_t + b on the tensor cores: mma.sync m16n8k8 (TF32) or m16n8k16 (16-bit).

The FMA GEMM (`projection.py`) reaches ~38 TFLOP/s on the H100, ~0.43 ms of an LSTM H=1024 B=20
layer. This one computes the same tiles with the tensor cores, at the layer's precision:
"3xtf32" (each operand split into a TF32 high part and the fp32 remainder, three mma: fp32
accuracy, as the recurrent step's tensor-core configs), "tf32" (operands rounded to TF32, one
mma: a build at precision "tf32"), or "f16" / "bf16" (an fp16 or bf16 layer, whose x and W are
16-bit values: two a register, one m16n8k16 mma, exact products). Read top to bottom in
`block_program`:
    per k-tile: registers -> shared memory (x row-major, rows of both padded so that the 16-byte
    stores and a fragment's lanes hit 32 banks; 16-bit operands as pairs along k, one word a
    fragment register: `gemm_staging`), sync, next tile's global loads issued,
    each warp's 32 x 32 (or 64 x 32, 64 x 64) of the CTA's 64 x 64 (or 128 x 128) tile as 2 x 4
    (4 x 4, 4 x 8) mma tiles (`warp_products`, 16-bit: `warp_products_16`), sync
    then out = acc + b from the C fragments.
Where the grid fits one wave (`gemm_plan`), G groups of four warps share the CTA's tile, each taking
1/G of a k-tile's slices; groups 1.. hand their sums to group 0 through shared memory
(`sum_groups`) before it stores. With STAGES > 0 k-tiles are in flight: cp.async copies them into
a ring of shared tiles (`block_program_async`), no registers between. A 16-bit layer's GEMM whose
weights are constants does so (`w_pairs`): its x is already in 16 bits and w_t is packed as pairs
along k when the model is built, so both are copied as the pair tiles hold them (`copy_pairs`);
where the grid is large, a CTA takes a 128 x 128 tile of out, 4 warps of 64 x 64 (`CTA_TILES`).
With `ldmatrix`, w_t comes packed as its transpose (`pack_pairs_nk`), so that both tiles hold a row
of pairs along k per row of out or column of out, and a warp loads a k-slice's fragments four
8 x 8 matrices an instruction (`warp_products_ldmatrix`), against a shared load a register. On the
H200 that was 0-6% slower at the big-tile plan's shapes, 8-19% at the plan between's, 2% faster at
one wave's (kernel alone, docs/data/projection-ldmatrix-h200.jsonl), so no plan takes it: a quarter
of the load instructions did not shorten a GEMM that waits elsewhere.
`emulated_projection_mma_kernel` runs the same staging serially on the CPU and takes each
product as the mma defines it (operands rounded or split as the GPU's are); the fragments' lane
and register maps are checked against the PTX ISA's figures on plain ints (`a_fragment`,
`b_fragment`, `c_fragment`).

Signature: x (M, K), w_t (K, N), b (N,) -> out (M, N), all float32, M = T*B symbolic.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .built_once import built_once
from .config import MMA_K, MMA_K_F16, STATIC_SHARED_BYTES
from .early_launch import after_previous_kernel, allow_next_kernel
from .gemm_signature import gemm_func, launch_by_rows, tile_grid
from .gemm_staging import commit_copies, copies_pairs, gemm_staging, packs_pairs, wait_copies
from .projection import few_ctas, one_small_wave
from .persistent.dot_mma import MMA_BF16, MMA_F16, f16_half, half_bits, mma, pair_convert, tf32_rounded, tf32_split

LDMATRIX_X4 = r"""
__device__ __forceinline__ void prnn_ldmatrix_x4(unsigned int* r, const void* row) {
  // four 8 x 8 matrices of 16-bit values, each lane giving one 16-byte row: lanes 8i..8i+7 matrix
  // i, which lands in r[i], lane l holding its row l / 4's values 2 (l % 4) and 2 (l % 4) + 1
  unsigned int a = (unsigned int)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
"""

BM, BN, BK = 64, 64, 32  # the CTA's tile of out, and the k-slice per shared-memory round
#: the k-slices a kernel may be built with (more columns a round: fewer global-load latencies a tile)
K_SLICES = (32, 64, 128)
WM, WN = 32, 32  # a warp's tile of out
NT = (BM // WM) * (BN // WN) * 32  # threads of the 64 x 64 tile: 4 warps
#: the CTA tiles of out a kernel may be built with, as BM x BN x WM (a warp's rows; its columns
#: are WN) [x WN]: a larger tile reads each operand from L2 fewer times (`cta_tile`), a larger
#: warp tile each fragment from shared memory fewer times; 64 x BN past 64 columns, 4 warps of 32
#: x BN / 2 (the GEMM scan's step where 64 x 64 tiles would take two waves: gemm_scan_cost.py)
CTA_TILES = {"64x64": (64, 64, 32, WN), "128x64": (128, 64, 32, WN), "128x128": (128, 128, 32, WN),
             "128x128x64": (128, 128, 64, WN), "128x128x64x64": (128, 128, 64, 64),
             "128x256x64x64": (128, 256, 64, 64), "64x80": (64, 80, 32, 40), "64x96": (64, 96, 32, 48),
             "64x128": (64, 128, 32, 64)}
#: "3xtf32", "tf32": fp32 operands, three or one m16n8k8 mma; "f16", "bf16": operands that are
#: exactly 16-bit values (an fp16 or bf16 model's x and W, cast to fp32 by the importer), one
#: m16n8k16 mma, exact products, fp32 accumulation
PRECISIONS = ("3xtf32", "tf32", "f16", "bf16")
#: the precisions whose operands are 16-bit values (two a register, m16n8k16), and the dtype of
#: those values (an fp16 or bf16 layer's x as it comes)
HALF_DTYPES = {"f16": "float16", "bf16": "bfloat16"}
HALF_PRECISIONS = tuple(HALF_DTYPES)


def slice_k(precision: str) -> int:
    """Columns of one k-slice (one mma's K) at `precision`: 16 for 16-bit operands, else 8."""
    return MMA_K_F16 if precision in HALF_PRECISIONS else MMA_K


#: the least K at which a GEMM at precision "tf32" (one mma a product) on a full grid goes to the
#: tensor cores: kernel alone on the H200 against the FMA GEMM's tile, (6400, 384) x (384, 1152)
#: 154.4 -> 75.9 us, (3200, 256) x (256, 1024) 53.4 -> 27.9, (1600, 320) x (320, 1280) 34.2 -> 20.8,
#: (12800, 192) x (192, 576) 79.9 -> 45.9 (docs/data/projection-tf32-small-k-h200.jsonl)
TF32_MIN_K = 192


def tensor_cores_pay(M: int | None, K: int, N: int, num_sms: int, precision: str = "3xtf32") -> bool:
    """Whether a GEMM of M rows goes to this kernel rather than the FMA GEMM, M = T B known when the
    model is built: wherever the FMA GEMM's 32 x 32 grid would not fit one wave (`one_small_wave`)
    and either its 64 x 64 grid leaves SMs idle (`few_ctas`) or K >= 512 (at "tf32", K >=
    TF32_MIN_K: one mma a product where 3xTF32 takes three). On the H100, kernel
    alone, one run (docs/data/projection-banks-h100.jsonl), with conflict-free shared tiles:
    (100, 1024) x (1024, 4096) 27.3 us against the FMA GEMM's 45.7; (2000, 1024) x (1024, 4096)
    316 against 419; (100, 256) x (256, 1024), one wave of 32 x 32 tiles, 8.8 against 6.2. At
    K = 256 on a full grid the kernel alone won ((2000, 256) x (256, 1024): 25.0 against 28.4),
    but whole layers were mixed (docs/data/b10-b20-ab-h100.jsonl: GRU H=256 B=10 0.135 -> 0.143
    ms, B=20 0.168 -> 0.162), so the FMA GEMM keeps those at 3xTF32."""
    deep = K >= (TF32_MIN_K if precision == "tf32" else 512)
    return M is not None and not one_small_wave(M, N, num_sms) and (few_ctas(M, N, num_sms) or deep)


def gemm_plan(M: int, K: int, N: int, num_sms: int, precision: str, pairs_copied: bool = False) -> dict:
    """The k-tile (`bk`), `k_groups` and `stages` of a GEMM of M rows (`pairs_copied`: x in the
    16 bits of a 16-bit precision and w_t a constant that may be packed as pairs: `_pairs_plan`,
    which adds `tile` and `w_pairs`, where its copies take K and N), as measured on the H100
    (kernel alone, docs/data/projection-kgroups-h100.jsonl, pairs-gemm-h100.jsonl).
    - Where its 64 x 64 grid fills at most one wave, a CTA is alone on its SM with one warp a
      scheduler: ncu on (100, 1024) x (1024, 4096) at 3xTF32 found 0.38 instructions issued a
      cycle, the warps stalled on their own mma operands (docs/data/ncu-projection-mma-h100.txt).
      Two groups of four warps, each half of a 64-column k-tile, took it from 27.2 to 23.9 us; at
      16 bits (operands staged as pairs) four groups, 13.1 to 12.2.
    - Past one wave the CTAs share SMs and the groups' sum only costs ((2000, 1024) x (1024, 4096)
      313 -> 321 us), so one group, through registers. 16-bit operands staged as pairs there took
      (2000, 1024) x (1024, 4096) from 198 us (3 k-tiles in flight by cp.async, the fp32 values
      rounded at each use) to 132, (1000, 1024) x (1024, 4096) from 104 to 68; at 3xTF32 the
      copies had changed nothing (316 -> 317 us) and at TF32 they were mixed (192 -> 188 us,
      (1000, 1024) x (1024, 3072) 77 -> 84), so no plan of operands staged through registers
      keeps k-tiles in flight; 16-bit operands copied as they lie do (`_pairs_plan`). TF32's
      one-wave grid: 19.6 -> 15.4 us with 2 groups."""
    if pairs_copied and precision in HALF_PRECISIONS:
        plan = _pairs_plan(M, N, num_sms)
        if _copies(K, N, plan.get("tile", "64x64"), plan["bk"], plan["k_groups"]):
            return plan
    if fits_one_wave(M, N, num_sms):
        return {"bk": 64, "k_groups": 4 if precision in HALF_PRECISIONS else 2, "stages": 0}
    return {"bk": BK, "k_groups": 1, "stages": 0}


def fits_one_wave(M, N: int, num_sms: int):
    """Whether M rows' grid of 64 x 64 tiles fits one wave (M an int, or the runtime rows)."""
    return (M + BM - 1) // BM * ((N + BN - 1) // BN) <= num_sms


def _big_tiles_fill(M, N: int, num_sms: int):
    """Whether M rows' grid of 128 x 128 tiles fills the GPU at 2 CTAs an SM (M an int, or the runtime rows)."""
    return (M + 127) // 128 * ((N + 127) // 128) >= 2 * num_sms


#: the plans of a 16-bit GEMM whose x and packed w_t are copied as they lie, by grid (`_pairs_plan`)
PAIRS_PLANS = {"one wave": {"bk": 64, "k_groups": 4, "stages": 3, "w_pairs": True},
               "big tiles": {"bk": 64, "k_groups": 1, "stages": 3, "tile": "128x128x64x64", "w_pairs": True},
               "between": {"bk": BK, "k_groups": 1, "stages": 3, "w_pairs": True}}


def _pairs_plan(M: int, N: int, num_sms: int) -> dict:
    """The plan of a 16-bit GEMM whose x and packed w_t are copied as they lie (`w_pairs`), as
    measured on the H200 (kernel alone, docs/data/projection-pairs-h200.jsonl), against the plan
    through registers: 3 k-tiles in flight everywhere; one wave of 64 x 64 tiles keeps its 4 groups
    of warps ((100, 1024) x (1024, 4096) 11.9 -> 9.5 us); a grid of 128 x 128 tiles that fills the
    GPU at 2 CTAs an SM takes those tiles, 64 columns a k-tile ((2000, 1024) x (1024, 4096) 133 ->
    74 us, (6400, 896) x (896, 3584) 318 -> 178 as 8 warps of 64 x 32), each warp 64 x 64 of them
    (4 warps: 73 -> 67 us and 178 -> 165, 5-10% on four such GEMMs at fp16 and bf16; a 128 x 256
    tile, 4 stages or 32-column k-tiles were slower, run C); between, 64 x 64 tiles ((800, 768) x
    (768, 3072) 35.6 -> 27.3, where 128 x 128 tiles took 32-36)."""
    if fits_one_wave(M, N, num_sms):
        return dict(PAIRS_PLANS["one wave"])
    return dict(PAIRS_PLANS["big tiles" if _big_tiles_fill(M, N, num_sms) else "between"])


def _shared_bytes(staging, stages: int, red_words: int) -> int:
    """Shared memory a CTA allocates: `stages` k-tiles of `staging`'s tiles (at least one) and the
    groups' sums (`red_words`)."""
    return 4 * (max(1, stages) * (staging.x_words + staging.w_words) + red_words)


def plan_shared_bytes(K: int, N: int, precision: str, plan: dict) -> int:
    """Shared memory a CTA of `plan` (`gemm_plan`'s) allocates, as `_launch` lays it out. The
    16-bit plans that copy pairs take 29-105 KB (`PAIRS_PLANS`); a GPU whose CTAs take less (99 KB
    on sm_86 and sm_89) cannot launch the larger ones."""
    tile, G, bk, stages = plan.get("tile", "64x64"), plan["k_groups"], plan["bk"], plan["stages"]
    BM, BN, WM, WN, NT = warp_grid(tile)
    pairs = plan.get("w_pairs") or plan.get("pairs", True) and pairs_staged(K, N, precision, bk, G, stages, tile)
    staging = gemm_staging(K, N, BM, BN, bk, NT * G, mma_tiles=True, pack=precision if pairs else None,
                           w_nk=bool(plan.get("ldmatrix")))
    return _shared_bytes(staging, stages, (G - 1) * NT * (WM // 16) * (WN // 8) * 4)


def _copies(K: int, N: int, tile: str, bk: int, k_groups: int, w_nk: bool = False) -> bool:
    """Whether the pair copies of a `tile`, `bk` columns a k-tile, its warps in `k_groups` groups,
    take K and N (`copies_pairs`; `w_nk`: w_t transposed)."""
    bm, bn, _, _, nt = warp_grid(tile)
    return copies_pairs(K, N, bm, bn, bk, nt * k_groups, w_nk)


def pairs_plan_copies(K: int, N: int, name: str, ldmatrix: bool = False) -> bool:
    """Whether plan `name` of PAIRS_PLANS copies K and N (`ldmatrix`: w_t transposed, warps of
    whole pairs of n-tiles)."""
    plan = PAIRS_PLANS[name]
    tile = plan.get("tile", "64x64")
    return _copies(K, N, tile, plan["bk"], plan["k_groups"], ldmatrix) and not (ldmatrix and warp_grid(tile)[3] % 16)


def pairs_by_rows_copy(K: int, N: int) -> bool:
    """Whether every plan of PAIRS_PLANS copies K and N, so that the plan can wait for the runtime rows."""
    return all(pairs_plan_copies(K, N, name) for name in PAIRS_PLANS)


def a_fragment(lane, reg):
    """(row, k) within a 16 x 8 A tile of register `reg` of `lane` (PTX ISA, m16n8k8 .tf32)."""
    return lane // 4 + 8 * (reg % 2), lane % 4 + 4 * (reg // 2)


def b_fragment(lane, reg):
    """(k, column) within an 8 x 8 B tile of register `reg` of `lane`."""
    return lane % 4 + 4 * reg, lane // 4


def a_fragment_f16(lane, reg, half):
    """(row, k) within a 16 x 16 A tile of half `half` of register `reg` of `lane` (m16n8k16 .f16)."""
    return lane // 4 + 8 * (reg % 2), 2 * (lane % 4) + half + 8 * (reg // 2)


def b_fragment_f16(lane, reg, half):
    """(k, column) within a 16 x 8 B tile of half `half` of register `reg` of `lane`."""
    return 2 * (lane % 4) + half + 8 * reg, lane // 4


def a_row_ldmatrix(lane):
    """(row, pair) within a 16 x 16 A tile of the 16-byte row that `lane` gives an ldmatrix.x4 whose
    matrices are the A fragment's registers 0-3: rows 0-7 / 8-15 (matrix % 2), k 0-7 / 8-15 (matrix // 2)."""
    return lane % 8 + lane // 8 % 2 * 8, lane // 16 * 4


def b_row_ldmatrix(lane):
    """(pair, column) within two n-tiles' 16 x 16 B tile (w_t transposed: a column's pairs in a row)
    of the row that `lane` gives an ldmatrix.x4 whose matrices are registers 0-1 of the first
    n-tile's B fragment (k 0-7, 8-15), then the second's."""
    return lane // 8 % 2 * 4, lane // 16 * 8 + lane % 8


def c_fragment(lane, reg):
    """(row, column) within a 16 x 8 C tile of accumulator `reg` of `lane`."""
    return lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2


def pairs_staged(K: int, N: int, precision: str, bk: int, k_groups: int, stages: int, tile: str = "64x64") -> bool:
    """Whether the kernel stages 16-bit operands as pairs (`gemm_staging`'s `pack`): at f16 and
    bf16 through registers (stages 0; cp.async copies bytes as they are), where the tile allows.
    TF32 and 3xTF32 operands staged as the mma reads them (TF32 bits; the high parts and the
    remainders) were slower on the H100: (100, 1024) x (1024, 4096) 3xTF32 24.0 -> 26.3 us,
    (2000, 1024) x (1024, 4096) 321 -> 357, TF32 15.2 -> 16.1 (docs/data/staged-gemm-h100.jsonl)."""
    bm, bn, wm, _, nt = warp_grid(tile)
    return precision in HALF_PRECISIONS and not stages and packs_pairs(K, N, bk, bn, nt * k_groups)


def warp_grid(tile: str) -> tuple[int, int, int, int, int]:
    """(BM, BN, WM, WN, NT) of a CTA tile's name (`CTA_TILES`): NT threads, a warp per WM x WN of out."""
    if tile not in CTA_TILES:
        raise ValueError(f"CTA tile {tile!r}: one of {sorted(CTA_TILES)}")
    bm, bn, wm, wn = CTA_TILES[tile]
    return bm, bn, wm, wn, bm // wm * (bn // wn) * 32


def _launch(K: int, N: int, precision: str, emulate: bool, BK: int, G: int, STAGES: int, PAIRS: bool, tile: str,
            W_PAIRS: bool = False, EARLY: bool = False, LDMATRIX: bool = False):
    """The macro launch(x, w, b, out, n_m) running the GEMM on the tensor cores (serially: `emulate`),
    a CTA per `tile` of out, BK columns of x a k-tile, its k-slices shared by G groups of its warps
    (G > 1: summed at the end through shared memory); STAGES > 0: that many k-tiles in flight by
    cp.async, else one, through registers; PAIRS: 16-bit operands staged as pairs (`pairs_staged`);
    W_PAIRS: x in 16 bits and w_t packed as pairs, both copied as they lie (`copy_pairs`; PAIRS,
    STAGES >= 2); EARLY: a kernel that may itself be launched early, touching nothing before the
    kernel ahead of it has finished (the GEMM scan's steps); LDMATRIX: with W_PAIRS, w_t comes
    transposed (`pack_pairs_nk`) and the fragments are loaded by ldmatrix."""
    BM, BN, WM, WN, NT = warp_grid(tile)
    WARPS_N = BN // WN
    MT, NTL = WM // 16, WN // 8  # mma tiles of a warp's tile along M and N
    SLICES = BK // slice_k(precision) // G  # k-slices a group takes of a k-tile
    TILE_NT = NT  # a group's threads, one warp tile each of the CTA's tile
    ACC = MT * NTL * 4  # accumulators a thread holds
    staging = gemm_staging(K, N, BM, BN, BK, TILE_NT * G, mma_tiles=True, pack=precision if PAIRS else None,
                           emulate=emulate, w_nk=LDMATRIX)
    smem_dtype = "uint32" if PAIRS else "float32"
    red_words = (G - 1) * TILE_NT * ACC  # the partial sums of groups 1.. (layout: words a group, a thread fastest)
    fits = _shared_bytes(staging, STAGES, red_words) <= STATIC_SHARED_BYTES
    scope = "shared" if fits else "shared.dyn"
    x_word, w_word = staging.x_word, staging.w_word
    fetch, stage, VN = staging.fetch, staging.stage, staging.VN
    copy_async = staging.copy_pairs if W_PAIRS else staging.copy_async
    A_LOADS, B_LOADS, VK = staging.A_LOADS, staging.B_LOADS, staging.VK
    KT = (K + BK - 1) // BK
    passes = 1 if precision == "tf32" else 3
    half = precision in HALF_PRECISIONS  # 16-bit operands: one m16n8k16 mma a tile
    pack = pair_convert(precision == "bf16")  # first source: high half

    def tile_thread(t):
        """Thread t's place in its group (the groups share the warp tiles)."""
        return t % TILE_NT if G > 1 else t

    def k_slice(t, ks):
        """The k-tile's slice that thread t takes as its group's ks-th."""
        return t // TILE_NT * SLICES + ks if G > 1 else ks

    def warp_row(t, mt):
        return (tile_thread(t) // 32 // WARPS_N) * WM + mt * 16

    def warp_col(t, nt):
        return (tile_thread(t) // 32 % WARPS_N) * WN + nt * 8

    @T.macro
    def split(hi, lo, j, x):
        """x as TF32 `hi[j]` and, for 3xTF32, the fp32 remainder `lo[j]` (the recurrent step's split)."""
        if passes == 3:
            tf32_split(hi, lo, j, x)
        else:
            T.ptx.cvt.rna.tf32.f32(hi[j], x)

    @T.macro
    def warp_products(a_s, b_s, ao, bo, acc, t):
        """The warp's 2 x 4 mma tiles over its group's 8-column slices of the k-tile at word offsets
        ao (x) and bo (w_t)."""
        ah = T.alloc_buffer((MT * 4,), "uint32", scope="local")
        al = T.alloc_buffer((MT * 4,), "float32", scope="local")
        bh = T.alloc_buffer((2,), "uint32", scope="local")
        bl = T.alloc_buffer((2,), "float32", scope="local")
        for ks in T.unroll(SLICES):
            for mt in T.unroll(MT):
                for j in T.unroll(4):
                    split(ah, al, mt * 4 + j, a_s[ao + x_word(warp_row(t, mt) + a_fragment(t % 32, j)[0], k_slice(t, ks) * 8 + a_fragment(t % 32, j)[1])])
            for nt in T.unroll(NTL):
                for j in T.unroll(2):
                    split(bh, bl, j, b_s[bo + w_word(k_slice(t, ks) * 8 + b_fragment(t % 32, j)[0], warp_col(t, nt) + b_fragment(t % 32, j)[1])])
                for mt in T.unroll(MT):
                    if passes == 3:  # the small terms first
                        mma(acc, mt * NTL + nt, [T.reinterpret("uint32", al[mt * 4 + j]) for j in range(4)], [bh[0], bh[1]])
                        mma(acc, mt * NTL + nt, [ah[mt * 4 + j] for j in range(4)], [T.reinterpret("uint32", bl[j]) for j in range(2)])
                    mma(acc, mt * NTL + nt, [ah[mt * 4 + j] for j in range(4)], [bh[0], bh[1]])

    def a_word_16(t, mt, ks, j, half, per_word=1):
        """x's word in shared memory that half `half` of A register j of thread t's tile mt holds
        (`per_word` 2: the tiles hold pairs along k)."""
        return x_word(warp_row(t, mt) + a_fragment_f16(t % 32, j, half)[0],
                      (k_slice(t, ks) * 16 + a_fragment_f16(t % 32, j, half)[1]) // per_word)

    def b_word_16(t, nt, ks, j, half, per_word=1):
        """w_t's word that half `half` of B register j of thread t's tile nt holds."""
        return w_word((k_slice(t, ks) * 16 + b_fragment_f16(t % 32, j, half)[0]) // per_word,
                      warp_col(t, nt) + b_fragment_f16(t % 32, j, half)[1])

    @T.macro
    def warp_products_16(a_s, b_s, ao, bo, acc, t):
        """16-bit operands: the warp's 2 x 4 mma tiles over the k-tile's two 16-column slices, each
        fragment register two values packed (exact: they are 16-bit values)."""
        ah = T.alloc_buffer((MT * 4,), "uint32", scope="local")
        bh = T.alloc_buffer((2,), "uint32", scope="local")
        for ks in T.unroll(SLICES):
            for mt in T.unroll(MT):
                for j in T.unroll(4):
                    if PAIRS:  # the pair's word: half 0 sits at an even k
                        ah[mt * 4 + j] = a_s[ao + a_word_16(t, mt, ks, j, 0, 2)]
                    else:
                        pack(ah[mt * 4 + j], a_s[ao + a_word_16(t, mt, ks, j, 1)], a_s[ao + a_word_16(t, mt, ks, j, 0)])
            for nt in T.unroll(NTL):
                for j in T.unroll(2):
                    if PAIRS:
                        bh[j] = b_s[bo + b_word_16(t, nt, ks, j, 0, 2)]
                    else:
                        pack(bh[j], b_s[bo + b_word_16(t, nt, ks, j, 1)], b_s[bo + b_word_16(t, nt, ks, j, 0)])
                for mt in T.unroll(MT):
                    a = (mt * NTL + nt) * 4
                    T.ptx[MMA_BF16 if precision == "bf16" else MMA_F16](
                        acc[a], acc[a + 1], acc[a + 2], acc[a + 3], *[ah[mt * 4 + j] for j in range(4)], bh[0], bh[1],
                        acc[a], acc[a + 1], acc[a + 2], acc[a + 3])

    @T.macro
    def ldmatrix_x4(regs, r, smem, word):
        """regs[r : r + 4] = the four 8 x 8 matrices whose rows the warp's lanes give (this lane's:
        the 16 bytes at `word` of `smem`)."""
        T.cuda.func_call("prnn_ldmatrix_x4", T.address_of(regs[r]), smem.access_ptr("r", offset=word), source_code=LDMATRIX_X4)

    @T.macro
    def warp_products_ldmatrix(a_s, b_s, ao, bo, acc, t):
        """16-bit operands, both tiles a row of pairs a row (x) or column (w_t) of out: per k-slice,
        an A fragment (16 rows x 16 k: matrices rows 0-7 and 8-15 at k 0-7, then at k 8-15) an
        ldmatrix, and the B fragments of two n-tiles (each 8 columns x k 0-7, k 8-15) an ldmatrix;
        lane l gives row l % 8 of matrix l / 8."""
        ah = T.alloc_buffer((MT * 4,), "uint32", scope="local")
        bh = T.alloc_buffer((NTL * 2,), "uint32", scope="local")
        for ks in T.unroll(SLICES):
            for mt in T.unroll(MT):
                ldmatrix_x4(ah, mt * 4, a_s, ao + x_word(warp_row(t, mt) + a_row_ldmatrix(t % 32)[0],
                                                         k_slice(t, ks) * 8 + a_row_ldmatrix(t % 32)[1]))
            for p in T.unroll(NTL // 2):
                ldmatrix_x4(bh, p * 4, b_s, bo + w_word(k_slice(t, ks) * 8 + b_row_ldmatrix(t % 32)[0],
                                                        warp_col(t, 2 * p) + b_row_ldmatrix(t % 32)[1]))
            for nt in T.unroll(NTL):
                for mt in T.unroll(MT):
                    a = (mt * NTL + nt) * 4
                    T.ptx[MMA_BF16 if precision == "bf16" else MMA_F16](
                        acc[a], acc[a + 1], acc[a + 2], acc[a + 3], *[ah[mt * 4 + j] for j in range(4)],
                        bh[nt * 2], bh[nt * 2 + 1], acc[a], acc[a + 1], acc[a + 2], acc[a + 3])

    @T.macro
    def store(out, b, acc, by, bx, t, n_m):
        """out = acc + b from the C fragments, for the rows and columns that exist."""
        for mt, nt, j in T.grid(MT, NTL, 4):
            if T.And(by * BM + warp_row(t, mt) + c_fragment(t % 32, j)[0] < n_m,
                     bx * BN + warp_col(t, nt) + c_fragment(t % 32, j)[1] < N):
                out[by * BM + warp_row(t, mt) + c_fragment(t % 32, j)[0], bx * BN + warp_col(t, nt) + c_fragment(t % 32, j)[1]] = (
                    acc[(mt * NTL + nt) * 4 + j] + b[bx * BN + warp_col(t, nt) + c_fragment(t % 32, j)[1]])

    @T.macro
    def sum_groups(acc, t):
        """Group 0's accumulators plus the other groups' partial sums, through shared memory."""
        red = T.alloc_buffer((red_words,), "float32", scope=scope)
        if t >= TILE_NT:
            for a in T.unroll(ACC):
                red[(t // TILE_NT - 1) * ACC * TILE_NT + a * TILE_NT + t % TILE_NT] = acc[a]
        T.tvm_storage_sync("shared")
        if t < TILE_NT:
            for g in T.unroll(G - 1):
                for a in T.unroll(ACC):
                    acc[a] = acc[a] + red[g * ACC * TILE_NT + a * TILE_NT + t]

    @T.macro
    def products(a_s, b_s, ao, bo, acc, t):
        if LDMATRIX:
            warp_products_ldmatrix(a_s, b_s, ao, bo, acc, t)
        elif half:
            warp_products_16(a_s, b_s, ao, bo, acc, t)
        else:
            warp_products(a_s, b_s, ao, bo, acc, t)

    @T.macro
    def finish(out, b, acc, by, bx, t, n_m):
        """The groups' sums (G > 1) and out = acc + b."""
        if G > 1:
            sum_groups(acc, t)
            if t < TILE_NT:
                store(out, b, acc, by, bx, t, n_m)
        else:
            store(out, b, acc, by, bx, t, n_m)

    @T.macro
    def kernel_start():
        """An early-launched recurrence may start (early_launch.py); EARLY: and this kernel waits
        for the one before."""
        if EARLY:
            after_previous_kernel()
        else:
            T.evaluate(allow_next_kernel())

    @T.macro
    def block_program(x, w, b, out, by, bx, t, n_m):
        """One CTA's tile, thread t's view (the CUDA kernel's body)."""
        a_s = T.alloc_buffer((staging.x_words,), smem_dtype, scope=scope)
        b_s = T.alloc_buffer((staging.w_words,), smem_dtype, scope=scope)
        acc = T.alloc_buffer((MT * NTL * 4,), "float32", scope="local")
        ra = T.alloc_buffer((1, A_LOADS * VK), "float32", scope="local")
        rb = T.alloc_buffer((1, B_LOADS * VN), "float32", scope="local")
        kernel_start()
        for a in T.unroll(MT * NTL * 4):
            acc[a] = T.float32(0)
        fetch(x, w, ra, rb, 0, by, bx, t, 0, n_m)
        for kt in range(KT):
            stage(a_s, b_s, ra, rb, 0, t)
            T.tvm_storage_sync("shared")
            if kt + 1 < KT:  # the next tile's loads are in flight during this tile's mma
                fetch(x, w, ra, rb, 0, by, bx, t, kt + 1, n_m)
            products(a_s, b_s, 0, 0, acc, t)
            T.tvm_storage_sync("shared")
        finish(out, b, acc, by, bx, t, n_m)

    def operand(v):
        """A value as the mma reads it: rounded to TF32 at "tf32", to fp16 or bf16 for the 16-bit
        mma (exact for the values it is given); exact for 3xTF32 (emulated as the fp32 product it
        approximates)."""
        if precision == "bf16":
            return f16_half(half_bits(v, True), 0, True)
        if precision == "f16":
            return T.Cast("float32", T.Cast("float16", v))
        return tf32_rounded(v) if passes == 1 else v

    @T.macro
    def emulated_store(out, b, acc, by, bx, n_m):
        """out = acc + b for the CTA's rows and columns that exist (the CPU twin's `store`)."""
        for i, j in T.grid(BM, BN):
            if T.And(by * BM + i < n_m, bx * BN + j < N):
                out[by * BM + i, bx * BN + j] = acc[i, j] + b[bx * BN + j]

    @T.macro
    def emulated_products(a_s, b_s, ao, bo, acc):
        """acc += the k-tile's products from the shared tiles at word offsets ao and bo, each as the
        mma defines it (pairs: each value from its half of the pair's word)."""
        for i, j, k in T.grid(BM, BN, BK):
            if PAIRS:
                acc[i, j] = acc[i, j] + (f16_half(a_s[ao + x_word(i, k // 2)], k % 2, precision == "bf16")
                                         * f16_half(b_s[bo + w_word(k // 2, j)], k % 2, precision == "bf16"))
            else:
                acc[i, j] = acc[i, j] + operand(a_s[ao + x_word(i, k)]) * operand(b_s[bo + w_word(k, j)])

    @T.macro
    def emulated_blocks(x, w, b, out, n_m):
        """The CTAs one after another, threads as serial loops; each warp's products from shared
        memory as the mma defines them."""
        for by in range((n_m + BM - 1) // BM):
            for bx in range((N + BN - 1) // BN):
                a_s = T.alloc_buffer((staging.x_words,), smem_dtype)
                b_s = T.alloc_buffer((staging.w_words,), smem_dtype)
                acc = T.alloc_buffer((BM, BN), "float32")
                ra = T.alloc_buffer((TILE_NT * G, A_LOADS * VK), "float32")
                rb = T.alloc_buffer((TILE_NT * G, B_LOADS * VN), "float32")
                for i, j in T.grid(BM, BN):
                    acc[i, j] = T.float32(0)
                for kt in range(KT):
                    for t in range(TILE_NT * G):
                        fetch(x, w, ra, rb, t, by, bx, t, kt, n_m)
                        stage(a_s, b_s, ra, rb, t, t)
                    emulated_products(a_s, b_s, 0, 0, acc)
                emulated_store(out, b, acc, by, bx, n_m)

    @T.macro
    def block_program_async(x, w, b, out, by, bx, t, n_m):
        """One CTA's tile with STAGES k-tiles in flight: copied by cp.async into a ring of shared
        tiles, STAGES - 1 ahead of the one whose mma runs; one sync a k-tile (it also frees the
        slot that the next copy overwrites, read the k-tile before)."""
        a_s = T.alloc_buffer((STAGES * staging.x_words,), smem_dtype, scope=scope)
        b_s = T.alloc_buffer((STAGES * staging.w_words,), smem_dtype, scope=scope)
        acc = T.alloc_buffer((MT * NTL * 4,), "float32", scope="local")
        kernel_start()
        for a in T.unroll(MT * NTL * 4):
            acc[a] = T.float32(0)
        for s in T.unroll(STAGES - 1):
            if s < KT:
                copy_async(x, w, a_s, b_s, s * staging.x_words, s * staging.w_words, by, bx, t, s, n_m, False)
            T.evaluate(commit_copies())
        for kt in range(KT):
            T.evaluate(wait_copies(STAGES - 2))  # this thread's copies of k-tile kt have landed
            T.tvm_storage_sync("shared")  # ... and every thread's; slot (kt - 1) % STAGES is free
            if kt + STAGES - 1 < KT:
                copy_async(x, w, a_s, b_s, (kt + STAGES - 1) % STAGES * staging.x_words,
                           (kt + STAGES - 1) % STAGES * staging.w_words, by, bx, t, kt + STAGES - 1, n_m, False)
            T.evaluate(commit_copies())
            products(a_s, b_s, kt % STAGES * staging.x_words, kt % STAGES * staging.w_words, acc, t)
        T.tvm_storage_sync("shared")  # the groups' sums may take the tiles' memory
        finish(out, b, acc, by, bx, t, n_m)

    @T.macro
    def emulated_blocks_async(x, w, b, out, n_m):
        """The ring of k-tiles serially: each copy into its slot as the GPU issues it, the products
        of k-tile kt from slot kt % STAGES after the copy that overwrites slot (kt - 1) % STAGES."""
        for by in range((n_m + BM - 1) // BM):
            for bx in range((N + BN - 1) // BN):
                a_s = T.alloc_buffer((STAGES * staging.x_words,), smem_dtype)
                b_s = T.alloc_buffer((STAGES * staging.w_words,), smem_dtype)
                acc = T.alloc_buffer((BM, BN), "float32")
                for i, j in T.grid(BM, BN):
                    acc[i, j] = T.float32(0)
                for s in range(STAGES - 1):
                    if s < KT:
                        for t in range(TILE_NT * G):
                            copy_async(x, w, a_s, b_s, s * staging.x_words, s * staging.w_words, by, bx, t, s, n_m, True)
                for kt in range(KT):
                    if kt + STAGES - 1 < KT:
                        for t in range(TILE_NT * G):
                            copy_async(x, w, a_s, b_s, (kt + STAGES - 1) % STAGES * staging.x_words,
                                       (kt + STAGES - 1) % STAGES * staging.w_words, by, bx, t, kt + STAGES - 1, n_m, True)
                    emulated_products(a_s, b_s, kt % STAGES * staging.x_words, kt % STAGES * staging.w_words, acc)
                emulated_store(out, b, acc, by, bx, n_m)

    if STAGES:
        return tile_grid(N, BM, BN, TILE_NT * G, block_program_async, emulated_blocks_async, emulate)
    return tile_grid(N, BM, BN, TILE_NT * G, block_program, emulated_blocks, emulate)


def gemm_launch(K: int, N: int, precision: str, plan: dict, emulate: bool = False, early: bool = False):
    """The macro launch(x, w, b, out, n_m) of the GEMM `plan` (`gemm_plan`'s dict; x in fp32, w_t
    as (K, N) fp32 values), for a kernel that runs it among others (the GEMM scan,
    gemm_scan.py): its CTAs, k-tiles and staging as `projection_mma_kernel` builds them; `early`:
    launched early, it waits for the kernel ahead before touching anything."""
    tile, bk, groups, stages = plan.get("tile", "64x64"), plan["bk"], plan["k_groups"], plan["stages"]
    pairs = precision in HALF_PRECISIONS and pairs_staged(K, N, precision, bk, groups, stages, tile)
    return _launch(K, N, precision, emulate, bk, groups, stages, pairs, tile, EARLY=early)


def _check_w_pairs(K, N, precision, bk, k_groups, stages, x_dtype, tile, ldmatrix=False):
    """Refuse a packed-pairs GEMM that its copies cannot run: 16-bit precision, x in those 16 bits,
    k-tiles in flight, and rows of whole 16-byte vectors, as many a thread (`copies_pairs`);
    `ldmatrix`: warps of an even number of 8-column n-tiles (an ldmatrix takes two)."""
    if HALF_DTYPES.get(precision) != x_dtype:
        raise ValueError(f"w_pairs needs 16-bit operands and x in their dtype, not {precision} with x in {x_dtype}")
    if stages < 2:
        raise ValueError(f"w_pairs copies k-tiles in flight: stages >= 2, not {stages}")
    if not _copies(K, N, tile, bk, k_groups, ldmatrix):
        raise ValueError(f"w_pairs: K={K} (a multiple of 8) and N={N} (of 4) in whole 16-byte copies of a {tile} tile")
    if ldmatrix and warp_grid(tile)[3] % 16:
        raise ValueError(f"ldmatrix loads two n-tiles at once: a {tile} tile's warps are {warp_grid(tile)[3]} columns wide")


def _build(K: int, N: int, precision: str, emulate: bool, bk: int, k_groups: int, stages: int,
           pairs: bool, x_dtype: str, tile: str, w_pairs: bool = False, ldmatrix: bool = False) -> tvm.tirx.PrimFunc:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {PRECISIONS}")
    if bk not in K_SLICES:
        raise ValueError(f"k-slice {bk}: one of {K_SLICES}")
    if bk // slice_k(precision) % k_groups:
        raise ValueError(f"{k_groups} k-groups do not divide a {bk}-column k-tile's slices at {precision}")
    if ldmatrix and not w_pairs:
        raise ValueError("ldmatrix loads the pair tiles that w_pairs copies: w_pairs=True")
    if w_pairs:
        _check_w_pairs(K, N, precision, bk, k_groups, stages, x_dtype, tile, ldmatrix)
    if stages and (stages < 2 or K % 4 or N % 4):
        raise ValueError(f"{stages} stages: 0, or 2 or more with K and N multiples of 4 (16-byte copies)")
    if stages and x_dtype != "float32" and not w_pairs:
        raise ValueError(f"{stages} stages copy x as fp32 words (cp.async); x in {x_dtype} goes through registers: stages 0")
    bm, bn, wm, _, nt = warp_grid(tile)
    if nt * k_groups > 1024:
        raise ValueError(f"{k_groups} k-groups of a {tile} tile's {nt} threads pass a CTA's 1024")
    pairs = w_pairs or pairs and pairs_staged(K, N, precision, bk, k_groups, stages, tile)
    info = {"mma": precision, "bk": bk, "k_groups": k_groups, "stages": stages, "pairs": pairs}
    if tile != "64x64":
        info["cta_tile"] = tile
    if w_pairs:
        info["w_pairs"] = True
    if ldmatrix:
        info["ldmatrix"] = info["w_nk"] = True
    launch = _launch(K, N, precision, emulate, bk, k_groups, stages, pairs, tile, w_pairs, LDMATRIX=ldmatrix)
    return gemm_func(K, N, launch, info, x_dtype, w_pairs, w_nk=ldmatrix)


def pairs_plan_launch(K: int, N: int, precision: str, name: str, emulate: bool, ldmatrix: bool = False):
    """The launch macro of plan `name` of PAIRS_PLANS (`ldmatrix`: w_t packed transposed, as the
    wgmma GEMM takes it), for a GEMM whose host picks its plan by the runtime rows."""
    plan = PAIRS_PLANS[name]
    return _launch(K, N, precision, emulate, plan["bk"], plan["k_groups"], plan["stages"], True,
                   plan.get("tile", "64x64"), True, LDMATRIX=ldmatrix)


def _build_pairs_by_rows(K: int, N: int, precision: str, num_sms: int, emulate: bool) -> tvm.tirx.PrimFunc:
    """The 16-bit pairs GEMM whose plan waits for the runtime rows: each plan of PAIRS_PLANS a
    kernel, the host picks one by `_pairs_plan`'s rule for a GPU of `num_sms` SMs."""
    x_dtype = HALF_DTYPES.get(precision)
    if x_dtype is None or not pairs_by_rows_copy(K, N):
        raise ValueError(f"a pairs GEMM by rows needs 16-bit operands and K={K} (a multiple of 8), N={N} (of 4)")
    one_wave, big, between = (pairs_plan_launch(K, N, precision, name, emulate)
                              for name in ("one wave", "big tiles", "between"))
    launch = launch_by_rows([(lambda n_m: fits_one_wave(n_m, N, num_sms), one_wave),
                             (lambda n_m: _big_tiles_fill(n_m, N, num_sms), big)], between)

    info = {"mma": precision, "plan": f"by rows, {num_sms} SMs", "pairs": True, "w_pairs": True}
    return gemm_func(K, N, launch, info, x_dtype, w_pairs=True)


@built_once
def pairs_gemm_by_rows(K: int, N: int, precision: str, num_sms: int = 132) -> tvm.tirx.PrimFunc:
    """The 16-bit GEMM of x in its 16 bits and w_t packed as pairs, for rows known only at run time:
    the plan `_pairs_plan` gives the runtime rows (a kernel each, the host picks)."""
    return _build_pairs_by_rows(K, N, precision, num_sms, emulate=False)


@built_once
def emulated_pairs_gemm_by_rows(K: int, N: int, precision: str, num_sms: int = 132) -> tvm.tirx.PrimFunc:
    """The same plans' serial twins, picked by the runtime rows alike (llvm): for tests."""
    return _build_pairs_by_rows(K, N, precision, num_sms, emulate=True)


@built_once
def projection_mma_kernel(K: int, N: int, precision: str = "3xtf32", bk: int = BK, k_groups: int = 1,
                          stages: int = 0, pairs: bool = True, x_dtype: str = "float32", tile: str = "64x64",
                          w_pairs: bool = False, ldmatrix: bool = False) -> tvm.tirx.PrimFunc:
    """The tensor-core CUDA GEMM for x (M, K) @ w_t (K, N) + b at `precision` ("3xtf32": fp32
    accuracy; "tf32"; "f16", "bf16": for operands that are 16-bit values), `bk` columns of x a
    k-tile, split between `k_groups` groups of the tile's warps, `stages` k-tiles in flight by cp.async
    (0: one, through registers); `pairs`: 16-bit operands staged as pairs where `pairs_staged`
    (False: as fp32 values, each rounded where a fragment takes it); x in `x_dtype` (gemm_func;
    16-bit only through registers, `stages` 0, unless `w_pairs`); a CTA per `tile` of out
    (`CTA_TILES`). `w_pairs`: the 16-bit GEMM whose w comes packed as pairs along k
    (gemm_staging.pack_pairs) and whose x is in the same 16 bits, both copied by cp.async into
    `stages` k-tiles in flight as they lie (`_check_w_pairs`); `ldmatrix`: w comes as the packed
    w_t transposed (gemm_staging.pack_pairs_nk), its fragments loaded by ldmatrix."""
    return _build(K, N, precision, emulate=False, bk=bk, k_groups=k_groups, stages=stages, pairs=pairs,
                  x_dtype=x_dtype, tile=tile, w_pairs=w_pairs, ldmatrix=ldmatrix)


@built_once
def emulated_projection_mma_kernel(K: int, N: int, precision: str = "3xtf32", bk: int = BK,
                                   k_groups: int = 1, stages: int = 0, pairs: bool = True,
                                   x_dtype: str = "float32", tile: str = "64x64",
                                   w_pairs: bool = False, ldmatrix: bool = False) -> tvm.tirx.PrimFunc:
    """The same staging run serially on the CPU (llvm), products as the mma defines them: for tests."""
    return _build(K, N, precision, emulate=True, bk=bk, k_groups=k_groups, stages=stages, pairs=pairs,
                  x_dtype=x_dtype, tile=tile, w_pairs=w_pairs, ldmatrix=ldmatrix)
