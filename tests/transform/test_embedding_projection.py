"""FoldEmbeddingProjection (transform/embedding_projection.py): a first layer fed by an embedding
lookup reads the projected table instead of running its input GEMM; the model still matches ONNX
Runtime, and what cannot be folded keeps its GEMM."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import embedding_model, max_rel_error, ort_run
from persist_rnn.transform import embedding_projection

SM90 = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32,
        "max_shared_memory_per_block": 49152}


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_an_embedded_layer_matches_onnxruntime_without_its_gemm(op):
    model, feeds = embedding_model(op)
    compiled = persist_rnn.compile(model, "llvm")
    assert compiled.report()[0].embedding_folded and "folded into its embedding table" in compiled.report()[0].line()
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


def test_a_batch_first_embedding_folds_with_its_ids_transposed():
    """ids (B, T) gathered, then the rows transposed to (T, B): the fold transposes the ids instead."""
    model, feeds = embedding_model("GRU", steps=5, batch=4, batch_first=True)
    compiled = persist_rnn.compile(model, "llvm")
    assert compiled.report()[0].embedding_folded
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


def test_the_cuda_build_has_no_projection_gemm_for_the_embedded_layer():
    model, _ = embedding_model("LSTM")
    compiled = persist_rnn.compile(model, tvm.target.Target(SM90), measure=False)
    calls = [line.split()[1] for line in compiled.executable.as_text().splitlines()
             if line.strip().startswith("call") and "vm.builtin" not in line]
    assert "take" in calls and not any(name.startswith("persist_rnn_projection") for name in calls)
    assert compiled.report()[0].lowering == "persistent" and compiled.report()[0].embedding_folded


def test_what_cannot_be_folded_keeps_its_gemm(monkeypatch):
    """A projected table over MAX_TABLE_BYTES, and rows gathered along another axis, keep the GEMM."""
    model, feeds = embedding_model("GRU", vocab=40, embed=8, hidden=16)
    monkeypatch.setattr(embedding_projection, "MAX_TABLE_BYTES", 40 * 48 * 4 - 1)
    big = persist_rnn.compile(model, "llvm")
    assert not big.report()[0].embedding_folded
    assert max_rel_error(big.run(feeds), ort_run(model, feeds)) <= 1e-4
    monkeypatch.undo()
    columns, feeds = embedding_model("LSTM", axis=1)
    other = persist_rnn.compile(columns, "llvm")
    assert not other.report()[0].embedding_folded
    assert max_rel_error(other.run(feeds), ort_run(columns, feeds)) <= 1e-4


def test_the_shipped_text_models_fold_their_first_layer():
    """char-RNN and the text classifier read an embedding; the speech model reads features."""
    for name, folded in (("char_rnn", [True, False, False]), ("text_classifier", [True, False]),
                         ("speech_gru", [False, False])):
        compiled = persist_rnn.compile(f"examples/{name}.onnx", "llvm")
        assert [r.embedding_folded for r in compiled.report()] == folded
        feeds = dict(np.load(f"examples/{name}_inputs.npz"))
        assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(f"examples/{name}.onnx"), feeds)) <= 1e-4
