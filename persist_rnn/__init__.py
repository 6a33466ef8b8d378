"""persist_rnn: ONNX LSTM / GRU / RNN into Apache TVM, each recurrence one persistent CUDA kernel."""
from .compile_any import compile
from .errors import PersistRNNError
from .frontend import from_onnx
from .pipeline import pipeline
from .report import LayerReport
from .runtime import CompiledModel, load

__all__ = ["CompiledModel", "LayerReport", "PersistRNNError", "compile", "from_onnx", "load", "pipeline"]
__version__ = "0.1.0"
