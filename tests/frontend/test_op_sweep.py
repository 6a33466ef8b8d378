"""ONNX's own backend cases of the ops around recurrent layers (persist_rnn.bench.op_sweep): on llvm
every case passes or is refused with an error; none runs to a wrong answer. The CUDA column of
docs/op-table.md comes from the same sweep on the GPU box (the gpu test below)."""
from __future__ import annotations

import pytest

from persist_rnn.bench.op_sweep import OPS, sweep


def _no_wrong(target):
    rows = sweep(target)
    assert {r.op for r in rows} == set(OPS)  # every listed op has backend cases
    wrong = [f"{r.case}: {r.detail}" for r in rows if r.outcome == "wrong"]
    assert wrong == []
    assert sum(r.outcome == "pass" for r in rows) >= 150  # 162 of 289 on llvm (2026-11-24: Pad at run time, Reshape one_dim)


def test_no_case_is_silently_wrong_on_llvm():
    _no_wrong("llvm")


@pytest.mark.gpu
def test_no_case_is_silently_wrong_on_cuda():
    _no_wrong("cuda")


def test_squeeze_with_runtime_axes_is_refused_for_cuda_only():
    """It runs on llvm; on the H100 it built and then failed at run time (nonzero on the GPU)."""
    import persist_rnn
    from persist_rnn.bench.op_sweep import cases

    [case] = [c for op, c in cases(("Squeeze",)) if c.name == "test_squeeze"]
    persist_rnn.compile(case.model, "llvm")
    with pytest.raises(persist_rnn.PersistRNNError, match="nonzero of run-time values.*'axes' an initializer"):
        persist_rnn.compile(case.model, "cuda", measure=False)
