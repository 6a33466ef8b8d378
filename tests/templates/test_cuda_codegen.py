"""Generated CUDA compiles with nvcc for sm_80 and sm_90 over a grid of configs, without spills.

No GPU is needed: TVM emits the CUDA source, and nvcc (the CUDA toolkit of this machine) compiles
it to a cubin with ptxas statistics, which must show no local-memory spills for the configs the
planner picks.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import shutil
import subprocess

import pytest
import tvm

from persist_rnn.schedule.calibrate import barrier_kernel, most_at_once, residency_kernel
from persist_rnn.schedule.cost_model import prices_tensor_cores, rank
from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.planner import plan_layer
from persist_rnn.schedule.space import candidate_configs
from tir_templates.config import Config
from tir_templates.persistent import persistent_kernel
from tir_templates.projection import TILES, projection_kernel
from tir_templates.reference import reference_scan
from tir_templates.spec import CellSpec

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def cuda_source(func, arch):
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target)
    return lib.mod.imports[0].inspect_source()


def nvcc_stats(source, arch, tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(source)
    res = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    spills = [int(m) for m in re.findall(r"(\d+) bytes spill stores", res.stderr)]
    return spills


WORKLOADS = [("lstm", 512, 10, "float32"), ("gru", 256, 20, "float32"), ("lstm", 64, 1, "float32"),
             ("rnn", 128, 5, "float32"), ("lstm", 512, 1, "float16"), ("lstm", 128, 1, "float16")]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("cell,hidden,batch,dtype", WORKLOADS, ids=lambda v: str(v))
def test_planned_kernel_compiles_without_spills(cell, hidden, batch, dtype, arch, tmp_path):
    """The planner's register estimate keeps its picks spill-free (fp16 weights too: one register
    each, as ptxas allocates them)."""
    spec = CellSpec(cell, hidden, hidden, "bidirectional" if cell == "rnn" else "forward", dtype=dtype,
                    linear_before_reset=(cell == "gru"), peepholes=(cell == "lstm" and hidden == 64))
    plan = plan_layer(spec, tvm.target.Target({"kind": "cuda", "arch": arch}), batch=batch, measure=False)
    assert plan.kernel is not None, plan.reason
    source = cuda_source(plan.kernel, arch)
    kind = plan.config.barrier(spec)
    assert ("prnn_grid_barrier" in source) == (kind == "grid")
    assert ("barrier.cluster.arrive" in source) == (kind == "cluster")
    assert nvcc_stats(source, arch, tmp_path) and max(nvcc_stats(source, arch, tmp_path)) == 0


def test_hidden_2048_fp16_compiles_without_spills(tmp_path):
    """The H100's largest persistent layer, fp16 LSTM H=2048 (32 MiB of weights): the planner's
    pick keeps part of each lane's weights in shared memory and ptxas spills nothing."""
    spec = CellSpec("lstm", 64, 2048, dtype="float16")
    plan = plan_layer(spec, tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), batch=1, measure=False)
    assert plan.kernel is not None and plan.config.smem_runs > 0, plan.reason
    assert max(nvcc_stats(cuda_source(plan.kernel, "sm_90"), "sm_90", tmp_path)) == 0


@pytest.mark.parametrize("cfg", [Config(8, 32, 4, 10), Config(8, 8, 1, 5), Config(4, 16, 2, 1, "float16")],
                         ids=lambda c: str(c.as_dict()))
def test_config_grid_compiles(cfg, tmp_path):
    spec = CellSpec("lstm", 1024, 1024, dtype="float16" if cfg.weight_dtype == "float16" else "float32")
    for arch in ("sm_80", "sm_90"):
        nvcc_stats(cuda_source(persistent_kernel(spec, cfg), arch), arch, tmp_path)


@pytest.mark.parametrize("cell,hidden,batch,arches", [("lstm", 1024, 20, ("sm_90",)), ("lstm", 256, 10, ("sm_80", "sm_90")),
                                                      ("gru", 64, 1, ("sm_80", "sm_90")), ("gru", 1024, 20, ("sm_90",))],
                         ids=str)
def test_tensor_core_configs_compile(cell, hidden, batch, arches, tmp_path):
    """The model's best tensor-core config in one grid: mma.sync with TF32 operands, no spills
    (H=1024's 128 CTAs exceed the A100's SMs; GRU's 24 rows a CTA pad their second row tile);
    without a GPU to measure, the planner picks the model's first config where the calibration
    prices tensor cores (the H100's), else keeps to the FMA units. At H=1024 B=20 the model's
    first config is in batch tiles of a grid, and its best in one grid has 8 column splits (512
    threads, 128 registers each) since the chain term: there ptxas spills 40-72 bytes of
    3xTF32's split operands, which `Config.live_registers` allows (LSTM H=1024 B=20 fp32's pick
    ran 1.02x the 4-split config's speed kernel alone, docs/data/chain-term-h200.jsonl)."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    for arch in arches:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        gpu = gpu_model(arch)
        ranked = rank(spec, _verified(spec, candidate_configs(spec, gpu, batch)), gpu, batch)
        cfg = next(c for _, c in ranked if c.tensor_cores() and not c.batch_tile)
        source = cuda_source(plan_layer(spec, target, batch=batch, config=cfg).kernel, arch)
        assert source.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 1  # the helper
        assert max(nvcc_stats(source, arch, tmp_path)) <= (128 if cfg.mma_k_split >= 8 else 0), cfg
        _assert_the_model_alone_picks(spec, target, gpu, batch, ranked)


def test_too_large_for_the_chip_says_why(tmp_path):
    """fp32 LSTM H=1024 needs 128 CTAs of 8 units in registers: the A100's 108 SMs cannot hold
    them; with part of the weights in shared memory 64 CTAs can. fp16 bidirectional H=1024 fits
    the A100 only with part of its tensor-core fragments in shared memory, and compiles for sm_80;
    H=1536 fits its registers and shared memory in no way: it reads the rest from global memory,
    and the report names what pruned the tensor-core configs."""
    spec = CellSpec("lstm", 1024, 1024)
    a100 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    plan = plan_layer(spec, a100, batch=10, measure=False)
    assert plan.config.smem_runs > 0 and plan.config.num_ctas(spec) <= 108
    assert max(nvcc_stats(cuda_source(plan.kernel, "sm_80"), "sm_80", tmp_path)) == 0
    plan = plan_layer(spec, tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), batch=10, measure=False)
    assert plan.kernel is not None and plan.config.smem_runs == 0
    fp16 = CellSpec("lstm", 1024, 1024, "bidirectional", dtype="float16")
    plan = plan_layer(fp16, a100, batch=10, measure=False)
    assert plan.config.f16_mma() and plan.config.smem_runs > 0 and not plan.config.global_runs
    nvcc_stats(cuda_source(plan.kernel, "sm_80"), "sm_80", tmp_path)
    fp16 = CellSpec("lstm", 1536, 1536, "bidirectional", dtype="float16")
    plan = plan_layer(fp16, a100, batch=10, measure=False)
    assert plan.kernel is not None and plan.config.global_runs > 0, plan.reason
    assert "no tensor-core config runs this layer" in plan.reason and "shared memory" in plan.reason


def test_reference_scan_compiles_for_cuda(tmp_path):
    spec = CellSpec("gru", 16, 32, "bidirectional", linear_before_reset=False)
    nvcc_stats(cuda_source(reference_scan(spec, "cuda"), "sm_80"), "sm_80", tmp_path)


def test_gpu_model_has_shipped_calibrations():
    assert gpu_model("sm_90").num_sms == 132 and gpu_model("sm_80").num_sms == 108


@pytest.mark.parametrize("hidden,batch", [(256, 10), (64, 1)], ids=["grid", "one-cta"])
def test_gru_reset_before_compiles(hidden, batch, tmp_path):
    """GRU linear_before_reset=0 is persistent by default (its kernels passed on the H100); the
    model's best config of each variant (two barriers, partial sums) compiles without spills for
    both arches."""
    spec = CellSpec("gru", hidden, hidden, linear_before_reset=False)
    for arch in ("sm_80", "sm_90"):
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        assert plan_layer(spec, target, batch=batch, measure=False).kernel is not None
        gpu = gpu_model(arch)
        ranked = rank(spec, candidate_configs(spec, gpu, batch), gpu, batch)
        for barriers in (2, 1):
            cfg = next(c for _, c in ranked if c.gru_barriers == barriers)
            plan = plan_layer(spec, target, batch=batch, config=cfg)
            source = cuda_source(plan.kernel, arch)
            assert ("prnn_grid_barrier" in source) == (cfg.barrier(spec) == "grid")
            assert max(nvcc_stats(source, arch, tmp_path)) == 0, cfg


def test_calibration_barrier_kernels_compile(tmp_path):
    """The kernels `persist-rnn calibrate` times: the persistent kernels' grid barrier, and the
    cluster barrier, nothing else."""
    source = cuda_source(barrier_kernel(132, steps=10), "sm_90")
    assert "red.release.gpu.global.add.u32" in source and "ld.acquire.gpu.global.u32" in source
    nvcc_stats(source, "sm_90", tmp_path)
    source = cuda_source(barrier_kernel(8, steps=10, cluster=True), "sm_90")
    assert "barrier.cluster.arrive" in source and "barrier.cluster.wait" in source
    nvcc_stats(source, "sm_90", tmp_path)


def test_residency_kernel_holds_an_sm_a_cta_and_stamps_its_clusters_runs(tmp_path):
    """The kernel whose clusters' overlap `persist-rnn calibrate` counts (`resident_clusters`):
    clusters of 16 CTAs, each with more than half an SM's shared memory, spinning on the global
    timer, rank 0 writing when its cluster ran."""
    source = cuda_source(residency_kernel(16, 17), "sm_90")
    assert "%globaltimer" in source and "barrier.cluster.arrive" in source
    assert "extern __shared__" in source  # dynamic shared memory, its size set at launch
    nvcc_stats(source, "sm_90", tmp_path)


def test_most_at_once_counts_overlapping_runs():
    """Seven clusters at once, then the eighth as the first ends; an end at a start's time first."""
    first = [(10 + k, 100 + k) for k in range(7)]
    assert most_at_once(first + [(100, 190)]) == 7
    assert most_at_once(first + [(99, 190)]) == 8
    assert most_at_once([]) == 0 and most_at_once([(0, 5), (5, 9)]) == 1


@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 64, 10), ("gru", 128, 20)], ids=str)
def test_cluster_configs_compile(cell, hidden, batch, tmp_path):
    """A direction's CTAs as one thread-block cluster (Hopper only): the model's best cluster
    config compiles without spills, and an A100 target refuses it with the reason."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    gpu = gpu_model("sm_90")
    cfg = next(c for _, c in rank(spec, candidate_configs(spec, gpu, batch), gpu, batch)
               if c.cluster and not c.tensor_cores())
    source = cuda_source(plan_layer(spec, target, batch=batch, config=cfg).kernel, "sm_90")
    assert "barrier.cluster.arrive" in source and "prnn_grid_barrier" not in source
    assert max(nvcc_stats(source, "sm_90", tmp_path)) == 0
    a100 = plan_layer(spec, tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), batch=batch, config=cfg)
    assert a100.kernel is None and "no thread-block clusters" in a100.reason


@pytest.mark.parametrize("cell,hidden,cfg", [
    ("lstm", 256, Config(32, 4, 2, 1, cluster=True, dsmem=True)),
    ("gru", 256, Config(32, 8, 4, 2, cluster=True, batch_tile=2, dsmem=True)),
    ("rnn", 512, Config(64, 16, 4, 1, cluster=True, dsmem=True)),
    ("lstm", 256, Config(16, 8, 4, 1, cluster=True, dsmem=True)),  # 16 CTAs, the non-portable cluster size
    ("gru", 256, Config(16, 16, 6, 1, "float16", cluster=True, dsmem=True)),
], ids=str)
def test_dsmem_configs_compile(cell, hidden, cfg, tmp_path):
    """h through distributed shared memory: st.async stores counted by an mbarrier, no cluster
    barrier inside the step loop (one after init, and the chunked path's), no spills at sm_90."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    source = cuda_source(persistent_kernel(spec, cfg), "sm_90")
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes" in source
    assert "prnn_dsmem_wait(" in source and "prnn_grid_barrier" not in source
    assert max(nvcc_stats(source, "sm_90", tmp_path)) == 0


@pytest.mark.parametrize("cell,hidden,batch,barrier", [("lstm", 64, 20, "cta"), ("gru", 64, 20, "cta"),
                                                        ("lstm", 256, 10, "cluster"), ("gru", 256, 20, "cluster")],
                         ids=str)
def test_batch_tiles_are_chosen_and_compile(cell, hidden, batch, barrier, tmp_path):
    """The model's choice at H=64: one CTA per batch row (no barrier at all); at H=256: one
    cluster per tile of batch rows, never a grid barrier. The grid size follows the runtime batch."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    plan = plan_layer(spec, target, batch=batch, measure=False)
    assert plan.config.batch_tile > 0 and plan.config.barrier(spec) == barrier
    source = cuda_source(plan.kernel, "sm_90")
    assert "prnn_grid_barrier" not in source and ("barrier.cluster.arrive" in source) == (barrier == "cluster")
    assert max(nvcc_stats(source, "sm_90", tmp_path)) == 0


def test_bidirectional_h1024_fits_with_shared_memory_weights(tmp_path):
    """32 MiB of fp32 LSTM weights: only with part of them in (dynamic) shared memory."""
    spec = CellSpec("lstm", 1024, 1024, "bidirectional")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    plan = plan_layer(spec, target, batch=20, measure=False)
    assert plan.config.smem_runs > 0 and plan.config.shared_bytes(spec) > 48 * 1024
    assert max(nvcc_stats(cuda_source(plan.kernel, "sm_90"), "sm_90", tmp_path)) == 0


@pytest.mark.parametrize("cfg", [Config(32, 4, 2, 1), Config(16, 4, 4, 2, batch_tile=2)], ids=str)
def test_exchange_buffer_loads_are_coherent(cfg, tmp_path):
    """h(t-1) is read where other threads and CTAs wrote it in the same launch: never through a
    read-only view that nvcc may turn into non-coherent ld.global.nc loads (a resident CTA's
    copy went stale that way on the H100). Weights and inputs, read-only, may use them."""
    hidden = cfg.tile_units if cfg.batch_tile else 2 * cfg.tile_units  # a resident CTA, or two behind a grid barrier
    spec = CellSpec("lstm", hidden, hidden)
    source = cuda_source(persistent_kernel(spec, cfg), "sm_90")
    (tmp_path / "k.cu").write_text(source)
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")], check=True,
                   capture_output=True)
    ptx = (tmp_path / "k.ptx").read_text()
    # h comes in coherent float4 loads; the only non-coherent ones are the weights' (one per run of 4)
    assert "ld.global.v4" in ptx and ptx.count("ld.global.nc.v4") == cfg.weight_regs(spec) // 4


@pytest.mark.parametrize("K,N,tile,arch", [(1024, 4096, (128, 128, 8), "sm_90"), (64, 192, (64, 64, 8), "sm_90"),
                                          (6, 18, (128, 128, 8), "sm_90"), (1024, 4096, (64, 64, 4), "sm_90"),
                                          (64, 256, (64, 64, 4), "sm_80"), (256, 768, None, "sm_90"),
                                          (1024, 4096, (64, 64, 4, 64), "sm_90"), (256, 768, (32, 32, 4, 64), "sm_80")],
                         ids=str)
def test_projection_kernel_compiles_without_spills(K, N, tile, arch, tmp_path):
    """The tiled GEMM: float4 loads where K and N allow them, its accumulators (8 x 8 or 4 x 4) in
    registers; the early launch's trigger compiles for sm_80 too (to nothing)."""
    source = cuda_source(projection_kernel(K, N, tile), arch)
    assert ("*(float4*)(x_ptr" in source) == (K % 4 == 0)  # global loads of x; shared reads are float4 always
    assert "griddepcontrol.launch_dependents" in source
    assert max(nvcc_stats(source, arch, tmp_path)) == 0
    if tile is None:  # rows known only at run time: a kernel per tile, the host picks by M
        assert len(set(re.findall(r"void __launch_bounds__\(\d+\) (\w+)\(", source))) == len(TILES)


@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 1024, 20), ("gru", 256, 10), ("rnn", 64, 1)], ids=str)
def test_tf32_configs_compile_with_a_third_of_the_mmas(cell, hidden, batch, tmp_path):
    """At TF32 (precision="tf32") the model's best tensor-core config issues one mma where its
    3xTF32 twin issues three, rounds h(t-1) with cvt.rna each step and builds without spills."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True)
    gpu = gpu_model("sm_90")
    cfg = next(c for _, c in rank(spec, candidate_configs(spec, gpu, batch, "tf32"), gpu, batch) if c.tf32())
    call = "tvm_builtin_ptx_mma_sync_aligned_m16n8k8_row_col_f32_tf32_tf32_f32(acc"
    tf32 = cuda_source(persistent_kernel(spec, cfg), "sm_90")
    three = cuda_source(persistent_kernel(spec, dataclasses.replace(cfg, mma_precision="3xtf32")), "sm_90")
    assert tf32.count(call) > 0 and three.count(call) == 3 * tf32.count(call)
    assert "cvt.rna.tf32.f32" in tf32
    assert max(nvcc_stats(tf32, "sm_90", tmp_path)) == 0, cfg


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,hidden,batch,arches", [("lstm", 1024, 20, ("sm_90",)), ("gru", 256, 10, ("sm_80", "sm_90")),
                                                      ("rnn", 64, 1, ("sm_90",))], ids=str)
def test_f16_mma_configs_compile(cell, hidden, batch, arches, dtype, tmp_path):
    """A 16-bit layer's best tensor-core config by the model: m16n8k16 mma on fp16 (bf16) pairs,
    one per (k-tile of 16, n-tile) in each copy of the step the kernel has, no spills (RNN H=64
    B=1's fp16 one, one warp per row tile, has 8 bytes of stack at sm_80, not at sm_90: ptxas's,
    at 56 registers); without a GPU to measure, the planner picks the model's first config where
    the calibration prices tensor cores (the H100's), else keeps to the FMA units."""
    spec = CellSpec(cell, hidden, hidden, linear_before_reset=True, dtype=dtype)
    kind = "bf16" if dtype == "bfloat16" else "f16"
    for arch in arches:
        gpu = gpu_model(arch)
        ranked = rank(spec, _verified(spec, candidate_configs(spec, gpu, batch)), gpu, batch)
        cfg = next(c for _, c in ranked if c.f16_mma())
        source = cuda_source(persistent_kernel(spec, cfg), arch)
        calls = source.count(f"tvm_builtin_ptx_mma_sync_aligned_m16n8k16_row_col_f32_{kind}_{kind}_f32(acc")
        assert calls and calls % (cfg.k_tiles_per_warp(spec) * cfg.n_tiles()) == 0, cfg  # per copy of the step
        assert f"cvt.rn.{kind}x2.f32" in source
        assert max(nvcc_stats(source, arch, tmp_path)) == 0, cfg
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        _assert_the_model_alone_picks(spec, target, gpu, batch, ranked)


def _verified(spec, configs):
    """The configs the planner may pick on its own (`checks.unverified_reason`)."""
    from tir_templates.persistent import unverified_reason

    return [c for c in configs if not unverified_reason(spec, c)]


def _assert_the_model_alone_picks(spec, target, gpu, batch, ranked):
    """The planner's pick without measurements: the model's first config where `gpu`'s calibration
    prices tensor cores, else its first FMA-unit config."""
    pick = plan_layer(spec, target, batch=batch, measure=False).config
    priced = prices_tensor_cores(gpu)
    assert pick == next(c for _, c in ranked if priced or not c.tensor_cores())
    assert priced or not pick.tensor_cores()


@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 64, 1), ("gru", 64, 1), ("lstm", 256, 10)], ids=str)
def test_fp16_layers_get_the_fp32_kernel_where_it_fits(cell, hidden, batch):
    """An fp16 layer's weights are exact in fp32, and where registers hold them so the model picks
    the fp32 kernel: the same CUDA, step for step, as the fp32 layer's (issue 20: the fp16 kernel
    took 52 us at LSTM H=64 B=1 on the H100, the fp32 one 36), but for Y, Y_h and an LSTM's Y_c,
    which it stores as half (no cast kernel after it: tir_templates/signature.py), and for an
    LSTM's C, which it keeps in fp32 in its exchange buffer's last slot where the fp32 kernel
    keeps it in Y_c (persistent/cell_state.py)."""
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    fp16, fp32 = (CellSpec(cell, hidden, hidden, linear_before_reset=True, dtype=d) for d in ("float16", "float32"))
    half = plan_layer(fp16, target, batch=batch, measure=False)
    assert half.config.weight_dtype == "float32"
    slot = half.config.cell_state_slot(fp16)
    c_home = (f"(n_b * (int64_t){slot * hidden})", f"+ (int64_t){slot}) * n_b)") if cell == "lstm" else ()

    def kernel(source):  # past cuda_fp16's helpers, TVM's numbering of common subexpressions left out
        return [re.sub(r"cse_v\d+", "cse_v", line) for line in source[source.index('extern "C"'):].splitlines()]

    got, want = kernel(cuda_source(half.kernel, "sm_90")), kernel(cuda_source(plan_layer(fp32, target, batch=batch, measure=False).kernel, "sm_90"))
    diff = [line for line in difflib.unified_diff(want, got, lineterm="", n=0) if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    removed = [line[1:] for line in diff if line[0] == "-" and "main_kernel" not in line]
    added = [line[1:] for line in diff if line[0] == "+" and "main_kernel" not in line]
    result_store = r"\s*(y|yh|yc)_ptr\[.*\] = "
    assert removed and all(re.match(result_store, line) or (cell == "lstm" and re.match(r".* = yc_ptr\[", line))
                           for line in removed), removed[:3]
    for line in added:
        if re.match(result_store, line):
            assert re.match(result_store + r"(\(\(half\)|__float2half_rn\()", line), line
        else:  # C's fp32 home: stores into it, loads from it, and common subexpressions of its offsets
            assert any(offset in line for offset in c_home) or (c_home and "int64_t cse_v = " in line), line
    assert len(removed) <= len(added) <= len(removed) + (6 if cell == "lstm" else 0)

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
def test_a_fragments_in_shared_memory_take_the_spills_out_of_the_dot(tmp_path):
    """GRU H=640 B=128 fp16's pick holds 80 fragment registers a thread at 128 a thread and spills
    556 bytes; its variant with 15 of its 20 k-tiles in shared memory reads them from there once a
    k-tile, and spills less than half of that."""
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.space import shared_fragments_variant
    from tir_templates.persistent.kernel import persistent_kernel

    spec = CellSpec("gru", 640, 640, linear_before_reset=True, dtype="float16")
    pick = Config(40, 32, 16, 32, "float16", cluster=True, batch_tile=32, mma_k_split=2)
    variant = shared_fragments_variant(spec, pick, gpu_model("sm_90"))
    assert variant.smem_runs == 15 and variant.weight_regs(spec) == 20
    spills = [max(nvcc_stats(cuda_source(persistent_kernel(spec, c), "sm_90"), "sm_90", tmp_path)) for c in (pick, variant)]
    assert spills[1] < spills[0] / 2, spills
    source = cuda_source(persistent_kernel(spec, variant), "sm_90")
    assert "uint wreg_ptr[20];" in source and "buf_dyn_shmem_ptr" in source  # 5 k-tiles in registers, 15 shared


@pytest.mark.parametrize("cfg,after", [
    (Config(24, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2), True),  # tensor cores, batch tiles of a grid
    (Config(16, 32, 16, 16, "float16", batch_tile=16, mma_k_split=2), False),  # ... of two n-tiles
    (Config(24, 32, 16, 8, "float16", mma_k_split=2), False),  # ... one grid for the batch
], ids=["grid-batch-tiles", "two-n-tiles", "grid"])
def test_step_fetches_next_inputs_after_its_mma_in_batch_tiles_of_a_grid(cfg, after):
    """In batch tiles of a grid of one n-tile, a tensor-core step loads step s+1's input
    projections after its mma (issued first, they held up the loads of h(t-1): LSTM H=768 B=32
    fp16 2.60 -> 2.22 us a step on the H200); with two n-tiles, or one grid for the batch, still at
    the step's top, where they ran faster (docs/data/fetch-after-dot-h200.jsonl)."""
    source = cuda_source(persistent_kernel(CellSpec("lstm", 768, 768, dtype="float16"), cfg), "sm_90")
    step = source[source.index("for (int64_t s = (int64_t)0; s < n_t; ++s) {"):]
    next_inputs = step.index("xn_ptr[0] = xw_ptr[")
    assert "(s + (int64_t)1)" in step[next_inputs:step.index(";", next_inputs)]
    last_mma = step.rindex("mma_sync_aligned_m16n8k16", 0, step.index("prnn_grid_barrier("))
    assert (next_inputs > last_mma) == after
