"""Export the example models (needs torch; the ONNX files are committed, so users need not).

    python examples/export_examples.py
- char_rnn.onnx: the GRNN paper's char-RNN: embedding, 3-layer LSTM (hidden 128), T=100, logits.
- text_classifier.onnx: GRNN's text classification: embedding, 2-layer LSTM (hidden 256), T=20, linear.
  Both have a dynamic batch axis; the time axis is fixed as in the paper.
- speech_gru.onnx: a speech-style acoustic model: 40 filterbank features, 2-layer GRU (hidden 256),
  per-frame logits over 29 characters; batch and time are dynamic.
Each comes with `<name>_inputs.npz`, inputs of the exported shape.
"""
from __future__ import annotations

import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


class CharRNN(torch.nn.Module):
    def __init__(self, vocab=65, hidden=128, layers=3):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, num_layers=layers)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, chars):
        y, _ = self.lstm(self.emb(chars))
        return self.out(y)


class TextClassifier(torch.nn.Module):
    def __init__(self, vocab=1000, emb=128, hidden=256, classes=4):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, emb)
        self.lstm = torch.nn.LSTM(emb, hidden, num_layers=2)
        self.fc = torch.nn.Linear(hidden, classes)

    def forward(self, tokens):
        _, (h, _) = self.lstm(self.emb(tokens))
        return self.fc(h[-1])


class SpeechGRU(torch.nn.Module):
    def __init__(self, features=40, hidden=256, chars=29):
        super().__init__()
        self.gru = torch.nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(hidden, chars)

    def forward(self, frames):
        y, _ = self.gru(frames)
        return self.out(y)


def export(name, module, example, input_name, output_name, dynamic_axes):
    module.eval()
    path = os.path.join(HERE, f"{name}.onnx")
    torch.onnx.export(module, (example,), path, input_names=[input_name], output_names=[output_name],
                      dynamic_axes=dynamic_axes, opset_version=14, dynamo=False)
    np.savez(os.path.join(HERE, f"{name}_inputs.npz"), **{input_name: example.numpy()})
    print("wrote", path)


def main():
    torch.manual_seed(0)
    export("char_rnn", CharRNN(), torch.randint(0, 65, (100, 1)), "chars", "logits",
           {"chars": {1: "batch"}, "logits": {1: "batch"}})
    export("text_classifier", TextClassifier(), torch.randint(0, 1000, (20, 8)), "tokens", "logits",
           {"tokens": {1: "batch"}, "logits": {0: "batch"}})
    export("speech_gru", SpeechGRU(), torch.randn(4, 50, 40), "frames", "logits",
           {"frames": {0: "batch", 1: "time"}, "logits": {0: "batch", 1: "time"}})


if __name__ == "__main__":
    main()
