"""Weights held as int8 (tir_templates/int8_rows.py): R packed only where it is exactly int8 values
times a scale a row, the CPU twin of every kernel path against the reference scan on the weights
the packed R stands for, and the rules that keep int8 configs to what the kernel does."""
from __future__ import annotations

import numpy as np
import pytest

from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.config import Config, problems
from tir_templates.int8_rows import PACKED_R_ATTR, pack, row_scales, unpack
from tir_templates.persistent import BARRIER_FLAG_WORD, emulated_persistent_kernel
from tir_templates.persistent.buckets import emulated_bucketed_kernel
from tir_templates.persistent.checks import UnsupportedLayer
from tir_templates.reference import reference_scan
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

H, I, STEPS = 16, 8, 5


def _int8_r(shape, per_row: bool, seed=0):
    """R as a dequantized model holds it: int8 values times a scale per direction or per row, the
    scale a symmetric quantizer's (the largest |weight| of the row or direction is 127 steps)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, shape).astype(np.float32)
    q[..., 0] = rng.choice([-127.0, 127.0], shape[:-1])
    s = rng.uniform(1e-3, 1e-2, shape[:-1] if per_row else shape[:1]).astype(np.float32)
    s = s[..., None] if per_row else s[:, None, None]
    return (q * s).astype(np.float32)


@pytest.mark.parametrize("per_row", [False, True], ids=["per_tensor", "per_channel"])
def test_packed_r_stands_for_the_same_weights(per_row):
    r = _int8_r((2, 64, 16), per_row)
    r[1, 5] = 0  # a row of zeros
    packed = pack(r)
    assert packed is not None and packed.dtype == np.float32 and packed.shape == r.shape
    np.testing.assert_array_equal(unpack(packed), r)


def test_weights_that_are_not_int8_values_are_not_packed():
    rng = np.random.default_rng(1)
    assert pack(rng.standard_normal((1, 64, 16)).astype(np.float32)) is None  # plain floats
    wide = (rng.integers(-200, 200, (1, 64, 16)) * np.float32(0.01)).astype(np.float32)  # q - zero_point past int8
    assert row_scales(wide) is None and pack(wide) is None
    assert pack(_int8_r((1, 64, 18), True)) is None  # H not a multiple of 4: no whole words


CASES = [
    # (cell, direction, batch, config)
    ("lstm", "bidirectional", 3, Config(4, 4, 2, 3, "int8")),  # grid, lanes meet in shared memory
    ("lstm", "forward", 5, Config(4, 4, 4, 2, "int8")),  # lane updates, three chunks
    ("lstm", "reverse", 3, Config(8, 4, 4, 2, "int8", cluster=True, dsmem=True)),  # h through dsmem, two chunks
    ("lstm", "forward", 3, Config(4, 4, 2, 3, "int8", stamped=True)),  # stamped words
    ("gru", "bidirectional", 5, Config(16, 4, 4, 2, "int8", batch_tile=2)),  # one resident CTA per batch tile
    ("gru0", "forward", 3, Config(4, 4, 2, 3, "int8")),  # two phases a step
    ("rnn", "reverse", 4, Config(16, 4, 1, 2, "int8")),  # one CTA, a row a group, two chunks
]


@pytest.mark.parametrize("cell,direction,batch,cfg", CASES, ids=str)
def test_int8_kernels_match_the_reference_on_the_weights_they_stand_for(cell, direction, batch, cfg):
    spec = CellSpec(cell.rstrip("0"), I, H, direction, linear_before_reset=(cell == "gru"), int8_weights=True,
                    int8_rows=True)
    assert not problems(spec, cfg, 132, max_cluster=16), problems(spec, cfg, 132, max_cluster=16)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    arrays[1] = _int8_r(arrays[1].shape, per_row=cell == "lstm", seed=batch)
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    packed = [a.copy() for a in arrays]
    packed[1] = pack(arrays[1])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), packed)
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
        np.testing.assert_allclose(g, w, atol=1e-5, err_msg=name)
    assert got[11][BARRIER_FLAG_WORD] == 0


def test_int8_configs_are_only_for_what_the_kernel_holds():
    """A packed R (int8_rows), the FMA units, every weight in registers in runs of four, no
    partial sums; and a quarter of fp32's registers for the weights, plus a scale a row."""
    spec = CellSpec("lstm", 256, 256, int8_weights=True, int8_rows=True)
    cfg = Config(16, 8, 4, 1, "int8")
    assert not problems(spec, cfg, 132) and cfg.weight_regs(spec) == 4 * (256 // 8 // 4 + 1)
    assert any("int8" in p for p in problems(CellSpec("lstm", 256, 256, int8_weights=True), cfg, 132))
    for bad in (Config(16, 8, 4, 1, "int8", smem_runs=1), Config(16, 8, 4, 1, "int8", global_runs=1)):
        assert any("int8" in p for p in problems(spec, bad, 132)), bad
    assert any("tensor cores" in p for p in problems(spec, Config(16, 32, 16, 1, "int8", mma_k_split=1), 132))
    three_columns = CellSpec("lstm", 24, 24, int8_weights=True, int8_rows=True)  # a lane's columns: no run of four
    assert any("int8" in p for p in problems(three_columns, Config(8, 8, 4, 1, "int8"), 132))
    gru0 = CellSpec("gru", 256, 256, int8_weights=True, int8_rows=True)
    assert any("partial sums" in p for p in problems(gru0, Config(16, 8, 2, 1, "int8", gru_barriers=1), 132))


MIXED = [
    # (cell, buckets): int8 at small batches, the others' weights read back from the packed R
    ("lstm", [(1, Config(4, 4, 2, 1, "int8", stamped=True)),
              (3, Config(4, 8, 2, 2, smem_runs=1)),  # fp32 weights, a run in shared memory
              (None, Config(4, 32, 16, 3, "float16", mma_k_split=1))]),  # the 16-bit mma
    ("gru0", [(2, Config(4, 4, 2, 2, "int8")), (None, Config(4, 4, 2, 2, "float16", gru_barriers=1))]),  # partial sums
]


@pytest.mark.parametrize("cell,buckets", MIXED, ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("batch", [1, 2, 3, 5])
def test_buckets_without_int8_weights_read_the_packed_r_back_exactly(cell, buckets, batch):
    """A symbolic batch's buckets may differ in kind (LSTM H=2048: int8 at B=1, fp16 on the tensor
    cores from B=4). R then comes packed to all of them, and a bucket without int8 weights computes
    from it exactly what it computes from R itself; an int8 bucket matches the reference."""
    spec = CellSpec(cell.rstrip("0"), I, H, linear_before_reset=(cell == "gru"), int8_weights=True, int8_rows=True)
    slots = max(cfg.exchange_slots(spec) for _, cfg in buckets)
    arrays = kernel_arrays(spec, batch, STEPS, seed=batch, slots=slots)
    arrays[1] = _int8_r(arrays[1].shape, per_row=cell == "lstm", seed=batch)
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")
    packed = [a.copy() for a in arrays]
    packed[1] = pack(arrays[1])
    got = run_on_llvm(emulated_bucketed_kernel(spec, buckets, packed_r=True), packed)
    cfg = next(c for bound, c in buckets if bound is None or batch <= bound)
    outputs = slice(7, 10 if cell == "lstm" else 9)
    if cfg.int8_weights():
        want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
        for g, w in zip(got[outputs], want[outputs]):
            np.testing.assert_allclose(g, w, atol=1e-5)
    else:
        want = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
        for g, w in zip(got[outputs], want[outputs]):
            np.testing.assert_array_equal(g, w)
    assert got[11][BARRIER_FLAG_WORD] == 0


def test_a_bucket_reading_r_every_step_cannot_take_it_packed():
    spec = CellSpec("lstm", I, H, int8_weights=True, int8_rows=True)
    buckets = [(1, Config(4, 4, 2, 1, "int8")), (None, Config(4, 2, 4, 2, global_runs=1))]
    with pytest.raises(UnsupportedLayer, match="packed"):
        emulated_bucketed_kernel(spec, buckets, packed_r=True)
    assert PACKED_R_ATTR not in (emulated_bucketed_kernel(spec, buckets).attrs or {})
