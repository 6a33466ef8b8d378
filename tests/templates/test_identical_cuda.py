"""The persistent template's generated code is byte for byte what template v4 generated.

The template was restructured (issue 19) without changing what it emits, so that the GPU results
of template v4 still hold. Each config below covers a variant (each cell, grid / cluster /
resident / batch tiles, chunked batches, shared-memory weights, 3xTF32 tensor cores, the two GRU
linear_before_reset=0 kernels, fp16 weights, h through distributed shared memory and as stamped
words, weights read from global memory, each recorded from code whose kernels ran on the H100); the md5 of its CUDA source (sm_90) and of its CPU
twin's TVMScript must equal the values recorded in `fixtures/template_v4_md5.json`.

A deliberate kernel change re-records them: `python tests/templates/test_identical_cuda.py`
(and says so in its commit, with the GPU tests that ran since), or only the cases whose kernels it
changed: `--replace NAME ...`; a new variant adds its cases alone: `--add NAME ...`.
"""
from __future__ import annotations

import hashlib
import pathlib
import shutil

import pytest
import tvm

from tir_templates.config import Config, two_phase
from tir_templates.persistent import emulated_persistent_kernel, persistent_kernel
from tir_templates.spec import Activation, CellSpec

from md5_records import check, record_main

RECORD = pathlib.Path(__file__).parents[1] / "fixtures" / "template_v4_md5.json"

#: name -> (cell, hidden, direction, config, spec flags); "gru0" is GRU with linear_before_reset=0
CASES = {
    "lstm-h64-resident-lane-updates": ("lstm", 64, "forward", Config(64, 2, 4, 1), {}),
    "lstm-h1024-grid": ("lstm", 1024, "forward", Config(8, 32, 4, 1), {}),
    "lstm-h1024-grid-chunked": ("lstm", 1024, "forward", Config(8, 32, 4, 10), {}),
    "lstm-h256-cluster-batch-tiles": ("lstm", 256, "forward", Config(32, 8, 4, 1, cluster=True, batch_tile=1), {}),
    "lstm-h512-fp16-grid": ("lstm", 512, "forward", Config(8, 16, 4, 1, "float16"), {}),
    "lstm-h16-peepholes-clip-bidir": ("lstm", 16, "bidirectional", Config(4, 4, 2, 3), dict(peepholes=True, clip=5.0)),
    "lstm-h16-input-forget-two-chunks": ("lstm", 16, "reverse", Config(16, 1, 8, 3), dict(input_forget=True)),
    "lstm-h16-cluster-per-direction": ("lstm", 16, "bidirectional", Config(4, 8, 4, 2, cluster=True), {}),
    "lstm-h16-smem-weights": ("lstm", 16, "bidirectional", Config(4, 1, 2, 3, smem_runs=2), {}),
    "lstm-h16-cta-batch-tiles-ragged": ("lstm", 16, "bidirectional", Config(16, 4, 4, 2, batch_tile=2),
                                        dict(peepholes=True)),
    "lstm-h16-tensor-cores-grid": ("lstm", 16, "bidirectional", Config(4, 32, 16, 3, mma_k_split=2), dict(peepholes=True)),
    "lstm-h1024-tensor-cores": ("lstm", 1024, "forward", Config(8, 32, 16, 20, mma_k_split=2), {}),
    # fp16 mma (m16n8k16), h(t-1) exchanged in 16 bits and held as pairs (h16_exchange.py); a bf16
    # GRU's cluster batch tiles so too; a resident CTA's fp16 mma keeps h in fp32, packing pairs itself
    "lstm-h768-fp16-tensor-cores": ("lstm", 768, "forward", Config(8, 32, 16, 32, "float16", mma_k_split=4), {}),
    "gru-h256-bf16-tensor-cores-cluster-tiles": ("gru", 256, "bidirectional",
                                                 Config(32, 32, 16, 16, "bfloat16", cluster=True, batch_tile=16,
                                                        mma_k_split=2), {}),
    "rnn-h32-fp16-tensor-cores-resident": ("rnn", 32, "forward", Config(32, 32, 16, 8, "float16", mma_k_split=1), {}),
    "gru-h256-cluster": ("gru", 256, "forward", Config(32, 8, 4, 1, cluster=True), {}),
    "gru-h256-dsmem-cluster-of-16": ("gru", 256, "forward", Config(16, 16, 6, 1, cluster=True, dsmem=True), {}),
    "lstm-h1024-stamped-words": ("lstm", 1024, "forward", Config(8, 32, 2, 1, stamped=True), {}),
    "gru-h16-fp16-smem-weights": ("gru", 16, "forward", Config(8, 4, 3, 2, "float16", smem_runs=1), {}),
    "gru-h16-cluster-tile-shared-meet": ("gru", 16, "reverse", Config(4, 4, 3, 1, cluster=True, batch_tile=1), {}),
    "gru-h16-activations-bidir": ("gru", 16, "bidirectional", Config(8, 4, 3, 2),
                                  dict(activations=(Activation("HardSigmoid", 0.2, 0.5), Activation("Tanh"),
                                                    Activation("Sigmoid"), Activation("Tanh")))),
    "gru-h16-tensor-cores-padded-tile": ("gru", 16, "bidirectional", Config(8, 32, 16, 3, mma_k_split=2), {}),
    "gru0-h512-two-phase-grid": ("gru0", 512, "bidirectional", Config(8, 16, 2, 20), {}),
    "gru0-h16-two-phase-one-cta": ("gru0", 16, "reverse", Config(16, 4, 4, 3), {}),
    "gru0-h16-partial-sums": ("gru0", 16, "bidirectional", Config(4, 4, 2, 2, gru_barriers=1), dict(clip=2.0)),
    "gru0-h16-partial-sums-fp16-smem": ("gru0", 16, "forward", Config(4, 4, 2, 3, "float16", gru_barriers=1,
                                                                       smem_runs=1), {}),
    # weights in three homes: registers, shared memory and global memory (both configs ran on the H200)
    "lstm-h256-global-weights": ("lstm", 256, "forward", Config(16, 8, 4, 2, smem_runs=2, global_runs=3), {}),
    "gru-h2048-global-weights-stamped": ("gru", 2048, "forward", Config(16, 16, 3, 1, smem_runs=18, global_runs=2,
                                                                        stamped=True), {}),
    # 59 global runs read in turns of 16 (ran on the H200 in benchmarks/streamed_layers.py)
    "lstm-h4096-global-weights-in-turns": ("lstm", 4096, "forward", Config(32, 16, 8, 8, smem_runs=3, global_runs=59),
                                           {}),
    # 16-bit A fragments partly in shared memory, every load of h in one turn (GRU H=640 B=128's
    # measure-off pick: ran on the H200, docs/data/tc-shared-fragments-h200.jsonl runs F and G)
    "gru-h640-fp16-tensor-cores-shared-fragments": ("gru", 640, "forward",
                                                    Config(40, 32, 16, 32, "float16", cluster=True, batch_tile=32,
                                                           mma_k_split=2, smem_runs=15), {}),
    # every run of a lane's columns in global memory: no register array (two phases a step)
    "gru0-h256-weights-off-registers": ("gru0", 256, "bidirectional", Config(32, 8, 4, 5, global_runs=8), {}),
    # weights held as int8, four to a register (int8_rows.py; ran on the H200)
    "lstm-h2048-int8-stamped": ("lstm", 2048, "forward", Config(16, 32, 8, 1, "int8", stamped=True), {}),
    "gru-h256-int8-chunks": ("gru", 256, "forward", Config(16, 8, 6, 2, "int8"), {}),
    "rnn-h128-cta-batch-tiles": ("rnn", 128, "bidirectional", Config(128, 4, 4, 1, batch_tile=1), {}),
    # batch tiles of a grid, a barrier counter each (LSTM H=768 B=32 fp16's measure-off pick: ran on
    # the H200, docs/data/grid-batch-tiles-h200.jsonl and the off-grid set's run M)
    "lstm-h768-fp16-grid-batch-tiles": ("lstm", 768, "forward", Config(24, 32, 16, 8, "float16", batch_tile=8,
                                                                       mma_k_split=2), {}),
    # 16-bit tensor cores reading their last k-tiles' A fragments each step, packed in the workspace
    "lstm-h256-fp16-streamed-fragments": ("lstm", 256, "forward", Config(8, 32, 16, 20, "float16", mma_k_split=4,
                                                                         smem_runs=1, global_runs=2), {}),
    "rnn-h16-clip-lane-groups": ("rnn", 16, "reverse", Config(16, 2, 4, 4), dict(clip=1.0)),
    "rnn-h16-tensor-cores-resident": ("rnn", 16, "reverse", Config(16, 32, 16, 3, mma_k_split=2), dict(clip=1.0)),
}


def _spec(cell, hidden, direction, cfg, flags):
    dtype = cfg.weight_dtype if cfg.weight_dtype in ("float16", "bfloat16") else "float32"
    int8 = cfg.weight_dtype == "int8"
    return CellSpec(cell.rstrip("0"), hidden, hidden, direction, dtype=dtype, linear_before_reset=(cell == "gru"),
                    int8_weights=int8, int8_rows=int8, **flags)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def generated(name: str) -> dict:
    """md5 of the case's CUDA source (sm_90) and of its CPU twin's TVMScript."""
    cell, hidden, direction, cfg, flags = CASES[name]
    spec = _spec(cell, hidden, direction, cfg, flags)
    kernel = persistent_kernel(spec, cfg).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": kernel}), target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    return {"cuda": _md5(lib.mod.imports[0].inspect_source()),
            "emulated": _md5(emulated_persistent_kernel(spec, cfg).script())}


def test_cases_cover_every_variant():
    """Each variant the template has appears among the cases (a kernel path nobody checks could drift)."""
    specs = {n: (_spec(*c), c[3]) for n, c in CASES.items()}
    assert {s.cell for s, _ in specs.values()} == {"lstm", "gru", "rnn"}
    assert any(two_phase(s) and not c.partial_sums(s) for s, c in specs.values())
    kinds = {(c.barrier(s), c.batch_tile > 0) for s, c in specs.values()}
    assert kinds >= {("grid", False), ("grid", True), ("cluster", False), ("cluster", True), ("cta", False), ("cta", True)}
    assert any(c.partial_sums(s) for s, c in specs.values())
    assert any(c.smem_runs and c.weight_dtype == "float16" for _, c in specs.values())
    assert any(c.smem_runs and c.weight_dtype == "float32" for _, c in specs.values())
    assert any(c.global_runs for _, c in specs.values())
    assert any(c.global_runs and not c.weight_regs(s) and two_phase(s) for s, c in specs.values())
    assert any(c.global_runs and c.f16_mma() for _, c in specs.values())
    assert any(c.h16_exchange(s) for s, c in specs.values())
    assert any(c.h16_exchange(s) and c.batch_tile for s, c in specs.values())
    assert any(c.f16_mma() and not c.h16_exchange(s) for s, c in specs.values())
    assert any(c.int8_weights() and c.batch_chunk > 1 for _, c in specs.values())
    assert any(c.tensor_cores() and (c.row_gates(s) * c.tile_units) % 16 for s, c in specs.values())
    assert any(c.lane_updates(s) for s, c in specs.values()) and any(not c.lane_updates(s) for s, c in specs.values())
    assert any(c.resident(s) for s, c in specs.values())
    assert any(c.dsmem for _, c in specs.values()) and any(c.stamped for _, c in specs.values())
    assert any(not c.resident(s) and c.batch_chunk < 20 and c.barrier(s) == "grid" for s, c in specs.values())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (TVM compiles CUDA with it)")
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_code_is_unchanged(name):
    check(RECORD, name, generated)


if __name__ == "__main__":
    record_main(RECORD, CASES, generated)
