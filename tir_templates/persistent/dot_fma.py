"""The recurrent dot products on the FMA units: each work group of WS lanes owns RPG gate rows;
every lane keeps its strided runs of columns in registers for the whole sequence (the next SR
runs in shared memory when registers cannot hold them, and the last GR read from R in global
memory each step when shared memory cannot hold them either), multiplies them with its columns
of h(t-1), and a warp shuffle sums the group's lanes. A quantized layer's lane may instead hold
its runs as int8, four to a register, and scale each row's sum once (`int8_rows.py`).
`emulated_dot` is the CPU twin's version.
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..int8_rows import OFFSET, int8_floats, int8_value, r_weight, scale, word


@T.macro
def load_int8_row(L, a, t, q):
    """Register row q of an int8 lane: each of its RR runs one packed word of R, then the row's
    scale (padding lanes: zero weights, q + 128 = 0x80 in every byte, and scale 0)."""
    for i in T.unroll(L.RR):
        t.wreg[t.row, q * L.WPR + i] = T.if_then_else(
            t.tx // L.WS < L.NG, word(a.r, L.dir_of(t.cta), L.weight_row(t.cta, t.tx, q), t.tx % L.WS + L.WS * i),
            T.uint32(0x80808080))
    t.wreg[t.row, q * L.WPR + L.RR] = T.if_then_else(
        t.tx // L.WS < L.NG, T.reinterpret("uint32", scale(a.r, L.dir_of(t.cta), L.weight_row(t.cta, t.tx, q), L.H)),
        T.uint32(0))


@T.macro
def int8_dot(L, t, hs):
    """The lane's sums of its int8 runs times h(t-1): each run's columns of h for every batch row
    of the chunk (float4 shared loads), then each weight dequantized once (`int8_floats`) and
    multiplied with them; each row's sum times its scale."""
    for i in T.unroll(L.RR):
        for bi in T.unroll(L.BC):
            for v in T.vectorized(L.DV):
                t.hq[bi * L.DV + v] = hs[bi, L.col(t.tx % L.WS, i, v)]
        for q in T.unroll(L.RPG):
            int8_floats(t.wq, t.wreg[0, q * L.WPR + i])
            for v in T.unroll(L.DV):
                for bi in T.unroll(L.BC):
                    t.acc[q * L.BC + bi] = t.acc[q * L.BC + bi] + (
                        T.reinterpret("float32", t.wq[v]) - T.float32(OFFSET)) * t.hq[bi * L.DV + v]
    for q in T.unroll(L.RPG):
        for bi in T.unroll(L.BC):
            t.acc[q * L.BC + bi] = t.acc[q * L.BC + bi] * T.reinterpret("float32", t.wreg[0, q * L.WPR + L.RR])


@T.macro
def load_weights(L, a, t):
    """This lane's slice of its work group's gate rows, for the whole sequence: the first RR
    runs of columns into registers (`wreg` row `t.row`), the last SR into shared memory (`wsm`
    block `t.block`, thread-contiguous so that a warp's loads hit distinct banks)."""
    for q in T.unroll(L.RPG):
        if L.INT8:
            load_int8_row(L, a, t, q)
        elif L.RR > 0:
            for i in T.unroll(L.RR):
                # a run: one 16-byte load (spilled with SR; a packed R's word is read per weight)
                for v in (T.vectorized if L.SR == 0 and not L.PACKED_R else T.unroll)(L.DV):
                    t.wreg[t.row, q * L.KR + i * L.DV + v] = T.Cast(L.WDT, T.if_then_else(
                        t.tx // L.WS < L.NG,
                        r_weight(L, a.r, L.dir_of(t.cta), L.weight_row(t.cta, t.tx, q), L.col(t.tx % L.WS, i, v)),
                        T.float32(0)))
        if L.SR > 0:
            for i in T.unroll(L.SR):
                for v in T.unroll(L.DV):
                    t.wsm[t.block, (i * L.RPG + q) * L.DV + v, t.tx] = T.Cast(L.WDT, T.if_then_else(
                        t.tx // L.WS < L.NG,
                        r_weight(L, a.r, L.dir_of(t.cta), L.weight_row(t.cta, t.tx, q), L.col(t.tx % L.WS, L.RR + i, v)),
                        T.float32(0)))


@T.macro
def staged_run_dot(L, t, hs, run):
    """The lane's sums += its RPG rows of columns run `run`, staged in `t.wt` (from shared or
    global memory), times h(t-1)'s columns of that run for each batch row of the chunk."""
    for bi in T.unroll(L.BC):
        for v in T.vectorized(L.DV):
            t.hv[v] = hs[bi, L.col(t.tx % L.WS, run, v)]
        for q in T.unroll(L.RPG):
            for v in T.unroll(L.DV):
                t.acc[q * L.BC + bi] = t.acc[q * L.BC + bi] + T.Cast("float32", t.wt[q * L.DV + v]) * t.hv[v]


@T.macro
def global_run_dot(L, a, t, hs, run):
    """`staged_run_dot` of run `run`, read from R in global memory (16-byte loads)."""
    for q in T.unroll(L.RPG):
        for v in T.vectorized(L.DV):
            t.wt[q * L.DV + v] = T.Cast(L.WDT, a.r[L.dir_of(t.cta), L.weight_row(t.cta, t.tx, q),
                                                   L.col(t.tx % L.WS, run, v)])
    staged_run_dot(L, t, hs, run)


@T.macro
def dot_and_reduce(L, a, t, hs, gs, phase):
    """Partial dot products of the lane's weights (registers, then shared memory, then global
    memory) with its columns of h(t-1) (float4 shared loads), then a shuffle-sum over the work group's lanes
    (outside any branch: every lane reaches it; every lane gets the sums), into `gs` unless the
    lanes update their units themselves."""
    for e in T.unroll(L.RPG * L.BC):
        t.acc[e] = T.float32(0)
    if L.group_active((t.tx // L.WS) * L.RPG, phase):
        if L.INT8:
            int8_dot(L, t, hs)
        elif L.RR > 0:
            for i in T.unroll(L.RR):
                for bi in T.unroll(L.BC):
                    for v in T.vectorized(L.DV):
                        t.hv[v] = hs[bi, L.col(t.tx % L.WS, i, v)]
                    for q in T.unroll(L.RPG):
                        for v in T.unroll(L.DV):
                            t.acc[q * L.BC + bi] = t.acc[q * L.BC + bi] + T.Cast(
                                "float32", t.wreg[0, q * L.KR + i * L.DV + v]) * t.hv[v]
        if L.SR > 0:
            for i in T.unroll(L.SR):
                for q in T.unroll(L.RPG):
                    for v in T.unroll(L.DV):
                        t.wt[q * L.DV + v] = t.wsm[0, (i * L.RPG + q) * L.DV + v, t.tx]
                staged_run_dot(L, t, hs, L.RR + i)
        if L.GR > 0 and t.tx // L.WS < L.NG:  # padding lanes have no rows of R to read
            if L.GU == L.GR:
                for i in T.unroll(L.GR):
                    global_run_dot(L, a, t, hs, L.RR + L.SR + i)
            else:  # GU runs a turn: a kernel unrolling them all would take nvcc minutes
                for turn in T.serial((L.GR + L.GU - 1) // L.GU):
                    for i in T.unroll(L.GU):
                        if turn * L.GU + i < L.GR:
                            global_run_dot(L, a, t, hs, L.RR + L.SR + turn * L.GU + i)
    for q in T.unroll(L.RPG):
        for bi in T.unroll(L.BC):
            if L.WS > 1:
                t.acc[q * L.BC + bi] = T.cuda.warp_sum(t.acc[q * L.BC + bi], L.WS)
            if not L.LANE and t.tx % L.WS == 0 and t.tx // L.WS < L.NG:
                gs[bi, (t.tx // L.WS) * L.RPG + q] = t.acc[q * L.BC + bi]


@T.macro
def emulated_dot(L, a, regs, hs, gs, cta, phase):
    """The work groups' dot products as the shuffle would sum them, lane by lane, from the
    lanes' weights where `load_weights` put them (the global runs from R); a group that skips
    this phase leaves NaN, so reading its rows would show."""
    for grp, q, bi in T.grid(L.NG, L.RPG, L.BC):
        gs[bi, grp * L.RPG + q] = T.float32(float("nan"))
        if L.group_active(grp * L.RPG, phase):
            gs[bi, grp * L.RPG + q] = T.float32(0)
            if L.INT8:  # each lane's int8 weight times its row's scale
                for lane, i, v in T.grid(L.WS, L.RR, L.DV):
                    gs[bi, grp * L.RPG + q] = gs[bi, grp * L.RPG + q] + int8_value(
                        regs.wreg[cta * L.NT + grp * L.WS + lane, q * L.WPR + i], v) * hs[bi, L.col(lane, i, v)] * (
                        T.reinterpret("float32", regs.wreg[cta * L.NT + grp * L.WS + lane, q * L.WPR + L.RR]))
            else:
                for lane, i, v in T.grid(L.WS, L.RR, L.DV):
                    gs[bi, grp * L.RPG + q] = gs[bi, grp * L.RPG + q] + T.Cast(
                        "float32", regs.wreg[cta * L.NT + grp * L.WS + lane, q * L.KR + i * L.DV + v]) * hs[bi, L.col(lane, i, v)]
            if L.SR > 0:
                for lane, i, v in T.grid(L.WS, L.SR, L.DV):
                    gs[bi, grp * L.RPG + q] = gs[bi, grp * L.RPG + q] + T.Cast(
                        "float32", regs.wsm[cta, (i * L.RPG + q) * L.DV + v, grp * L.WS + lane]) * hs[bi, L.col(lane, L.RR + i, v)]
            if L.GR > 0:
                for lane, i, v in T.grid(L.WS, L.GR, L.DV):
                    gs[bi, grp * L.RPG + q] = gs[bi, grp * L.RPG + q] + T.Cast("float32", T.Cast(
                        L.WDT, a.r[L.dir_of(cta), L.weight_row(cta, grp * L.WS + lane, q),
                                   L.col(lane, L.RR + L.SR + i, v)])) * hs[bi, L.col(lane, L.RR + L.SR + i, v)]
