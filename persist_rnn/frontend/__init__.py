"""ONNX LSTM / GRU / RNN import into Relax."""
from .importer import from_onnx, load_model

__all__ = ["from_onnx", "load_model"]
