"""h(t-1) exchanged in 16 bits by the 16-bit mma step (`Config.h16_exchange`), on the CPU twin.

The mma reads h(t-1) rounded to the layer's 16 bits either way. Whether the owner rounds h(t)
once and publishes the halves, or every CTA rounds the fp32 copy as it packs B fragments, the
outputs must be the same bits. The cases below also cover batches that span chunks, cluster
batch tiles, both directions, bf16, and ragged and empty sequences (a finished sequence carries
the owner's fp32 h(t-1))."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.config import Config, problems
from tir_templates.persistent import BARRIER_FLAG_WORD, emulated_persistent_kernel
from tir_templates.persistent.layout import Layout
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

H, I, STEPS = 16, 8, 5

CASES = [
    # (cell, direction, batch, config, extra spec flags)
    ("lstm", "bidirectional", 3, Config(4, 32, 16, 3, "float16", mma_k_split=1), dict(peepholes=True)),
    ("gru", "bidirectional", 10, Config(8, 32, 16, 10, "float16", mma_k_split=1), {}),  # two n-tiles
    ("lstm", "forward", 7, Config(4, 32, 16, 3, "float16", mma_k_split=1), {}),  # three chunks, the last ragged
    ("gru", "reverse", 7, Config(8, 32, 16, 2, "bfloat16", mma_k_split=1), {}),  # bf16, four chunks
    ("lstm", "bidirectional", 5, Config(4, 32, 16, 2, "float16", cluster=True, batch_tile=2, mma_k_split=1), {}),
    ("rnn", "forward", 4, Config(4, 32, 16, 4, "bfloat16", mma_k_split=1), dict(clip=1.0)),
]


def _run(spec, cfg, batch, monkeypatch, h16):
    """The twin's outputs with the 16-bit exchange on or off (built afresh, past the cache)."""
    with monkeypatch.context() as m:
        if not h16:
            m.setattr(Config, "h16_exchange", lambda self, spec: False)
        assert Layout(spec, cfg, emulate=True).H16 == h16
        arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
        arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
        return run_on_llvm(emulated_persistent_kernel.__wrapped__(spec, cfg), arrays)


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", CASES, ids=lambda v: str(v))
def test_16_bit_exchange_gives_the_same_bits(cell, direction, batch, cfg, flags, monkeypatch):
    spec = CellSpec(cell, I, H, direction, linear_before_reset=(cell == "gru"), dtype=cfg.weight_dtype, **flags)
    want = _run(spec, cfg, batch, monkeypatch, h16=False)
    got = _run(spec, cfg, batch, monkeypatch, h16=True)
    assert got[11][BARRIER_FLAG_WORD] == 0, "a barrier's arrivals would not match on the GPU"
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got[7:10], want[7:10]):
        np.testing.assert_array_equal(g.astype("float32"), w.astype("float32"), err_msg=name)
    assert np.abs(got[7].astype("float32")).max() > 0.05  # the layer did compute


def test_16_bit_exchange_only_where_the_mma_reads_16_bits():
    """On for the 16-bit mma's grid and cluster steps; off for fp32 and TF32 mma, the FMA units,
    stamped words, a resident CTA and H not a multiple of 8; its slot follows the others."""
    lstm16 = CellSpec("lstm", I, H, "forward", dtype="float16")
    on = Config(4, 32, 16, 3, "float16", mma_k_split=1)
    assert on.h16_exchange(lstm16)
    assert on.h16_slot(lstm16) == on.exchange_slots(lstm16) - 1 == on.cell_state_slot(lstm16) + 1
    assert on.h_stride(lstm16) % 8 == 4 and on.h_stride(lstm16) >= H // 2
    assert not Config(4, 32, 16, 3, mma_k_split=1).h16_exchange(CellSpec("lstm", I, H, "forward"))
    assert not Config(4, 32, 16, 3, mma_k_split=1, mma_precision="tf32").h16_exchange(CellSpec("lstm", I, H, "forward"))
    assert not Config(4, 4, 4, 3, "float16").h16_exchange(lstm16)
    stamped = Config(4, 32, 16, 3, "float16", mma_k_split=1, stamped=True)  # as stamped halves, a slot a copy
    assert stamped.h16_exchange(lstm16) and stamped.stamped_halves(lstm16)
    assert stamped.exchange_slots(lstm16) == on.exchange_slots(lstm16) + 1
    assert not on.stamped_halves(lstm16)
    assert not Config(16, 32, 16, 3, "float16", mma_k_split=1).h16_exchange(lstm16)  # one resident CTA
    assert Config(4, 4, 4, 3, "float16").h16_slot(lstm16) is None


#: stamped halves (no barrier a step) against the same configs' 16-bit exchange through a barrier:
#: grid directions, chunks (the last ragged), two n-tiles, bf16, grid batch tiles, both directions
STAMPED_CASES = [
    ("lstm", "bidirectional", 3, Config(4, 32, 16, 3, "float16", mma_k_split=1), dict(peepholes=True)),
    ("gru", "forward", 10, Config(8, 32, 16, 10, "float16", mma_k_split=1), {}),
    ("lstm", "forward", 7, Config(4, 32, 16, 3, "float16", mma_k_split=1), {}),
    ("gru", "reverse", 7, Config(8, 32, 16, 2, "bfloat16", mma_k_split=1), {}),
    ("lstm", "bidirectional", 5, Config(4, 32, 16, 2, "float16", batch_tile=2, mma_k_split=1), {}),
    ("rnn", "forward", 4, Config(4, 32, 16, 4, "bfloat16", mma_k_split=1), dict(clip=1.0)),
]


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", STAMPED_CASES, ids=lambda v: str(v))
def test_stamped_halves_give_the_same_bits(cell, direction, batch, cfg, flags, monkeypatch):
    """The pairs as stamped words carry the same 16 bits as the barrier's 16-bit slot: the same
    outputs bit for bit, no barrier after the launch's first, and every word read with its stamp."""
    spec = CellSpec(cell, I, H, direction, linear_before_reset=(cell == "gru"), dtype=cfg.weight_dtype, **flags)
    stamped = dataclasses.replace(cfg, stamped=True)
    assert not problems(spec, stamped, 48) and stamped.stamped_halves(spec)
    want = _run(spec, cfg, batch, monkeypatch, h16=True)
    got = _run(spec, stamped, batch, monkeypatch, h16=True)
    assert got[11][BARRIER_FLAG_WORD] == 0, "a stamp or the launch's barrier would not match on the GPU"
    assert got[11][0] == stamped.ctas_per_direction(spec)  # the launch's one barrier
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got[7:10], want[7:10]):
        np.testing.assert_array_equal(g.astype("float32"), w.astype("float32"), err_msg=name)
    assert np.abs(got[7].astype("float32")).max() > 0.05  # the layer did compute


#: 16-bit mma picks whose halved copy of h would leave 0-48 KiB of dynamic shared memory beside
#: static memory past 48 KiB (GRU H=640 B=128's cluster tiles; LSTM H=1280 B=16)
WINDOW_CASES = [
    ("gru", 640, Config(40, 32, 16, 32, "float16", cluster=True, batch_tile=32, mma_k_split=2)),
    ("lstm", 1280, Config(10, 32, 16, 16, "float16", mma_k_split=4)),
]


@pytest.mark.parametrize("cell,hidden,cfg", WINDOW_CASES, ids=str)
def test_the_16_bit_copy_stays_out_of_tvms_dynamic_shared_memory_window(cell, hidden, cfg):
    """TVM's runtime raises a kernel's shared memory limit only for 48 KiB or more of dynamic
    memory: the rows are spread apart so that what TVM keeps of the copy (up to the last row's
    last word) reaches it, the stride stays 4 mod 8 words, and the config launches."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype="float16")
    assert cfg.h16_exchange(spec)
    stride = cfg.h_stride(spec)
    assert stride % 8 == 4 and stride > hidden // 2 + 4
    assert 4 * ((cfg.h_rows() - 1) * stride + hidden // 2) >= 48 * 1024
    assert cfg.dynamic_shared_bytes(spec) >= 48 * 1024
    assert not problems(spec, cfg, 132, 228 * 1024, 16)


def test_the_planner_offers_the_configs_whose_fp32_copy_fits():
    """A chunk that fits shared memory only as 16-bit h is refused (such chunks ran slower where
    timed); the pick beside it, whose fp32 copy fits, is not."""
    spec = CellSpec("lstm", 896, 896, dtype="bfloat16")
    only_16_bit = Config(8, 32, 16, 64, "bfloat16", mma_k_split=8)
    assert only_16_bit.shared_bytes(spec) <= 228 * 1024 < only_16_bit.fp32_copy_shared_bytes(spec)
    assert any("shared memory" in p for p in problems(spec, only_16_bit, 132, 228 * 1024, 16))
    pick = Config(8, 32, 16, 32, "bfloat16", mma_k_split=4)
    assert pick.fp32_copy_shared_bytes(spec) == 4 * (32 * (896 + 8) + 32 * 4 * 4 * 8)
    assert not problems(spec, pick, 132, 228 * 1024, 16)
