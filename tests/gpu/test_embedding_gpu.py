"""A first layer fed by an embedding, its input projection folded into the table
(transform/embedding_projection.py), on the GPU against ONNX Runtime: symbolic batch, negative
ids, each cell."""
from __future__ import annotations

import pytest

import persist_rnn
from persist_rnn.bench.layer_models import embedding_model, max_rel_error, ort_run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch", [1, 17])
def test_embedded_layer_matches_onnxruntime_on_cuda(op, batch):
    model, feeds = embedding_model(op, vocab=300, embed=64, hidden=128, steps=21, batch=batch)
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    assert compiled.report()[0].embedding_folded and compiled.report()[0].lowering == "persistent"
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


def test_batch_first_embedding_matches_onnxruntime_on_cuda():
    """ids (B, T), the rows transposed to (T, B) before the layer: the fold transposes the ids."""
    model, feeds = embedding_model("LSTM", vocab=300, embed=64, hidden=128, steps=21, batch=5, batch_first=True)
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    assert compiled.report()[0].embedding_folded
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4
