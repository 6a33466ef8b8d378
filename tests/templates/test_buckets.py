"""Batch buckets: one recurrence kernel holding a persistent kernel per bucket of batch sizes,
picked on the host by the runtime batch (tir_templates/persistent/buckets.py)."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import tvm

from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.config import Config
from tir_templates.persistent import BARRIER_FLAG_WORD
from tir_templates.persistent.buckets import bucketed_kernel, emulated_bucketed_kernel
from tir_templates.reference import reference_scan
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

H, STEPS = 16, 4
#: a CTA per batch row and direction up to 1, 4 CTAs meeting at the grid counter up to 4, then
#: one CTA a direction walking chunks of 2 rows
BUCKETS = [(1, Config(16, 4, 4, 1, batch_tile=1)), (4, Config(4, 4, 2, 4)), (None, Config(16, 4, 4, 2))]



@pytest.mark.parametrize("batch", [1, 3, 4, 7])
def test_each_bucket_matches_the_reference(batch):
    """Batches in each bucket (and past the last bound) take their bucket's kernel and match."""
    spec = CellSpec("lstm", 8, H, "bidirectional", peepholes=True)
    arrays = kernel_arrays(spec, batch, STEPS, seed=batch, slots=3)
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_bucketed_kernel(spec, BUCKETS), [a.copy() for a in arrays])
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got[7:10], want[7:10]):
        np.testing.assert_allclose(g, w, atol=1e-5, err_msg=name)
    ws = got[11]
    assert ws[BARRIER_FLAG_WORD] == 0
    grid_bucket = 1 < batch <= 4  # only the middle bucket meets at the grid counter
    assert (ws[0] > 0) == grid_bucket, "the batch took another bucket's kernel"


def test_exchange_buffer_fits_the_hungriest_bucket():
    spec = CellSpec("gru", 16, 16, linear_before_reset=False)
    buckets = [(2, Config(4, 4, 2, 2)), (None, Config(4, 4, 2, 2, gru_barriers=1))]
    func = bucketed_kernel(spec, buckets)
    assert "n_slots >= T.int64(%d)" % buckets[1][1].exchange_slots(spec) in func.script()


def test_bad_buckets_are_refused():
    spec = CellSpec("lstm", 16, 16)
    with pytest.raises(ValueError, match="increasing bounds"):
        bucketed_kernel(spec, [(4, Config(16, 4, 4, 1)), (2, Config(16, 4, 4, 1)), (None, Config(16, 4, 4, 1))])
    with pytest.raises(ValueError, match="only the last open-ended"):
        bucketed_kernel(spec, [(None, Config(16, 4, 4, 1)), (None, Config(16, 4, 4, 1))])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_buckets_compile_to_one_kernel_each(tmp_path):
    """sm_90: a cluster kernel for small batches, a grid kernel (and its counter-zeroing kernel)
    for large ones, in one module; nvcc compiles it without spills."""
    spec = CellSpec("lstm", 256, 256)
    func = bucketed_kernel(spec, [(8, Config(32, 8, 4, 1, cluster=True, batch_tile=1)), (None, Config(8, 32, 4, 10))])
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    source = lib.mod.imports[0].inspect_source()
    assert len(set(re.findall(r"void __launch_bounds__\(\d+\) (\w+)\(", source))) == 3
    assert "barrier.cluster.arrive" in source and "prnn_grid_barrier" in source
    from test_cuda_codegen import nvcc_stats
    assert max(nvcc_stats(source, "sm_90", tmp_path)) == 0
