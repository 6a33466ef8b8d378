"""Checks of input values that the compiled kernels assume and ONNX Runtime enforces, run by
`CompiledModel.run` before the call:
- `sequence_lens` within [0, T] (a length past T would read past the sequence);
- indices of a Gather over a table (an embedding's token ids) within [-n, n): TVM's take runs in
  "fast" mode, and an index out of range reads past the table, where ONNX Runtime refuses it.
`sequence_lens` is read back from the device too (B int32s); Gather indices only when they are
host (numpy) arrays: a device tensor of token ids is not copied back each call (README says so).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from .errors import PersistRNNError


@dataclasses.dataclass
class LengthsCheck:
    """A graph input feeding a node's sequence_lens, and the graph input whose time axis bounds it."""

    node: str
    lens: str
    x: str | None
    time_axis: int
    kind: str = "lengths"

    def verify(self, host: dict) -> None:
        lens = host[self.lens] if isinstance(host[self.lens], np.ndarray) else host[self.lens].numpy()
        bound = tuple(host[self.x].shape)[self.time_axis] if self.x is not None else None
        if (lens < 0).any() or (bound is not None and (lens > bound).any()):
            raise PersistRNNError(f"node {self.node!r}: input 'sequence_lens' ({self.lens!r}) is {lens.tolist()}; "
                                  f"expected values in [0, {bound if bound is not None else 'T'}]")


@dataclasses.dataclass
class IndexCheck:
    """A graph input used as the indices of a Gather over a constant table of `extent` rows."""

    node: str
    indices: str
    extent: int
    kind: str = "index"

    def verify(self, host: dict) -> None:
        ids = host[self.indices]
        if not isinstance(ids, np.ndarray):
            return  # a device tensor: not copied back each call (module doc)
        if ids.size and (ids.min() < -self.extent or ids.max() >= self.extent):
            bad = ids[(ids < -self.extent) | (ids >= self.extent)].ravel()[:5].tolist()
            raise PersistRNNError(f"node {self.node!r} (Gather): input {self.indices!r} holds {bad} outside "
                                  f"[-{self.extent}, {self.extent}) (the table has {self.extent} rows)")


def from_dict(d: dict):
    """A check from `export_library`'s JSON (files from before IndexCheck hold lengths checks)."""
    kind = d.get("kind", "lengths")
    return (IndexCheck if kind == "index" else LengthsCheck)(**d)


def input_checks(model: onnx.ModelProto, inputs: set) -> list:
    """The checks for graph inputs `inputs` (names) of `model`'s top-level graph."""
    checks = []
    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    integer = {vi.name for vi in model.graph.input
               if np.issubdtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type), np.integer)}
    cast_of = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.input[0] in integer}
    for node in model.graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN") and len(node.input) > 4 and node.input[4] in inputs:
            layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
            x = node.input[0] if node.input[0] in inputs else None
            checks.append(LengthsCheck(node.name, node.input[4], x, 1 if layout else 0))
        if node.op_type == "Gather" and node.input[0] in tables:
            indices = node.input[1] if node.input[1] in inputs else cast_of.get(node.input[1])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = tables[node.input[0]]
            if indices in inputs and dims:
                checks.append(IndexCheck(node.name, indices, int(dims[axis % len(dims)])))
    return checks


def verify(checks: list, host: dict) -> None:
    for check in checks:
        check.verify(host)
