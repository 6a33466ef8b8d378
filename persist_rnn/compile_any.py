"""`persist_rnn.compile`: an ONNX model (compile.py) or a torch module (pytorch/module.py), by what
it is handed; torch is imported only for a torch module."""
from __future__ import annotations

import sys

from .compile import compile_onnx


def compile(model, *args, **options):
    """Compile a model: an ONNX model (a path or a ModelProto) as `compile_onnx(model, target="llvm",
    **options)`, or a torch.nn.Module as `compile_module(module, example_inputs, target="auto",
    dynamic=None, **options)` (persist_rnn/pytorch/module.py), which returns a module called with
    torch tensors. Either way each recurrent layer becomes a persistent kernel on CUDA, and
    `report()` says what became of each and why."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        from .pytorch.module import compile_module

        return compile_module(model, *args, **options)
    return compile_onnx(model, *args, **options)
