"""Which (spec, config) pairs the persistent template builds, and which the planner may pick."""
from __future__ import annotations

from ..config import Config, int8_problems, tensor_core_problems
from ..spec import CellSpec


class UnsupportedLayer(Exception):
    """The persistent template cannot build this layer; the message is the report's reason."""


def unverified_reason(spec: CellSpec, cfg: Config) -> str:
    """Why the planner does not pick this config for `spec` on its own (empty when it may): a
    variant that passes the CPU emulation and nvcc but has not run on a GPU. `unverified=True` or
    a config forced by the caller still builds it. Today every variant has run on a GPU: batch
    tiles, clusters, both GRU linear_before_reset=0 kernels and fp32 shared-memory weights
    (docs/data/gpu_variants.log), tensor cores with whole row tiles (docs/data/gpu-v4-tensor-cores.log),
    fp16 weights in shared memory (H=1024 bidirectional, H=2048; docs/data/gpu-v22-fp16-shared-weights.log;
    bf16 layers hold fp32 weights, the fp32 code), h through distributed shared memory (dsmem)
    (docs/data/gpu-v24-dsmem.log), tensor cores at TF32 precision with whole row tiles
    (docs/data/gpu-v25-tf32.log), the fp16 layers' mma (m16n8k16) with whole row tiles
    (docs/data/gpu-v26-f16-mma-projection.log), the bf16 layers' mma (docs/data/gpu-v27-bf16-tile.log),
    h(t-1) as stamped words between a grid direction's CTAs (docs/data/gpu-v28-stamped-rounds.log,
    an H200), and tensor cores with a padded row tile at 3xTF32, TF32, fp16 and bf16 (GRU H=1024:
    24 gate rows a CTA; docs/data/gpu-v34-padded-tiles.log), and weights read from global memory
    (`global_runs`) in fp32 LSTM and GRU layers, forward, bidirectional and with two phases a step
    (docs/data/gpu-global-weights-h200.log), in fp16 and bf16 layers
    (docs/data/gpu-global16-h200.log) and in int8 layers holding fp16 weights
    (docs/data/gpu-int8-global-h200.log), and tensor cores in batch tiles, in clusters, with up to
    four (batch row, unit) pairs a thread (docs/data/gpu-tc-batch-tiles-h200.log), and weights held
    as int8 (docs/data/gpu-int8-registers-h200.log), and 16-bit tensor-core A fragments partly in
    shared memory (GRU H=640 B=128 fp16, 6 to 14 of 20 k-tiles: outputs as with every fragment in
    registers; docs/data/tc-shared-fragments-h200.jsonl; at H=256 in a grid and in cluster tiles,
    fp16 and bf16, one and two directions, some and all k-tiles: tests/gpu/test_persistent_gpu.py
    `test_f16_mma_shared_fragments_match_onnxruntime`), and batch tiles of a grid, a barrier counter
    each (tensor cores at 3xTF32, fp16 and bf16, and the FMA units, at H=256:
    docs/data/gpu-grid-batch-tiles-h200.log), and 16-bit tensor-core steps reading h(t-1) as
    stamped halves (grid batch tiles and chunked grids, fp16 and bf16, 1-4 column splits, at
    H=256: `test_stamped_halves_match_onnxruntime`, run F of docs/data/stamped-halves-h200.jsonl;
    17 random layers' picks: run C of docs/data/conformance-sweep-h200.jsonl), and the 16-bit mma
    on a quantized fp32 layer's fp16 weights (grid, stamped halves, shared fragments, grid and
    cluster batch tiles, bidirectional, at H=256; the model's picks at H=512-2048:
    docs/data/gpu-quantized-tensor-cores-h200.log), and 16-bit tensor-core A fragments read each step
    from the workspace's packed pairs (`global_runs`; a grid, cluster and grid batch tiles, stamped
    halves, one and two directions, at H=256, and the picks of LSTM H=2560 fp16 and GRU H=3072 bf16:
    `test_f16_mma_streamed_fragments_match_onnxruntime`, docs/data/gpu-streamed-fragments-h200.log).
    A new variant starts here, named."""
    return ""


def check(spec: CellSpec, cfg: Config) -> None:
    """Raise UnsupportedLayer unless `cfg` tiles `spec` the way the template maps it."""
    if cfg.tensor_cores():
        bad = tensor_core_problems(spec, cfg)
        if spec.hidden_size % cfg.tile_units or bad:
            raise UnsupportedLayer(f"config {cfg.as_dict()} cannot use the tensor cores for hidden_size "
                                   f"{spec.hidden_size}: " + "; ".join(bad or ["tile_units does not divide it"]))
        return
    if spec.hidden_size % cfg.tile_units or spec.hidden_size % cfg.group_size:
        raise UnsupportedLayer(f"config {cfg.as_dict()} does not tile hidden_size {spec.hidden_size}")
    if (cfg.row_gates(spec) * cfg.tile_units) % cfg.rows_per_group or cfg.gru_barriers not in (1, 2):
        raise UnsupportedLayer(f"config {cfg.as_dict()} does not map the CTA's gate rows onto work groups")
    if not (0 <= cfg.smem_runs and 0 <= cfg.global_runs
            and cfg.smem_runs + cfg.global_runs <= cfg.cols_per_lane(spec) // cfg.column_run(spec)):
        raise UnsupportedLayer(f"config {cfg.as_dict()}: smem_runs and global_runs exceed a lane's runs of columns")
    if cfg.int8_weights() and int8_problems(spec, cfg):
        raise UnsupportedLayer(f"config {cfg.as_dict()}: " + "; ".join(int8_problems(spec, cfg)))
