"""Each recurrent ONNX node of a capture named by the torch module it came from.

torch's TorchScript exporter names a node after the module scope it was traced in, one node per
layer of an nn.LSTM / nn.GRU / nn.RNN: "/encoder/lstm/LSTM", "/encoder/lstm/LSTM_1", ... So the
scope is the module path, and the suffix counts the layers (and, for a module called twice, goes on
counting: its k-th node is layer k % num_layers).
"""
from __future__ import annotations

import re

import torch

_NODE = re.compile(r"^(?P<scope>.*?)/?(?P<op>LSTM|GRU|RNN)(?:_(?P<k>\d+))?$")


def module_labels(module: torch.nn.Module, node_names) -> dict[str, str]:
    """{ONNX node name: "encoder.lstm, layer 2 of 3"} for the nodes an nn.RNNBase of `module` made."""
    layers = {path: m.num_layers for path, m in module.named_modules() if isinstance(m, torch.nn.RNNBase)}
    out = {}
    for node in node_names:
        found = _NODE.match(node or "")
        if found is None:
            continue
        path = found["scope"].strip("/").replace("/", ".")
        if path not in layers:
            continue
        label = path or type(module).__name__
        count, k = layers[path], int(found["k"] or 0)
        out[node] = label if count == 1 else f"{label}, layer {k % count + 1} of {count}"
    return out
