"""The recurrent dot products on the tensor cores, with fp32 accuracy (3xTF32, config.py) or at
TF32 precision (`L.TF32`: weights rounded once as they are loaded, one mma a tile): each warp
holds one 16-row tile of the CTA's gate rows over its share of the columns as mma A fragments;
h(t-1) of the chunk is the B operand (batch rows padded to 8); the column splits' partial sums
meet in shared memory (`gs`), where the updating threads add them.
`emulated_mma_dot` is the CPU twin's version, the product as PTX defines it (TF32 operands
rounded as `cvt.rna.tf32.f32` rounds them).
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..int8_rows import r_weight

#: the tensor cores' instruction: D = A B + C, m16n8k8, TF32 operands, fp32 accumulators
MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
#: ... m16n8k16 with fp16 operands (two halves a 32-bit register, the lower k in the low half)
MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#: ... and with bf16 operands (the same fragments)
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


@T.macro
def tf32_split(hi, lo, j, x):
    """x as TF32 `hi[j]` (rounded to nearest; a volatile cvt, so that the compiler cannot hoist
    the weights' splits out of the time loop and hold twice the registers) and the fp32 `lo[j]`
    = x - hi (exact), whose TF32 bits the mma reads."""
    T.ptx.cvt.rna.tf32.f32(hi[j], x)
    lo[j] = x - T.reinterpret("float32", hi[j])


def tf32_rounded(x):
    """x rounded to TF32 (10 mantissa bits, to nearest, ties away from zero: what
    `cvt.rna.tf32.f32` does to finite values), as an fp32 value; plain integer arithmetic, so
    that the CPU twin rounds exactly as the GPU does."""
    bits = T.reinterpret("uint32", x)
    return T.reinterpret("float32", (bits + T.uint32(0x1000)) & T.uint32(0xFFFFE000))


def half_bits(x, bf16=False):
    """fp32 x rounded to fp16 or (`bf16`) bf16, to nearest even, as its 16 bits in a uint32 (bf16:
    integer arithmetic on finite values, what `cvt.rn.bf16.f32` does to them)."""
    if bf16:
        bits = T.reinterpret("uint32", x)
        return (bits + T.uint32(0x7FFF) + ((bits >> T.uint32(16)) & T.uint32(1))) >> T.uint32(16)
    return T.Cast("uint32", T.reinterpret("uint16", T.Cast("float16", x)))


def f16_pair(lo, hi, bf16=False):
    """Two values as one fp16x2 (bf16x2) fragment register: `lo` in the low half (the lower k)."""
    return half_bits(lo, bf16) | (half_bits(hi, bf16) << T.uint32(16))


def f16_half(reg, e, bf16=False):
    """Half e (0: low) of an fp16x2 (bf16x2) register, as fp32 (exact)."""
    half = (reg >> T.uint32(16 * e)) & T.uint32(0xFFFF)
    if bf16:
        return T.reinterpret("float32", half << T.uint32(16))
    return T.Cast("float32", T.reinterpret("float16", T.Cast("uint16", half)))


def pair_convert(bf16: bool):
    """The instruction that rounds two fp32 values into one fp16 (`bf16`: bf16) pair register, its
    first source into the high half."""
    return T.ptx.cvt.rn.bf16x2.f32 if bf16 else T.ptx.cvt.rn.f16x2.f32


def a_operand(L, w):
    """A weight as it is held: TF32-rounded at TF32 (the mma reads its bits), else as given
    (3xTF32 splits it each step)."""
    return tf32_rounded(w) if L.TF32 else w


def b_operand(L, x):
    """An element of h(t-1) as the mma reads it: rounded to TF32 at TF32 or to fp16 (bf16) for the
    16-bit mma, else exact (3xTF32 is emulated as the fp32 product it approximates)."""
    if L.BF16:
        return f16_half(half_bits(x, True), 0, True)
    if L.F16:
        return T.Cast("float32", T.Cast("float16", x))
    return tf32_rounded(x) if L.TF32 else x


def weight(L, a, t, j, col):
    """R's element in A-fragment register j's row and column `col` (a padded tile's rows: zero)."""
    return T.if_then_else(L.mma_row_in_tile(t.tx, j) < L.GTW, r_weight(L, a.r, L.dir_of(t.cta), L.mma_row(t.cta, t.tx, j), col),
                          T.float32(0))


@T.macro
def f16_fragments_to_shared(L, a, t):
    """The 16-bit A fragments of the warp's last SK k-tiles, word j of k-tile KREG + i at
    `wsm[block, 4 i + j, tx]`: a warp's 32 lanes read 32 consecutive words, on 32 banks, and
    the registers they free keep the rest of the step from spilling."""
    for i in T.unroll(L.SK):
        for j in T.unroll(4):
            if L.emulate:
                t.wsm[t.block, i * 4 + j, t.tx] = f16_pair(weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + i, j, 0)),
                                                           weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + i, j, 1)),
                                                           L.BF16)
            else:
                pair_convert(L.BF16)(t.wsm[0, i * 4 + j, t.tx], weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + i, j, 1)),
                                     weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + i, j, 0)))


@T.macro
def mma_load_weights(L, a, t):
    """The warp's row tile over its k-tiles, as mma A fragments in registers (TF32: rounded
    once here, not every step; fp16 and bf16: two weights a register); the last SK k-tiles' into
    shared memory, a word a thread (`f16_fragments_to_shared`)."""
    if L.KREG > 0:  # (none where every fragment is in shared memory: no register array then)
        for i in T.unroll(L.KREG):
            for j in T.unroll(4):
                if L.F16 and L.emulate:  # the pair's bits in plain arithmetic, as the CPU can run it
                    t.wreg[t.row, i * 4 + j] = f16_pair(weight(L, a, t, j, L.mma_col_f16(t.tx, i, j, 0)),
                                                        weight(L, a, t, j, L.mma_col_f16(t.tx, i, j, 1)), L.BF16)
                elif L.F16:  # cvt packs its first source into the high half (nvcc gave sm_80 a stack
                    # frame for the bit puns of the plain version)
                    pair_convert(L.BF16)(t.wreg[t.row, i * 4 + j], weight(L, a, t, j, L.mma_col_f16(t.tx, i, j, 1)),
                                         weight(L, a, t, j, L.mma_col_f16(t.tx, i, j, 0)))
                else:
                    t.wreg[t.row, i * 4 + j] = a_operand(L, weight(L, a, t, j, L.mma_col(t.tx, i, j)))
    if L.SK > 0:
        f16_fragments_to_shared(L, a, t)


def acc_tile(L, i, nt):
    """The C fragment (as an n-tile index into `acc`) that k-tile i of n-tile nt accumulates
    into: set i % ACC_SETS, so that consecutive k-tiles' mma do not wait for each other."""
    return i % L.ACC_SETS * L.NTL + nt


@T.macro
def mma(acc, nt, a, b):
    """acc's n-tile nt += a b on the tensor cores (operands: TF32 bits in 32-bit registers)."""
    T.ptx[MMA_TF32](acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3], *a, *b,
                    acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3])


@T.macro
def load_b_fragment(L, t, hs, i, nt):
    """h(t-1)'s B fragment of k-tile i, n-tile nt: batch row lane / 4, column lane % 4 (+4)."""
    for j in T.unroll(2):
        t.bv[j] = hs[nt * 8 + t.tx % 32 // 4, ((t.tx // 32 // L.RT) * L.KPW + i) * 8 + t.tx % 4 + 4 * j]


@T.macro
def f16_b_fragment(L, t, hs, bh, i, nt):
    """h(t-1)'s B fragment of k-tile i, n-tile nt as 16-bit pairs: batch row lane / 4, columns
    2 * (lane % 4) + {0, 1} (+8)."""
    for j in T.unroll(2):
        if L.H16:  # the pair as exchanged (h16_exchange.py)
            bh[j] = hs[(nt * 8 + t.tx % 32 // 4) * L.HSW + L.mma_col_f16(t.tx, i, 2 * j, 0) // 2]
        else:
            pair_convert(L.BF16)(bh[j], hs[nt * 8 + t.tx % 32 // 4, L.mma_col_f16(t.tx, i, 2 * j, 1)],
                                 hs[nt * 8 + t.tx % 32 // 4, L.mma_col_f16(t.tx, i, 2 * j, 0)])


@T.macro
def mma_f16(L, acc, nt, a, bh):
    """acc's n-tile nt += a bh, one m16n8k16 mma on 16-bit pairs, fp32 accumulation."""
    T.ptx[MMA_BF16 if L.BF16 else MMA_F16](acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3],
                                           *a, bh[0], bh[1], acc[nt * 4], acc[nt * 4 + 1], acc[nt * 4 + 2], acc[nt * 4 + 3])


@T.macro
def pack_streamed_fragments(L, a, t):
    """The 16-bit A fragments of the warp's last GK k-tiles, which registers and shared memory
    cannot hold, packed once a call into the workspace (`Layout.streamed_word`), rounded as
    `mma_load_weights` rounds the others: the step then reads half of R's fp32 bytes, a warp's
    128 consecutive bytes a load. Written after the kernel before has finished (the workspace is
    this call's output)."""
    pair = T.alloc_buffer((1,), "uint32", scope="local")
    for i in T.serial(L.GK):
        for j in T.unroll(4):
            if L.emulate:
                pair[0] = f16_pair(weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + L.SK + i, j, 0)),
                                   weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + L.SK + i, j, 1)), L.BF16)
            else:
                pair_convert(L.BF16)(pair[0], weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + L.SK + i, j, 1)),
                                     weight(L, a, t, j, L.mma_col_f16(t.tx, L.KREG + L.SK + i, j, 0)))
            a.ws[L.streamed_word(t.cta, t.tx, i, j)] = pair[0]


@T.macro
def streamed_fragments(L, a, t, hs, bh):
    """The warp's last GK k-tiles' mma, their A fragments read each step from the workspace's
    packed pairs (`pack_streamed_fragments`; in L2 where they fit). GKU k-tiles a loop turn:
    their loads are in flight together, and a turn bounds how many the compiler hoists."""
    ag = T.alloc_buffer((4,), "uint32", scope="local")
    for turn in T.serial((L.GK + L.GKU - 1) // L.GKU):
        for u in T.unroll(L.GKU):
            if turn * L.GKU + u < L.GK:
                for j in T.unroll(4):
                    ag[j] = a.ws[L.streamed_word(t.cta, t.tx, turn * L.GKU + u, j)]
                for nt in T.unroll(L.NTL):
                    f16_b_fragment(L, t, hs, bh, L.KREG + L.SK + turn * L.GKU + u, nt)
                    mma_f16(L, t.acc, acc_tile(L, u, nt), [ag[j] for j in range(4)], bh)  # (a set by u: static)


@T.macro
def mma_dot_f16(L, a, t, hs):
    """fp16 (bf16): h(t-1) rounded to the layer's dtype in pairs, one m16n8k16 mma per (k-tile,
    n-tile) with the 16-bit weights, fp32 accumulation; the SK k-tiles after the registers' A
    fragments read from shared memory, once a k-tile, and the last GK k-tiles' from the pairs
    packed in the workspace (`streamed_fragments`)."""
    bh = T.alloc_buffer((2,), "uint32", scope="local")
    if L.KREG > 0:
        for i in T.unroll(L.KREG):
            for nt in T.unroll(L.NTL):
                f16_b_fragment(L, t, hs, bh, i, nt)
                mma_f16(L, t.acc, acc_tile(L, i, nt), [t.wreg[0, i * 4 + j] for j in range(4)], bh)
    if L.SK > 0:
        ah = T.alloc_buffer((4,), "uint32", scope="local")
        for i in T.unroll(L.SK):
            for j in T.unroll(4):
                ah[j] = t.wsm[0, i * 4 + j, t.tx]
            for nt in T.unroll(L.NTL):
                f16_b_fragment(L, t, hs, bh, L.KREG + i, nt)
                mma_f16(L, t.acc, acc_tile(L, L.KREG + i, nt), [ah[j] for j in range(4)], bh)
    if L.GK > 0:
        streamed_fragments(L, a, t, hs, bh)


@T.macro
def mma_dot_tf32(L, t, hs):
    """TF32: h(t-1) rounded to TF32, one mma per (k-tile, n-tile) with the rounded weights."""
    bh = T.alloc_buffer((2,), "uint32", scope="local")
    for i in T.unroll(L.KPW):
        for nt in T.unroll(L.NTL):
            load_b_fragment(L, t, hs, i, nt)
            for j in T.unroll(2):
                T.ptx.cvt.rna.tf32.f32(bh[j], t.bv[j])
            mma(t.acc, acc_tile(L, i, nt), [T.reinterpret("uint32", t.wreg[0, i * 4 + j]) for j in range(4)],
                [bh[0], bh[1]])


@T.macro
def mma_dot_3xtf32(L, t, hs):
    """3xTF32: the high parts' product plus both cross products, fp32 accumulation."""
    ah = T.alloc_buffer((4,), "uint32", scope="local")  # one k-tile's A fragment, split
    al = T.alloc_buffer((4,), "float32", scope="local")
    bh = T.alloc_buffer((2,), "uint32", scope="local")  # ... and one n-tile's B fragment
    bl = T.alloc_buffer((2,), "float32", scope="local")
    for i in T.unroll(L.KPW):
        for nt in T.unroll(L.NTL):
            load_b_fragment(L, t, hs, i, nt)
            for j in T.unroll(4):
                tf32_split(ah, al, j, t.wreg[0, i * 4 + j])
            for j in T.unroll(2):
                tf32_split(bh, bl, j, t.bv[j])
            a_hi = [ah[j] for j in range(4)]
            b_hi = [bh[j] for j in range(2)]
            a_lo = [T.reinterpret("uint32", al[j]) for j in range(4)]
            b_lo = [T.reinterpret("uint32", bl[j]) for j in range(2)]
            mma(t.acc, acc_tile(L, i, nt), a_lo, b_hi)  # the small terms first
            mma(t.acc, acc_tile(L, i, nt), a_hi, b_lo)
            mma(t.acc, acc_tile(L, i, nt), a_hi, b_hi)


@T.macro
def mma_dot(L, a, t, hs, gs):
    """Each warp's row tile times h(t-1) over its k-tiles, then its C fragments into `gs` block
    `tx // 32 // RT` (the warp's column split) for the updating threads to add."""
    for a in T.unroll(L.NTL * 4 * L.ACC_SETS):
        t.acc[a] = T.float32(0)
    if L.F16:  # (`a`: the kernel's arguments again, the loop's index is the loop's own)
        mma_dot_f16(L, a, t, hs)
    elif L.TF32:
        mma_dot_tf32(L, t, hs)
    else:
        mma_dot_3xtf32(L, t, hs)
    if L.ACC_SETS > 1:  # the other sets' sums into set 0
        for k in T.unroll(1, L.ACC_SETS):
            for a in T.unroll(L.NTL * 4):
                t.acc[a] = t.acc[a] + t.acc[k * L.NTL * 4 + a]
    for nt in T.unroll(L.NTL):
        for j in T.unroll(4):  # C fragment: row lane / 4 (+8 for 2, 3), batch row 2 * (lane % 4) (+1 for 1, 3)
            if nt * 8 + t.tx % 4 * 2 + j % 2 < L.BC and L.mma_row_in_tile(t.tx, j // 2) < L.GTW:
                gs[(t.tx // 32 // L.RT) * L.BC + nt * 8 + t.tx % 4 * 2 + j % 2,
                   (t.tx // 32 % L.RT) * 16 + t.tx % 32 // 4 + 8 * (j // 2)] = t.acc[nt * 4 + j]


def h_operand_f16(L, hs, row, col):
    """h(t-1)[row, col] as the 16-bit mma reads it: its half of the pair `hs` holds with 16-bit
    exchange, else the fp32 copy rounded."""
    if L.H16:
        return f16_half(hs[row * L.HSW + col // 2], col % 2, L.BF16)
    return b_operand(L, hs[row, col])


@T.macro
def emulated_mma_dot_f16(L, a, regs, hs, gs, cta):
    """`emulated_mma_dot` for the 16-bit mma (m16n8k16): element (m, k) of a warp's 16 x 16 tile
    sits in lane 4 * (m % 8) + (k % 8) // 2, register m // 8 + 2 * (k // 8), half k % 2."""
    for w, nt, m, nn in T.grid(L.RT * L.KS, L.NTL, 16, 8):
        if nt * 8 + nn < L.BC and (w % L.RT) * 16 + m < L.GTW:
            gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = T.float32(0)
            for i, k in T.grid(L.KREG, 16):
                gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = (
                    gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m]
                    + f16_half(regs.wreg[cta * L.NT + w * 32 + 4 * (m % 8) + k % 8 // 2, i * 4 + m // 8 + 2 * (k // 8)],
                               k % 2, L.BF16)
                    * h_operand_f16(L, hs, nt * 8 + nn, ((w // L.RT) * L.KPW + i) * 16 + k))
            if L.SK > 0:  # then the k-tiles whose fragments are in shared memory, in the same order
                for i, k in T.grid(L.SK, 16):
                    gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = (
                        gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m]
                        + f16_half(regs.wsm[cta, i * 4 + m // 8 + 2 * (k // 8), w * 32 + 4 * (m % 8) + k % 8 // 2],
                                   k % 2, L.BF16)
                        * h_operand_f16(L, hs, nt * 8 + nn, ((w // L.RT) * L.KPW + L.KREG + i) * 16 + k))
            if L.GK > 0:  # then those read each step, from the pairs packed in the workspace
                for i, k in T.grid(L.GK, 16):
                    gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = (
                        gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m]
                        + f16_half(a.ws[L.streamed_word(cta, w * 32 + 4 * (m % 8) + k % 8 // 2, i, m // 8 + 2 * (k // 8))],
                                   k % 2, L.BF16)
                        * h_operand_f16(L, hs, nt * 8 + nn, ((w // L.RT) * L.KPW + L.KREG + L.SK + i) * 16 + k))


@T.macro
def emulated_mma_dot_tf32(L, regs, hs, gs, cta):
    """`emulated_mma_dot` for the TF32 shapes (m16n8k8)."""
    for w, nt, m, nn in T.grid(L.RT * L.KS, L.NTL, 16, 8):
        if nt * 8 + nn < L.BC and (w % L.RT) * 16 + m < L.GTW:
            gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = T.float32(0)
            for i, k in T.grid(L.KPW, 8):
                gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = (
                    gs[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m]
                    + regs.wreg[cta * L.NT + w * 32 + 4 * (m % 8) + k % 4, i * 4 + m // 8 + 2 * (k // 4)]
                    * b_operand(L, hs[nt * 8 + nn, ((w // L.RT) * L.KPW + i) * 8 + k]))


@T.macro
def emulated_mma_dot(L, a, regs, hs, gs, cta):
    """The mma's product as PTX defines it (C[m, n] = sum over k of A[m, k] B[k, n]), with A
    read back from where `mma_load_weights` put it: element (m, k) of a warp's 16 x 8 tile sits
    in lane 4 * (m % 8) + k % 4, register m // 8 + 2 * (k // 4)."""
    if L.F16:
        emulated_mma_dot_f16(L, a, regs, hs, gs, cta)
    else:
        emulated_mma_dot_tf32(L, regs, hs, gs, cta)
