"""The streamed scan (a kernel a step, weights from L2/HBM): its CPU twin against the reference scan
for every cell form, sequences ragged and some empty, batches of one (the single-row path) and past
a tile; its CUDA build (a host loop of step launches, GRU's two phases two kernels, float4 loads)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tvm

from persist_rnn.bench.layer_models import cuda_source
from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.reference import reference_scan
from tir_templates.spec import Activation, CellSpec
from tir_templates.streamed import BATCH_TILE, SMALL_TILE, streamed_scan
from templates.llvm_runs import run_on_llvm

STEPS = 5



CASES = [
    # (cell, direction, linear_before_reset, hidden, batch, extra spec flags)
    ("lstm", "bidirectional", 0, 37, 3, dict(peepholes=True, clip=5.0)),  # H not a multiple of a warp's k's
    ("lstm", "reverse", 0, 128, 1, dict(input_forget=True)),  # one row; float4 loads
    ("lstm", "forward", 0, 64, BATCH_TILE + 2, {}),  # two tiles, the second ragged
    ("lstm", "bidirectional", 0, 512, BATCH_TILE + 1, {}),  # float4 loads, four in flight; two tiles
    ("gru", "forward", 0, 256, SMALL_TILE - 1, {}),  # the small tile; r * h(t-1) in float4 loads too
    ("gru", "forward", 0, 37, 5, dict(clip=2.0)),  # two kernels a step: r * h(t-1) first
    ("gru", "bidirectional", 0, 32, 1, {}),
    ("gru", "reverse", 1, 40, 2, dict(activations=(Activation("HardSigmoid", 0.2, 0.5), Activation("Softsign")))),
    ("rnn", "forward", 0, 33, 6, {}),
    ("rnn", "bidirectional", 0, 16, 1, dict(clip=1.0)),
]


@pytest.mark.parametrize("cell,direction,lbr,hidden,batch,flags", CASES, ids=str)
def test_emulated_streamed_scan_matches_the_reference(cell, direction, lbr, hidden, batch, flags):
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=lbr, **flags)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=3)
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    if batch > 1:
        arrays[3][0] = 0  # an empty sequence: zero final states
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(streamed_scan(spec, emulate=True), [a.copy() for a in arrays])
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]):
        np.testing.assert_allclose(g, w, atol=1e-5, err_msg=name)  # fp32 sums in another order


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_builds_for_cuda_as_a_host_loop_of_step_kernels(arch):
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    for spec, step_kernels in ((CellSpec("lstm", 64, 2048), 1), (CellSpec("gru", 64, 4096, "bidirectional"), 2)):
        func = streamed_scan(spec).with_attr("global_symbol", "main")
        built = tvm.compile(tvm.IRModule({"main": func}), target=target)
        source = cuda_source(built)
        kernels = [line for line in source.splitlines() if line.startswith('extern "C" __global__') and "{" in line]
        assert len(kernels) == 1 + step_kernels  # init, then the step's
        assert all("int64_t s)" in k for k in kernels[1:])  # the step index comes from the host's loop
        assert "__shared__" not in source and "__syncthreads" not in source  # a warp per unit meets no other
        assert "*(float4*)(r_ptr" in source  # a lane's four consecutive weights in one load
