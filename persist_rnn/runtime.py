"""CompiledModel: a built model that runs on numpy inputs and checks them against the ONNX graph."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import tvm
from tvm import relax

from .errors import PersistRNNError
from .report import LayerReport


@dataclasses.dataclass
class InputSpec:
    name: str
    dtype: str
    shape: list  # ints for static dims, strings for symbolic ones, None for unknown


@dataclasses.dataclass
class LengthsCheck:
    """A graph input feeding a node's sequence_lens, and the graph input whose time axis bounds it."""

    node: str
    lens: str
    x: str | None
    time_axis: int


def graph_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
        shape = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        out.append(InputSpec(vi.name, dtype, shape))
    return out


def lengths_checks(model: onnx.ModelProto) -> list[LengthsCheck]:
    names = {i.name for i in graph_inputs(model)}
    out = []
    for node in model.graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN") and len(node.input) > 4 and node.input[4] in names:
            layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
            x = node.input[0] if node.input[0] in names else None
            out.append(LengthsCheck(node.name, node.input[4], x, 1 if layout else 0))
    return out


class CompiledModel:
    """The result of `persist_rnn.compile`: run it, read its report, export it."""

    def __init__(self, executable, target: tvm.target.Target, report: list[LayerReport],
                 inputs: list[InputSpec], output_names: list[str], checks: list[LengthsCheck]):
        self.executable = executable
        self.target = target
        self._report = report
        self.inputs = inputs
        self.output_names = output_names
        self._checks = checks
        self._vm = None

    @property
    def device(self):
        return tvm.cuda(0) if self.target.kind.name == "cuda" else tvm.cpu(0)

    def report(self) -> list[LayerReport]:
        return list(self._report)

    def _validate(self, inputs: dict) -> list[np.ndarray]:
        if not isinstance(inputs, dict):
            raise PersistRNNError(f"run() takes a dict of input name -> numpy array, got {type(inputs).__name__}")
        expected = [i.name for i in self.inputs]
        unknown = sorted(set(inputs) - set(expected))
        missing = [n for n in expected if n not in inputs]
        if unknown or missing:
            raise PersistRNNError(f"inputs: unknown {unknown}, missing {missing}; the model takes {expected}")
        arrays, dims = [], {}
        for spec in self.inputs:
            a = np.asarray(inputs[spec.name])
            if a.dtype != np.dtype(spec.dtype):
                raise PersistRNNError(f"input {spec.name!r}: dtype {a.dtype}, expected {spec.dtype}")
            if spec.shape is not None:
                if a.ndim != len(spec.shape):
                    raise PersistRNNError(f"input {spec.name!r}: shape {a.shape}, expected rank {len(spec.shape)} "
                                          f"{tuple(spec.shape)}")
                for axis, (got, want) in enumerate(zip(a.shape, spec.shape)):
                    if isinstance(want, int) and want > 0 and got != want:
                        raise PersistRNNError(f"input {spec.name!r}: shape {a.shape}, expected {tuple(spec.shape)}")
                    if isinstance(want, str):
                        seen = dims.setdefault(want, (got, spec.name))
                        if seen[0] != got:
                            raise PersistRNNError(f"input {spec.name!r}: dimension {want!r} (axis {axis}) is {got}, "
                                                  f"but {seen[1]!r} gave it {seen[0]}")
            arrays.append(np.require(a, requirements="C"))  # keeps 0-d inputs 0-d (ascontiguousarray does not)
        for c in self._checks:
            lens = np.asarray(inputs[c.lens])
            bound = np.asarray(inputs[c.x]).shape[c.time_axis] if c.x is not None else None
            if (lens < 0).any() or (bound is not None and (lens > bound).any()):
                raise PersistRNNError(f"node {c.node!r}: input 'sequence_lens' ({c.lens!r}) is {lens.tolist()}; "
                                      f"expected values in [0, {bound if bound is not None else 'T'}]")
        return arrays

    def run(self, inputs: dict) -> list[np.ndarray]:
        """Outputs in the ONNX graph's output order, as numpy arrays."""
        arrays = self._validate(inputs)
        if self._vm is None:
            self._vm = relax.VirtualMachine(self.executable, self.device)
        dev = self.device
        out = self._vm["main"](*[tvm.runtime.tensor(a, dev) for a in arrays])
        outs = list(out) if not hasattr(out, "numpy") else [out]
        return [o.numpy() for o in outs]

    def export_library(self, path: str) -> None:
        """Write the shared library, plus `path`.json describing inputs, outputs and the report."""
        self.executable.export_library(path)
        meta = {
            "target": json.loads(str(self.target)),
            "inputs": [dataclasses.asdict(i) for i in self.inputs],
            "outputs": self.output_names,
            "report": [r.as_dict() for r in self._report],
            "checks": [dataclasses.asdict(c) for c in self._checks],
        }
        with open(str(path) + ".json", "w") as f:
            json.dump(meta, f, indent=1)


def load(path: str) -> CompiledModel:
    """A CompiledModel from `export_library`'s two files."""
    with open(str(path) + ".json") as f:
        meta = json.load(f)
    ex = tvm.runtime.load_module(str(path))
    target = tvm.target.Target(meta["target"])
    return CompiledModel(ex, target, [LayerReport(**r) for r in meta["report"]],
                         [InputSpec(**i) for i in meta["inputs"]], meta["outputs"],
                         [LengthsCheck(**c) for c in meta["checks"]])
