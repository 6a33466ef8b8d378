"""The torch models the PyTorch tests compile: the shipped examples' definitions
(examples/export_examples.py), the corpus's six (tests/fixtures/corpus/make_corpus.py), and the
nn.LSTM features ONNX lacks or writes its own way (batch_first, packed sequences, proj_size)."""
from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures", "corpus"))

import export_examples  # noqa: E402
import make_corpus  # noqa: E402


class Packed(torch.nn.Module):
    """A batch-first BiGRU over padded sequences of given lengths, through pack_padded_sequence."""

    def __init__(self, features=8, hidden=16, enforce_sorted=False):
        super().__init__()
        self.rnn = torch.nn.GRU(features, hidden, batch_first=True, bidirectional=True)
        self.enforce_sorted = enforce_sorted

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                         enforce_sorted=self.enforce_sorted)
        y, h = self.rnn(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return y, h


class Projected(torch.nn.Module):
    """An LSTM with a projection (proj_size, common in speech) under a plain GRU."""

    def __init__(self, features=8, hidden=16, proj=6):
        super().__init__()
        self.gru = torch.nn.GRU(features, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, proj_size=proj)

    def forward(self, x):
        return self.lstm(self.gru(x)[0])[0]


def examples() -> dict:
    """name -> (module, example input, dynamic, another input): the shipped examples' definitions."""
    torch.manual_seed(0)
    return {
        "char_rnn": (export_examples.CharRNN().eval(), torch.randint(0, 65, (100, 1)), {"batch": 1},
                     torch.randint(0, 65, (100, 3))),
        "text_classifier": (export_examples.TextClassifier().eval(), torch.randint(0, 1000, (20, 2)), {"batch": 1},
                            torch.randint(0, 1000, (20, 5))),
        "speech_gru": (export_examples.SpeechGRU().eval(), torch.randn(2, 13, 40), {"batch": 0, "time": 1},
                       torch.randn(3, 7, 40)),
    }


def corpus(name: str):
    """(module, example input, dynamic, another input) of a corpus model: batch 3 and another length."""
    b_axis, t_axis = make_corpus.MODELS[name][2]
    steps = {"crnn_ocr": 36, "conv_bilstm_speech": 17, "stft_lstm_vad": 700, "gru_enhancer": 4,
             "seq2seq_encoder": 6, "bilstm_tagger": 21}[name]
    return (make_corpus.build(name), make_corpus.example_input(name, *make_corpus.EXAMPLE[name]),
            {"batch": b_axis, "steps": t_axis}, make_corpus.example_input(name, 3, steps, seed=1))


CORPUS = sorted(make_corpus.MODELS)


def relative_error(got, want) -> float:
    """The largest error over the outputs (nested alike), relative to each output's scale."""
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got) == len(want)
    return max(float((g - w).abs().max() / max(w.abs().max(), 1e-30)) for g, w in zip(got, want))
