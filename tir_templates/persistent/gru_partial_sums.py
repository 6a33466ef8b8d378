"""GRU with linear_before_reset=0 and one barrier a step: GRNN's partial sums (Fig. 7b).

The work groups hold only the candidate rows. Each thread also holds whole rows of R_z and R_r at
its CTA's columns, so after h(t) each CTA publishes partial sums R_z[:, tile] h(t)[tile] and
R_r[:, tile] h(t)[tile] for every unit (`publish_partials`); after the barrier every CTA sums all
CTAs' partials into r of every unit (and z of its own), forms r * h(t-1) and runs the candidate
rows' dot products.
"""
from __future__ import annotations

from tvm.script import tirx as T

from .. import cells
from ..int8_rows import r_weight
from ..signature import batch_row
from .inputs import time_index, valid_steps
from .update import each_owned_pair


@T.macro
def load_partial_weights(L, a, t):
    """Thread tx holds rows tx, tx + NT, ... of R_z and R_r, at the CTA's columns."""
    for k in T.unroll(L.PR):
        for u in T.unroll(L.TW):
            t.wp[t.row, k * L.TW + u] = T.Cast(L.WDT, T.if_then_else(
                k * L.NT + t.tx < 2 * L.H, r_weight(L, a.r, L.dir_of(t.cta), k * L.NT + t.tx, (t.cta % L.CPD) * L.TW + u),
                T.float32(0)))


@T.macro
def tile_state(L, a, t, hm, ch):
    """h0 of the CTA's units into `hm`, for the partial sums of step 0."""
    for e in T.unroll(L.UPT):
        if L.owns(t.cta, t.tx, e, ch, a.n_b):
            hm[(e * L.NT + t.tx) // L.TW, (e * L.NT + t.tx) % L.TW] = a.h0[
                L.dir_of(t.cta), batch_row(L.spec, "h0", L.pair(t.cta, t.tx, e, ch)[0]), L.pair(t.cta, t.tx, e, ch)[1]]


@T.macro
def publish_partials(L, a, t, hm, parity, ch):
    """The tile's h (`hm`) times the CTA's columns of R_z and R_r, one partial pre-activation per
    (batch row, z/r row), into this CTA's slots for every CTA to sum."""
    for k in T.unroll(L.PR):
        if k * L.NT + t.tx < 2 * L.H:
            for bi in T.unroll(L.BC):
                if ch * L.BC + bi < a.n_b:
                    t.sacc[t.row, 0] = T.float32(0)
                    for u in T.unroll(L.TW):
                        t.sacc[t.row, 0] = t.sacc[t.row, 0] + T.Cast("float32", t.wp[t.row, k * L.TW + u]) * hm[bi, u]
                    a.hb[L.partial_slot(parity, (k * L.NT + t.tx) // L.H, t.cta), L.dir_of(t.cta), ch * L.BC + bi,
                         (k * L.NT + t.tx) % L.H] = t.sacc[t.row, 0]


@T.macro
def reset_from_partials(L, a, t, hs, rs, s, ch):
    """After the barrier: every CTA's partials of r summed, for every unit, and r * h(t-1) into
    `rs` (zero past a sequence's end) for the candidate rows' dot products."""
    for e in range((L.BC * L.H + L.NT - 1) // L.NT):
        if e * L.NT + t.tx < L.BC * L.H:
            if ch * L.BC + (e * L.NT + t.tx) // L.H < a.n_b:
                t.sacc[t.row, 0] = T.float32(0)
                for c in range(L.CPD):
                    t.sacc[t.row, 0] = t.sacc[t.row, 0] + a.hb[L.partial_slot(s % 2, 1, c), L.dir_of(t.cta),
                                                               ch * L.BC + (e * L.NT + t.tx) // L.H,
                                                               (e * L.NT + t.tx) % L.H]
                rs[(e * L.NT + t.tx) // L.H, (e * L.NT + t.tx) % L.H] = T.if_then_else(
                    s < valid_steps(L, a, ch * L.BC + (e * L.NT + t.tx) // L.H),
                    cells.gru_gate(L.spec, L.dir_of(t.cta), a.xw[T.max(T.min(time_index(
                        L, L.dir_of(t.cta), s, valid_steps(L, a, ch * L.BC + (e * L.NT + t.tx) // L.H)), a.n_t - 1),
                        T.int64(0)), ch * L.BC + (e * L.NT + t.tx) // L.H, L.dir_of(t.cta), L.H + (e * L.NT + t.tx) % L.H],
                        t.sacc[t.row, 0] + a.rb[L.dir_of(t.cta), L.H + (e * L.NT + t.tx) % L.H])
                    * hs[(e * L.NT + t.tx) // L.H, (e * L.NT + t.tx) % L.H],
                    T.float32(0))


@T.macro
def partial_update_pair(L, a, t, e, b, j, bi, d, hs, gs, hm, s):
    """`partial_update` for one owned pair: batch row b (bi within the chunk), unit j, direction d."""
    t.xr[t.row, e * L.XR + L.G] = T.float32(0)  # the z partials' sum (GRU has no C(t) here)
    for c in range(L.CPD):
        t.xr[t.row, e * L.XR + L.G] = t.xr[t.row, e * L.XR + L.G] + a.hb[L.partial_slot(s % 2, 0, c), d, b, j]
    if s < t.nv[t.row, e]:
        t.hn[t.row, e] = cells.gru_blend(
            L.spec, d, cells.gru_gate(L.spec, d, t.xr[t.row, e * L.XR], t.xr[t.row, e * L.XR + L.G] + a.rb[d, j]),
            t.xr[t.row, e * L.XR + 2], gs[bi, j % L.TW] + a.rb[d, 2 * L.H + j], hs[bi, j])
        a.y[time_index(L, d, s, t.nv[t.row, e]), d, b, j] = t.hn[t.row, e]
    else:
        t.hn[t.row, e] = hs[bi, j]
        a.y[s, d, b, j] = T.float32(0)
    a.hb[(s + 1) % 2, d, b, j] = t.hn[t.row, e]
    hm[bi, j % L.TW] = t.hn[t.row, e]


@T.macro
def partial_update(L, a, t, hs, gs, hm, s, ch):
    """z of each owned pair from the summed partials, the candidate from the work groups' dot
    products with r * h(t-1), then h(t) as in `update`, also into `hm`."""
    each_owned_pair(L, a, t, ch, partial_update_pair, hs, gs, hm, s)
