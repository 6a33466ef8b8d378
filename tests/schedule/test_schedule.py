"""Config space, cost model and tuning logs: plain Python, no GPU."""
from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest
import tvm

from persist_rnn import PersistRNNError
from persist_rnn.schedule import tuning_log
from persist_rnn.schedule.cost_model import FEATURES, features, rank, step_us
from persist_rnn.gpu_fit import gpu_problem
from persist_rnn.schedule import gpu as gpu_module
from persist_rnn.schedule.gpu import PresentGPU, gpu_model, on_present_gpu
from persist_rnn.schedule.planner import choose, plan_layer, target_arch
from persist_rnn.targets import as_target
from persist_rnn.schedule.space import candidate_configs, problems_on, shared_fragment_fits
from tir_templates.config import TEMPLATE_VERSION, Config, problems
from tir_templates.spec import CellSpec

H100 = gpu_model("sm_90")
TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def test_every_candidate_is_runnable_and_within_the_chip():
    spec = CellSpec("lstm", 256, 256)
    configs = candidate_configs(spec, H100, 10)
    assert len(configs) > 20 and any(c.cluster for c in configs)
    for cfg in configs:
        assert problems_on(spec, cfg, H100) == []
        assert cfg.num_ctas(spec) <= H100.num_sms and cfg.threads(spec) <= 1024
        assert cfg.shared_bytes(spec) <= (48 * 1024 if not cfg.smem_runs else H100.max_shared_bytes)


@pytest.mark.parametrize("cfg,why", [
    (Config(3, 8, 1, 1), "does not divide hidden_size"),
    (Config(1, 32, 1, 1), "cannot all be resident"),  # 256 CTAs
    (Config(256, 1, 1, 1), "registers"),
    (Config(8, 8, 1, 64), "shared memory"),
    (Config(8, 8, 1, 1, cluster=True), "a cluster of 32 CTAs"),
    (Config(32, 8, 1, 1, gru_barriers=1), "gru_barriers 1"),
    # h (32 rows) in 33 KB of dynamic shared memory beside 16 KB of static dot results: TVM raises
    # the limit only from 48 KB of dynamic memory, and the H100 refused this launch (B=32)
    (Config(4, 32, 16, 32, mma_k_split=8), "dynamic shared memory beside"),
])
def test_problems_name_the_limit(cfg, why):
    assert any(why in p for p in problems(CellSpec("lstm", 256, 256), cfg, H100.num_sms))


def test_cost_model_is_plain_arithmetic_and_monotone_in_batch():
    spec = CellSpec("gru", 256, 256, linear_before_reset=True)
    cfg = Config(4, 16, 2, 4)
    f = features(spec, cfg, H100, 8)
    assert set(f) == set(FEATURES)
    assert step_us(spec, cfg, H100, 4) < step_us(spec, cfg, H100, 8) < step_us(spec, cfg, H100, 16)
    ranked = rank(spec, candidate_configs(spec, H100, 8), H100, 8)
    assert [t for t, _ in ranked] == sorted(t for t, _ in ranked)


def _data_rows(name):
    """The JSON lines of docs/data/`name`."""
    return [json.loads(line) for line in (pathlib.Path(__file__).parents[2] / "docs" / "data" / name).read_text().splitlines()]


def _sweep_rows(*names):
    """Measured configs from docs/data: by default the exhaustive sweeps of GRNN's 18 workloads
    (before the cluster, batch-tile and shared-memory variants existed)."""
    import os

    paths = [os.path.join(os.path.dirname(__file__), "..", "..", "docs", "data", f"sweep-h100-{n}.jsonl")
             for n in names or ("lstm", "gru")]
    return [json.loads(line) for p in paths for line in open(p)]


def _judge(quality):
    top1 = [q["top1_ratio"] for q in quality]
    top5 = [q["top5_ratio"] for q in quality]
    # the acceptance bounds of the cost-model issue: top-1 within 1.10x on average and never worse
    # than 1.25x of the best measured config; best of the top 5 within 1.05x on average
    assert sum(top1) / len(top1) <= 1.10 and max(top1) <= 1.25 and sum(top5) / len(top5) <= 1.05


def test_shipped_weights_rank_the_measured_sweep_well():
    """The shipped weights were fitted to the 2,709 configs measured on the H100 (docs/data)."""
    from persist_rnn.schedule.fit import ranking_quality

    rows = _sweep_rows()
    assert len(rows) > 2000
    _judge(ranking_quality(rows, H100))


def test_shipped_weights_rank_the_template_v2_sweep_well():
    """Template version 2 (lane updates), measured exhaustively on the H100 for 13 of the 18
    workloads (every LSTM one, GRU H=256 and GRU H=1024 B=1; the GPU time ran out before GRU H=64
    and GRU H=1024 B=10/20): the weights fitted on version 1 still meet the bounds, so they were
    kept (docs/cost-model.md)."""
    from persist_rnn.schedule.fit import ranking_quality

    rows = _sweep_rows("v2")
    quality = ranking_quality(rows, H100)
    assert len(rows) > 2700 and len(quality) == 13
    _judge(quality)
    assert max(q["top5_ratio"] for q in quality) <= 1.01  # the top 5 the tuner measures hold the best (GRU H=256 B=1: 1.001x)


def test_shipped_weights_put_the_best_variant_in_the_top_5():
    """A sample of 10 configs per workload measured on the H100 with every variant allowed (batch
    tiles, clusters, shared-memory weights): the top 5 the tuner measures hold the best one, and
    top-1 stays within 1.10x on average (its worst, GRU H=1024 B=20, is 1.32x: docs/cost-model.md)."""
    from persist_rnn.schedule.fit import ranking_quality

    quality = ranking_quality(_sweep_rows("variants"), H100)
    assert len(quality) == 18
    assert max(q["top5_ratio"] for q in quality) <= 1.0 + 1e-9
    assert sum(q["top1_ratio"] for q in quality) / len(quality) <= 1.10


def test_cluster_tiles_rank_first_and_beat_the_rest_of_the_space():
    """H=256 at B=10/20: every config with a cluster per batch tile, measured on the H100 (the
    configs added after the v2 sweep): the model ranks them within the bounds, and its top-1 of
    the whole space is one of them and faster than the best of the v2 sweep's configs. The sweep
    timed the cluster barrier's kernel: at GRU B=20 the model's top-1 among its configs (3 rows a
    group) took 1.098x the best (4 rows), where with the current distributed-shared-memory exchange the
    3 rows run 1.05x faster than the 4 (H200, docs/data/scheduler-warps-h200.jsonl)."""
    from persist_rnn.schedule.fit import ranking_quality

    rows = _sweep_rows("cluster-tiles")
    quality = ranking_quality(rows, H100)
    bound = {("gru", 20): 1.10}
    assert len(quality) == 4 and all(q["top1_ratio"] <= bound.get((q["cell"], q["batch"]), 1.02) for q in quality)
    _judge(quality)
    older = _sweep_rows("v2")
    for q in quality:
        spec = CellSpec(q["cell"], 256, 256, linear_before_reset=q["cell"] == "gru")
        ranked = [c for _, c in rank(spec, candidate_configs(spec, H100, q["batch"]), H100, q["batch"])]
        # the whole space's top-1 exchanges h through distributed shared memory (measured faster on
        # the H100 than the cluster barrier: docs/data/batch1-h100.jsonl); the sweep predates it
        assert ranked[0].batch_tile and ranked[0].cluster and ranked[0].dsmem
        top1 = next(c for c in ranked if not c.dsmem)
        later = ("dsmem", "mma_precision", "stamped", "global_runs")  # fields added after the sweep
        measured = {json.dumps({k: v for k, v in r["config"].items() if k not in later}, sort_keys=True): r["measured_us"]
                    for r in rows if (r["cell"], r["batch"]) == (q["cell"], q["batch"])}
        assert top1.batch_tile and top1.cluster
        assert measured[json.dumps({k: v for k, v in top1.as_dict().items() if k not in later}, sort_keys=True)] < min(
            r["measured_us"] for r in older if (r["cell"], r["hidden"], r["batch"]) == (q["cell"], 256, q["batch"]))


def test_batch_tiles_of_clusters_run_at_once():
    """A cluster must fit one GPC: the H100 and H200 run 7 clusters of 16 CTAs at once (and no more
    of 12), not the 8 that 132 SMs would hold. GRU H=384 B=64 TF32 in 8 tiles of 16-CTA clusters
    took 8.3 us a step on the H200, the model's 3.1 for one wave (docs/data/offgrid-h200.jsonl):
    the space offers only tiles whose clusters all run at once, and the model's pick is then a
    tensor-core config, which ran 1.25x faster than cuDNN's best there (run B)."""
    assert H100.clusters_at_once(16) == 7 and H100.clusters_at_once(12) == 7 and H100.clusters_at_once(8) == 15
    spec = CellSpec("gru", 384, 384, linear_before_reset=True)
    space = candidate_configs(spec, H100, 64, "tf32")
    tiled = [c for c in space if c.batch_tile and c.cluster]
    assert tiled and all(64 // c.batch_tile <= H100.clusters_at_once(c.ctas_per_direction(spec)) for c in tiled)
    sixteen = {c.batch_tile for c in tiled if c.ctas_per_direction(spec) == 16}
    assert 16 in sixteen and 8 not in sixteen  # 4 clusters of 16 at once, not 8
    assert rank(spec, space, H100, 64)[0][1].tensor_cores()


@pytest.mark.parametrize("cell,dtype", [("lstm", "float32"), ("gru", "float32"), ("lstm", "float16"), ("gru", "float16")])
def test_sixteen_cta_clusters_reach_the_tuner_at_h256_batch_1(cell, dtype):
    """The H100 takes clusters of 16 CTAs (non-portable); at H=256 B=1 the fastest config measured
    there, a 16-CTA dsmem cluster (docs/data/cluster16-h100.jsonl: 8x4 lanes x rows for LSTM,
    16x6 for GRU, 1.09-1.11x faster than the best 8-CTA one), is among the configs the tuner
    measures; no cluster exceeds 16, and a GPU without clusters (sm_80) gets none."""
    from persist_rnn.schedule.planner import to_measure

    spec = CellSpec(cell, 256, 256, linear_before_reset=cell == "gru", dtype=dtype)
    space = candidate_configs(spec, H100, 1)
    assert max(c.ctas_per_direction(spec) for c in space if c.cluster) == 16
    fastest = Config(16, 8, 4, 1, cluster=True, dsmem=True) if cell == "lstm" else Config(16, 16, 6, 1, cluster=True, dsmem=True)
    assert fastest in to_measure(rank(spec, space, H100, 1), 5)
    assert not any(c.cluster for c in candidate_configs(spec, gpu_model("sm_80"), 1))


def test_shipped_weights_rank_the_template_v4_h64_sweep_well():
    """Template version 4 changed the resident CTA's step: LSTM and GRU H=64 at B=1/10, every
    FMA-unit config measured again on the H100 (2,016 configs; B=20 was not swept): the model still meets the bounds, and the tuner's top 5 hold the best."""
    from persist_rnn.schedule.fit import ranking_quality

    quality = ranking_quality(_sweep_rows("h64-v4"), H100)
    assert len(quality) == 4 and sum(q["configs"] for q in quality) > 2000
    _judge(quality)
    assert max(q["top5_ratio"] for q in quality) <= 1.0 + 1e-9


def test_fitted_weights_rank_held_out_workloads_well():
    """Fitted without a cell (or a hidden size), the model still ranks that cell's configs."""
    from persist_rnn.schedule.fit import held_out_quality

    for name, quality in held_out_quality(_sweep_rows(), H100).items():
        _judge(quality)


def test_without_gpu_the_cost_model_decides():
    plan = plan_layer(CellSpec("lstm", 256, 256), TARGET, batch=10, measure=False)
    assert plan.kernel is not None and plan.source == "cost_model" and plan.time_us is None


def test_gru_linear_before_reset_0_is_persistent():
    plan = plan_layer(CellSpec("gru", 64, 64, linear_before_reset=False), TARGET, batch=1, measure=False)
    assert plan.kernel is not None and plan.config.gru_barriers in (1, 2)


FP16_BIDIRECTIONAL_1024 = CellSpec("lstm", 1024, 1024, "bidirectional", dtype="float16")


def test_fp16_weights_partly_in_shared_memory_are_persistent():
    """16 MiB of fp16 weights (bidirectional H=1024) and 32 MiB (H=2048) fit the H100's FMA-unit
    configs only with part of them in shared memory (run on the H100: tests/gpu/test_sizes.py,
    test_persistent_gpu.py); the tensor cores hold bidirectional H=1024's as fp16 fragments."""
    for spec in (FP16_BIDIRECTIONAL_1024, CellSpec("lstm", 64, 2048, dtype="float16")):
        plan = plan_layer(spec, TARGET, batch=1, measure=False)
        assert plan.kernel is not None, plan.reason
        fma = [c for c in candidate_configs(spec, H100, 1) if not c.tensor_cores()]
        assert fma and all(c.smem_runs > 0 for c in fma)
        assert plan.config.smem_runs > 0 or plan.config.f16_mma()


def test_tensor_cores_are_measured_never_trusted():
    """With a GPU the tuner measures the model's best two tensor-core configs beside its top 5,
    padded row tiles too (GRU H=1024: 24 rows a CTA; they ran on the H100,
    docs/data/gpu-v34-padded-tiles.log)."""
    from persist_rnn.schedule.planner import to_measure
    from tir_templates.persistent import unverified_reason

    lstm = CellSpec("lstm", 1024, 1024)
    measured = to_measure(rank(lstm, candidate_configs(lstm, H100, 20), H100, 20), 5)
    assert len(measured) == 7 and sum(c.tensor_cores() for c in measured) == 2
    gru = CellSpec("gru", 1024, 1024, linear_before_reset=True)
    configs = candidate_configs(gru, H100, 20)
    padded = [c for c in configs if c.tensor_cores() and c.row_gates(gru) * c.tile_units % 16]
    assert padded
    assert not any(unverified_reason(gru, c) for c in configs)
    assert any(c.tensor_cores() for c in to_measure(rank(gru, configs, H100, 20), 5))


@pytest.mark.parametrize("threads,cap", [(128, 255), (256, 255), (288, 168), (320, 168), (384, 168),
                                         (512, 128), (640, 96), (1024, 64)])
def test_register_cap_is_the_busiest_sub_partitions_share(threads, cap):
    """ptxas's cap for `__launch_bounds__(threads)` (nvcc 13, sm_90: a kernel of 166 live floats
    spilled under 320 threads and 96 under 640, none a step below), not 65536 / threads."""
    from tir_templates.config import register_cap_of

    assert register_cap_of(threads) == cap


def test_small_batch_chunks_of_fma_configs_fit_the_register_cap():
    """An FMA-unit config whose chunk is at most SPILL_FREE_CHUNK rows must fit what ptxas gives
    (the LSTM H=1280 B=1 pick of 320 threads, estimated 196 registers, used 168 and spilled 120
    bytes and ran 1.13x slower than what fits: docs/data/register-cap-h200.jsonl); a longer chunk
    keeps the register file's bound, where the config past the cap still ran faster."""
    from tir_templates.config import SPILL_FREE_CHUNK, register_cap_of

    lstm = CellSpec("lstm", 1280, 1280)
    spilling = Config(10, 16, 2, 1, smem_runs=4)
    assert spilling.threads(lstm) == 320 and spilling.registers(lstm) + 8 > register_cap_of(320)
    assert any("ptxas gives" in p for p in problems(lstm, spilling, 132, 227 * 1024))
    gru = CellSpec("gru", 1536, 1536, linear_before_reset=True)
    wide = Config(12, 32, 4, 16, smem_runs=7)
    assert wide.batch_chunk > SPILL_FREE_CHUNK and wide.registers(gru) + 8 > register_cap_of(wide.threads(gru))
    assert problems(gru, wide, 132, 227 * 1024) == []
    assert any("ptxas gives" in p for p in problems(gru, dataclasses.replace(wide, batch_chunk=8), 132, 227 * 1024))
    plan = choose(lstm, as_target("cuda"), 1, measure=False)
    assert plan.config.registers(lstm) + 8 <= register_cap_of(plan.config.threads(lstm))


def test_grid_batch_tiles_only_where_every_tile_is_resident_and_counted():
    """Batch tiles of a grid (a barrier counter per tile and direction) are offered to tensor-core
    configs whose direction outnumbers a cluster, for a batch known at build time, in tiles of
    whole n-tiles whose CTAs all fit the GPU; `problems` refuses more counters than the workspace
    holds, and stamped words (no counter to meet at). The measure-off pick of LSTM H=768 B=32
    fp16 takes them (2.59 us a step on the H200 against 3.66 for one grid, kernels alone:
    docs/data/grid-batch-tiles-h200.jsonl)."""
    from persist_rnn.schedule.space import grid_batch_tiles

    lstm = CellSpec("lstm", 768, 768, dtype="float16")
    assert grid_batch_tiles(lstm, 24, 32, H100) == [8, 16]  # 4 x 32 and 2 x 32 CTAs
    assert grid_batch_tiles(lstm, 8, 32, H100) == []  # 96 CTAs a tile: two tiles do not fit
    assert grid_batch_tiles(lstm, 48, 32, H100) == []  # 16 CTAs: a cluster's tiles instead
    assert grid_batch_tiles(lstm, 24, None, H100) == []  # a run-time batch could outgrow the GPU
    a100 = gpu_model("sm_80")  # no clusters: any direction of several CTAs, none of one (a CTA's tiles)
    assert grid_batch_tiles(lstm, 48, 32, a100) == [8, 16] and grid_batch_tiles(lstm, 768, 32, a100) == []
    small16 = CellSpec("lstm", 64, 64, dtype="float16")
    configs = candidate_configs(small16, a100, 32)
    assert len(configs) == len(set(configs))
    tiled = Config(24, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2)
    assert tiled.barrier(lstm) == "grid" and problems_on(lstm, tiled, H100) == []
    small = CellSpec("lstm", 64, 64)
    few = Config(32, 8, 4, 2, batch_tile=2)  # 2 CTAs a direction: 66 tiles could run at once
    assert any("counter per tile" in p for p in problems_on(small, few, H100))
    stamped = Config(8, 8, 4, 2, batch_tile=2, stamped=True)
    assert any("counter per tile" in p for p in problems_on(small, stamped, H100))
    pick = choose(lstm, as_target("cuda"), 32, measure=False).config
    assert pick.batch_tile and pick.barrier(lstm) == "grid" and pick.tensor_cores()


def test_tensor_core_threads_keep_only_their_fragments_in_registers():
    """A tensor-core thread must hold its A and C fragments all sequence; the rest ptxas may spill.
    On the H200 (docs/data/tc-registers-h200.jsonl) GRU H=1536 B=8 fp16 ran 3.95 us a step in
    a config the full estimate put past the register file, against 7.90 for the FMA units' pick;
    at B=1 the FMA units' config was faster wherever one fits, and bf16 GRU H=2048, which no
    FMA-unit config fits, is persistent now (it streamed)."""
    from persist_rnn.schedule.planner import model_pick
    from persist_rnn.targets import as_target

    gru = CellSpec("gru", 1536, 1536, linear_before_reset=True, dtype="float16")
    ran = Config(16, 32, 16, 8, "float16", mma_k_split=4)
    assert ran.live_registers(gru) < ran.registers(gru) and not problems_on(gru, ran, H100)
    assert model_pick(gru, rank(gru, candidate_configs(gru, H100, 8), H100, 8), H100, 8).tensor_cores()
    for dtype, tensor_cores in (("float16", False), ("bfloat16", True)):
        big = CellSpec("gru", 2048, 2048, linear_before_reset=True, dtype=dtype)
        ranked = rank(big, candidate_configs(big, H100, 1), H100, 1)
        assert ranked[0][1].tensor_cores()  # the model alone would take the tensor cores ...
        assert model_pick(big, ranked, H100, 1).tensor_cores() == tensor_cores  # ... but not at B=1 beside FMA configs
        plan = plan_layer(big, as_target("cuda"), batch=1, measure=False)
        assert plan.config is not None and plan.config.tensor_cores() == tensor_cores


def test_a_16_bit_layer_without_tensor_cores_says_why():
    """A 16-bit layer the tensor-core step cannot take (H not a multiple of the mma's k) gets the
    FMA units' best config, and the plan says which and why, for a static and a run-time batch;
    one whose FMA pick beat tensor-core configs that could run says nothing."""
    from persist_rnn.targets import as_target

    odd = CellSpec("lstm", 100, 100, dtype="float16")
    for batch in (32, None):
        plan = plan_layer(odd, as_target("cuda"), batch=batch, measure=False)
        assert plan.kernel is not None and not plan.config.tensor_cores()
        assert plan.reason == ("FMA units: no tensor-core config runs this layer (tensor cores: hidden_size 100 is not "
                               "a multiple of the mma's k (16))")
    small = CellSpec("gru", 96, 96, linear_before_reset=True, dtype="float16")
    plan = plan_layer(small, as_target("cuda"), batch=8, measure=False)
    assert not plan.config.tensor_cores() and plan.reason == ""


def test_forced_config_is_checked():
    spec = CellSpec("rnn", 64, 64)
    assert plan_layer(spec, TARGET, batch=1, config={"tile_units": 64, "group_size": 8, "rows_per_group": 2,
                                                     "batch_chunk": 1}).kernel is not None
    plan = plan_layer(spec, TARGET, batch=1, config=Config(5, 8, 1, 1))
    assert plan.kernel is None and "forced config cannot run" in plan.reason


# ---- tuning logs ---------------------------------------------------------------------------

def _record(spec, batch=10, arch="sm_90", cfg=Config(4, 16, 2, 10), time_us=3.0, source="measured"):
    return tuning_log.Record(tuning_log.workload(spec, batch, arch), cfg, time_us, source)


def test_tuning_log_round_trip_and_reuse(tmp_path):
    log = str(tmp_path / "tune.jsonl")
    spec = CellSpec("lstm", 256, 256)
    tuning_log.append(log, _record(spec, cfg=Config(8, 8, 1, 10), time_us=4.0))
    tuning_log.append(log, _record(spec, cfg=Config(4, 16, 2, 10), time_us=3.0))
    best = tuning_log.lookup(log, tuning_log.workload(spec, 10, "sm_90"))
    assert best.config == Config(4, 16, 2, 10)
    plan = plan_layer(spec, TARGET, batch=10, tuning_log_path=log, measure=False)
    assert plan.source == "tuning_log" and plan.config == Config(4, 16, 2, 10)


def test_tuning_log_written_by_a_search(tmp_path):
    log = str(tmp_path / "tune.jsonl")
    spec = CellSpec("gru", 128, 128, linear_before_reset=True)
    first = plan_layer(spec, TARGET, batch=4, tuning_log_path=log, measure=False)
    again = plan_layer(spec, TARGET, batch=4, tuning_log_path=log, measure=False)
    assert first.source == "cost_model" and again.source == "tuning_log" and again.config == first.config
    assert len(tuning_log.read(log)) == 1


def test_picks_of_another_cost_model_are_not_used(tmp_path):
    """A "cost_model" record carries the model's version; one of another version (or none: v1) is
    not used, with a warning naming both, while a measured record of any age is."""
    from persist_rnn.schedule.cost_model import MODEL_VERSION

    log = str(tmp_path / "tune.jsonl")
    spec = CellSpec("lstm", 256, 256)
    wl = tuning_log.workload(spec, 10, "sm_90")
    old_pick = json.loads(_record(spec, cfg=Config(8, 8, 1, 10), time_us=None, source="cost_model").to_json())
    assert old_pick.pop("model_version") == MODEL_VERSION  # written with this build's version
    with open(log, "w") as f:
        f.write(json.dumps(old_pick) + "\n")  # as an older build wrote it: no version
    with pytest.warns(UserWarning, match=f"pick of cost model v1, nothing measured .this build's model: v{MODEL_VERSION}"):
        assert tuning_log.lookup(log, wl) is None
    with pytest.warns(UserWarning, match="cost model v1"):
        plan = plan_layer(spec, TARGET, batch=10, tuning_log_path=log, measure=False)
    assert plan.source == "cost_model"  # the model's own pick, appended with this version
    assert tuning_log.lookup(log, wl).model_version == MODEL_VERSION
    tuning_log.append(log, _record(spec, cfg=Config(4, 16, 2, 10), time_us=3.0))
    assert tuning_log.lookup(log, wl).config == Config(4, 16, 2, 10)


def test_a_quantized_layers_records_are_its_own(tmp_path):
    """A quantized layer's record may hold its weights in fp16: the float layer of the same shape
    never takes it (nor the other way round), and fp16 weights are a problem for a float fp32 layer."""
    log = str(tmp_path / "tune.jsonl")
    plain, int8 = CellSpec("lstm", 256, 256), CellSpec("lstm", 256, 256, int8_weights=True)
    halves = Config(4, 16, 2, 10, "float16")
    assert any("int8" in p for p in problems_on(plain, halves, H100))
    assert not any("int8" in p for p in problems_on(int8, halves, H100))
    tuning_log.append(log, _record(int8, cfg=halves))
    assert tuning_log.lookup(log, tuning_log.workload(plain, 10, "sm_90")) is None
    assert tuning_log.lookup(log, tuning_log.workload(int8, 10, "sm_90")).config == halves
    plan = plan_layer(plain, TARGET, batch=10, tuning_log_path=log, measure=False)
    assert plan.source == "cost_model" and plan.config.weight_dtype == "float32"


def test_records_of_another_arch_or_version_are_ignored_with_a_warning(tmp_path):
    log = str(tmp_path / "tune.jsonl")
    spec = CellSpec("lstm", 256, 256)
    tuning_log.append(log, _record(spec, arch="sm_80"))
    rec = _record(spec)
    rec.workload["template_version"] = TEMPLATE_VERSION + 1
    tuning_log.append(log, rec)
    want = rf"made for sm_80, v{TEMPLATE_VERSION}; sm_90, v{TEMPLATE_VERSION + 1} \(this build: sm_90, template v{TEMPLATE_VERSION}\) and are not used"
    with pytest.warns(UserWarning, match=want):
        assert tuning_log.lookup(log, tuning_log.workload(spec, 10, "sm_90")) is None


def test_the_cli_shows_persist_rnns_own_warnings_but_not_tvms(tmp_path):
    """Quiet by default: TVM's and ONNX's warnings only with --verbose, but a tuning log whose
    records are not used is said (a user who passed the log must learn it was not used)."""
    import subprocess
    import sys

    log = tmp_path / "tune.jsonl"
    model = pathlib.Path(__file__).parents[1] / "fixtures" / "torch_rnn_relu.onnx"
    compile_ = [sys.executable, "-m", "persist_rnn.cli", "compile", str(model), "-o", str(tmp_path / "m.so"),
                "--target", "cuda", "--tuning-log", str(log)]
    assert subprocess.run(compile_, capture_output=True).returncode == 0  # writes the layer's record
    rec = json.loads(log.read_text().splitlines()[0])
    rec["workload"]["template_version"] = TEMPLATE_VERSION - 1  # as an older template's log holds it
    log.write_text(json.dumps(rec) + "\n")
    res = subprocess.run(compile_, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"(this build: sm_90, template v{TEMPLATE_VERSION}) and are not used" in res.stderr
    assert "Warning" not in res.stderr.replace("UserWarning", "")  # nothing from TVM


@pytest.mark.parametrize("line,expect", [
    ("{not json", r"tune.jsonl:2: not valid JSON"),
    ('{"workload": {}, "config": {}, "source": "measured"}', r"tune.jsonl:2: workload lacks"),
    (None, r"tune.jsonl:2: config values must be integers"),
    (None, r"tune.jsonl:2: source 'guessed'"),
])
def test_corrupt_log_names_the_line(tmp_path, line, expect):
    log = tmp_path / "tune.jsonl"
    good = _record(CellSpec("lstm", 256, 256)).to_json()
    if line is None:
        d = json.loads(good)
        if "integers" in expect:
            d["config"]["tile_units"] = "wide"
        else:
            d["source"] = "guessed"
        line = json.dumps(d)
    log.write_text(good + "\n" + line + "\n")
    with pytest.raises(PersistRNNError, match=expect):
        tuning_log.read(str(log))


def test_merge_keeps_the_fastest(tmp_path):
    spec = CellSpec("lstm", 256, 256)
    a, b, out = (str(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "out.jsonl"))
    tuning_log.append(a, _record(spec, time_us=5.0))
    tuning_log.append(b, _record(spec, cfg=Config(8, 8, 1, 10), time_us=2.0))
    tuning_log.append(b, _record(CellSpec("gru", 64, 64), time_us=1.0))
    assert tuning_log.merge([a, b], out) == 2
    recs = tuning_log.read(out)
    assert {r.time_us for r in recs} == {2.0, 1.0}


def test_a_cold_retune_takes_over_from_faster_warm_records(tmp_path):
    """Cold times (L2 flushed before each launch) are longer than warm ones and do not compare
    with them: once the newest measured record is cold, lookup and merge choose among the cold
    ones; the timing survives the round trip, and an unknown one names the line."""
    spec = CellSpec("lstm", 1024, 1024)
    log, out = str(tmp_path / "tune.jsonl"), str(tmp_path / "out.jsonl")
    warm, cold, slower_cold = Config(8, 16, 2, 1), Config(8, 32, 2, 1), Config(8, 32, 4, 1)
    tuning_log.append(log, _record(spec, cfg=warm, batch=1, time_us=1.4))
    wl = tuning_log.workload(spec, 1, "sm_90")
    assert tuning_log.lookup(log, wl).config == warm
    for cfg, us in ((cold, 1.9), (slower_cold, 2.1)):
        tuning_log.append(log, tuning_log.Record(wl, cfg, us, "measured", timing="cold"))
    assert tuning_log.lookup(log, wl).config == cold
    assert tuning_log.merge([log], out) == 1
    assert [(r.config, r.timing) for r in tuning_log.read(out)] == [(cold, "cold")]
    bad = json.loads(tuning_log.read(out)[0].to_json())
    bad["timing"] = "lukewarm"
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(PersistRNNError, match=r"bad.jsonl:1: timing 'lukewarm'"):
        tuning_log.read(str(tmp_path / "bad.jsonl"))


def test_a_cold_timing_runs_the_flush_before_each_launch(monkeypatch):
    """The cold path end to end on the CPU: the flush is registered once a device, the evaluator
    calls it before every timing (3 x repeats, one launch each, and its warm-up), and a time comes back."""
    from tvm import te

    from persist_rnn.schedule import measure

    a = te.placeholder((64,), "float32", name="a")
    add_one = te.create_prim_func([a, te.compute((64,), lambda i: a[i] + 1.0, name="b")])
    lib = tvm.compile(tvm.IRModule({"main": add_one}), target="llvm")
    monkeypatch.setattr(measure, "FLUSH_BYTES", 1 << 16)
    monkeypatch.setattr(measure, "_flushed_on", [])
    arrays = [np.zeros(64, "float32"), np.zeros(64, "float32")]
    assert measure.time_kernel(lib, tvm.cpu(0), arrays, repeats=2, cold=True) > 0
    calls = []
    flush = tvm.get_global_func(measure._FLUSH)
    tvm.register_global_func(measure._FLUSH, lambda *args: calls.append(flush(*args)), override=True)
    assert measure.time_kernel(lib, tvm.cpu(0), arrays, repeats=2, cold=True) > 0  # registered: kept
    assert len(calls) >= 6


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_tuners_arrays_are_what_the_persistent_kernel_takes(dtype):
    """The tuner times persistent kernels on arrays from `kernel_arrays`: their dtypes are the
    kernel's parameters' (Y and Y_h in the layer's dtype; the GPU runtime refuses a mismatch),
    and `as_params` converts them for the reference scan, which keeps Y_h in float32."""
    from persist_rnn.schedule.measure import as_params, kernel_arrays
    from tir_templates.persistent import persistent_kernel
    from tir_templates.reference import reference_scan

    spec = CellSpec("lstm", 64, 64, dtype=dtype)
    cfg = Config(64, 2, 4, 1)
    arrays = kernel_arrays(spec, 1, 3, slots=cfg.exchange_slots(spec))
    assert [str(a.dtype) for a in arrays] == [str(p.dtype) for p in persistent_kernel(spec, cfg).params]
    reference = reference_scan(spec, "llvm")
    assert [str(a.dtype) for a in as_params(reference, arrays)] == [str(p.dtype) for p in reference.params]
    assert str(reference.params[8].dtype) == "float32" and str(arrays[7].dtype) == dtype


def test_only_a_layer_whose_weights_outgrow_half_of_l2_is_timed_cold():
    """R plus its GEMM's W at the layer's width against half of the H100's 50 MB L2: fp32 LSTM
    H=1024 (32 MB) is cold; fp32 GRU H=1024 (24 MB), fp16 LSTM H=1024 (16 MB) and an unknown L2 warm."""
    from persist_rnn.schedule.measure import evicted_by_projection

    h100 = 50 << 20
    assert evicted_by_projection(CellSpec("lstm", 1024, 1024), h100)
    assert evicted_by_projection(CellSpec("lstm", 512, 512, direction="bidirectional"), 20 << 20)
    assert not evicted_by_projection(CellSpec("gru", 1024, 1024, linear_before_reset=True), h100)
    assert not evicted_by_projection(CellSpec("lstm", 1024, 1024, dtype="float16"), h100)
    assert not evicted_by_projection(CellSpec("lstm", 1024, 1024), 0)


def test_unverified_configs_in_a_tuning_log_need_the_flag(tmp_path, monkeypatch):
    """A record that an unverified=True tuning measured is not reused by a default compile, which
    plans the layer without it. No variant is unverified today, so this one is made so: tensor
    cores with a padded row tile, as they were until they ran on the H100."""
    from persist_rnn.schedule import planner

    monkeypatch.setattr(planner, "unverified_reason", lambda spec, c: "not yet run" if c.tensor_cores() else "")
    log = str(tmp_path / "t.jsonl")
    spec = CellSpec("gru", 1024, 1024, linear_before_reset=True)
    padded = next(c for c in candidate_configs(spec, H100, 20) if c.tensor_cores())
    tuning_log.append(log, _record(spec, batch=20, cfg=padded, time_us=0.1))
    default = plan_layer(spec, TARGET, batch=20, measure=False, tuning_log_path=log)
    assert default.source != "tuning_log" and not default.config.tensor_cores()
    assert plan_layer(spec, TARGET, batch=20, measure=False, unverified=True, tuning_log_path=log).config == padded


def test_a_candidate_the_gpu_refuses_is_left_out_with_a_warning(monkeypatch):
    """Tuning goes on without a candidate whose launch fails, and says which one; if every
    candidate fails, the error is raised."""
    from persist_rnn.schedule import measure

    spec = CellSpec("lstm", 64, 64)
    good, bad, broken = Config(64, 4, 4, 1), Config(32, 4, 4, 1), Config(16, 4, 4, 1)
    monkeypatch.setattr(measure, "built_as_completed", lambda spec, configs, target: [
        (c, RuntimeError("building candidate failed: ptxas error") if c is broken else c, 2.5) for c in configs])
    monkeypatch.setattr(measure, "kernel_arrays", lambda *a, **k: None)

    def time_kernel(lib, dev, arrays, cold=False):
        if lib is bad:
            raise tvm.error.InternalError("CUDALaunch Error: CUDA_ERROR_INVALID_VALUE")
        return 50.0

    monkeypatch.setattr(measure, "time_kernel", time_kernel)
    reported = []
    with pytest.warns(UserWarning, match="CUDA_ERROR_INVALID_VALUE"):
        assert measure.measure_configs(spec, [bad, broken, good], TARGET, "cuda(0)", 1, progress=reported.append) == [(1.0, good)]
    assert [(t.config, t.us_per_step, t.build_s) for t in reported] == [(bad, None, 2.5), (broken, None, 2.5), (good, 1.0, 2.5)]
    assert "CUDA_ERROR_INVALID_VALUE" in reported[0].error and "ptxas error" in reported[1].error
    with pytest.raises(tvm.error.InternalError):
        measure.measure_configs(spec, [bad], TARGET, "cuda(0)", 1)


def test_background_builds_build_each_candidate_once_and_time_it_as_it_finishes(monkeypatch):
    """`measure.Builds`: a config submitted again (another bucket's candidate) shares the first
    build; `built_as_completed` hands over builds in the order they finish, not the order asked."""
    import threading

    from persist_rnn.schedule import measure

    spec, started, release = CellSpec("lstm", 64, 64), [], threading.Event()
    slow, fast = Config(64, 4, 4, 1), Config(32, 4, 4, 1)

    def build(spec, cfg, target, path):
        started.append(cfg)
        if cfg == slow:
            release.wait(10)
        return path, 0.1

    monkeypatch.setattr(measure, "_build_in_subprocess", build)
    monkeypatch.setattr(measure.tvm.runtime, "load_module", lambda path: path)
    monkeypatch.setattr(measure, "_builds", [measure.Builds(workers=2)])
    first = measure.builds().submit(spec, [slow, fast], TARGET)
    again = measure.builds().submit(spec, [fast, slow], TARGET)
    assert again == first[::-1]
    order = []
    for cfg, lib, seconds in measure.built_as_completed(spec, [slow, fast], TARGET):
        order.append(cfg)
        release.set()
    assert order == [fast, slow] and sorted(map(str, started)) == sorted(map(str, [slow, fast]))


PLAIN_SCRIPT = '''
import tvm
from persist_rnn.schedule import measure
from tir_templates.config import Config
from tir_templates.spec import CellSpec
print("main ran")
tvm.runtime.load_module = lambda path: path  # no CUDA runtime here: check the files, not load them
paths = measure.build_many(CellSpec("lstm", 16, 32), [Config(32, 4, 8, 1), Config(8, 8, 4, 1)],
                           tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), workers=2)
print("built", sum(__import__("os").path.getsize(p) > 0 for p in paths))
'''


def test_candidates_build_from_a_script_without_a_main_guard(tmp_path):
    """Measurement compiles candidates in subprocesses that never re-import the user's script (a
    spawned pool did, and crashed on a script without `if __name__ == "__main__":`)."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split("\n")[:2] == ["main ran", "built 2"]


def test_symbolic_batch_gets_a_config_per_bucket_logged_and_reused(tmp_path, monkeypatch):
    """batch None: a config per bucket, each logged under its bound; a second compile takes them
    from the log; an explicit measurement (persist-rnn tune) does not settle for those guesses."""
    from persist_rnn.schedule import planner

    spec = CellSpec("lstm", 128, 128)
    log = str(tmp_path / "t.jsonl")
    plan = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=False)
    assert plan.kernel is not None and plan.buckets and plan.buckets[-1]["max_batch"] is None
    bounds = [b["max_batch"] for b in plan.buckets[:-1]]
    assert bounds == sorted(bounds) and all(b in planner.BATCH_BUCKETS for b in bounds)
    assert sorted(r.workload["batch"] for r in tuning_log.read(log)) == list(planner.BATCH_BUCKETS)
    again = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=False)
    assert again.buckets == [{**b, "source": "tuning_log"} for b in plan.buckets]
    timed, prefetched = [], []

    class Builds:  # what prefetch_builds hands the background builds, recorded, nothing built
        def submit(self, spec, configs, target):
            prefetched.append(configs)
            return configs

    monkeypatch.setattr(planner, "present_device", lambda: "cuda(0)")
    monkeypatch.setattr(planner, "builds", lambda: Builds())
    monkeypatch.setattr(planner, "measure_configs", lambda spec, configs, target, dev, batch, progress=None:
                        timed.append((batch, configs)) or [(1.0, configs[0])])
    tuned = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=True, buckets=(1, 8))
    assert [b for b, _ in timed] == [1, 8] and {b["source"] for b in tuned.buckets} == {"measured"}
    # every bucket's candidates were submitted to build before the first was timed, the same lists
    assert prefetched == [configs for _, configs in timed]
    assert planner.prefetch_builds(spec, TARGET, (1, 8), tuning_log_path=log) == 0  # both measured now


#: a grid-barrier and a cluster batch-tile config of LSTM 128 -> 256 (the text classifier's first layer)
GRID_256 = Config(2, 4, 1, 16)
CLUSTER_256 = Config(32, 4, 1, 2, cluster=True, batch_tile=2)


def mixed_barrier_log(path, spec) -> str:
    """A tuning log whose bucket configs mix grid barriers (B <= 16) and clusters (B = 32, 64)."""
    for batch in (1, 2, 4, 8, 16, 32, 64):
        tuning_log.append(path, _record(spec, batch=batch, cfg=GRID_256 if batch <= 16 else CLUSTER_256))
    return str(path)


def test_buckets_never_mix_grid_and_cluster_barriers(tmp_path):
    """The launch flag is the bucketed kernel's: a cooperative launch (for a grid bucket) of a
    cluster bucket is refused by the driver, so the grid buckets give way to the cluster config."""
    spec = CellSpec("lstm", 128, 256)
    assert GRID_256.barrier(spec) == "grid" and CLUSTER_256.barrier(spec) == "cluster"
    plan = plan_layer(spec, TARGET, batch=None, tuning_log_path=mixed_barrier_log(tmp_path / "t.jsonl", spec),
                      measure=False)
    assert [b["config"] for b in plan.buckets] == [CLUSTER_256.as_dict()]


def test_buckets_give_a_last_bucket_that_grows_with_the_batch_no_grid_barrier(tmp_path):
    """A last bucket of one CTA a batch row (LSTM H=64) runs any batch in waves, unless a grid
    bucket makes the kernel launch cooperatively: then past the GPU's SMs the driver refuses it.
    The grid buckets give way to the tiled config, as they do to a cluster's."""
    spec = CellSpec("lstm", 64, 64)
    grid, tiles = Config(1, 4, 1, 16), Config(64, 4, 2, 1, batch_tile=1)
    assert grid.barrier(spec) == "grid" and tiles.barrier(spec) == "cta" and not problems_on(spec, tiles, H100)
    log = tmp_path / "t.jsonl"
    for batch in (1, 2, 4, 8, 16, 32, 64):
        tuning_log.append(str(log), _record(spec, batch=batch, cfg=grid if batch <= 16 else tiles))
    plan = plan_layer(spec, TARGET, batch=None, tuning_log_path=str(log), measure=False)
    assert [b["config"] for b in plan.buckets] == [tiles.as_dict()]


# ---- precision -------------------------------------------------------------------------------

def test_tf32_configs_only_in_a_tf32_build_of_an_fp32_layer():
    spec = CellSpec("lstm", 256, 256)
    assert not any(c.tf32() for c in candidate_configs(spec, H100, 10))
    tf32 = [c for c in candidate_configs(spec, H100, 10, "tf32") if c.tf32()]
    assert tf32 and all(problems_on(spec, c, H100) == [] for c in tf32)
    assert not any(c.tf32() for c in candidate_configs(CellSpec("lstm", 256, 256, dtype="float16"), H100, 10, "tf32"))
    # one mma where 3xTF32 issues three, no splits of the weights: the model prices it cheaper
    three = dataclasses.replace(tf32[0], mma_precision="3xtf32")
    assert step_us(spec, tf32[0], H100, 10) < step_us(spec, three, H100, 10)


def test_a_tf32_config_is_refused_where_fp32_was_asked_for(tmp_path):
    """Forced or from a tuning log, a TF32 step never enters an fp32 build: it would lose accuracy
    the user did not give up. The tf32 build keys its records apart."""
    spec = CellSpec("lstm", 256, 256)
    cfg = Config(4, 32, 16, 10, mma_k_split=4, mma_precision="tf32")
    plan = plan_layer(spec, TARGET, batch=10, config=cfg)
    assert plan.kernel is None and "precision='tf32'" in plan.reason
    assert plan_layer(spec, TARGET, batch=10, config=cfg, precision="tf32").kernel is not None
    log = str(tmp_path / "tune.jsonl")
    wl = tuning_log.workload(spec, 10, "sm_90", "tf32")
    assert wl["precision"] == "tf32" and "precision" not in tuning_log.workload(spec, 10, "sm_90")
    tuning_log.append(log, tuning_log.Record(wl, cfg, 1.0, "measured"))
    assert tuning_log.lookup(log, tuning_log.workload(spec, 10, "sm_90")) is None
    assert tuning_log.lookup(log, wl).config == cfg  # read back with its string field
    with pytest.raises(PersistRNNError, match="precision 'fp16'"):
        plan_layer(spec, TARGET, batch=10, precision="fp16")
    # without a GPU to measure them, the planner keeps to the FMA units at either precision
    assert not plan_layer(spec, TARGET, batch=10, measure=False, precision="tf32").config.tensor_cores()


def test_fp16_layers_get_f16_tensor_core_configs_only_on_fp16_weights():
    """An fp16 layer's tensor-core configs hold fp16 weights (mma m16n8k16, half the registers of
    TF32's A fragments per column); fp32 weights or a TF32 mma on an fp16 layer are refused."""
    spec = CellSpec("lstm", 1024, 1024, dtype="float16")
    mma = [c for c in candidate_configs(spec, H100, 20, "tf32") if c.tensor_cores()]
    assert mma and all(c.f16_mma() and c.mma_k() == 16 and c.mma_passes() == 1 for c in mma)
    fp32 = CellSpec("lstm", 1024, 1024)
    held = next(c for c in mma if not c.smem_runs)  # every fragment in registers
    assert held.weight_regs(spec) * 2 == dataclasses.replace(held, weight_dtype="float32").weight_regs(fp32)
    assert any("bf16 layers with weights of their own dtype" in p
               for p in problems_on(spec, dataclasses.replace(mma[0], weight_dtype="float32"), H100))
    assert any("is for fp32 layers" in p for p in problems_on(spec, dataclasses.replace(mma[0], mma_precision="tf32"), H100))


def test_bf16_layers_get_bf16_tensor_core_configs():
    """A bf16 layer's tensor-core configs hold its bf16 weights (the same m16n8k16 fragments as
    fp16's); bf16 weights on the FMA units are refused (those take the exact fp32 weights). The
    bf16 mma ran on the H100 (docs/data/gpu-v27-bf16-tile.log): the planner picks it on its own."""
    from tir_templates.persistent import unverified_reason

    spec = CellSpec("lstm", 1024, 1024, dtype="bfloat16")
    configs = candidate_configs(spec, H100, 20)
    mma = [c for c in configs if c.tensor_cores()]
    assert mma and all(c.f16_mma() and c.weight_dtype == "bfloat16" and c.mma_k() == 16 for c in mma)
    assert all(c.weight_dtype == "float32" for c in configs if not c.tensor_cores())
    assert not any(unverified_reason(spec, c) for c in mma if (c.row_gates(spec) * c.tile_units) % 16 == 0
                   and not c.batch_tile and c.updates_per_thread(spec) == 1)  # those two: test_tensor_core_tiles.py
    fma = next(c for c in configs if not c.tensor_cores())
    assert any("on the tensor cores only" in p for p in problems_on(spec, dataclasses.replace(fma, weight_dtype="bfloat16"), H100))
    pick = plan_layer(spec, TARGET, batch=20, measure=False).config
    assert pick.f16_mma() and pick.weight_dtype == "bfloat16", pick


def test_the_shipped_model_picks_tensor_core_configs_where_they_win_off_the_grid():
    """On the side-by-side sweep of 33 off-grid workloads (docs/data/sweep-offgrid-h100.jsonl: FMA-unit
    and tensor-core configs timed on the H100, every precision), the model's own pick, tensor cores
    allowed, is within 1.15x of the best timed config in at least 90% of them; kept to FMA-unit
    configs it is in 27 (23 before MODEL_VERSION 5). The tensor-core prices predate the sweep, so
    all of it is held out."""
    from persist_rnn.schedule.cost_model import prices_tensor_cores
    from persist_rnn.schedule.fit import pick_quality

    rows = _data_rows("sweep-offgrid-h100.jsonl")
    assert prices_tensor_cores(H100)
    picks, fma_only = pick_quality(rows, H100), pick_quality(rows, H100, tensor_cores=False)
    assert len(picks) == 33
    assert sum(q["regret"] <= 1.15 for q in picks) >= 0.9 * len(picks) > sum(q["regret"] <= 1.15 for q in fma_only)
    assert np.mean([q["spearman"] for q in picks]) > 0.7


@pytest.mark.parametrize("arch", ["sm_86", "sm_89"])
def test_architectures_without_a_calibration_get_their_own_shared_memory(arch):
    """sm_86 and sm_89 take the A100's calibration with 99 KiB of shared memory a CTA, and no
    thread-block clusters: the planner's picks there launch (the H100's offered 227 KiB and
    clusters); sm_90a and sm_100a keep the H100's model as it is."""
    gpu = gpu_model(arch)
    assert gpu.max_shared_bytes == 101376 and gpu.max_cluster_ctas == 0 and gpu.num_sms == gpu_model("sm_80").num_sms
    assert gpu_model("sm_90a") == gpu_model("sm_90") == gpu_model("sm_100a")
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    for spec, batch in [(CellSpec("lstm", 256, 256), 1), (CellSpec("lstm", 1024, 1024), 1),
                        (CellSpec("gru", 1536, 1536, linear_before_reset=True, dtype="float16"), 8)]:
        cfg = choose(spec, target, batch, measure=False).config
        assert not cfg.cluster and cfg.shared_bytes(spec) <= 101376, cfg


H100_PCIE = PresentGPU("NVIDIA H100 PCIe", "sm_90", 114)


def test_the_present_gpu_of_the_target_architecture_gives_its_sm_count():
    """An H100 PCIe (114 SMs) gets the H100 SXM's calibration with its own SMs, and its clusters
    that run at once shrink alike; a GPU of another architecture, or of the calibration's SMs
    (the H200), leaves the model as it is."""
    sxm = gpu_model("sm_90")
    pcie = on_present_gpu(sxm, "sm_90", H100_PCIE)
    assert pcie.num_sms == 114 and "H100 PCIe" in pcie.name and pcie.arch == "sm_90"
    assert all(pcie.clusters_at_once(k) <= sxm.clusters_at_once(k) for k in (2, 4, 8, 16))
    assert pcie.clusters_at_once(16) * 16 <= 114
    assert on_present_gpu(sxm, "sm_90", PresentGPU("NVIDIA H200", "sm_90", 132)) is sxm
    assert on_present_gpu(sxm, "sm_90", PresentGPU("NVIDIA A100", "sm_80", 108)) is sxm
    assert on_present_gpu(sxm, "sm_90", None) is sxm


def test_picks_on_a_gpu_with_fewer_sms_launch_there(monkeypatch, tmp_path):
    """With an H100 PCIe present, the cost model's picks and a tuning log's records use at most
    114 CTAs: LSTM H=1024 B=1's pick on 132 SMs takes 128."""
    spec, target = CellSpec("lstm", 1024, 1024), tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    on_sxm = choose(spec, target, 1, measure=False).config
    assert on_sxm.num_ctas(spec) > 114
    log = str(tmp_path / "log.jsonl")
    tuning_log.append(log, tuning_log.Record(tuning_log.workload(spec, 1, "sm_90"), on_sxm, 100.0, "measured"))
    monkeypatch.setattr(gpu_module, "present_gpu", lambda: H100_PCIE)
    for plan in (choose(spec, target, 1, measure=False), choose(spec, target, 1, measure=False, tuning_log_path=log)):
        assert plan.source == "cost_model" and plan.config.num_ctas(spec) <= 114, plan.config


def test_a_build_is_refused_on_a_gpu_it_cannot_run_on():
    """Code for a newer architecture, or persistent kernels planned for more SMs than the GPU has,
    get an error naming both GPUs; a build without grid-wide kernels runs on fewer SMs."""
    planned = {"arch": "sm_90", "num_sms": 132}
    msg = gpu_problem(planned, H100_PCIE, grid_wide=True)
    assert "132 SMs" in msg and "H100 PCIe" in msg and "114 SMs" in msg and "compile it on this GPU" in msg
    assert gpu_problem(planned, H100_PCIE, grid_wide=False) == ""
    assert "compiled for sm_90" in gpu_problem(planned, PresentGPU("NVIDIA A100", "sm_80", 108), grid_wide=False)
    assert gpu_problem(planned, PresentGPU("NVIDIA H200", "sm_90", 132), grid_wide=True) == ""
    assert gpu_problem(planned, None, grid_wide=True) == ""
    hopper_only = {"arch": "sm_90a", "num_sms": 132}  # "cuda" on a Hopper GPU (wgmma)
    assert gpu_problem(hopper_only, PresentGPU("NVIDIA H200", "sm_90", 132), grid_wide=True) == ""
    assert "runs on that architecture only" in gpu_problem(hopper_only, PresentGPU("NVIDIA B200", "sm_100", 148), True)


def test_cuda_means_the_present_gpus_architecture(monkeypatch):
    """A Hopper GPU's in its arch-specific form (sm_90a: the wgmma GEMM), which the schedules,
    calibrations and tuning logs know as sm_90."""
    monkeypatch.setattr(gpu_module, "present_gpu", lambda: PresentGPU("NVIDIA A100", "sm_80", 108))
    assert target_arch(as_target("cuda")) == "sm_80"
    monkeypatch.setattr(gpu_module, "present_gpu", lambda: PresentGPU("NVIDIA H200", "sm_90", 132))
    assert str(as_target("cuda").attrs["arch"]) == "sm_90a" and target_arch(as_target("cuda")) == "sm_90"
    monkeypatch.setattr(gpu_module, "present_gpu", lambda: None)
    assert target_arch(as_target("cuda")) == "sm_90"


def test_the_measured_compile_also_times_spilling_picks_with_shared_fragments():
    """A 16-bit tensor-core candidate whose registers (with the exchange's loads in flight) pass
    the thread's cap is timed beside its variant with A fragments in shared memory (the model does
    not price spills); one within the cap, or an FMA config, gets none."""
    from persist_rnn.schedule.planner import _ranked, to_measure

    gpu = gpu_model("sm_90")
    spec = CellSpec("lstm", 1280, 1280, dtype="float16")
    ranked = _ranked(spec, gpu, 32, False, "fp32")[1]
    plain = to_measure(ranked, 5, spec)
    timed = to_measure(ranked, 5, spec, gpu)
    extra = [c for c in timed if c not in plain]
    assert [c.smem_runs for c in extra] == [10] and extra[0].tile_units == 10 and not problems_on(spec, extra[0], gpu)
    small = CellSpec("gru", 512, 512, linear_before_reset=True, dtype="float16")
    assert to_measure(_ranked(small, gpu, 32, False, "fp32")[1], 5, small, gpu) == to_measure(
        _ranked(small, gpu, 32, False, "fp32")[1], 5, small)


def test_the_measured_compile_times_shared_fragments_the_space_offers_only_without_them():
    """LSTM H=1280 B=64 fp16 has tensor-core configs that fit in registers, so the space leaves
    out those that fit only with fragments in shared memory; a compile on a GPU times the model's
    best of them beside its candidates (the grid batch tiles of 32 rows that ran the layer 1.32x
    faster on the H200), and LSTM H=2048, whose space is all such configs, gets one more of them."""
    from persist_rnn.schedule.planner import _ranked, measured_candidates, to_measure

    spec = CellSpec("lstm", 1280, 1280, dtype="float16")
    ranked = _ranked(spec, H100, 64, False, "fp32")[1]
    extra = [c for c in measured_candidates(spec, H100, 64, ranked, 5, "fp32", False)
             if c not in to_measure(ranked, 5, spec, H100)]
    assert extra[0] == Config(20, 32, 16, 32, "float16", batch_tile=32, smem_runs=14, mma_k_split=2)
    assert extra[0] not in [c for _, c in ranked] and not problems_on(spec, extra[0], H100)
    large = CellSpec("lstm", 2048, 2048, dtype="float16")
    ranked = _ranked(large, H100, 16, False, "fp32")[1]
    timed = measured_candidates(large, H100, 16, ranked, 5, "fp32", False)
    fits = [c for c in shared_fragment_fits(large, H100, 16) if c not in to_measure(ranked, 5, large, H100)]
    assert rank(large, fits, H100, 16)[0][1] in timed and len(set(timed)) == len(timed)
    assert all(c.smem_runs for c in timed if c.tensor_cores())


def test_the_measured_compile_times_shared_fragments_also_with_as_many_k_tiles_as_shared_memory_holds():
    """The register estimate that gives a config the fewest k-tiles of A fragments in shared memory
    misses some spills, so a compile on a GPU times each such candidate also with the most that
    shared memory holds. LSTM H=1280 B=64 fp16: grid batch tiles of 32 rows with 25 of 40 k-tiles
    there, whose layer ran 0.98x cuDNN's best (0.74x with 14, docs/data/offgrid-heldout-h200.jsonl
    run O), and the pick's variant with 20 of 20 (1.24x faster than 10 kernel alone,
    docs/data/fullest-shared-fragments-h200.jsonl)."""
    from persist_rnn.schedule.planner import _ranked, measured_candidates
    from persist_rnn.schedule.space import fullest_shared_fragments

    spec = CellSpec("lstm", 1280, 1280, dtype="float16")
    timed = measured_candidates(spec, H100, 64, _ranked(spec, H100, 64, False, "fp32")[1], 5, "fp32", False)
    most = Config(20, 32, 16, 32, "float16", batch_tile=32, smem_runs=25, mma_k_split=2)
    assert most in timed and Config(10, 32, 16, 32, "float16", smem_runs=20, mma_k_split=4) in timed
    assert all(fullest_shared_fragments(spec, c, H100) in timed + [None] for c in timed)
    assert fullest_shared_fragments(spec, most, H100) is None  # shared memory holds no more
    assert problems_on(spec, dataclasses.replace(most, smem_runs=26), H100)
    assert fullest_shared_fragments(spec, Config(10, 32, 16, 32, "float16", mma_k_split=4), H100) is None


def test_the_measured_compile_times_the_best_config_of_each_way_the_ctas_meet():
    """The model's first two tensor-core picks for LSTM H=512 B=32 fp16 are grid batch tiles; its
    best cluster batch tile, which ran 1.09-1.10x faster kernel alone on the H200
    (docs/data/meeting-kinds-h200.jsonl), is timed beside them, and no kind twice."""
    from persist_rnn.schedule.planner import TENSOR_CORE_CANDIDATES, _ranked, to_measure

    spec = CellSpec("lstm", 512, 512, dtype="float16")
    ranked = _ranked(spec, H100, 32, False, "fp32")[1]
    first = [c for _, c in ranked if c.tensor_cores()][:TENSOR_CORE_CANDIDATES]
    assert {c.barrier(spec) for c in first} == {"grid"}
    timed = [c for c in to_measure(ranked, 5, spec, H100) if c.tensor_cores()]
    cluster = Config(32, 32, 16, 8, "float16", cluster=True, batch_tile=8, mma_k_split=1)
    assert [c for c in timed if c not in first] == [cluster]


def test_shared_fragments_free_registers_for_one_turn_of_loads_or_none():
    """The registers A fragments in shared memory free go to the 16-bit exchange's loads of h only
    where every vector then fits one turn within the estimate; else the loads stay as many as
    without the fragments (more of them spilled: GRU H=2048 B=16 fp16, ptxas)."""
    from tir_templates.persistent.h16_exchange import h16_vectors, vectors_in_flight
    from tir_templates.persistent.layout import Layout

    gru640 = CellSpec("gru", 640, 640, linear_before_reset=True, dtype="float16")
    tile = Config(40, 32, 16, 32, "float16", cluster=True, batch_tile=32, mma_k_split=2)
    loads = {k: vectors_in_flight(Layout(gru640, dataclasses.replace(tile, smem_runs=k))) for k in (0, 14, 15)}
    assert loads == {0: 4, 14: 4, 15: 5} and h16_vectors(Layout(gru640, tile)) == 5
    gru2048 = CellSpec("gru", 2048, 2048, linear_before_reset=True, dtype="float16")
    grid = Config(16, 32, 16, 16, "float16", mma_k_split=4)
    assert [vectors_in_flight(Layout(gru2048, dataclasses.replace(grid, smem_runs=k))) for k in (0, 8, 17)] == [4, 4, 11]


@pytest.mark.parametrize("cell,hidden,batch,smem_runs", [
    # four n-tiles: as many k-tiles as shared memory holds (FULLEST_N_TILES; 12 ran 1.39x its pick
    # before, 14 0.998x 12's; LSTM H=1280 B=32 20 of 20, 1.13x its 10, fullest-shared-fragments-h200.jsonl)
    ("gru", 1280, 64, 14),
    ("gru", 640, 128, 0),  # grid tiles of 32 rows, within the cap (its cluster tiles took 15 k-tiles)
    ("lstm", 1536, 16, 6),  # two n-tiles, 32 registers past the cap
    # one n-tile, and stamped halves' words in flight: 10 and 8 k-tiles there, 1.16x and 1.12x the
    # barrier picks of 8 and none kernel alone (bf16; docs/data/stamped-halves-h200.jsonl, run C)
    ("gru", 2048, 4, 10),
    ("gru", 2048, 2, 8),
    ("lstm", 1536, 8, 0),  # one n-tile, 12 past
    ("lstm", 768, 32, 0),  # within the cap
])
def test_measure_off_takes_shared_fragments_only_where_they_paid(cell, hidden, batch, smem_runs):
    """Without measurements a spilling 16-bit pick becomes its shared-fragments variant where the
    variant ran faster on the H200 (`space.unmeasured_variant`: two or more n-tiles, or a large
    overflow; from four n-tiles with as many k-tiles there as shared memory holds), and stays as it
    is where it ran slower."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype="float16")
    pick = choose(spec, tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), batch, measure=False).config
    assert pick.f16_mma() and pick.smem_runs == smem_runs


def _shared_beside_timings():
    """Each layer timed with its measure-off pick beside a shared-fragments config offered beside
    configs that fit (lstm2048-shared-fragments-h200.jsonl, runs E, H, I and J): (cell, hidden, batch,
    precision, the faster config, the slower one, their steps in us)."""
    rows = [r for r in _data_rows("lstm2048-shared-fragments-h200.jsonl") if r.get("run") in ("E", "H", "I", "J")]
    pairs = [(r, r["new"], r["new_us"], r["old"], r["old_us"]) for r in rows if r["part"] == "kernel_ab"]
    probes = [r for r in rows if r["part"] == "probe"]
    pairs += [(r, r["config"], r["us"], o["config"], o["us"]) for r in probes if r["pick"] for o in probes
              if not o["pick"] and (o["cell"], o["hidden"], o["batch"]) == (r["cell"], r["hidden"], r["batch"])]
    return [(r["cell"], r["hidden"], r["batch"], r["precision"], *((a, b, a_us, b_us) if a_us < b_us else (b, a, b_us, a_us)))
            for r, a, a_us, b, b_us in pairs]


@pytest.mark.parametrize("cell,hidden,batch,precision,faster,slower,faster_us,slower_us", _shared_beside_timings(),
                         ids=lambda v: str(v) if not isinstance(v, (dict, float)) else "")
def test_measure_off_takes_shared_fragments_beside_configs_that_fit_where_they_ran_faster(
        cell, hidden, batch, precision, faster, slower, faster_us, slower_us):
    """Without measurements a 16-bit tensor-core pick gives way to the model's best config with A
    fragments in shared memory of those offered beside configs that fit, where priced at most the
    pick and fewer than SHARED_BESIDE_PADDING of its 16-row tiles' rows are zero
    (`planner.shared_fragments_lead`). On each of the 28 layers timed both ways on the H200 the
    measure-off compile takes the faster: the shared-fragments config on 24 (1.16-2.11x), the pick
    on four GRU layers whose shared-fragments configs pad 5-14 of 80 rows (0.70-0.95x). Its k-tiles
    in shared memory are as many as then or more (`SHARED_BESIDE_FULLEST_N_TILES`)."""
    from persist_rnn.bench.torch_layers import PRECISIONS

    build_precision, dtype, _ = PRECISIONS[precision]
    spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=dtype)
    pick, want = choose(spec, TARGET, batch, measure=False, precision=build_precision).config, Config.from_dict(faster)
    assert dataclasses.replace(pick, smem_runs=0) == dataclasses.replace(want, smem_runs=0), (pick, faster_us, slower_us)
    assert pick.smem_runs >= want.smem_runs
    assert len(_shared_beside_timings()) == 28


def test_a_shared_fragments_lead_of_two_n_tiles_takes_what_shared_memory_holds():
    """Kernel alone on the H200, the shared-fragments lead with the fewest k-tiles that fit against
    it with as many as shared memory holds (docs/data/fullest-shared-fragments-h200.jsonl, runs D
    and E): from two n-tiles a chunk the fullest ran faster on 19 of 23 layers (geomean 1.12x), with
    one on neither of 2. The measure-off pick is the fullest from two n-tiles, the lead with one."""
    from persist_rnn.bench.torch_layers import PRECISIONS
    from persist_rnn.schedule.planner import SHARED_BESIDE_FULLEST_N_TILES

    rows = [r for r in _data_rows("fullest-shared-fragments-h200.jsonl") if r.get("part") == "lead_ab"]
    wide = [r["lead_us"] / r["fullest_us"] for r in rows if r["n_tiles"] >= SHARED_BESIDE_FULLEST_N_TILES]
    narrow = [r["lead_us"] / r["fullest_us"] for r in rows if r["n_tiles"] < SHARED_BESIDE_FULLEST_N_TILES]
    assert (len(wide), sum(x > 1 for x in wide), len(narrow), sum(x > 1 for x in narrow)) == (23, 19, 2, 0)
    assert float(np.exp(np.mean(np.log(wide)))) > 1.1
    for r in rows:
        build_precision, dtype, _ = PRECISIONS[r["precision"]]
        spec = CellSpec(r["cell"].lower(), r["hidden"], r["hidden"], linear_before_reset=r["cell"] == "GRU", dtype=dtype)
        pick = choose(spec, TARGET, r["batch"], measure=False, precision=build_precision).config
        assert pick == Config.from_dict(r["fullest"] if r["n_tiles"] >= 2 else r["lead"]), r


def test_the_model_prices_padded_gru_shared_fragment_tiles_short():
    """The premise of `planner.SHARED_BESIDE_PADDING`: of the GRU shared-fragments configs in batch
    tiles timed in the sweeps, those whose 16-row tiles hold zero rows ran longer against their
    price than those without (0.68x against 0.58x, geomean). A model that priced the padding would
    need the bound weighed again."""
    from persist_rnn.bench.torch_layers import PRECISIONS
    from persist_rnn.schedule.planner import SHARED_BESIDE_PADDING

    ratios = {True: [], False: []}
    for name in ("sweep-shared-fragments-h200.jsonl", "tc-shared-fragments-h200.jsonl",
                 "fullest-shared-fragments-h200.jsonl"):
        for r in _data_rows(name):
            if r.get("cell", "").upper() != "GRU" or r.get("precision", "fp16") not in PRECISIONS:
                continue
            spec = CellSpec("gru", r["hidden"], r["hidden"], linear_before_reset=True,
                            dtype=PRECISIONS[r.get("precision", "fp16")][1])
            timed = [(r["config"], r["us"])] if "config" in r and "us" in r else []
            timed += [(r[k], r[k + "_us"]) for k in ("new", "old") if isinstance(r.get(k), dict) and r.get(k + "_us")]
            for config, us in timed:
                cfg = Config.from_dict(config)
                if cfg.tensor_cores() and cfg.smem_runs and cfg.batch_tile:
                    padded = cfg.row_tiles(spec) * 16 > cfg.row_gates(spec) * cfg.tile_units
                    ratios[padded].append(us / step_us(spec, cfg, H100, r["batch"]))
    geomean = {k: float(np.exp(np.mean(np.log(v)))) for k, v in ratios.items()}
    assert (len(ratios[True]), len(ratios[False])) == (33, 21)
    assert geomean[True] > 1.15 * geomean[False] and SHARED_BESIDE_PADDING < 0.1, geomean


def test_shared_fragments_beside_configs_that_fit_stay_off_gpus_not_timed_with_them():
    """On sm_80 the measure-off pick of LSTM H=1280 B=64 fp16 keeps its kind: the rule that moves
    it on sm_90 (`planner.SHARED_BESIDE_ARCHS`) was timed on the H200 only. A bucket of a symbolic
    batch takes what a static build of its bound takes."""
    from persist_rnn.schedule.planner import _ranked, model_pick, shared_fragments_lead

    spec = CellSpec("lstm", 1280, 1280, dtype="float16")
    for arch, moves in (("sm_80", False), ("sm_90", True)):
        gpu = gpu_model(arch)
        fitting, ranked = _ranked(spec, gpu, 64, False, "fp32")
        lead = shared_fragments_lead(spec, gpu, 64, fitting, ranked, model_pick(spec, ranked, gpu, 64), "fp32", False)
        assert (lead is not None) == moves, arch
    static, bucket = (choose(spec, TARGET, 64, measure=False, bucket=b).config for b in (False, True))
    assert static.batch_tile and static.smem_runs == 25 and bucket == static


@pytest.mark.parametrize("cell,hidden,dtype", [("gru", 1024, "float32"), ("lstm", 1280, "float16")])
def test_a_symbolic_batchs_last_bucket_runs_every_larger_batch(cell, hidden, dtype, tmp_path):
    """Batch tiles of a grid add CTAs with the batch, and a grid barrier needs them all resident:
    GRU H=1024 fp32's config for B=64 (tiles of 32 rows, 64 CTAs each) would launch 448 CTAs at
    B=200. Such a config serves its own bucket only, and one more, planned at twice the last bound
    without them, takes every larger batch; its log record is kept apart from a static build's."""
    from persist_rnn.schedule.space import bounded_by_batch

    spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype=dtype)
    log = str(tmp_path / "t.jsonl")
    plan = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=False)
    *bounded, last = plan.buckets
    assert last["max_batch"] is None and not bounded_by_batch(spec, Config.from_dict(last["config"]))
    assert bounded[-1]["max_batch"] == 64 and bounded_by_batch(spec, Config.from_dict(bounded[-1]["config"]))
    for b in bounded:  # each bucket's CTAs at its bound fit the GPU at once
        cfg = Config.from_dict(b["config"])
        tiles = -(-b["max_batch"] // cfg.batch_tile) if cfg.batch_tile else 1
        assert cfg.num_ctas(spec) * tiles <= H100.num_sms, b
    open_ended = [r for r in tuning_log.read(log) if r.workload.get("open_ended")]
    assert [r.workload["batch"] for r in open_ended] == [128] and open_ended[0].config.as_dict() == last["config"]
    # a static build at B=128 does not take the open-ended record, nor the open-ended bucket a static one
    static = choose(spec, TARGET, 128, tuning_log_path=log, measure=False)
    assert static.source == "cost_model"
    tuning_log.append(log, tuning_log.Record(tuning_log.workload(spec, 128, "sm_90"), _grid_batch_tiles_config(spec),
                                             1.0, "measured"))
    again = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=False)
    assert again.buckets[-1]["config"] == last["config"] and again.buckets[-1]["source"] == "tuning_log"
    # an open-ended record that holds the B=64 bucket's grid tiles (a log edited by hand) is not taken
    tiled = Config.from_dict(bounded[-1]["config"])
    tuning_log.append(log, tuning_log.Record(tuning_log.workload(spec, 128, "sm_90", open_ended=True), tiled, 0.5,
                                             "measured"))
    assert tuning_log.lookup(log, tuning_log.workload(spec, 128, "sm_90", open_ended=True)).config == tiled
    third = plan_layer(spec, TARGET, batch=None, tuning_log_path=log, measure=False)
    assert third.buckets[-1]["config"] == last["config"] and third.buckets[-1]["source"] == "cost_model"


def _grid_batch_tiles_config(spec):
    """A config of `spec` in batch tiles of a grid (16 rows, 64 CTAs a tile)."""
    return Config(spec.hidden_size // 64, 32, 16, 16, batch_tile=16, mma_k_split=4)


def test_a_chained_mma_is_priced_as_its_scheduler_hides_it():
    """The chain term: a warp's chained mma, divided by the square of the warps its scheduler
    holds. Doubling LSTM H=768 B=16 fp16's column splits halves each warp's chain and doubles the
    warps; the model now takes 4 splits (2.26 against 2.47 us a step kernel alone on the H200,
    docs/data/ksplit-h200.jsonl). Of that file's 29 pairs of column splits it ranks 26 right."""
    from persist_rnn.bench.torch_layers import PRECISIONS

    spec = CellSpec("lstm", 768, 768, dtype="float16")
    pick = choose(spec, TARGET, 16, measure=False, precision="fp16").config
    assert pick.mma_k_split == 4, pick
    two, four = (dataclasses.replace(pick, mma_k_split=k) for k in (2, 4))
    f2, f4 = features(spec, two, H100, 16), features(spec, four, H100, 16)
    warps = lambda c: c.threads(spec) / 32  # noqa: E731
    assert warps(four) == 2 * warps(two) and f4["mma_chain"] < f2["mma_chain"] / 2
    assert H100.weights["mma_chain"] > 0
    rows = _data_rows("ksplit-h200.jsonl")
    timed = [r for r in rows if r.get("part") == "probe"]
    assert len(timed) == 32
    layers = {}
    for r in timed:
        layers.setdefault((r["cell"], r["hidden"], r["batch"], r["precision"]), []).append(r)
    right = total = 0
    for (cell, hidden, batch, precision), rs in layers.items():
        s = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU", dtype=PRECISIONS[precision][1])
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                ca, cb = Config.from_dict(a["config"]), Config.from_dict(b["config"])
                total += 1
                right += (step_us(s, ca, H100, batch) <= step_us(s, cb, H100, batch)) == (a["us"] <= b["us"])
    assert total == 29 and right >= 26, (right, total)  # 24 without the chain term


def test_an_fma_warp_of_few_sums_is_priced_at_the_scheduler_that_holds_the_most_warps():
    """An FMA-unit warp that keeps at most SCHEDULER_MAX_SUMS sums (rows x batch rows of its chunk)
    is priced at the scheduler holding the most warps: six warps cost as much issue as eight. GRU
    H=1024 B=1 fp32 picked 32 lanes x 4 rows (six warps: two schedulers hold two) at 1.24 us a step
    where 32 lanes x 3 rows (eight warps) runs 1.03, kernel alone on the H200
    (docs/data/b1-step-h200.jsonl); the model now takes the latter, and each of that file's seven
    layers' picks among its timed configs is within 1.15x of the fastest (GRU H=1024 was at
    1.20x). At B=10 (40 sums a warp) the six warps stay priced at the mean and stay the pick:
    4.90 us a step, where pricing them at two a scheduler moved the pick to 6.65
    (docs/data/scheduler-warps-h200.jsonl)."""
    from persist_rnn.schedule.cost_model import SCHEDULER_MAX_SUMS

    gru = CellSpec("gru", 1024, 1024, linear_before_reset=True)
    six = Config(8, 32, 4, 1, stamped=True)
    assert six.threads(gru) == 192 and features(gru, six, H100, 1)["fma_issue"] == 2 * 128
    pick = choose(gru, TARGET, 1, measure=False).config
    assert (pick.group_size, pick.rows_per_group, pick.threads(gru)) == (32, 3, 256), pick
    at_ten = choose(gru, TARGET, 10, measure=False).config
    assert at_ten.rows_per_group * at_ten.batch_chunk > SCHEDULER_MAX_SUMS
    assert (at_ten.group_size, at_ten.rows_per_group, at_ten.smem_runs, at_ten.threads(gru)) == (32, 4, 0, 192), at_ten
    rows = _data_rows("b1-step-h200.jsonl")
    layers = {}
    for r in rows:
        if r["part"] == "config":
            layers.setdefault((r["cell"], r["hidden"]), []).append(r)
    assert len(layers) == 7
    for (cell, hidden), rs in layers.items():
        spec = CellSpec(cell.lower(), hidden, hidden, linear_before_reset=cell == "GRU")
        picked = min(rs, key=lambda r: step_us(spec, Config.from_dict(r["config"]), H100, 1))
        assert picked["measured_us"] <= 1.15 * min(r["measured_us"] for r in rs), (cell, hidden, picked)


@pytest.mark.parametrize("cell,hidden,batch,dtype,ks,smem_runs", [
    ("lstm", 2048, 128, "float16", 2, 33),  # 31.8 us a step against the GEMM scan's 53.4
    ("gru", 2048, 128, "bfloat16", 4, 17),  # 33.6 against 66.5
])
def test_deep_chunks_run_the_tensor_cores_where_four_passes_fit_none(cell, hidden, batch, dtype, ks, smem_runs):
    """Where no tensor-core config of at most MAX_PASSES chunks fits (a chunk of 32 rows' fp32 copy
    of h alone passes shared memory at H=2048), chunks of 16 rows in 8 passes with shared fragments
    (`space._deep_chunks`) take the layer from the GEMM scan: kernel alone on the H200 1.68x and
    1.98x its step; LSTM H=2048 B=128 fp16 whole 6.26 -> 4.09 ms (docs/data/deep-chunks-h200.jsonl).
    At B=64 four passes fit, and the space holds no deeper chunk."""
    from persist_rnn.schedule.space import MAX_PASSES, candidate_configs

    spec = CellSpec(cell, hidden, hidden, linear_before_reset=cell == "gru", dtype=dtype)
    plan = choose(spec, TARGET, batch, measure=False)
    assert plan.lowering == "" and plan.config is not None, plan.reason
    pick = plan.config
    assert pick.f16_mma() and (pick.batch_chunk, pick.mma_k_split, pick.smem_runs) == (16, ks, smem_runs), pick
    assert -(-batch // pick.batch_chunk) > MAX_PASSES
    assert all(-(-64 // c.batch_chunk) <= MAX_PASSES for c in candidate_configs(spec, H100, 64))
