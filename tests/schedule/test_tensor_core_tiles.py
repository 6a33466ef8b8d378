"""Tensor-core configs in batch tiles: where one CTA or cluster holds a direction, each tile of
batch rows gets its own and reads only its rows of h(t-1). Offered by the space, priced by the
model, picked by the default compile (docs/data/gpu-tc-batch-tiles-h200.log,
docs/data/tc-tiles-ab-h200.jsonl)."""
from __future__ import annotations

import shutil

import pytest
import tvm

from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import plan_layer
from persist_rnn.schedule.space import candidate_configs
from tir_templates.config import Config, problems
from tir_templates.persistent.checks import unverified_reason
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
GRU640 = CellSpec("gru", 640, 640, dtype="float16", linear_before_reset=True)


def test_tiles_are_offered_where_a_cluster_holds_a_direction():
    """... a tile a cluster where one holds a direction, else a tile a grid (its own counter)."""
    tiled = [c for c in candidate_configs(GRU640, H100, 128) if c.tensor_cores() and c.batch_tile]
    clusters, grids = [c for c in tiled if c.cluster], [c for c in tiled if not c.cluster]
    assert clusters and all(c.ctas_per_direction(GRU640) <= 16 for c in clusters)
    # every tile's cluster runs at once: 128 / 32 = 4 clusters of 16 CTAs (7 fit the H100)
    assert {c.batch_tile for c in clusters} == {32}
    # ... and every tile's CTAs are resident: 4 grids of 32 CTAs (20 units a CTA), not 4 of 40
    assert grids and all(c.ctas_per_direction(GRU640) > 16 and c.barrier(GRU640) == "grid" for c in grids)
    assert all(c.ctas_per_direction(GRU640) * 128 // c.batch_tile <= H100.num_sms for c in grids)
    tiles = {(c.tile_units, c.batch_tile) for c in grids}
    assert (20, 32) in tiles and (16, 64) in tiles and (16, 32) not in tiles


def test_the_default_compile_picks_a_tile_where_it_measured_faster():
    """GRU H=640 B=128 fp16: the tile of 32 rows, 3 pairs a thread, 2.08x the step of the pick
    without tiles, kernel alone (docs/data/tc-tiles-ab-h200.jsonl)."""
    tiled = [c for c in candidate_configs(GRU640, H100, 128) if c.tensor_cores() and c.batch_tile]
    assert not any(unverified_reason(GRU640, c) for c in tiled)
    pick = plan_layer(GRU640, CUDA, batch=128, measure=False).config
    assert pick.batch_tile == 32 and pick.tensor_cores() and pick.updates_per_thread(GRU640) == 3, pick


def test_several_pairs_a_thread_are_offered_only_in_batch_tiles():
    """Outside tiles they measured 0.37-1.15x the one-pair pick (docs/data/tc-tiles-ab-h200.jsonl)."""
    spec = CellSpec("lstm", 768, 768, dtype="float16")
    tc = [c for c in candidate_configs(spec, H100, 64) if c.tensor_cores()]
    assert all(c.updates_per_thread(spec) == 1 for c in tc if not c.batch_tile)
    assert any(c.updates_per_thread(spec) > 1 for c in candidate_configs(GRU640, H100, 128) if c.batch_tile)


def test_several_pairs_a_thread_only_with_tensor_cores():
    spec = CellSpec("gru", 16, 16, linear_before_reset=True)
    tc = Config(16, 32, 16, 8, batch_tile=8, mma_k_split=1)  # 96 threads, 128 pairs
    assert tc.updates_per_thread(spec) == 2 and not problems(spec, tc, 132, 232448, 16)
    too_many = Config(16, 32, 16, 64, mma_k_split=1)  # 1024 pairs, 96 threads
    assert any("pairs for each of 96 threads" in p for p in problems(spec, too_many, 132, 232448, 16))
    fma = Config(4, 4, 2, 16)  # 64 pairs, 32 threads
    assert any("exceeds 32 threads" in p for p in problems(CellSpec("lstm", 16, 16), fma, 132, 232448, 16))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_tensor_core_tile_compiles_for_sm_90(tmp_path):
    from templates.test_cuda_codegen import cuda_source, nvcc_stats

    plan = plan_layer(GRU640, CUDA, batch=128, measure=False)
    assert plan.config.batch_tile and plan.config.updates_per_thread(GRU640) > 1
    nvcc_stats(cuda_source(plan.kernel, "sm_90"), "sm_90", tmp_path)
