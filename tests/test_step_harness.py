"""`benchmarks/step_harness.py`: the host program it wraps around a persistent kernel. A grid
kernel's launch runs the kernel that zeroes its barrier counters first, as the layer does; a
kernel in dynamic shared memory is launched with all a CTA may take; a cluster config is refused;
the program builds with nvcc (running it needs the GPU box)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from step_harness import DYNAMIC_SHARED_BYTES, host_program, kernel_source, static_shared_bytes  # noqa: E402

from tir_templates.config import Config


def test_a_grid_kernel_is_launched_after_its_counters_are_zeroed(tmp_path):
    cfg = Config(8, 32, 4, 1, "float16", stamped=True)
    source, grid, threads = kernel_source("lstm", 256, cfg, 1, "float16")
    assert (grid, threads) == (32, 256)
    program = host_program(source, grid, threads, 1, "lstm256")
    zero = program.index("main_kernel<<<1, 32>>>((uint*)ws_ptr);")
    main = program.index("main_kernel_1<<<32, 256, DYNAMIC_SHARED_BYTES>>>(")
    assert zero < main
    assert "#define DYNAMIC_SHARED_BYTES 0\n" in program  # static shared memory only
    assert "(half*)y_ptr" in program  # a 16-bit layer's Y
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    path = tmp_path / "lstm256.cu"
    path.write_text(program)
    subprocess.run(["nvcc", "-arch=sm_90", "-c", "-w", "-o", str(tmp_path / "lstm256.o"), str(path)], check=True)


def test_a_cluster_config_is_refused():
    with pytest.raises(SystemExit, match="one CTA or a grid"):
        kernel_source("gru", 256, Config(32, 8, 4, 1, cluster=True), 1)


def test_a_kernel_in_dynamic_shared_memory_is_launched_with_all_a_cta_may_take(tmp_path):
    """A config whose shared memory passes the static window (a GRU H=1024 B=20 fp16 pick in
    batch tiles of a grid) is timed too: launched with the most a CTA may opt into, less the
    kernel's static arrays, after raising the kernel's limit to it."""
    cfg = Config(32, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2, smem_runs=8)
    source, grid, threads = kernel_source("gru", 1024, cfg, 20, "float16")
    assert "extern __shared__" in source
    static = static_shared_bytes(source)
    assert 0 < static < 48 * 1024
    program = host_program(source, grid, threads, 20, "gru1024")
    assert f"#define DYNAMIC_SHARED_BYTES {DYNAMIC_SHARED_BYTES - static}" in program
    assert "cudaFuncSetAttribute(main_kernel_1, cudaFuncAttributeMaxDynamicSharedMemorySize" in program
    assert f"main_kernel_1<<<{grid}, {threads}, DYNAMIC_SHARED_BYTES>>>(" in program
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    path = tmp_path / "gru1024.cu"
    path.write_text(program)
    subprocess.run(["nvcc", "-arch=sm_90", "-c", "-w", "-o", str(tmp_path / "gru1024.o"), str(path)], check=True)
