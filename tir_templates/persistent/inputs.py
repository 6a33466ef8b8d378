"""A step's inputs into registers: each owned pair's sequence length, its gates' input
projections (step s+1's fetched at the top of step s) and C(t-1); the recurrent biases once.

Every macro takes the layout `L`, the kernel's arguments `a` and the thread `t` (buffers.py).
"""
from __future__ import annotations

from tvm.script import tirx as T

from .. import signature
from .cell_state import cell_state
from .exchange import h_into_shared
from .h16_exchange import own_h_prev


def time_index(L, d, s, n_valid):
    """Position of xw and y that step s of direction d reads and writes (`signature.time_index`)."""
    return signature.time_index(L.spec, d, s, n_valid)


def valid_steps(L, a, b):
    """Batch row b's sequence length, clamped to [0, T]."""
    return T.max(T.min(T.Cast("int64", a.lens[signature.batch_row(L.spec, "lens", b)]), a.n_t), T.int64(0))


def input_at(L, a, t, e, g, ch, time):
    """Gate g's input projection of the thread's e-th pair of chunk ch at time index `time`."""
    return a.xw[time, L.pair(t.cta, t.tx, e, ch)[0], L.dir_of(t.cta), g * L.H + L.pair(t.cta, t.tx, e, ch)[1]]


@T.macro
def load_biases(L, a, t):
    """The recurrent biases of each pair's unit into registers, for the whole sequence."""
    for e in T.unroll(L.UPT):
        if L.owns_unit(t.tx, e):
            for g in T.unroll(L.G):
                t.rbr[t.row, e * L.G + g] = a.rb[L.dir_of(t.cta), g * L.H + L.pair(t.cta, t.tx, e, 0)[1]]


@T.macro
def load_lengths(L, a, t, ch):
    """Each owned pair's sequence length (clamped to [0, T]) into a register."""
    for e in T.unroll(L.UPT):
        if L.owns(t.cta, t.tx, e, ch, a.n_b):
            t.nv[t.row, e] = valid_steps(L, a, L.pair(t.cta, t.tx, e, ch)[0])


def pair_length(L, a, t, e, ch, own):
    """The sequence length of the thread's e-th pair of chunk ch: its register (`own`, the chunk
    `load_lengths` last loaded), else read here (a chunk ahead of the registers)."""
    return t.nv[t.row, e] if own else valid_steps(L, a, L.pair(t.cta, t.tx, e, ch)[0])


@T.macro
def fetch_cell_state(L, a, t, xr, e, ch):
    """C(t-1) of the thread's e-th pair of chunk ch into `xr`."""
    xr[t.row, e * L.XR + L.G] = cell_state(L, a, L.dir_of(t.cta), L.pair(t.cta, t.tx, e, ch)[0],
                                           L.pair(t.cta, t.tx, e, ch)[1])


@T.macro
def fetch(L, a, t, xr, s, ch, with_c, own_lengths=True):
    """Load step s's input projection of each owned pair (and C(t-1) when `with_c`) into the
    register set `xr`. Unguarded, with the time index clamped, so the loads issue at once (a
    forward direction's index needs no length; `own_lengths`: see `pair_length`)."""
    for e in T.unroll(L.UPT):
        if L.owns(t.cta, t.tx, e, ch, a.n_b):
            for g in T.unroll(L.G):
                xr[t.row, e * L.XR + g] = input_at(L, a, t, e, g, ch, T.max(
                    T.min(time_index(L, L.dir_of(t.cta), s, pair_length(L, a, t, e, ch, own_lengths)), a.n_t - 1),
                    T.int64(0)))
            if L.lstm and with_c:
                fetch_cell_state(L, a, t, xr, e, ch)


@T.macro
def fetch_valid(L, a, t, xr, s):
    """`fetch` for a resident CTA: only the pairs whose sequence reaches step s load, so the
    time index needs no clamp (fewer instructions on a step that is all latency)."""
    for e in T.unroll(L.UPT):
        if L.owns(t.cta, t.tx, e, L.first_chunk(t.cta), a.n_b):
            if s < t.nv[t.row, e]:
                for g in T.unroll(L.G):
                    xr[t.row, e * L.XR + g] = input_at(L, a, t, e, g, L.first_chunk(t.cta),
                                                       time_index(L, L.dir_of(t.cta), s, t.nv[t.row, e]))


@T.macro
def chunk_inputs(L, a, t, hs, s, ch, slot, with_c):
    """A chunk's lengths and step-s inputs into registers, exchange `slot` into `hs` (with the
    16-bit exchange, each owned pair's fp32 h(t-1) into its register)."""
    load_lengths(L, a, t, ch)
    fetch(L, a, t, t.xr, s, ch, with_c)
    h_into_shared(L, a, t, hs, s, slot, ch)
    if L.H16:
        own_h_prev(L, a, t, t.hp, slot, ch)


@T.macro
def chunk_ahead_inputs(L, a, t, hs, s, ch):
    """A one-phase step's chunk ch, when the batch spans chunks: its lengths, C(t-1) and h(t-1)
    (`hs`; with the 16-bit exchange each owned pair's fp32 h(t-1) too), and the input
    projections of the chunk after it (the next step's first after the last) into `xn`, in
    flight while this chunk computes. The chunk's own projections are in `xr`, fetched the same
    way a chunk earlier (`chunked_steps`): they come from HBM, where the projection GEMM left
    them, and would otherwise hold up every chunk by a round trip."""
    load_lengths(L, a, t, ch)
    for e in T.unroll(L.UPT):
        if L.lstm and L.owns(t.cta, t.tx, e, ch, a.n_b):
            fetch_cell_state(L, a, t, t.xr, e, ch)
    h_into_shared(L, a, t, hs, s, s % 2, ch)
    if L.H16:
        own_h_prev(L, a, t, t.hp, s % 2, ch)
    last = ch + 1 == L.chunks(a.n_b)
    fetch(L, a, t, t.xn, T.if_then_else(last, s + 1, s), T.if_then_else(last, 0, ch + 1), False, False)


@T.macro
def advance(L, t, resident_step):
    """Next step's prefetched input projections become this step's (C(t) stays). A resident
    CTA swaps the two register sets by step parity instead (no copy, which would wait for
    the loads at the next step's top): only C(t) moves."""
    for e in T.unroll(L.UPT):
        if resident_step:
            if L.lstm:
                t.xn[t.row, e * L.XR + L.G] = t.xr[t.row, e * L.XR + L.G]
        else:
            for g in T.unroll(L.G):
                t.xr[t.row, e * L.XR + g] = t.xn[t.row, e * L.XR + g]
