"""`benchmarks/step_harness.py`: the host program it wraps around a persistent kernel. A grid
kernel's launch runs the kernel that zeroes its barrier counters first, as the layer does; a
cluster config is refused; the program builds with nvcc (running it needs the GPU box)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from step_harness import host_program, kernel_source  # noqa: E402

from tir_templates.config import Config


def test_a_grid_kernel_is_launched_after_its_counters_are_zeroed(tmp_path):
    cfg = Config(8, 32, 4, 1, "float16", stamped=True)
    source, grid, threads = kernel_source("lstm", 256, cfg, 1, "float16")
    assert (grid, threads) == (32, 256)
    program = host_program(source, grid, threads, 1, "lstm256")
    zero, main = program.index("main_kernel<<<1, 32>>>((uint*)ws_ptr);"), program.index("main_kernel_1<<<32, 256>>>(")
    assert zero < main
    assert "(half*)y_ptr" in program  # a 16-bit layer's Y
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    path = tmp_path / "lstm256.cu"
    path.write_text(program)
    subprocess.run(["nvcc", "-arch=sm_90", "-c", "-w", "-o", str(tmp_path / "lstm256.o"), str(path)], check=True)


def test_a_cluster_config_is_refused():
    with pytest.raises(SystemExit, match="one CTA or a grid"):
        kernel_source("gru", 256, Config(32, 8, 4, 1, cluster=True), 1)
