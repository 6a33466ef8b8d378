"""The FlashRNN anchor's operands (`persist_rnn/bench/flashrnn_anchor.py`): FlashRNN's pure-torch `vanilla`
backend, given torch's weights as converted, computes torch's layer (its CUDA backends share the
operands). Needs torch and flashrnn (skipped without them: the GPU box has torch; the bench
bundle carries flashrnn)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flashrnn")

from persist_rnn.bench.flashrnn_anchor import check_against_torch  # noqa: E402


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("hidden,inputs", [(16, 16), (32, 8)])
def test_flashrnn_computes_torchs_layer(cls, hidden, inputs):
    torch.manual_seed(hidden + inputs)
    layer = getattr(torch.nn, cls)(inputs, hidden)
    with torch.no_grad():
        assert check_against_torch(layer, torch.randn(7, 3, inputs)) < 1e-5
