"""`persist_rnn.compile(module, example_inputs)`: a torch module in, a torch module out.

The module is captured as ONNX (capture.py) and compiled as any ONNX model; what comes back is an
nn.Module called like the original, torch tensors in and torch tensors out in forward's own
output structure, through the runtime's zero-copy DLPack path (on CUDA: torch's current stream,
CUDA-graph capturable).
"""
from __future__ import annotations

import dataclasses

import torch
from torch.utils import _pytree as pytree

from ..compile import compile_onnx
from ..errors import PersistRNNError
from ..runtime import CompiledModel
from .capture import Capture, capture
from .layer_names import module_labels


class CompiledModule(torch.nn.Module):
    """A torch module compiled by persist_rnn. Call it as the module; `report()` says what became
    of each recurrent layer, named by its module path; `compiled` is the CompiledModel underneath
    (`export_library`, `run` with numpy)."""

    def __init__(self, compiled: CompiledModel, captured: Capture, name: str):
        super().__init__()
        self.compiled = compiled
        self._input_names = captured.input_names
        self._constants = captured.constants
        self._output_spec = captured.output_spec
        self._name = name

    def report(self):
        return self.compiled.report()

    def forward(self, *args):
        if len(args) != len(self._input_names):
            raise PersistRNNError(f"{self._name} was compiled for {len(self._input_names)} positional arguments, "
                                  f"called with {len(args)}")
        feeds = {}
        for k, (name, value) in enumerate(zip(self._input_names, args)):
            if k in self._constants:
                if value != self._constants[k]:
                    raise PersistRNNError(f"{self._name}: argument {k} is {value!r}, but was {self._constants[k]!r} "
                                          "when compiled; an argument that is not a tensor is a constant of the build")
            elif name is not None:
                if not isinstance(value, torch.Tensor):
                    raise PersistRNNError(f"{self._name}: argument {name!r} is {type(value).__name__}, expected a "
                                          "torch.Tensor")
                feeds[name] = value.contiguous()
        outputs = [o if isinstance(o, torch.Tensor) else torch.from_dlpack(o)
                   for o in self.compiled.run(feeds, outputs="device")]
        return pytree.tree_unflatten(outputs, self._output_spec)


def _default_target(example_inputs) -> str:
    """cuda if an example tensor is on a CUDA device, else llvm."""
    examples = example_inputs if isinstance(example_inputs, (tuple, list)) else [example_inputs]
    return "cuda" if any(isinstance(x, torch.Tensor) and x.is_cuda for x in examples) else "llvm"


def compile_module(module: torch.nn.Module, example_inputs, *, target="auto", dynamic=None,
                   **options) -> CompiledModule:
    """`module` compiled at `example_inputs` (a tensor or a tuple of forward's positional
    arguments). `dynamic` names the dimensions that vary between calls: {"batch": 0} (axis 0 of
    every input), or {"batch": {"x": 1, "lengths": 0}}; the rest are fixed at the example's sizes.
    `target` "auto" is cuda where the example inputs are on a GPU, else llvm. `options` are
    `persist_rnn.compile`'s for ONNX models (tuning_log, precision, wavefront, ...)."""
    captured = capture(module, example_inputs, dynamic)
    compiled = compile_onnx(captured.model, _default_target(example_inputs) if target == "auto" else target, **options)
    labels = module_labels(module, [n.name for n in captured.model.graph.node])
    compiled._report = [dataclasses.replace(r, module=labels.get(r.node, "")) for r in compiled._report]
    compiled.origin["torch_module"] = type(module).__name__
    return CompiledModule(compiled, captured, type(module).__name__)
