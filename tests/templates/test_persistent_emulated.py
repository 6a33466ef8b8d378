"""The persistent template's tiling, checked numerically on the CPU.

`emulated_persistent_kernel` is the same template with CTAs and threads as serial loops and
every barrier a phase boundary; it must agree with the reference scan for configs that split
units across CTAs, rows across work groups, lanes across columns and batches across chunks, and
its count of barrier arrivals must match every barrier's target (else the GPU would hang).
Configs whose work groups hold whole units (rows_per_group a multiple of the gates, one pair per
lane) take the lane-update path (`Config.lane_updates`); the others meet in shared memory. The
tensor-core configs (`Config.mma_k_split`) are emulated as PTX defines the mma, reading each
weight back from the fragment register the kernel loaded it into. A dsmem cluster's exchange
copies each CTA's stores, as its threads issue them, between the CTAs' copies of h, and flags a
CTA that would receive other than the bytes its mbarrier expects.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tvm.script import tirx as T

from persist_rnn.schedule.measure import kernel_arrays
from persist_rnn.schedule.precision import TOLERANCE
from tir_templates.config import Config, problems
from tir_templates.persistent.dot_mma import tf32_rounded
from tir_templates.persistent import (
    BARRIER_FLAG_WORD,
    emulated_persistent_kernel,
    two_phase,
)
from tir_templates.reference import reference_scan
from tir_templates.spec import Activation, CellSpec
from templates.llvm_runs import run_on_llvm

H, I, STEPS = 16, 8, 5



CASES = [
    # (cell, direction, batch, config, extra spec flags)
    ("lstm", "bidirectional", 3, Config(4, 4, 2, 3), dict(peepholes=True, clip=5.0)),
    ("lstm", "reverse", 5, Config(16, 1, 8, 3), dict(input_forget=True)),  # one CTA, two chunks
    ("lstm", "forward", 2, Config(16, 4, 4, 2), {}),  # one resident CTA, one chunk
    ("lstm", "bidirectional", 2, Config(4, 8, 4, 2, cluster=True), {}),  # each direction a cluster
    # weights partly in shared memory: the last runs of each lane's columns
    ("lstm", "bidirectional", 3, Config(4, 1, 2, 3, smem_runs=2), {}),  # 4 float4 runs, 2 in shared memory
    ("gru", "forward", 5, Config(8, 4, 3, 2, "float16", smem_runs=1), {}),
    ("gru0", "forward", 3, Config(4, 4, 2, 3, gru_barriers=1, smem_runs=1), {}),
    # ... and the last runs read from R in global memory each step (what neither holds)
    ("lstm", "bidirectional", 3, Config(4, 1, 2, 3, smem_runs=1, global_runs=2), dict(peepholes=True)),
    ("lstm", "forward", 5, Config(16, 4, 4, 2, global_runs=1), {}),  # one resident CTA, lane updates, 3 chunks
    ("gru", "forward", 5, Config(8, 4, 3, 2, "float16", global_runs=1), {}),
    ("gru0", "forward", 3, Config(4, 1, 2, 3, gru_barriers=1, smem_runs=1, global_runs=2), {}),
    ("gru0", "bidirectional", 3, Config(4, 4, 2, 2, global_runs=1), {}),  # two phases, groups skip one
    ("rnn", "reverse", 3, Config(4, 4, 1, 3, global_runs=1), {}),  # 4 groups of 4 lanes: 16 padding lanes
    # batch tiles: one CTA per direction and tile of batch rows, no barrier between them
    ("lstm", "bidirectional", 5, Config(16, 4, 4, 2, batch_tile=2), dict(peepholes=True)),  # ragged last tile
    ("rnn", "reverse", 3, Config(16, 4, 2, 1, batch_tile=1), {}),
    ("gru", "forward", 4, Config(16, 4, 3, 3, batch_tile=3), {}),
    # ... or one cluster per direction and tile: h of the tile's rows through the exchange buffer
    ("lstm", "bidirectional", 5, Config(8, 4, 4, 2, cluster=True, batch_tile=2), dict(peepholes=True)),
    ("gru", "reverse", 3, Config(4, 4, 3, 1, cluster=True, batch_tile=1), {}),  # 4 CTAs a tile, shared-memory meet
    # ... or a grid per tile: the tile's CTAs meet at a counter of their own
    ("lstm", "bidirectional", 5, Config(4, 4, 4, 2, batch_tile=2), dict(peepholes=True)),  # 12 counters, ragged
    ("gru", "forward", 3, Config(4, 4, 3, 1, batch_tile=1), {}),
    ("gru", "forward", 5, Config(4, 4, 2, 2), {}),  # three chunks
    ("gru", "bidirectional", 2, Config(8, 4, 3, 2), dict(activations=(Activation("HardSigmoid", 0.2, 0.5),
                                                                     Activation("Softsign"),
                                                                     Activation("Sigmoid"), Activation("Tanh")))),
    ("rnn", "reverse", 3, Config(16, 2, 4, 4), dict(clip=1.0)),
    ("rnn", "forward", 4, Config(2, 8, 1, 4), {}),  # 8 CTAs of 2 units, 16-lane groups
    # GRU linear_before_reset=0: two phases per step, r * h(t-1) exchanged between them
    ("gru0", "bidirectional", 5, Config(4, 4, 2, 2), dict(clip=2.0)),  # groups skip the other phase
    ("gru0", "reverse", 3, Config(16, 4, 4, 3), {}),  # one CTA, no grid barrier
    ("gru0", "forward", 4, Config(4, 4, 3, 4), {}),  # 3 rows per group: groups straddle gates
    # ... and GRNN's partial sums: one barrier a step, every CTA sums all CTAs' partials of z and r
    ("gru0", "bidirectional", 5, Config(4, 4, 2, 2, gru_barriers=1), dict(clip=2.0)),
    ("gru0", "reverse", 3, Config(16, 4, 4, 3, gru_barriers=1), {}),  # one CTA
    ("gru0", "forward", 3, Config(2, 8, 1, 4, gru_barriers=1), {}),  # 8 CTAs of 2 units
    ("gru0", "bidirectional", 3, Config(4, 16, 2, 3, "float16", gru_barriers=1), {}),  # fp16 weights
    # lane updates beyond the ones above: three chunks over a grid, and every lane of a group busy
    ("lstm", "forward", 5, Config(4, 4, 4, 2), dict(peepholes=True)),
    ("lstm", "reverse", 3, Config(16, 4, 8, 2, batch_tile=2), {}),  # 2 units x 2 rows on 4 lanes
    # tensor cores (3xTF32 mma): row tiles x column splits of warps, batch padded to 8-row n-tiles
    ("lstm", "bidirectional", 3, Config(4, 32, 16, 3, mma_k_split=2), dict(peepholes=True)),  # grid, 2 splits
    ("lstm", "forward", 10, Config(4, 32, 16, 10, mma_k_split=2), {}),  # two n-tiles, the second ragged
    ("gru", "forward", 5, Config(16, 32, 16, 2, mma_k_split=1), {}),  # 3 row tiles, one CTA, three chunks
    ("rnn", "reverse", 3, Config(16, 32, 16, 3, mma_k_split=2), dict(clip=1.0)),  # one resident CTA
    ("gru", "bidirectional", 3, Config(8, 32, 16, 3, mma_k_split=2), {}),  # 24 rows: the second tile padded
    ("rnn", "forward", 10, Config(4, 32, 16, 10, mma_k_split=2), {}),  # 4 rows in a 16-row tile, two n-tiles
    # ... in batch tiles (a cluster or a CTA each), and with several (batch row, unit) pairs a thread
    ("lstm", "bidirectional", 5, Config(4, 32, 16, 2, cluster=True, batch_tile=2, mma_k_split=2), {}),  # ragged
    ("gru", "forward", 10, Config(16, 32, 16, 8, batch_tile=8, mma_k_split=1), {}),  # 2 pairs a thread
    ("lstm", "forward", 20, Config(8, 32, 16, 16, cluster=True, batch_tile=16, mma_k_split=1), {}),  # 2 pairs
    ("gru", "bidirectional", 10, Config(16, 32, 16, 10, mma_k_split=1), {}),  # no tiles, 2 pairs a thread
    ("lstm", "forward", 10, Config(4, 32, 16, 5, batch_tile=5, mma_k_split=2), {}),  # grid tiles, 2 splits
    ("gru", "bidirectional", 3, Config(8, 32, 16, 2, batch_tile=2, mma_k_split=1), {}),  # padded tile, 8 counters
    # a cluster's CTAs sending h(t) into each other's shared memory (dsmem), h and C on chip
    ("lstm", "bidirectional", 2, Config(4, 8, 4, 2, cluster=True, dsmem=True), dict(peepholes=True)),
    ("lstm", "bidirectional", 5, Config(8, 4, 4, 2, cluster=True, batch_tile=2, dsmem=True), {}),  # ragged tile
    ("gru", "reverse", 3, Config(4, 4, 3, 1, cluster=True, batch_tile=1, dsmem=True), {}),
    ("rnn", "forward", 4, Config(4, 4, 2, 4, cluster=True, dsmem=True), dict(clip=1.0)),
    ("lstm", "forward", 3, Config(4, 4, 4, 1, cluster=True, batch_tile=1, dsmem=True), {}),  # lane updates
    ("lstm", "reverse", 5, Config(4, 8, 4, 2, cluster=True, dsmem=True), {}),  # 3 chunks: the exchange buffer
    # a grid direction's CTAs reading h(t-1) as stamped words: one barrier (init's) in all
    ("lstm", "bidirectional", 3, Config(4, 4, 2, 3, stamped=True), dict(peepholes=True, clip=5.0)),
    ("gru", "forward", 5, Config(4, 4, 2, 2, stamped=True), {}),  # three chunks
    ("rnn", "reverse", 4, Config(2, 8, 1, 4, stamped=True), {}),  # 8 CTAs of 2 units
    ("lstm", "forward", 5, Config(4, 4, 4, 2, stamped=True), {}),  # lane updates, three chunks
]


def test_lane_updates_are_covered():
    """Both update paths appear above: lanes updating their own units, and the shared-memory meet."""
    lanes = [cfg.lane_updates(CellSpec(c.rstrip("0"), I, H, linear_before_reset=(c == "gru"))) for c, _, _, cfg, _ in CASES]
    assert 6 <= sum(lanes) < len(lanes)


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", CASES, ids=lambda v: str(v))
def test_emulated_persistent_matches_reference(cell, direction, batch, cfg, flags):
    _emulation_matches_reference(CellSpec(cell.rstrip("0"), I, H, direction, linear_before_reset=(cell == "gru"),
                                          **flags), batch, cfg)


@pytest.mark.parametrize("cell,direction,batch,cfg", [
    ("lstm", "forward", 3, Config(4, 4, 4, 2, cluster=True, dsmem=True)),  # 2 chunks: the cluster barrier too
    ("gru", "bidirectional", 2, Config(4, 4, 3, 1, cluster=True, batch_tile=1, dsmem=True)),  # 4 clusters
], ids=str)
def test_sixteen_cta_clusters_match_reference(cell, direction, batch, cfg):
    """Clusters of 16 CTAs, past the portable 8 (H=64 in units of 4): every CTA sends its units
    to 15 peers."""
    spec = CellSpec(cell, I, 64, direction, linear_before_reset=(cell == "gru"))
    assert cfg.ctas_per_direction(spec) == 16
    _emulation_matches_reference(spec, batch, cfg)


def _emulation_matches_reference(spec, batch, cfg):
    """The CPU twin of `cfg` against the reference scan, sequences ragged (some empty), and the
    barrier counts the GPU's counter would see."""
    cell = spec.cell
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    arrays[1] = arrays[1].astype(cfg.weight_dtype).astype("float32")  # R as the registers hold it
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
        np.testing.assert_allclose(g, w, atol=1e-5, err_msg=name)
    ws = got[11]
    assert ws[BARRIER_FLAG_WORD] == 0, "a barrier's target does not match the CTAs that reach it"
    if cfg.barrier(spec) == "grid":  # init's barrier, then one per phase of every step (stamped: none)
        barriers = 1 + (0 if cfg.stamped else 2 if two_phase(spec) and not cfg.partial_sums(spec) else 1) * STEPS
        assert list(ws[:spec.num_directions]) == [barriers * cfg.ctas_per_direction(spec)] * spec.num_directions


#: a case of each way a kernel reads h0, c0 and lengths: grid, cluster, batch tiles, cluster tiles,
#: two-phase GRU, GRU's partial sums, tensor cores
BROADCAST_CASES = [CASES[i] for i in (0, 3, 7, 11, 17, 19, 25)]


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", BROADCAST_CASES, ids=lambda v: str(v))
def test_operands_given_once_for_the_batch(cell, direction, batch, cfg, flags):
    """A spec whose `batch_broadcast` names lens, h0 and c0 takes them with batch extent 1 (a
    symbolic batch's default lengths and constant states) and computes what the reference
    computes with that row repeated for every batch row."""
    spec = CellSpec(cell.rstrip("0"), I, H, direction, linear_before_reset=(cell == "gru"), **flags)
    once = CellSpec(cell.rstrip("0"), I, H, direction, linear_before_reset=(cell == "gru"),
                    batch_broadcast=("lens", "h0", "c0"), **flags)
    full = kernel_arrays(spec, batch, STEPS, seed=5, slots=cfg.exchange_slots(spec))
    full[1] = full[1].astype(cfg.weight_dtype).astype("float32")
    full[3][:] = STEPS - 1
    full[4][:] = full[4][:, :1]
    full[5][:] = full[5][:, :1]
    given_once = [a.copy() for a in full]
    given_once[3], given_once[4], given_once[5] = full[3][:1].copy(), full[4][:, :1].copy(), full[5][:, :1].copy()
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in full])
    for func in (reference_scan(once, "llvm"), emulated_persistent_kernel(once, cfg)):
        got = run_on_llvm(func, [a.copy() for a in given_once])
        for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
            np.testing.assert_allclose(g, w, atol=1e-5, err_msg=name)


#: tensor cores at TF32 precision: a grid of two column splits, a padded GRU tile, a resident RNN CTA
TF32_CASES = [
    ("lstm", "bidirectional", 3, Config(4, 32, 16, 3, mma_k_split=2, mma_precision="tf32"), dict(peepholes=True)),
    ("gru", "bidirectional", 10, Config(8, 32, 16, 10, mma_k_split=2, mma_precision="tf32"), {}),
    ("rnn", "reverse", 3, Config(16, 32, 16, 3, mma_k_split=2, mma_precision="tf32"), dict(clip=1.0)),
]


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", TF32_CASES, ids=lambda v: str(v))
def test_tf32_rounds_its_operands_within_the_bound(cell, direction, batch, cfg, flags):
    """The TF32 twin rounds R and h(t-1) as cvt.rna does: within TF32's bound of the fp32
    reference (precision.TOLERANCE), and measurably off it (the 3xTF32 twin agrees to 1e-5), so
    the rounding is really there."""
    spec = CellSpec(cell.rstrip("0"), I, H, direction, linear_before_reset=(cell == "gru"), **flags)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    scale = max(1.0, float(np.abs(want[7]).max()))
    err = float(np.abs(got[7] - want[7]).max()) / scale
    assert 1e-5 < err <= TOLERANCE["tf32"], err


def test_tf32_rounding_is_round_to_nearest_ties_away():
    """`tf32_rounded` against numpy's own rounding of the mantissa to 10 bits (ties away from
    zero), over random values, exact halfway cases and values that round up into the next binade."""
    rng = np.random.default_rng(0)
    mantissa = rng.integers(0, 1 << 23, 2000, dtype=np.uint32)
    halfway = (mantissa & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
    bits = np.concatenate([mantissa, halfway, [0x7FFFFF, 0x7FF000]]).astype(np.uint32) | np.uint32(0x3F800000)
    x = np.concatenate([bits.view(np.float32), -bits.view(np.float32), rng.standard_normal(2000).astype("float32")])
    x = x.astype("float32")

    @T.prim_func
    def rounded(a: T.Buffer((x.size,), "float32"), b: T.Buffer((x.size,), "float32")):
        for i in range(x.size):
            b[i] = tf32_rounded(a[i])

    got = run_on_llvm(rounded, [x, np.zeros_like(x)])[1]
    m, e = np.frexp(x.astype("float64"))  # x = m 2^e, 0.5 <= |m| < 1: 11 significant bits are m's first 11
    want = (np.sign(m) * np.floor(np.abs(m) * 2.0 ** 11 + 0.5) / 2.0 ** 11 * 2.0 ** e).astype("float32")
    np.testing.assert_array_equal(got, want)


#: fp16 layers on the tensor cores (m16n8k16 on their fp16 weights): a grid of two column splits,
#: a padded GRU tile over two n-tiles, a resident RNN CTA
F16_CASES = [
    ("lstm", "bidirectional", 3, Config(4, 32, 16, 3, "float16", mma_k_split=1), dict(peepholes=True)),
    ("gru", "bidirectional", 10, Config(8, 32, 16, 10, "float16", mma_k_split=1), {}),
    ("rnn", "reverse", 3, Config(16, 32, 16, 3, "float16", mma_k_split=1), dict(clip=1.0)),
]


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", F16_CASES, ids=lambda v: str(v))
def test_f16_mma_rounds_h_within_the_fp16_bound(cell, direction, batch, cfg, flags):
    """The fp16 layer's mma twin (weights as fp16 pairs in 32-bit registers, h(t-1) rounded to
    fp16 as the B fragments are packed): within the fp16 models' bound (2e-3) of the reference on
    the same fp16 weights, and off it by more than fp32 arithmetic would be."""
    spec = CellSpec(cell, I, H, direction, linear_before_reset=(cell == "gru"), dtype="float16", **flags)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    arrays[1] = arrays[1].astype("float16").astype("float32")  # an fp16 model's weights
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    y_got, y_want = got[7].astype("float32"), want[7].astype("float32")  # Y in fp16: subtract in fp32
    err = float(np.abs(y_got - y_want).max()) / max(1.0, float(np.abs(y_want).max()))
    assert 1e-5 < err <= 2e-3, err


@pytest.mark.parametrize("cell,direction,batch,cfg,flags", F16_CASES, ids=lambda v: str(v))
def test_bf16_mma_rounds_h_within_the_bf16_bound(cell, direction, batch, cfg, flags):
    """The bf16 layer's mma twin (bf16 pairs, h(t-1) rounded to bf16 to nearest even as
    `cvt.rn.bf16x2.f32` rounds it): within the bf16 bound, 8e-3 of the output scale (bf16 keeps 8
    bits, a unit roundoff of 2^-9; fp16's 2e-3 is four of its 2^-11, this is four of bf16's), of
    the reference on the same bf16 weights, and off it by more than fp32 arithmetic would be."""
    import ml_dtypes

    cfg = dataclasses.replace(cfg, weight_dtype="bfloat16")
    spec = CellSpec(cell, I, H, direction, linear_before_reset=(cell == "gru"), dtype="bfloat16", **flags)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    arrays[1] = arrays[1].astype(ml_dtypes.bfloat16).astype("float32")  # a bf16 model's weights
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    y_got, y_want = got[7].astype("float32"), want[7].astype("float32")  # Y in bf16: subtract in fp32
    err = float(np.abs(y_got - y_want).max()) / max(1.0, float(np.abs(y_want).max()))
    assert 1e-4 < err <= 8e-3, err


#: LSTM kernels on the FMA units with C kept between steps in each place a kernel keeps it: a CTA
#: walking two chunks (C in memory), three chunks over a grid, stamped words, a resident CTA (C in
#: a register), dsmem with three chunks
SIXTEEN_BIT_LSTM_CASES = [
    ("lstm", "reverse", 5, Config(16, 1, 8, 3), dict(input_forget=True)),
    ("lstm", "forward", 5, Config(4, 4, 4, 2), dict(peepholes=True)),
    ("lstm", "forward", 5, Config(4, 4, 4, 2, stamped=True), {}),
    ("lstm", "forward", 2, Config(16, 4, 4, 2), {}),
    ("lstm", "reverse", 5, Config(4, 8, 4, 2, cluster=True, dsmem=True), {}),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,direction,batch,cfg,flags", SIXTEEN_BIT_LSTM_CASES, ids=lambda v: str(v))
def test_a_16_bit_lstm_returns_the_fp32_states_rounded_once(cell, direction, batch, cfg, flags, dtype):
    """A 16-bit LSTM on the FMA units computes in fp32 as the fp32 layer does and writes Y, Y_h
    and Y_c in its dtype (no cast kernel after it): each must be the fp32 kernel's value rounded
    once. C kept between steps in Y_c itself would be rounded every step, and off by more."""
    import ml_dtypes

    assert cell == "lstm" and not cfg.tensor_cores()
    fp32 = CellSpec(cell, I, H, direction, **flags)
    half = dataclasses.replace(fp32, dtype=dtype)
    arrays = kernel_arrays(fp32, batch, STEPS, seed=3, slots=cfg.exchange_slots(half))
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    want = run_on_llvm(emulated_persistent_kernel(fp32, cfg), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(half, cfg), [a.copy() for a in arrays])
    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got[7:10], want[7:10]):
        assert g.dtype == np_dtype, name
        np.testing.assert_array_equal(g.astype("float32"), w.astype(np_dtype).astype("float32"), err_msg=name)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,direction,batch,hidden,cfg", [
    ("gru", "forward", 10, 32, Config(8, 32, 16, 10, mma_k_split=1, smem_runs=1)),  # 2 k-tiles: 1 in registers, 1 shared
    ("lstm", "bidirectional", 3, 16, Config(4, 32, 16, 3, mma_k_split=1, smem_runs=1)),  # every fragment shared
    ("lstm", "forward", 5, 64, Config(8, 32, 16, 5, mma_k_split=2, smem_runs=1)),  # 2 splits of 2 k-tiles
], ids=str)
def test_a_fragments_in_shared_memory_give_the_registers_sums(cell, direction, batch, hidden, cfg, dtype):
    """A 16-bit mma config whose last k-tiles' A fragments live in shared memory (`smem_runs`)
    adds the same products in the same order as with every fragment in registers: equal outputs."""
    import ml_dtypes

    cfg = dataclasses.replace(cfg, weight_dtype=dtype)
    spec = CellSpec(cell, I, hidden, direction, linear_before_reset=(cell == "gru"), dtype=dtype)
    assert cfg.weight_regs(spec) == 4 * (cfg.k_tiles_per_warp(spec) - 1)
    arrays = kernel_arrays(spec, batch, STEPS, seed=5, slots=cfg.exchange_slots(spec))
    arrays[1] = arrays[1].astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).astype("float32")
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    want = run_on_llvm(emulated_persistent_kernel(spec, dataclasses.replace(cfg, smem_runs=0)), [a.copy() for a in arrays])
    for g, w in zip(got[7:], want[7:]):
        np.testing.assert_array_equal(g, w)
    assert np.abs(got[7].astype("float32")).max() > 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,direction,batch,hidden,cfg", [
    ("gru", "forward", 10, 48, Config(8, 32, 16, 10, mma_k_split=1, smem_runs=1, global_runs=1)),  # padded row tile
    ("lstm", "bidirectional", 3, 32, Config(4, 32, 16, 3, mma_k_split=1, global_runs=2)),  # every fragment from R
    ("lstm", "forward", 5, 128, Config(16, 32, 16, 5, mma_k_split=2, smem_runs=1, global_runs=2)),  # 2 splits of 4
    # past one loop turn (STREAMED_TILES_A_TURN = 16): a turn of 16 and one of 2
    ("lstm", "forward", 2, 320, Config(16, 32, 16, 2, mma_k_split=1, smem_runs=1, global_runs=18)),
], ids=str)
def test_a_fragments_read_from_r_each_step_give_the_registers_sums(cell, direction, batch, hidden, cfg, dtype):
    """A 16-bit mma config whose last k-tiles' A fragments are read from R every step
    (`global_runs`, after any in shared memory) rounds them as the registers' are and adds the
    same products in the same order: equal outputs to every fragment in registers."""
    import ml_dtypes

    cfg = dataclasses.replace(cfg, weight_dtype=dtype)
    spec = CellSpec(cell, I, hidden, direction, linear_before_reset=(cell == "gru"), dtype=dtype)
    held = cfg.k_tiles_per_warp(spec) - cfg.smem_runs - cfg.global_runs
    assert cfg.weight_regs(spec) == 4 * held and not problems(spec, cfg, 132, 227 * 1024, 16)
    arrays = kernel_arrays(spec, batch, STEPS, seed=7, slots=cfg.exchange_slots(spec), words=cfg.workspace_words(spec))
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    want = run_on_llvm(emulated_persistent_kernel(spec, dataclasses.replace(cfg, smem_runs=0, global_runs=0)),
                       [a.copy() for a in arrays])
    for g, w in zip(got[7:10], want[7:10]):  # Y, Y_h, Y_c (the workspace holds the packed pairs too)
        np.testing.assert_array_equal(g, w)
    assert got[11][32:].any()
    assert np.abs(got[7].astype("float32")).max() > 0
