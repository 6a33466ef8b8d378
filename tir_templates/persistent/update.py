"""A step's cell update for LSTM, GRU (linear_before_reset=1) and RNN: each (batch row, unit) of
the chunk has one owner thread, which applies the cell (`cells.py`) to its gates' sums.

The sums come from the work groups' dot products in shared memory (`gs`), or, with
`Config.lane_updates`, straight from the lane's own accumulators after the shuffle. GRU with
linear_before_reset=0 has kernels of its own: `gru_two_phase.py`, `gru_partial_sums.py`.
"""
from __future__ import annotations

from tvm.script import tirx as T

from .. import cells
from .cell_state import keep_cell_state
from .inputs import time_index
from .h16_exchange import publish_h16
from .dot_mma import half_bits
from .stamped_exchange import publish, publish_half, publish_pairs


def h_prev(L, t, hs, e, bi, j):
    """The pair's fp32 h(t-1): the owner's register with 16-bit exchange (`hs` holds halves),
    else the shared copy."""
    return t.hp[t.row, e] if L.H16 else hs[bi, j]


def recurrent_parts(L, t, gs, e, bi, jl):
    """A pair's gate sums plus its recurrent biases. Lane updates on the GPU read the lane's
    own accumulators (every lane holds the group's sums after the shuffle), picked by lane."""
    G, BC = L.G, L.BC
    if L.LANE and not L.emulate:
        sums = []
        for g in range(G):
            v = t.acc[g * BC]
            for p in range(1, L.UG * BC):  # lane p owns unit p % UG of batch row p // UG
                v = T.Select(t.tx % L.WS == p, t.acc[((p % L.UG) * G + g) * BC + p // L.UG], v)
            sums.append(v)
    else:  # with tensor cores, the column split's partial sums
        sums = [gs[bi, L.gate_pos(g, jl)] for g in range(G)]
        for kk in range(1, L.KS):
            sums = [sums[g] + gs[kk * BC + bi, L.gate_pos(g, jl)] for g in range(G)]
    return [sums[g] + t.rbr[t.row, e * G + g] for g in range(G)]


@T.macro
def each_owned_pair(L, a, t, ch, body, *args):
    """body(L, a, t, e, b, j, bi, d, *args) for each (batch row b, unit j) of chunk ch that the
    thread updates (its e-th pair): bi is b's row within the chunk, d the direction."""
    cta, tx = t.cta, t.tx  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    for e in T.unroll(L.UPT):
        if L.owns(cta, tx, e, ch, a.n_b):
            b, j = L.pair(cta, tx, e, ch)
            bi = L.chunk_row(tx, e)
            d = L.dir_of(cta)
            body(L, a, t, e, b, j, bi, d, *args)


@T.macro
def h_out(L, a, t, e, b, j, bi, d, s, hs_next):
    """A pair's h(t) (in `hn`) where step s+1 reads it: the exchange buffer's slot (s+1) % 2, or
    its stamped word (`stamped_exchange.py`; stamped halves: both, its 16 bits into `hh` for
    `publish_pairs`), or the shared copy `hs_next`."""
    if hs_next is None and L.stamped and not L.HALVES:
        publish(L, a, (s + 1) % 2, d, b, j, t.hn[t.row, e], s + 2)
    elif hs_next is None:
        a.hb[(s + 1) % 2, d, b, j] = t.hn[t.row, e]
        if L.HALVES and L.emulate:
            publish_half(L, a, (s + 1) % 2, d, b, j, t.hn[t.row, e], s + 2)
        elif L.HALVES:
            t.hh[t.row, e] = half_bits(t.hn[t.row, e], L.BF16)
        elif L.H16:
            publish_h16(L, a, (s + 1) % 2, d, b, j, t.hn[t.row, e])
    else:
        hs_next[bi, j] = t.hn[t.row, e]


@T.macro
def update_pair(L, a, t, e, b, j, bi, d, hs, gs, s, hs_next):
    """`update` for one owned pair: batch row b (bi within the chunk), unit j, direction d."""
    if s < t.nv[t.row, e]:
        if L.lstm:
            t.xr[t.row, e * L.XR + L.G] = cells.lstm_cell_state(
                L.spec, d, cells.gate_slice(t.xr, (t.row,), e * L.XR, 1, L.G),
                recurrent_parts(L, t, gs, e, bi, j % L.TW), t.xr[t.row, e * L.XR + L.G],
                cells.gate_slice(a.p, (d,), j, L.H, 3), L.FAST)
            if hs_next is None:
                keep_cell_state(L, a, d, b, j, t.xr[t.row, e * L.XR + L.G])
        t.hn[t.row, e] = cells.hidden(
            L.spec, d, cells.gate_slice(t.xr, (t.row,), e * L.XR, 1, L.G),
            recurrent_parts(L, t, gs, e, bi, j % L.TW), h_prev(L, t, hs, e, bi, j), t.xr[t.row, e * L.XR + L.G],
            cells.gate_slice(a.p, (d,), j, L.H, 3), L.FAST)
        a.y[time_index(L, d, s, t.nv[t.row, e]), d, b, j] = t.hn[t.row, e]
    else:  # past this sequence's end: state carried, output zero
        t.hn[t.row, e] = h_prev(L, t, hs, e, bi, j)
        a.y[s, d, b, j] = T.float32(0)
    h_out(L, a, t, e, b, j, bi, d, s, hs_next)


@T.macro
def update(L, a, t, hs, gs, s, ch, hs_next):
    """The owner of each pair keeps C(t) in its register and stores h(t) into Y and `hn`; then
    into the exchange buffer (or its stamped words; C(t) where the next step reads it,
    `cell_state.py`), or, when `hs_next` is not None (a resident CTA, which needs neither until
    its last step: `resident_states_out`), into that shared copy of h (`h_out`)."""
    each_owned_pair(L, a, t, ch, update_pair, hs, gs, s, hs_next)
    if L.HALVES and not L.emulate and hs_next is None:
        publish_pairs(L, a, t, s, ch)
