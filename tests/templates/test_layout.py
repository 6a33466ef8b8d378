"""The persistent kernel's layout on plain ints: every unit, gate row, weight and state has
exactly one owner, and the dot results sit where the updates read them.

`Layout` builds the same index arithmetic on ints as on the kernel's thread indices, so these
checks see what the CUDA kernel does without building it.
"""
from __future__ import annotations

import collections
import itertools

import pytest

from tir_templates.config import Config
from tir_templates.persistent.layout import Layout
from tir_templates.spec import CellSpec

#: (cell, hidden, direction, batch, config); "gru0" is GRU with linear_before_reset=0
CASES = [
    ("lstm", 64, "forward", 1, Config(64, 2, 4, 1)),  # one resident CTA, lane updates
    ("lstm", 256, "bidirectional", 3, Config(32, 8, 4, 1, cluster=True, batch_tile=1)),
    ("lstm", 128, "forward", 5, Config(16, 16, 4, 2)),  # chunks, shared-memory meet
    ("lstm", 16, "bidirectional", 5, Config(16, 4, 4, 2, batch_tile=2)),  # ragged last tile
    ("lstm", 32, "forward", 3, Config(8, 1, 8, 3, smem_runs=1)),
    ("gru", 48, "reverse", 4, Config(8, 4, 3, 4)),  # 3 rows a group: groups straddle gates
    ("gru0", 64, "bidirectional", 3, Config(16, 4, 2, 2)),
    ("gru0", 64, "forward", 3, Config(16, 4, 2, 3, gru_barriers=1)),  # partial sums: candidate rows only
    ("rnn", 16, "forward", 4, Config(2, 8, 1, 4)),  # 8 CTAs of 2 units
    ("lstm", 64, "forward", 10, Config(8, 32, 16, 10, mma_k_split=2)),
    ("gru", 16, "bidirectional", 3, Config(8, 32, 16, 3, mma_k_split=2)),  # the second row tile padded
]


def _layout(cell, hidden, direction, cfg):
    spec = CellSpec(cell.rstrip("0"), hidden, hidden, direction, linear_before_reset=(cell == "gru"))
    return Layout(spec, cfg)


def _chunks_of(L, cta, n_b):
    return [L.first_chunk(cta)] if L.tiled else range(L.chunks(n_b))


@pytest.mark.parametrize("cell,hidden,direction,batch,cfg", CASES, ids=str)
def test_every_pair_has_one_updating_thread(cell, hidden, direction, batch, cfg):
    L = _layout(cell, hidden, direction, cfg)
    owners = collections.Counter()
    for cta, tx, e in itertools.product(range(L.grid_size(batch)), range(L.NT), range(L.UPT)):
        for ch in _chunks_of(L, cta, batch):
            if L.owns(cta, tx, e, ch, batch):
                b, j = L.pair(cta, tx, e, ch)
                assert b // L.BC == ch and L.chunk_row(tx, e) == b - ch * L.BC
                owners[L.dir_of(cta), b, j] += 1
    assert owners == {(d, b, j): 1 for d in range(L.D) for b in range(batch) for j in range(L.H)}


@pytest.mark.parametrize("cell,hidden,direction,batch,cfg", CASES, ids=str)
def test_every_state_is_set_up_once(cell, hidden, direction, batch, cfg):
    L = _layout(cell, hidden, direction, cfg)
    owners = collections.Counter()
    for cta, tx in itertools.product(range(L.grid_size(batch)), range(L.NT)):
        for e in range((L.own_rows(batch) * L.TW + L.NT - 1) // L.NT):
            if L.owns_state(cta, tx, e, batch):
                owners[L.dir_of(cta), L.state_row(cta, tx, e), L.state_unit(cta, tx, e)] += 1
    assert owners == {(d, b, j): 1 for d in range(L.D) for b in range(batch) for j in range(L.H)}


@pytest.mark.parametrize("cell,hidden,direction,batch,cfg", [c for c in CASES if not c[4].tensor_cores()], ids=str)
def test_every_weight_of_a_direction_is_held_once(cell, hidden, direction, batch, cfg):
    """The FMA layout: the work groups' lanes hold each of their gate rows' columns exactly once
    (registers and shared memory together), and each dot result lands where the update reads
    gate g of unit jl (`gate_pos`)."""
    L = _layout(cell, hidden, direction, cfg)
    held = collections.Counter()
    for cta, tx, q in itertools.product(range(L.CPD), range(L.NG * L.WS), range(L.RPG)):
        for i, v in itertools.product(range(L.RR + L.SR), range(L.DV)):
            held[L.weight_row(cta, tx, q), L.col(tx % L.WS, i, v)] += 1
    rows = range(L.GATE0 * L.H, L.G * L.H)
    assert held == {(row, c): 1 for row in rows for c in range(L.H)}
    if L.LANE:
        return
    for g, jl in itertools.product(range(L.G - L.GATE0), range(L.TW)):
        pos = L.gate_pos(g, jl)
        assert L.weight_row(0, pos // L.RPG * L.WS, pos % L.RPG) == (L.GATE0 + g) * L.H + jl


@pytest.mark.parametrize("cell,hidden,direction,batch,cfg", [c for c in CASES if c[4].tensor_cores()], ids=str)
def test_mma_fragments_cover_the_ctas_rows_once(cell, hidden, direction, batch, cfg):
    """Tensor cores: the warps' A fragments hold each (gate row, column) of a CTA once; the
    padded tile's rows (past the CTA's gate rows) hold nothing."""
    L = _layout(cell, hidden, direction, cfg)
    for cta in range(L.CPD):
        held = collections.Counter()
        for tx, i, j in itertools.product(range(L.NT), range(L.KPW), range(4)):
            if L.mma_row_in_tile(tx, j) < L.GTW:
                held[L.mma_row(cta, tx, j), L.mma_col(tx, i, j)] += 1
        rows = [g * L.H + cta * L.TW + u for g in range(L.G) for u in range(L.TW)]
        assert held == {(row, c): 1 for row in rows for c in range(L.H)}


def test_barrier_indices_and_slots_do_not_collide():
    """Each phase of each step has its own barrier index, and the partial sums' slots (two
    parities, two gates, every CTA) sit past h's three slots, each once."""
    L = _layout("gru0", 64, "forward", Config(16, 4, 2, 2))
    indices = [L.barrier_index(s, phase) for s in range(5) for phase in (1, 2)]
    assert indices == list(range(2, 12))
    L = _layout("gru0", 64, "forward", Config(16, 4, 2, 3, gru_barriers=1))
    slots = [L.partial_slot(parity, gate, cta) for parity in (0, 1) for gate in (0, 1) for cta in range(L.CPD)]
    assert sorted(slots) == list(range(3, L.SLOTS))


@pytest.mark.parametrize("cfg,hidden,direction", [
    (Config(32, 4, 2, 1, cluster=True, dsmem=True), 256, "forward"),  # 8 CTAs, 56 stores each
    (Config(32, 8, 4, 2, cluster=True, batch_tile=2, dsmem=True), 256, "bidirectional"),
    (Config(4, 8, 4, 3, cluster=True, dsmem=True), 16, "reverse"),
    (Config(16, 8, 4, 1, cluster=True, batch_tile=1, dsmem=True), 256, "bidirectional"),  # clusters of 16 CTAs
], ids=str)
def test_dsmem_stores_give_every_peer_each_unit_once(cfg, hidden, direction):
    """A dsmem cluster's 16-byte stores of h(t): each CTA sends its own units, never to itself,
    and every other CTA of its cluster receives each (batch row, unit) of them exactly once; the
    bytes each receives are what its mbarrier expects."""
    L = _layout("lstm", hidden, direction, cfg)
    assert L.dsmem and L.h_on_chip
    received = collections.Counter()
    for cta, tx in itertools.product(range(L.grid_size(2 * cfg.batch_chunk)), range(L.NT)):
        for e in range(-(-L.SENDS // L.NT)):
            if L.sends(tx, e):
                peer, row, col = L.dsmem_store(cta, tx, e)
                to = cta // L.CPD * L.CPD + peer
                assert peer != cta % L.CPD and col // L.TW == cta % L.CPD and col % 4 == 0
                for v in range(4):
                    received[to, row, col + v] += 1
    ctas = range(L.grid_size(2 * cfg.batch_chunk))
    assert received == {(to, row, j): 1 for to in ctas for row in range(L.BC) for j in range(L.H)
                        if j // L.TW != to % L.CPD}
    assert all(sum(n for (to, _, _), n in received.items() if to == c) * 4 == L.RECV_BYTES for c in ctas)


@pytest.mark.parametrize("cell,hidden,cfg", [("lstm", 64, Config(8, 32, 16, 10, "float16", mma_k_split=2)),
                                             ("gru", 32, Config(8, 32, 16, 3, "float16", mma_k_split=1))], ids=str)
def test_f16_fragments_follow_the_ptx_layout_and_cover_the_rows_once(cell, hidden, cfg):
    """fp16 mma (m16n8k16): half e of A-fragment register j of lane l is, by the PTX ISA's
    figure for .f16 A fragments, row l / 4 (+8 for j odd) and column 2 (l % 4) + e (+8 for j >= 2)
    of the warp's 16 x 16 tile; the warps' fragments hold each (gate row, column) of a CTA once."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True, dtype="float16")
    L = Layout(spec, cfg)
    assert L.F16 and L.KPW == hidden // 16 // cfg.mma_k_split
    for lane, j, e in itertools.product(range(32), range(4), range(2)):
        ptx_row = lane // 4 + (8 if j in (1, 3) else 0)
        ptx_col = (lane % 4) * 2 + e + (8 if j >= 2 else 0)
        assert (L.mma_row_in_tile(lane, j), L.mma_col_f16(lane, 0, j, e)) == (ptx_row, ptx_col)
    for cta in range(L.CPD):
        held = collections.Counter()
        for tx, i, j, e in itertools.product(range(L.NT), range(L.KPW), range(4), range(2)):
            if L.mma_row_in_tile(tx, j) < L.GTW:
                held[L.mma_row(cta, tx, j), L.mma_col_f16(tx, i, j, e)] += 1
        rows = [g * L.H + cta * L.TW + u for g in range(L.G) for u in range(L.TW)]
        assert held == {(row, c): 1 for row in rows for c in range(L.H)}


@pytest.mark.parametrize("cfg,sets", [
    (Config(16, 32, 16, 8, "float16", batch_tile=8, mma_k_split=1), 2),  # 16-bit, one n-tile, one split
    (Config(16, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2), 1),  # two column splits
    (Config(16, 32, 16, 16, "float16", batch_tile=16, mma_k_split=1), 1),  # two n-tiles
    (Config(16, 32, 16, 8, batch_tile=8, mma_k_split=1), 1),  # fp32 weights: 3xTF32
    (Config(16, 8, 4, 8, "float16"), 1),  # the FMA units
])
def test_two_sets_of_c_fragments_only_where_one_chain_holds_a_warps_k_tiles(cfg, sets):
    """A 16-bit mma warp with one n-tile and one column split alternates two sets of C fragments
    (Config.acc_sets), which its layout and register estimate count; elsewhere one set."""
    spec = CellSpec("lstm", 256, 256, dtype="float16")
    assert cfg.acc_sets() == sets and Layout(spec, cfg).ACC_SETS == sets
    if cfg.tensor_cores():
        one = cfg.weight_regs(spec) + 4 * cfg.n_tiles() + 8
        assert cfg.live_registers(spec) == one + 4 * cfg.n_tiles() * (sets - 1)
