"""Shared fixtures: ONNX model builders, ONNX Runtime references, GPU detection."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__)))


def _gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:
        return False


def pytest_configure(config):
    """On a machine with a GPU, GPU tests in several processes at once are refused: they time
    kernels and launch persistent grids that expect the GPU to themselves (14 workers on one
    H200 left failures scattered through the suite)."""
    workers = config.getoption("numprocesses", default=None)
    if workers in (None, 0, "0") or "not gpu" in (config.getoption("markexpr", default="") or ""):
        return
    if _gpu_present():
        raise pytest.UsageError("the GPU tests run in one process: drop -n, or deselect them with -m 'not gpu'")


def pytest_collection_modifyitems(config, items):
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU here: run `pytest -m gpu` on the GPU box")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
