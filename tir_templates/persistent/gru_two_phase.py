"""GRU with linear_before_reset=0, two phases a step (GRNN Fig. 7a): r * h(t-1) of *every* unit
is needed before the candidate's GEMV, so each phase ends in a barrier.

Phase 1: the z and r rows' dot products with h(t-1); z kept (in yc, unused by GRU), r * h(t-1)
published in exchange slot 2. Phase 2: the candidate rows' dot products with r * h(t-1), then h(t).
"""
from __future__ import annotations

from tvm.script import tirx as T

from .. import cells
from .inputs import time_index
from .update import each_owned_pair


@T.macro
def reset_pair(L, a, t, e, b, j, bi, d, hs, gs, s):
    """`reset_phase` for one owned pair: batch row b (bi within the chunk), unit j, direction d."""
    if s < t.nv[t.row, e]:
        a.yc[d, b, j] = cells.gru_gate(L.spec, d, t.xr[t.row, e * L.XR], gs[bi, j % L.TW] + a.rb[d, j])
        a.hb[2, d, b, j] = cells.gru_gate(L.spec, d, t.xr[t.row, e * L.XR + 1],
                                          gs[bi, L.TW + j % L.TW] + a.rb[d, L.H + j]) * hs[bi, j]
    else:
        a.hb[2, d, b, j] = T.float32(0)


@T.macro
def reset_phase(L, a, t, hs, gs, s, ch):
    """Phase 1: each owned pair's z goes to yc (its owner reads it back in phase 2) and
    r * h(t-1) to exchange slot 2, for every CTA's candidate GEMV."""
    each_owned_pair(L, a, t, ch, reset_pair, hs, gs, s)


@T.macro
def candidate_pair(L, a, t, e, b, j, bi, d, gs, s):
    """`candidate_phase` for one owned pair: batch row b (bi within the chunk), unit j, direction d."""
    if s < t.nv[t.row, e]:
        t.hn[t.row, e] = cells.gru_blend(L.spec, d, a.yc[d, b, j], t.xr[t.row, e * L.XR + 2],
                                         gs[bi, 2 * L.TW + j % L.TW] + a.rb[d, 2 * L.H + j],
                                         a.hb[s % 2, d, b, j])
        a.y[time_index(L, d, s, t.nv[t.row, e]), d, b, j] = t.hn[t.row, e]
    else:
        t.hn[t.row, e] = a.hb[s % 2, d, b, j]
        a.y[s, d, b, j] = T.float32(0)
    a.hb[(s + 1) % 2, d, b, j] = t.hn[t.row, e]


@T.macro
def candidate_phase(L, a, t, gs, s, ch):
    """Phase 2: the candidate from R_h (r * h(t-1)), then h(t) as in `update`; h(t-1) of the pair
    is read back from the exchange buffer (its owner wrote it)."""
    each_owned_pair(L, a, t, ch, candidate_pair, gs, s)
