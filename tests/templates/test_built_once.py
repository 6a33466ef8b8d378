"""Kernels built once a process (tir_templates/built_once.py): the same arguments give the same
PrimFunc object, lists key as tuples, a builder that raises raises again, and a cached kernel is
the one a fresh build gives."""
from __future__ import annotations

import pytest
import tvm

from tir_templates.built_once import built_once
from tir_templates.config import Config
from tir_templates.persistent import UnsupportedLayer, persistent_kernel
from tir_templates.persistent.buckets import bucketed_kernel
from tir_templates.spec import CellSpec


def test_same_arguments_same_kernel_and_lists_key_as_tuples():
    spec, cfg = CellSpec("lstm", 64, 64), Config(64, 2, 4, 1)
    assert persistent_kernel(spec, cfg) is persistent_kernel(spec, cfg)
    assert persistent_kernel(spec, cfg) is not persistent_kernel(spec, Config(64, 4, 4, 1))
    buckets = [(1, cfg), (None, Config(64, 4, 4, 2))]
    assert bucketed_kernel(spec, buckets) is bucketed_kernel(spec, tuple(buckets))
    fresh = persistent_kernel.__wrapped__(spec, cfg)
    tvm.ir.assert_structural_equal(persistent_kernel(spec, cfg), fresh)


def test_a_builder_that_raises_is_not_cached():
    calls = []

    @built_once
    def build(n):
        calls.append(n)
        if n < 0:
            raise ValueError(n)
        return n

    assert build(1) == build(1) == 1 and calls == [1]
    for _ in range(2):
        with pytest.raises(ValueError):
            build(-1)
    assert calls == [1, -1, -1]
    with pytest.raises(UnsupportedLayer):
        persistent_kernel(CellSpec("lstm", 64, 64), Config(48, 2, 4, 1))  # 64 units do not tile by 48
