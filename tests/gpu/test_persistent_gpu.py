"""Persistent kernels on a real GPU against ONNX Runtime (marked gpu: run on the GPU box).

One compile per (cell, hidden, directions, dtype) with symbolic T and B, then every (B, T) of
the matrix through that same kernel, so the grid stays affordable.
"""
from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import tvm

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.schedule.cost_model import rank
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.precision import TOLERANCE as PRECISION_TOLERANCE
from persist_rnn.schedule.space import candidate_configs
from persist_rnn.bench.layer_models import (
    LayerCase,
    cell_loop_model,
    max_rel_error,
    ort_run,
    reference,
)
from persist_rnn.transform import PersistentRNN
from tir_templates.config import Config
from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.spec import CellSpec

pytestmark = pytest.mark.gpu

CELLS = ("LSTM", "GRU", "RNN")
HIDDEN = (32, 64, 128, 256, 512, 1024)
DIRECTIONS = ("forward", "reverse", "bidirectional")
DTYPES = ("float32", "float16")
BATCHES = (1, 5, 20)
STEPS = (1, 7, 100)
#: fp32: 1e-4 of the output scale (the brief's bound). fp16 models: their outputs are rounded to
#: fp16 (11-bit mantissa, relative step 2^-11 = 4.9e-4), weights are exact in fp16 registers and
#: accumulation is fp32, so 2e-3 leaves 4x headroom over one rounding of the output.
#: bf16: four of its unit roundoffs (2^-9), as fp16's 2e-3 is four of 2^-11 (test_persistent_emulated.py)
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 8e-3}


def _layer_case(op, hidden, direction, dtype="float32", lbr=None):
    """One compile's model: symbolic T and B, input size = hidden size, weights scaled by 1/sqrt(H)."""
    return LayerCase(op=op, hidden_size=hidden, input_size=hidden, direction=direction, dtype=dtype, dynamic=True,
                     seq_len=STEPS[-1], batch=BATCHES[-1], weight_scale=1.0 / np.sqrt(hidden),
                     linear_before_reset=(1 if op == "GRU" else None) if lbr is None else lbr)


def _failures(compiled, case, tolerance):
    """Every (B, T) of the matrix through the one compiled kernel: the ones off ONNX Runtime."""
    out = []
    for batch, steps in itertools.product(BATCHES, STEPS):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        err = max_rel_error(compiled.run(feeds), want)
        if not err <= tolerance:
            out.append(f"B={batch} T={steps}: {err:.2e}")
    return out


def _matches_three_times(case, cfg, tolerance):
    """`case` built with `cfg`, each (B, T) of the matrix run three times within `tolerance` of
    ONNX Runtime: an exchange that reads early or late shows as a run that differs."""
    compiled = persist_rnn.compile(reference(case)[0], "cuda", config=cfg)
    assert compiled.report()[0].lowering == "persistent", compiled.report()[0].reason
    for batch, steps in itertools.product(BATCHES, STEPS):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        errors = [max_rel_error(compiled.run(feeds), want) for _ in range(3)]
        assert max(errors) <= tolerance, f"B={batch} T={steps}: {errors}"


def _model_best(spec, keep):
    """The cost model's best config for B=20 among the verified ones `keep` accepts
    (`checks.unverified_reason`: the tests of a variant not yet run name its configs)."""
    from tir_templates.persistent import unverified_reason

    gpu = gpu_model("sm_90")
    return next(c for _, c in rank(spec, candidate_configs(spec, gpu, BATCHES[-1]), gpu, BATCHES[-1])
                if keep(c) and not unverified_reason(spec, c))


@pytest.mark.parametrize("op,hidden,direction,dtype", list(itertools.product(CELLS, HIDDEN, DIRECTIONS, DTYPES)))
def test_persistent_matches_onnxruntime(op, hidden, direction, dtype):
    case = _layer_case(op, hidden, direction, dtype)
    compiled = persist_rnn.compile(reference(case)[0], "cuda", measure=False)
    layer = compiled.report()[0]
    failures = _failures(compiled, case, TOLERANCE[dtype])
    assert not failures, f"{layer.lowering} {layer.config}: " + ", ".join(failures)
    assert layer.lowering == "persistent", layer.reason  # fp16 bidirectional H=1024: weights partly in shared memory


@pytest.mark.parametrize("barriers", [2, 1], ids=["two-barriers", "partial-sums"])
@pytest.mark.parametrize("hidden,direction,dtype", [(32, "forward", "float32"), (64, "bidirectional", "float32"),
                                                    (256, "forward", "float32"), (256, "reverse", "float32"),
                                                    (1024, "forward", "float32"), (128, "bidirectional", "float16")])
def test_gru_reset_before_matches_onnxruntime(hidden, direction, dtype, barriers):
    """GRU linear_before_reset=0, both kernel variants, each at the cost model's best config for B=20."""
    case = _layer_case("GRU", hidden, direction, dtype, lbr=0)
    spec = CellSpec("gru", hidden, hidden, direction, linear_before_reset=False, dtype=dtype)
    cfg = _model_best(spec, lambda c: c.gru_barriers == barriers and not c.cluster)
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE[dtype])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,hidden,direction", [("LSTM", 64, "forward"), ("GRU", 128, "bidirectional"),
                                                 ("RNN", 256, "reverse")])
def test_cluster_barrier_matches_onnxruntime(op, hidden, direction):
    """A direction's CTAs as one thread-block cluster (the model's best such config)."""
    case = _layer_case(op, hidden, direction)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU")
    cfg = _model_best(spec, lambda c: c.cluster and not c.tensor_cores())
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE["float32"])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,hidden,direction,dtype", [("LSTM", 64, "forward", "float32"), ("GRU", 32, "bidirectional", "float32"),
                                                       ("RNN", 128, "reverse", "float32"), ("LSTM", 128, "forward", "float16")])
def test_batch_tiles_match_onnxruntime(op, hidden, direction, dtype):
    """One CTA per direction and tile of batch rows (the model's best such config)."""
    case = _layer_case(op, hidden, direction, dtype)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU", dtype=dtype)
    cfg = _model_best(spec, lambda c: c.batch_tile > 0)
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE[dtype])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,hidden,direction", [("LSTM", 256, "bidirectional"), ("GRU", 256, "forward"),
                                                 ("RNN", 128, "reverse")])
def test_cluster_batch_tiles_match_onnxruntime(op, hidden, direction):
    """One thread-block cluster per direction and tile of batch rows (the model's best such
    config): tiles never wait for each other, the cluster barrier is each tile's own."""
    case = _layer_case(op, hidden, direction)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU")
    cfg = _model_best(spec, lambda c: c.batch_tile > 0 and c.cluster)
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE["float32"])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,hidden,direction,dtype,cfg", [
    ("LSTM", 256, "forward", "float32", Config(32, 4, 2, 1, cluster=True, dsmem=True)),  # B > 1: the chunked path
    ("GRU", 256, "bidirectional", "float32", Config(32, 8, 4, 1, cluster=True, batch_tile=1, dsmem=True)),
    ("RNN", 128, "reverse", "float32", Config(16, 8, 2, 2, cluster=True, batch_tile=2, dsmem=True)),  # ragged tile
    ("LSTM", 128, "forward", "float32", Config(32, 8, 4, 1, cluster=True, batch_tile=1, dsmem=True)),  # lane updates
    ("LSTM", 256, "forward", "float16", Config(32, 8, 4, 1, "float16", cluster=True, batch_tile=1, dsmem=True)),
    # clusters of 16 CTAs (non-portable): 15 peers each; B > 1 takes the chunked path's 16-CTA cluster barrier
    ("LSTM", 256, "forward", "float32", Config(16, 8, 4, 1, cluster=True, dsmem=True)),
    ("GRU", 256, "bidirectional", "float16", Config(16, 16, 6, 1, cluster=True, batch_tile=1, dsmem=True)),
    ("RNN", 128, "reverse", "float32", Config(8, 8, 2, 2, cluster=True, batch_tile=2, dsmem=True)),  # ragged tile
], ids=str)
def test_dsmem_exchange_matches_onnxruntime(op, hidden, direction, dtype, cfg):
    """h through distributed shared memory between a cluster's CTAs, each (B, T) run three times:
    a store that lands late, or a wait that passes early, shows as a run that differs."""
    _matches_three_times(_layer_case(op, hidden, direction, dtype), cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,hidden,direction,dtype,cfg", [
    ("LSTM", 1024, "forward", "float32", Config(8, 32, 4, 1, stamped=True)),  # 128 CTAs; B > 1: the chunked path
    ("GRU", 1024, "forward", "float32", Config(8, 32, 4, 1, stamped=True)),
    ("GRU", 512, "bidirectional", "float32", Config(8, 32, 4, 5, stamped=True)),  # B = 5: one chunk of 5 rows
    ("RNN", 256, "reverse", "float32", Config(32, 16, 2, 5, stamped=True)),  # 8 CTAs
    ("LSTM", 1024, "forward", "float16", Config(8, 32, 4, 1, stamped=True)),  # an fp16 layer's fp32 weights
], ids=str)
def test_stamped_exchange_matches_onnxruntime(op, hidden, direction, dtype, cfg):
    """h(t-1) read as stamped words between a grid direction's CTAs (no barrier a step), each
    (B, T) run three times: a word read before its writer stored it, or a copy overwritten while
    a reader still wanted it, shows as a run that differs."""
    _matches_three_times(_layer_case(op, hidden, direction, dtype), cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,hidden,direction,dtype,cfg", [
    ("LSTM", 256, "forward", "float16", Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2, stamped=True)),
    ("GRU", 256, "bidirectional", "bfloat16", Config(16, 32, 16, 8, "bfloat16", batch_tile=8, mma_k_split=2,
                                                     stamped=True)),
    ("GRU", 256, "forward", "float16", Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=4,
                                              stamped=True)),  # a padded row tile, four column splits
    ("LSTM", 256, "forward", "bfloat16", Config(8, 32, 16, 16, "bfloat16", batch_tile=16, mma_k_split=2,
                                                smem_runs=2, stamped=True)),  # two n-tiles, shared fragments
    ("RNN", 256, "reverse", "float16", Config(16, 32, 16, 8, "float16", mma_k_split=2, stamped=True)),  # chunks
    ("LSTM", 256, "forward", "float16", Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=4,
                                               stamped=True)),  # four column splits, as LSTM H=768 B=16's pick
], ids=str)
def test_stamped_halves_match_onnxruntime(op, hidden, direction, dtype, cfg):
    """16-bit tensor-core steps reading h(t-1) as stamped words of two halves (no barrier a step):
    grid batch tiles (ragged at B=5 and 20) and a grid walking batch chunks, fp16 and bf16, one to
    four column splits, each (B, T) of the matrix three times: a word read before its writer stored
    it, or a copy overwritten while a reader still wanted it, shows as a run that differs."""
    _matches_three_times(_layer_case(op, hidden, direction, dtype), cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,hidden,direction,dtype", [("LSTM", 1024, "bidirectional", "float32"),
                                                      ("GRU", 512, "forward", "float32"),
                                                      ("GRU", 1024, "bidirectional", "float16"),
                                                      ("RNN", 1024, "forward", "float16")])
def test_shared_memory_weights_match_onnxruntime(op, hidden, direction, dtype):
    """Weights partly in shared memory: the model's best such config, which for bidirectional
    fp32 H=1024 is the only persistent one (fp16 weights there too: one register each)."""
    case = _layer_case(op, hidden, direction, dtype)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU", dtype=dtype)
    cfg = _model_best(spec, lambda c: c.smem_runs > 0 and not c.cluster)
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE[dtype])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,direction,cfg", [
    ("LSTM", "forward", Config(16, 8, 4, 2, smem_runs=2, global_runs=3)),  # 16 CTAs, three homes of weights
    ("GRU", "bidirectional", Config(32, 8, 3, 5, global_runs=4)),
    ("RNN", "reverse", Config(64, 16, 4, 4, smem_runs=1, global_runs=2)),
    ("GRU0", "forward", Config(32, 8, 4, 5, global_runs=2)),  # two phases a step
    ("GRU0", "forward", Config(32, 16, 2, 5, gru_barriers=1, smem_runs=1, global_runs=2)),  # partial sums
    ("GRU0", "bidirectional", Config(32, 8, 4, 5, global_runs=8)),  # no weights in registers
    ("LSTM", "forward", Config(32, 8, 4, 2, smem_runs=1, global_runs=7)),
], ids=str)
def test_global_weights_match_onnxruntime(op, direction, cfg):
    """The last runs of each lane's weights read from global memory each step (`global_runs`),
    forced at H=256, each (B, T) of the matrix three times."""
    case = _layer_case(op.rstrip("0"), 256, direction, lbr=0 if op == "GRU0" else None)
    _matches_three_times(case, cfg, TOLERANCE["float32"])


@pytest.mark.parametrize("op,direction,dtype,cfg", [
    ("LSTM", "forward", "float16", Config(16, 8, 4, 2, "float16", smem_runs=2, global_runs=3)),
    ("GRU", "bidirectional", "bfloat16", Config(32, 8, 3, 5, global_runs=4)),  # bf16 layers hold fp32 weights
    ("GRU0", "forward", "float16", Config(32, 8, 4, 5, "float16", global_runs=2)),  # two phases a step
    ("LSTM", "reverse", "float16", Config(32, 8, 4, 2, "float16", global_runs=8)),  # no weights in registers
], ids=str)
def test_global_weights_of_16_bit_layers_match_onnxruntime(op, direction, dtype, cfg):
    """16-bit layers whose last runs of weights are read from global memory each step (how an
    fp16 or bf16 layer past the chip runs: H=4096), forced at H=256, each (B, T) three times."""
    case = _layer_case(op.rstrip("0"), 256, direction, dtype, lbr=0 if op == "GRU0" else None)
    _matches_three_times(case, cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,direction,dtype,cfg", [
    ("GRU", "forward", "float32", Config(16, 32, 16, 16, cluster=True, batch_tile=16, mma_k_split=2)),  # 2 pairs
    ("LSTM", "bidirectional", "float32", Config(32, 32, 16, 8, cluster=True, batch_tile=8, mma_k_split=1)),
    ("GRU", "forward", "float16", Config(16, 32, 16, 16, "float16", cluster=True, batch_tile=16, mma_k_split=2)),
    ("GRU", "forward", "float32", Config(16, 32, 16, 10, mma_k_split=1)),  # no tiles, 2 pairs a thread
], ids=str)
def test_tensor_core_batch_tiles_match_onnxruntime(op, direction, dtype, cfg):
    """Tensor-core steps in batch tiles (a cluster of 16 or 8 CTAs per tile of batch rows), and
    with two (batch row, unit) pairs a thread, forced at H=256, each (B, T) of the matrix three
    times (ragged last tiles at B=5 and 20) (docs/data/gpu-tc-batch-tiles-h200.log)."""
    case = _layer_case(op, 256, direction, dtype)
    _matches_three_times(case, cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,direction,dtype,cfg", [
    ("LSTM", "forward", "float16", Config(8, 32, 16, 20, "float16", mma_k_split=4, smem_runs=2)),  # grid, half shared
    ("GRU", "forward", "float16", Config(16, 32, 16, 16, "float16", cluster=True, batch_tile=16, mma_k_split=2,
                                         smem_runs=4)),
    ("LSTM", "bidirectional", "bfloat16", Config(32, 32, 16, 8, "bfloat16", cluster=True, batch_tile=8, mma_k_split=1,
                                                 smem_runs=16)),  # every fragment in shared memory
    ("GRU", "bidirectional", "bfloat16", Config(16, 32, 16, 20, "bfloat16", mma_k_split=2, smem_runs=3)),
], ids=str)
def test_f16_mma_shared_fragments_match_onnxruntime(op, direction, dtype, cfg):
    """16-bit tensor-core steps with their last k-tiles' A fragments in shared memory (`smem_runs`):
    in a grid and in cluster batch tiles, one direction and two, some and all of a warp's k-tiles,
    forced at H=256, each (B, T) of the matrix three times within the dtype's bound."""
    case = _layer_case(op, 256, direction, dtype)
    _matches_three_times(case, cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,direction,dtype,cfg", [
    ("LSTM", "forward", "float16", Config(8, 32, 16, 20, "float16", mma_k_split=4, smem_runs=1, global_runs=2)),
    ("GRU", "forward", "float16", Config(16, 32, 16, 16, "float16", cluster=True, batch_tile=16, mma_k_split=2,
                                         global_runs=4)),  # cluster tiles
    ("LSTM", "bidirectional", "bfloat16", Config(32, 32, 16, 8, "bfloat16", cluster=True, batch_tile=8, mma_k_split=1,
                                                 smem_runs=6, global_runs=10)),  # no fragment in registers
    ("GRU", "bidirectional", "bfloat16", Config(8, 32, 16, 20, "bfloat16", mma_k_split=2, global_runs=3)),  # padded tile
    ("LSTM", "forward", "float16", Config(16, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2, smem_runs=2,
                                          global_runs=3, stamped=True)),  # grid batch tiles, stamped halves
], ids=str)
def test_f16_mma_streamed_fragments_match_onnxruntime(op, direction, dtype, cfg):
    """16-bit tensor-core steps whose last k-tiles' A fragments are read from R in global memory
    each step (`global_runs`, after any in shared memory): a grid, cluster and grid batch tiles,
    stamped halves, one direction and two, forced at H=256, each (B, T) of the matrix three times
    within the dtype's bound."""
    case = _layer_case(op, 256, direction, dtype)
    _matches_three_times(case, cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,dtype,cfg", [
    ("LSTM", "float16", Config(20, 32, 16, 8, "float16", mma_k_split=2, smem_runs=36, global_runs=13)),  # B=16's pick
    ("GRU", "bfloat16", Config(24, 32, 16, 8, "bfloat16", mma_k_split=2, smem_runs=34, global_runs=30)),
    ("LSTM", "float16", Config(20, 32, 16, 1, "float16", mma_k_split=2, smem_runs=37, global_runs=21,
                               stamped=True)),  # B=1's pick (`planner.past_chip_lead`)
    ("GRU", "bfloat16", Config(24, 32, 16, 1, "bfloat16", mma_k_split=2, smem_runs=35, global_runs=39,
                               stamped=True)),  # B=1's pick
], ids=str)
def test_past_chip_streamed_fragments_match_onnxruntime(op, dtype, cfg):
    """16-bit layers whose weights outgrow registers and shared memory (LSTM H=2560: 50 MiB; GRU
    H=3072: 54 MiB), their tensor-core steps reading the last k-tiles' A fragments from R each
    step (`space.streamed_fragments_variant`; at B=1 with stamped halves, a chunk of one row),
    each (B, T) of the matrix three times."""
    hidden = 2560 if op == "LSTM" else 3072
    _matches_three_times(_layer_case(op, hidden, "forward", dtype), cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("dtype,cfg", [
    ("float16", Config(16, 32, 16, 16, "float16", mma_k_split=2, smem_runs=33)),  # B=16's pick: 2 chunks at B=20
    ("bfloat16", Config(16, 32, 16, 4, "bfloat16", mma_k_split=2, smem_runs=26, stamped=True)),  # B=4's
], ids=str)
def test_lstm_2048_shared_fragments_match_onnxruntime(dtype, cfg):
    """LSTM H=2048 at 16 bits (32 MiB of weights): tensor-core steps whose fragments only fit with
    26-33 of a warp's 64 k-tiles in shared memory (`space._shared_fragments`), the measure-off picks
    at B=4 and 16, each (B, T) of the matrix three times within the dtype's bound."""
    _matches_three_times(_layer_case("LSTM", 2048, "forward", dtype), cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("hidden,batch,dtype,smem_runs", [
    (1280, 64, "float16", 25), (1024, 128, "bfloat16", 36), (1280, 32, "float16", 35)], ids=str)
def test_shared_fragments_beside_picks_match_onnxruntime(hidden, batch, dtype, smem_runs):
    """The measure-off compile of a static batch where the model's best shared-fragments config
    is priced no more than the pick (`planner.shared_fragments_lead`): that config, batch tiles of
    32 or 16 (two to four of them) with as many k-tiles in shared memory as it holds, runs the layer
    within the dtype's bound, three times."""
    case = LayerCase(op="LSTM", hidden_size=hidden, input_size=hidden, dtype=dtype, seq_len=STEPS[-1], batch=batch,
                     weight_scale=1.0 / np.sqrt(hidden))
    compiled = persist_rnn.compile(reference(case)[0], "cuda", measure=False)
    layer = compiled.report()[0]
    assert layer.lowering == "persistent" and layer.config["smem_runs"] == smem_runs, layer
    _, feeds, want = reference(case)
    errors = [max_rel_error(compiled.run(feeds), want) for _ in range(3)]
    assert max(errors) <= TOLERANCE[dtype], errors


@pytest.mark.parametrize("op,hidden,dtype", [("LSTM", 1280, "float16"), ("GRU", 1024, "float32")], ids=str)
def test_symbolic_batch_buckets_match_onnxruntime_past_the_last_bound(op, hidden, dtype):
    """A symbolic batch compiled as users compile it (measure off): LSTM H=1280 fp16's buckets of
    B=9-64 take configs with A fragments in shared memory in batch tiles of a grid
    (`planner.shared_fragments_lead`), and past B=64 both layers run the open-ended bucket's
    config (`space.bounded_by_batch`): at B=200 GRU H=1024 fp32's B=64 config, tiles of 32 rows,
    would launch 448 CTAs at a grid barrier. Batches in each bucket and past the last bound, twice
    each, within the dtype's bound."""
    from persist_rnn.schedule.space import bounded_by_batch
    from tir_templates.spec import CellSpec

    case = _layer_case(op, hidden, "forward", dtype)
    compiled = persist_rnn.compile(reference(case)[0], "cuda", measure=False)
    layer = compiled.report()[0]
    spec = CellSpec(op.lower(), hidden, hidden, linear_before_reset=1 if op == "GRU" else None, dtype=dtype)
    configs = [Config.from_dict(b["config"]) for b in layer.buckets]
    assert layer.lowering == "persistent" and bounded_by_batch(spec, configs[-2])
    assert not bounded_by_batch(spec, configs[-1])
    assert op != "LSTM" or all(c.smem_runs for c in configs[-4:-1]), layer.buckets
    for batch, steps in [(1, 10), (16, 20), (33, 20), (64, 20), (65, 10), (200, 10)]:
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        errors = [max_rel_error(compiled.run(feeds), want) for _ in range(2)]
        assert max(errors) <= TOLERANCE[dtype], (batch, steps, errors)


@pytest.mark.parametrize("op,direction,dtype,cfg", [
    ("LSTM", "forward", "float16", Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2)),  # 3 tiles at B=20
    ("GRU", "bidirectional", "float32", Config(16, 32, 16, 8, batch_tile=8, mma_k_split=2)),  # 6 counters
    ("LSTM", "forward", "bfloat16", Config(8, 32, 16, 16, "bfloat16", batch_tile=16, mma_k_split=1, smem_runs=4)),
    ("GRU", "forward", "float16", Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=4)),  # a padded row tile
    # one split, one n-tile: C fragments in two sets (Config.acc_sets); the GRU's A fragments partly in shared memory
    ("LSTM", "reverse", "float16", Config(16, 32, 16, 8, "float16", batch_tile=8, mma_k_split=1)),
    ("GRU", "forward", "bfloat16", Config(8, 32, 16, 8, "bfloat16", batch_tile=8, mma_k_split=1, smem_runs=5)),
    ("LSTM", "forward", "float32", Config(8, 8, 4, 5, batch_tile=5)),  # FMA units, 4 tiles at B=20
], ids=str)
def test_grid_batch_tiles_match_onnxruntime(op, direction, dtype, cfg):
    """Batch tiles of a grid, each tile's CTAs meeting at a barrier counter of their own
    (tensor cores at 3xTF32, fp16 and bf16, A fragments partly in shared memory, a padded GRU
    tile; and the FMA units), forced at H=256, each (B, T) of the matrix three times (ragged last
    tiles at B=5 and 20): a tile that waited on another's counter would hang or read early."""
    case = _layer_case(op, 256, direction, dtype)
    _matches_three_times(case, cfg, TOLERANCE[dtype])


@pytest.mark.parametrize("op,hidden,direction,lbr", [("LSTM", 2048, "forward", None), ("GRU", 2048, "forward", None),
                                                     ("GRU", 2048, "bidirectional", 0)])
def test_layers_too_large_for_the_chip_match_onnxruntime(op, hidden, direction, lbr):
    """fp32 layers whose weights no config holds on chip, compiled as a user compiles them
    (symbolic batch, measure off): a persistent kernel per batch bucket that reads what does not
    fit from global memory each step (bidirectional with two phases a step: about 8 minutes of
    builds on the H200). (H=4096 is checked against torch by benchmarks/streamed_layers.py; its
    bucketed build is too slow for this suite.)"""
    case = _layer_case(op, hidden, direction, lbr=lbr)
    compiled = persist_rnn.compile(reference(case)[0], "cuda", measure=False)
    layer = compiled.report()[0]
    assert layer.lowering == "persistent" and any(b["config"]["global_runs"] for b in layer.buckets), layer
    for batch, steps in [(1, 100), (20, 7), (5, 1)]:
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        err = max_rel_error(compiled.run(feeds), want)
        assert err <= TOLERANCE["float32"], f"B={batch} T={steps}: {err:.2e}"


def _whole_tiles(spec, c):
    return c.row_gates(spec) * c.tile_units % 16 == 0


@pytest.mark.parametrize("op,hidden,direction,keep", [
    ("LSTM", 1024, "forward", _whole_tiles),  # 128 CTAs, grid barrier, 4 warps per row tile
    ("LSTM", 256, "bidirectional", _whole_tiles),
    ("GRU", 256, "forward", _whole_tiles),
    ("RNN", 128, "reverse", lambda s, c: _whole_tiles(s, c) and not c.cluster),
    ("LSTM", 64, "forward", lambda s, c: c.cluster),
    ("GRU", 64, "bidirectional", lambda s, c: c.barrier(s) == "cta" and _whole_tiles(s, c)),  # one resident CTA
    ("GRU", 1024, "forward", lambda s, c: not _whole_tiles(s, c)),  # 3 x 8 rows: the second tile padded
], ids=["lstm1024", "lstm256-bidir", "gru256", "rnn128", "lstm64-cluster", "gru64-one-cta", "gru1024-padded"])
def test_tensor_cores_match_onnxruntime(op, hidden, direction, keep):
    """3xTF32 mma dot products (the model's best tensor-core config of each kind) keep fp32's
    tolerance over the whole (B, T) matrix, odd batches padding the mma's 8-row n-tiles. The
    first six passed on the H100 on 2026-11-23, the padded row tile on 2026-11-26
    (docs/data/gpu-v34-padded-tiles.log, with its TF32, fp16 and bf16 twins below)."""
    case = _layer_case(op, hidden, direction)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU")
    cfg = _model_best(spec, lambda c: c.tensor_cores() and keep(spec, c))
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE["float32"])
    assert not failures, f"{cfg}: " + ", ".join(failures)


#: one layer of each kind a tensor-core step takes (a grid, a bidirectional cluster, GRU, a
#: reverse RNN, one CTA) with the filter its config must pass: the new mma variants' GPU cases
MMA_KINDS = pytest.mark.parametrize("op,hidden,direction,keep", [
    ("LSTM", 1024, "forward", _whole_tiles),
    ("LSTM", 256, "bidirectional", _whole_tiles),
    ("GRU", 256, "forward", _whole_tiles),
    ("RNN", 128, "reverse", lambda s, c: _whole_tiles(s, c) and not c.cluster),
    ("GRU", 64, "bidirectional", lambda s, c: c.barrier(s) == "cta" and _whole_tiles(s, c)),
    ("GRU", 1024, "forward", lambda s, c: not _whole_tiles(s, c)),  # 3 x 8 rows: the second tile padded
], ids=["lstm1024", "lstm256-bidir", "gru256", "rnn128", "gru64-one-cta", "gru1024-padded"])


@MMA_KINDS
def test_tf32_matches_onnxruntime_within_its_bound(op, hidden, direction, keep):
    """The TF32 step (precision="tf32": one mma of rounded operands) of the model's best TF32
    config of each kind, over the whole (B, T) matrix: within TF32's bound (precision.TOLERANCE),
    and off fp32's result by more than fp32 arithmetic would be (the rounding is really there). All
    five passed on the H100 on 2026-11-25 (docs/data/gpu-v25-tf32.log), the padded GRU H=1024 on
    2026-11-26 (docs/data/gpu-v34-padded-tiles.log)."""
    case = _layer_case(op, hidden, direction)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU")
    gpu = gpu_model("sm_90")
    cfg = next(c for _, c in rank(spec, candidate_configs(spec, gpu, BATCHES[-1], "tf32"), gpu, BATCHES[-1])
               if c.tf32() and keep(spec, c))
    compiled = persist_rnn.compile(reference(case)[0], "cuda", config=cfg, precision="tf32")
    assert compiled.report()[0].tf32_step
    errors = {}
    for batch, steps in itertools.product(BATCHES, STEPS):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        errors[batch, steps] = max_rel_error(compiled.run(feeds), want)
    failures = [f"B={b} T={t}: {e:.2e}" for (b, t), e in errors.items() if not e <= PRECISION_TOLERANCE["tf32"]]
    assert not failures, f"{cfg}: " + ", ".join(failures)
    assert max(errors.values()) > TOLERANCE["float32"] / 10, errors


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@MMA_KINDS
def test_f16_mma_matches_onnxruntime(op, hidden, direction, keep, dtype):
    """16-bit models on the tensor cores (m16n8k16 on their own fp16 or bf16 weights, h(t-1)
    rounded to that dtype): the model's best such config of each kind over the whole (B, T)
    matrix, within the dtype's bound, against ONNX Runtime on the float32 twin. fp16: all five
    passed on the H100 on 2026-11-25 (docs/data/gpu-v26-f16-mma-projection.log), bf16 later
    (docs/data/gpu-v27-bf16-tile.log), the padded GRU H=1024 at both dtypes on 2026-11-26
    (docs/data/gpu-v34-padded-tiles.log)."""
    case = _layer_case(op, hidden, direction, dtype)
    spec = CellSpec(op.lower(), hidden, hidden, direction, linear_before_reset=op == "GRU", dtype=dtype)
    gpu = gpu_model("sm_90")
    cfg = next(c for _, c in rank(spec, candidate_configs(spec, gpu, BATCHES[-1]), gpu, BATCHES[-1])
               if c.f16_mma() and keep(spec, c))
    failures = _failures(persist_rnn.compile(reference(case)[0], "cuda", config=cfg), case, TOLERANCE[dtype])
    assert not failures, f"{cfg}: " + ", ".join(failures)


@pytest.mark.parametrize("op,hidden,direction,dtype,precision,batch,steps,mma", [
    ("LSTM", 1024, "forward", "float32", "fp32", 5, 20, "3xtf32"),  # M = 100: the few-row GEMM
    ("GRU", 256, "bidirectional", "float32", "fp32", 5, 20, "3xtf32"),
    ("LSTM", 512, "forward", "float32", "fp32", 20, 101, "3xtf32"),  # a full grid (M = 2020, K = 512)
    ("LSTM", 1024, "forward", "float32", "tf32", 5, 20, "tf32"),
    ("RNN", 64, "reverse", "float32", "tf32", 30, 100, "tf32"),
    ("LSTM", 1024, "forward", "float16", "fp32", 5, 20, "f16"),  # 16-bit x and W: exact 16-bit products
    ("GRU", 1024, "forward", "bfloat16", "fp32", 1, 100, "bf16"),  # B=1: one wave, four groups of warps
    ("GRU", 512, "forward", "bfloat16", "fp32", 20, 101, "bf16"),
], ids=str)
def test_tensor_core_projection_matches_onnxruntime(op, hidden, direction, dtype, precision, batch, steps, mma):
    """The input projection on the tensor cores (projection_mma.py) inside a whole layer, at a static
    (B, T) whose M = T B sends it there (the pass must pick it): 3xTF32 and the 16-bit GEMM keep
    their layer's bound, TF32 its own."""
    case = dataclasses.replace(_layer_case(op, hidden, direction, dtype), dynamic=False, batch=batch, seq_len=steps)
    model, feeds, want = reference(case)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    mod = PersistentRNN(target, measure=False, unverified=True, precision=precision)(from_onnx(model))
    used = [json.loads(str(f.attrs[PROJECTION_ATTR])).get("mma") for f in mod.functions.values()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and PROJECTION_ATTR in f.attrs]
    assert used == [mma], used
    compiled = persist_rnn.compile(model, "cuda", measure=False, unverified=True, precision=precision)
    bound = PRECISION_TOLERANCE["tf32"] if precision == "tf32" else TOLERANCE[dtype]
    assert max_rel_error(compiled.run(feeds), want) <= bound


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru0"])
def test_matched_cell_loops_on_gpu(cell):
    """Cells written as primitive ops (torch RNNCell/LSTMCell loops, Keras-style GRU with
    linear_before_reset=0), I == H: matched, made persistent, checked against ONNX Runtime."""
    model, feeds = cell_loop_model(cell, steps=7, batch=5, input_size=64, hidden=64)
    compiled = persist_rnn.compile(model, "cuda", measure=False, unverified=True)
    assert [r.lowering for r in compiled.report()] == ["persistent"], compiled.report()
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= TOLERANCE["float32"]


@pytest.mark.parametrize("op,direction,cfg", [
    ("RNN", "reverse", Config(128, 4, 4, 1, batch_tile=1)),  # every lane of a group updates a unit
    ("LSTM", "forward", Config(128, 4, 8, 1, batch_tile=1, smem_runs=4)),  # ... with weights in shared memory
], ids=str)
def test_resident_lane_updates_repeat_exactly(op, direction, cfg):
    """A resident CTA whose lanes update their units, each (B, T) run three times: a stale read of
    h would show as a run that differs (this is how reading h through a read-only view showed)."""
    case = _layer_case(op, cfg.tile_units, direction)
    compiled = persist_rnn.compile(reference(case)[0], "cuda", config=cfg)
    for batch, steps in itertools.product(BATCHES, STEPS):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch, "seq_len": steps}))
        errors = [max_rel_error(compiled.run(feeds), want) for _ in range(3)]
        assert max(errors) <= TOLERANCE["float32"], f"B={batch} T={steps}: {errors}"


@pytest.mark.parametrize("op,hidden,direction,cfg", [
    ("LSTM", 64, "bidirectional", Config(64, 2, 4, 1, batch_tile=1)),  # narrow groups, one CTA per batch row
    ("GRU", 64, "reverse", Config(64, 4, 6, 1, batch_tile=1)),
    ("LSTM", 64, "forward", Config(64, 8, 4, 5)),  # one resident CTA, the whole batch one chunk
    ("RNN", 256, "forward", Config(32, 16, 2, 5)),  # 8 CTAs behind the grid barrier
    ("LSTM", 256, "forward", Config(32, 8, 4, 2, cluster=True, batch_tile=2)),  # a cluster a tile, the last ragged
    ("LSTM", 256, "forward", Config(32, 8, 4, 2, cluster=True, batch_tile=2, dsmem=True)),  # ... h through dsmem
    ("GRU", 256, "bidirectional", Config(32, 8, 3, 5, cluster=True, dsmem=True)),  # the whole batch one chunk
    ("RNN", 256, "forward", Config(32, 16, 2, 5, stamped=True)),  # ... h(t-1) as stamped words
    ("LSTM", 256, "reverse", Config(16, 8, 4, 2, stamped=True)),  # ... 16 CTAs, three chunks
], ids=str)
def test_ragged_lengths_match_onnxruntime(op, hidden, direction, cfg):
    """Sequences of different lengths (one empty) with initial states: a resident CTA loads only
    the inputs of sequences that reach the next step and writes h(t), C(t) out after its last
    step (template version 4), so carried states and zero outputs past each end must hold."""
    case = LayerCase(op=op, hidden_size=hidden, input_size=hidden, direction=direction, dynamic=True, seq_len=9, batch=5,
                     seq_lens=[9, 4, 0, 7, 1], initial_h=True, initial_c=op == "LSTM", weight_scale=1.0 / np.sqrt(hidden),
                     linear_before_reset=1 if op == "GRU" else None)
    model, feeds, want = reference(case)
    compiled = persist_rnn.compile(model, "cuda", config=cfg)
    assert compiled.report()[0].lowering == "persistent", compiled.report()[0].reason
    assert max_rel_error(compiled.run(feeds), want) <= TOLERANCE["float32"]


@pytest.mark.parametrize("tile", [(128, 128, 8), (64, 64, 8), (64, 64, 4), (32, 32, 4, 64), None], ids=str)
def test_projection_matches_numpy_on_gpu(tile):
    """The tiled input-projection GEMM (every tile; None: the reference through TVM's default CUDA
    schedule, what persistent=False builds) on ragged shapes against numpy."""
    import tvm
    from templates.test_projection import operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module
    from tir_templates.projection import projection_kernel, projection_reference

    for M, K, N in ((1000, 64, 256), (130, 6, 18), (65, 40, 192), (300, 1024, 4096)):
        func = projection_reference(K, N) if tile is None else projection_kernel(K, N, tile)
        with tvm.transform.PassContext(opt_level=3):
            ex = tvm.compile(projection_module(func, M, K, N), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
        dev = tvm.cuda(0)
        x, w, b = operands(M, K, N)
        got = relax.VirtualMachine(ex, dev)["main"](*(tvm.runtime.tensor(a, dev) for a in (x, w, b))).numpy()
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (M, K, N)


@pytest.mark.parametrize("precision,bk,k_groups,stages", [
    ("3xtf32", 64, 2, 0), ("tf32", 64, 2, 0), ("f16", 64, 4, 0), ("bf16", 64, 4, 0),  # one wave: warp groups
    ("f16", 32, 1, 0),  # 16-bit operands staged as pairs (so are the groups' above), one group
    ("f16", 32, 1, 3), ("bf16", 32, 1, 3), ("3xtf32", 32, 1, 4),  # past a wave: k-tiles in flight by cp.async
    ("tf32", 32, 1, 0),  # past a wave at "tf32", from K = 192 (TF32_MIN_K): through registers
], ids=str)
def test_gemm_plans_match_numpy_on_gpu(precision, bk, k_groups, stages):
    """The tensor-core GEMM as `projection_mma.gemm_plan` builds it, its 64-column k-tiles split
    between groups of warps or its k-tiles copied by cp.async into a ring, on ragged shapes against
    numpy: K not a multiple of the k-tile, N not a multiple of 64, M of 64; 16-bit operands hold
    16-bit values, as a 16-bit model's do (through registers they are staged as pairs along k)."""
    import ml_dtypes
    import tvm
    from templates.test_projection import operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module
    from tir_templates.projection_mma import projection_mma_kernel

    half = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(precision)
    # fp32 accumulation over K = 1024 reaches ~1e-5 of the output scale (3xTF32, one group: 1.05e-5
    # on the H100); TF32 (operands rounded) ~1e-3: the layers' own bounds tell them apart
    bound = PRECISION_TOLERANCE["tf32" if precision == "tf32" else "fp32"]
    for M, K, N in ((100, 1024, 4096), (65, 40, 192), (37, 12, 20), (130, 200, 72)):
        func = projection_mma_kernel(K, N, precision, bk, k_groups, stages)
        with tvm.transform.PassContext(opt_level=3):
            ex = tvm.compile(projection_module(func, M, K, N), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
        dev = tvm.cuda(0)
        x, w, b = (a if half is None else a.astype(half).astype("float32") for a in operands(M, K, N))
        got = relax.VirtualMachine(ex, dev)["main"](*(tvm.runtime.tensor(a, dev) for a in (x, w, b))).numpy()
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() <= bound * np.abs(want).max(), (M, K, N)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("ldmatrix", [False, True], ids=["lds", "ldmatrix"])
@pytest.mark.parametrize("bk,k_groups,tile", [(64, 4, "64x64"), (32, 1, "64x64"), (64, 1, "128x128x64"),
                                                (64, 1, "128x128x64x64")], ids=str)
def test_pairs_gemm_plans_match_numpy_on_gpu(precision, bk, k_groups, tile, ldmatrix):
    """The 16-bit GEMM whose x (in its 16 bits) and packed w_t are copied as they lie, 3 k-tiles in
    flight, with each plan of `projection_mma._pairs_plan` (one wave: 4 groups of warps; 64 x 64
    tiles; 128 x 128 tiles of 4 warps, and of 8), its fragments read a word at a time or (w_t packed
    transposed) by ldmatrix, on ragged shapes against numpy: M and N off the tiles, K
    off the k-tile. Exact products, fp32 sums: fp32's bound."""
    import tvm
    from templates.test_projection_pairs import sixteen_bit_operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module
    from tir_templates.gemm_staging import pack_pairs, pack_pairs_nk
    from tir_templates.projection_mma import HALF_DTYPES, projection_mma_kernel

    dev = tvm.cuda(0)
    x_dtype = HALF_DTYPES[precision]
    for M, K, N in ((100, 1024, 4096), (2000, 1024, 4096), (130, 200, 72), (37, 96, 20)):
        func = projection_mma_kernel(K, N, precision, bk, k_groups, 3, x_dtype=x_dtype, tile=tile, w_pairs=True,
                                     ldmatrix=ldmatrix)
        with tvm.transform.PassContext(opt_level=3):
            ex = tvm.compile(projection_module(func, M, K, N), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
        x, w, b = sixteen_bit_operands(M, K, N, precision)
        args = (x, (pack_pairs_nk if ldmatrix else pack_pairs)(w, precision == "bf16"), b)
        got = relax.VirtualMachine(ex, dev)["main"](*(tvm.runtime.tensor(a, dev) for a in args)).numpy()
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() <= PRECISION_TOLERANCE["fp32"] * np.abs(want).max(), (M, K, N)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("tile_n", [96, 128, 160, 256])
def test_wgmma_gemm_matches_numpy_on_gpu(precision, tile_n):
    """The wgmma GEMM (sm_90a), x in its 16 bits and w_t packed transposed, on ragged shapes against
    numpy: M and N off its tiles, K off its 64-column k-tiles. Exact products, fp32 sums: fp32's bound."""
    import tvm
    from templates.test_projection_pairs import sixteen_bit_operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module
    from tir_templates.gemm_staging import pack_pairs_nk
    from tir_templates.projection_wgmma import projection_wgmma_kernel

    dev = tvm.cuda(0)
    for M, K, N in ((3200, 768, 3072), (130, 200, 72), (37, 96, 20), (800, 1032, 4100)):
        func = projection_wgmma_kernel(K, N, precision, 3, tile_n)
        with tvm.transform.PassContext(opt_level=3):
            ex = tvm.compile(projection_module(func, M, K, N), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
        x, w, b = sixteen_bit_operands(M, K, N, precision)
        args = (x, pack_pairs_nk(w, precision == "bf16"), b)
        got = relax.VirtualMachine(ex, dev)["main"](*(tvm.runtime.tensor(a, dev) for a in args)).numpy()
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() <= PRECISION_TOLERANCE["fp32"] * np.abs(want).max(), (M, K, N)


def _check_gemm_by_rows(func, arch: str, pack, rows, precision: str):
    """One build of a 16-bit GEMM whose rows are symbolic (`func`, w given as `pack` packs w_t),
    called at each of `rows`, against numpy's float64 product."""
    import tvm
    from templates.test_projection_pairs import sixteen_bit_operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module

    K, N = 1024, 4096
    with tvm.transform.PassContext(opt_level=3):
        ex = tvm.compile(projection_module(func, tvm.tirx.Var("m", "int64"), K, N),
                         target=tvm.target.Target({"kind": "cuda", "arch": arch}))
    dev = tvm.cuda(0)
    vm = relax.VirtualMachine(ex, dev)
    for M in rows:
        x, w, b = sixteen_bit_operands(M, K, N, precision)
        args = (x, pack(w, precision == "bf16"), b)
        got = vm["main"](*(tvm.runtime.tensor(a, dev) for a in args)).numpy()
        want = x.astype("float64") @ w + b
        assert np.abs(got - want).max() <= PRECISION_TOLERANCE["fp32"] * np.abs(want).max(), M


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_pairs_gemm_by_rows_matches_numpy_on_gpu(precision):
    """The pairs GEMM for rows known only at run time, one build called at rows that take each of
    its plans (on 132 SMs, N = 4096: 100 rows one wave, 800 between, 2000 the 128 x 128 tiles)."""
    from tir_templates.gemm_staging import pack_pairs
    from tir_templates.projection_mma import pairs_gemm_by_rows

    _check_gemm_by_rows(pairs_gemm_by_rows(1024, 4096, precision, 132), "sm_90", pack_pairs, (100, 800, 2000),
                        precision)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_wgmma_gemm_by_rows_matches_numpy_on_gpu(precision):
    """The wgmma GEMM for rows known only at run time (sm_90a), one build called at rows that take
    each of its kernels (on 132 SMs, N = 4096: 100 rows the ldmatrix one-wave plan, 300 its between
    plan, 800 and 2000 the wgmma GEMM)."""
    from tir_templates.gemm_staging import pack_pairs_nk
    from tir_templates.projection_wgmma import wgmma_gemm_by_rows

    _check_gemm_by_rows(wgmma_gemm_by_rows(1024, 4096, precision, 132), "sm_90a", pack_pairs_nk,
                        (100, 300, 800, 2000), precision)


def test_narrow_dense_matches_numpy_on_gpu():
    """The narrow dense kernel (a warp per row, N <= 32), rows symbolic, against numpy: one row,
    rows not a multiple of the CTA's 4 warps, K not a multiple of 32, N = 1 and 32."""
    import tvm
    from templates.test_projection import operands
    from tvm import relax

    from persist_rnn.bench.layer_models import projection_module
    from tir_templates.narrow_dense import narrow_dense_kernel

    dev = tvm.cuda(0)
    for K, N in ((256, 4), (256, 29), (33, 1), (1000, 32)):
        m = tvm.tirx.Var("m", "int64")
        ex = tvm.compile(projection_module(narrow_dense_kernel(K, N), m, K, N),
                         target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
        vm = relax.VirtualMachine(ex, dev)
        for M in (1, 6, 2000):
            x, w, b = operands(M, K, N)
            got = vm["main"](*(tvm.runtime.tensor(a, dev) for a in (x, w, b))).numpy()
            want = x.astype("float64") @ w + b
            assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), (M, K, N)


@pytest.mark.parametrize("cell,direction,dtype,batch,cfg", [
    ("lstm", "forward", "float16", 16, Config(8, 32, 16, 16, "float16", mma_k_split=4)),  # grid, one chunk
    ("lstm", "bidirectional", "bfloat16", 37, Config(8, 32, 16, 16, "bfloat16", mma_k_split=4)),  # 3 chunks
    ("gru", "forward", "float16", 40, Config(16, 32, 16, 16, "float16", cluster=True, batch_tile=16, mma_k_split=2)),
    ("gru", "bidirectional", "bfloat16", 9, Config(16, 32, 16, 16, "bfloat16", mma_k_split=4)),
    ("rnn", "reverse", "float16", 5, Config(16, 32, 16, 8, "float16", mma_k_split=2)),
], ids=str)
def test_16_bit_exchange_matches_the_fp32_exchange_bit_for_bit(cell, direction, dtype, batch, cfg, monkeypatch):
    """The 16-bit mma step with h(t-1) exchanged in 16 bits (`Config.h16_exchange`) against the
    same config exchanging fp32 and rounding as it packs B fragments, on the GPU at H=256 with
    ragged and empty sequences: Y, Y_h and Y_c the same bits (the CPU twin's check, on the
    hardware's cvt, grid barrier and cluster)."""
    from persist_rnn.schedule.measure import as_params, build_kernel, kernel_arrays
    from tir_templates.config import problems
    from tir_templates.persistent import persistent_kernel

    spec = CellSpec(cell, 256, 256, direction, linear_before_reset=cell == "gru", dtype=dtype)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    dev = tvm.cuda(0)
    outputs = {}
    for h16 in (True, False):
        with monkeypatch.context() as m:
            if not h16:
                m.setattr(Config, "h16_exchange", lambda self, spec: False)
            assert cfg.h16_exchange(spec) == h16
            assert not problems(spec, cfg, 132, 228 * 1024, 16), "both variants must launch"
            func = persistent_kernel.__wrapped__(spec, cfg)
            arrays = kernel_arrays(spec, batch, 50, seed=5, slots=cfg.exchange_slots(spec))
            arrays[3] = np.random.default_rng(batch).integers(0, 51, batch).astype("int32")
            arrays[3][0] = 50
            tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
            build_kernel(func, target)["main"](*tensors)
            dev.sync()
            outputs[h16] = [t.numpy().astype("float32") for t in tensors[7:10]]
    for name, got, want in zip(("Y", "Y_h", "Y_c"), outputs[True], outputs[False]):
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert np.abs(outputs[True][0]).max() > 0.05
