"""The narrow dense kernel (a warp per row, N <= 32): its CPU twin against numpy on ragged K and
N, its CUDA build (one shuffle per column, no shared memory), and its refusal of wide outputs."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from persist_rnn.bench.layer_models import cuda_source
from templates.test_projection import operands, run_on_cpu
from tir_templates.narrow_dense import MAX_N, emulated_narrow_dense_kernel, narrow_dense_kernel

#: (M, K, N): the text classifier's and speech GRU's heads, K not a multiple of 32, N = 1 and 32
SHAPES = [(1, 256, 4), (9, 256, 29), (5, 40, 7), (3, 33, 1), (6, 64, MAX_N)]


@pytest.mark.parametrize("M,K,N", SHAPES, ids=str)
def test_emulated_narrow_dense_matches_numpy(M, K, N):
    x, w, b = operands(M, K, N)
    got = run_on_cpu(emulated_narrow_dense_kernel(K, N), x, w, b)
    np.testing.assert_allclose(got, x.astype("float64") @ w + b, rtol=0, atol=1e-5 * np.abs(x @ w).max())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_builds_for_cuda_with_one_shuffle_per_column(arch):
    N = 29
    built = tvm.compile(tvm.IRModule({"main": narrow_dense_kernel(256, N).with_attr("global_symbol", "main")}),
                        target=tvm.target.Target({"kind": "cuda", "arch": arch}))
    source = cuda_source(built)
    assert source.count("tvm_builtin_cuda_warp_reduce_sum_32(acc") == N
    assert "__shared__" not in source and "__launch_bounds__(128)" in source


def test_wide_outputs_are_refused():
    with pytest.raises(ValueError, match="N=33"):
        narrow_dense_kernel(16, MAX_N + 1)
