"""CompiledModel: a built model that runs on numpy or DLPack (device) inputs and checks them
against the ONNX graph."""
from __future__ import annotations

import dataclasses
import json
import sys
import threading

import numpy as np
import onnx
import tvm
import tvm_ffi
from tvm import relax

from .errors import PersistRNNError
from .gpu_fit import GRID_WIDE_LOWERINGS, compiled_for, gpu_problem
from .input_checks import from_dict as check_from_dict
from .input_checks import verify
from .report import LayerReport
from .schedule.gpu import present_gpu
from .stream_order import current_stream_handle, ordered_after_other_streams, pool_shared_with_graph


@dataclasses.dataclass
class InputSpec:
    name: str
    dtype: str
    shape: list  # ints for static dims, strings for symbolic ones, None for unknown


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


def _from_dlpack(name: str, value) -> tuple[tvm.runtime.Tensor, bool]:
    """The DLPack array as a TVM tensor, and whether that is the array's own memory: it is when
    the array is 64-byte aligned, as TVM's kernels assume; else it is one copy on the array's
    device (a view at an odd offset)."""
    try:
        return tvm.runtime.from_dlpack(value), True
    except (RuntimeError, ValueError):
        try:
            raw = tvm_ffi.from_dlpack(value, require_contiguous=True)
        except (RuntimeError, ValueError) as err:
            raise PersistRNNError(f"input {name!r}: not a contiguous array ({err}); pass a contiguous one") from None
        aligned = tvm.runtime.empty(raw.shape, raw.dtype, raw.device)
        aligned.copyfrom(raw)
        return aligned, False


_OUTPUT_MODES = ("auto", "numpy", "device")
_FRAMEWORKS = {}  # type of a DLPack array -> its framework module (with from_dlpack), or None


def _framework_of(kind: type):
    """The module of a DLPack array's type (torch for torch.Tensor), looked up once per type."""
    if kind not in _FRAMEWORKS:
        module = sys.modules.get(kind.__module__.split(".")[0])
        _FRAMEWORKS[kind] = module if module is not None and hasattr(module, "from_dlpack") else None
    return _FRAMEWORKS[kind]


def _copied(tensor: tvm.runtime.Tensor) -> tvm.runtime.Tensor:
    """A TVM tensor's values in memory of its own, outside the VM's pool."""
    return tvm.runtime.empty(tensor.shape, tensor.dtype, tensor.device).copyfrom(tensor)


def _framework_copy(array):
    """A framework's array copied on the device: torch's `clone`, else `copy` (CuPy, JAX)."""
    copy = getattr(array, "clone", None) or getattr(array, "copy", None)
    return copy() if copy is not None else array


class CompiledModel:
    """The result of `persist_rnn.compile`: run it, read its report, export it."""

    def __init__(self, executable, target: tvm.target.Target, report: list[LayerReport],
                 inputs: list[InputSpec], output_names: list[str], checks: list,
                 notes: list[str] | None = None, origin: dict | None = None):
        self.executable = executable
        self.target = target
        self._report = report
        self.inputs = inputs
        self.output_names = output_names
        self._checks = checks
        self.notes = list(notes or [])  # what the front door pinned and folded
        #: what it was compiled from and how, for a check against ONNX Runtime after `load`:
        #: {"model": the ONNX path or None, "sha256": its bytes' digest, "constants": pinned inputs,
        #: "precision": the build's}
        self.origin = dict(origin or {})
        self._local = threading.local()  # a VM per thread: a VM keeps each call's values in its registers
        self._dtypes = [str(np.dtype(i.dtype)) for i in inputs]
        self._names = {i.name: None for i in inputs}.keys()  # ordered, and compares equal to a dict's keys
        self._device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
        self._on_cuda = self._device.dlpack_device_type() == 2
        if target.kind.name == "cuda":  # the GPU it was planned for, which `gpu_problem` checks
            self.origin.setdefault("gpu", compiled_for(target))

    @property
    def device(self):
        return self._device

    def report(self) -> list[LayerReport]:
        return list(self._report)

    def _refuse_other_gpu(self) -> None:
        """A clear error where the GPU present cannot run this build (`gpu_fit`), before CUDA's."""
        if self._on_cuda:
            grid_wide = any(r.lowering in GRID_WIDE_LOWERINGS for r in self._report)
            problem = gpu_problem(self.origin.get("gpu", {}), present_gpu(), grid_wide)
            if problem:
                raise PersistRNNError(problem)

    def _as_array(self, name: str, value):
        """numpy stays numpy (copied to the device at the call); a DLPack array (torch, CuPy, JAX,
        a TVM tensor) becomes a TVM tensor without a copy, and must already be on the model's
        device. Returns (array, the framework module of a DLPack input or None, the input itself
        when the TVM tensor is a view of it, else None)."""
        kind = type(value)
        if kind is np.ndarray or kind is tvm.runtime.Tensor:  # the common cases first: run() is per call
            return value, None, None
        if not hasattr(value, "__dlpack__") or isinstance(value, (np.ndarray, np.generic)):
            return np.asarray(value), None, None  # also Python scalars and lists
        if isinstance(value, tvm.runtime.Tensor):
            return value, None, None
        tensor, is_view = _from_dlpack(name, value)
        if tensor.device != self._device:
            raise PersistRNNError(f"input {name!r} is on {tensor.device}, but the model runs on {self.device}: "
                                  "move it there first (run() copies nothing between devices)")
        return tensor, _framework_of(kind), value if is_view else None

    def _validate(self, inputs: dict) -> tuple[list, object, list]:
        """(arrays in input order, numpy or TVM tensors; the framework of the DLPack inputs, if any;
        per input, the DLPack input itself where its TVM tensor is a view of it, else None)."""
        if not isinstance(inputs, dict):
            raise PersistRNNError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        if inputs.keys() != self._names:
            expected = [i.name for i in self.inputs]
            unknown, missing = sorted(set(inputs) - self._names), [n for n in expected if n not in inputs]
            raise PersistRNNError(f"inputs: unknown {unknown}, missing {missing}; the model takes {expected}")
        arrays, views, dims, framework = [], [], {}, None
        for spec, dtype in zip(self.inputs, self._dtypes):
            a, from_framework, view = self._as_array(spec.name, inputs[spec.name])
            views.append(view)
            framework = framework or from_framework
            if a.dtype != dtype:
                raise PersistRNNError(f"input {spec.name!r}: dtype {a.dtype}, expected {spec.dtype}")
            if spec.shape is not None:
                self._check_shape(spec, tuple(a.shape), dims)
            if type(a) is np.ndarray:
                a = np.require(a, requirements="C")  # keeps 0-d inputs 0-d (ascontiguousarray does not)
            arrays.append(a)
        if self._checks:
            verify(self._checks, dict(zip(self._names, arrays)))  # input_checks: lengths, Gather indices
        return arrays, framework, views

    @staticmethod
    def _check_shape(spec: InputSpec, shape: tuple, dims: dict) -> None:
        """The input's shape against the graph's: static sizes equal, one size per symbolic name
        (`dims`: name -> (size, the input that set it), shared by the call's inputs)."""
        if len(shape) != len(spec.shape):
            raise PersistRNNError(f"input {spec.name!r}: shape {shape}, expected rank {len(spec.shape)} "
                                  f"{tuple(spec.shape)}")
        for axis, (got, want) in enumerate(zip(shape, spec.shape)):
            if isinstance(want, int) and want > 0 and got != want:
                raise PersistRNNError(f"input {spec.name!r}: shape {shape}, expected {tuple(spec.shape)}")
            if isinstance(want, str):
                seen = dims.setdefault(want, (got, spec.name))
                if seen[0] != got:
                    raise PersistRNNError(f"input {spec.name!r}: dimension {want!r} (axis {axis}) is {got}, "
                                          f"but {seen[1]!r} gave it {seen[0]}")

    def run(self, inputs: dict, *, outputs: str = "auto") -> list:
        """Outputs in the ONNX graph's output order. Inputs are numpy arrays, or DLPack arrays
        (torch, CuPy, JAX, TVM tensors) already on the model's device, taken without a copy.
        `outputs`: "auto" gives numpy for numpy inputs and the inputs' framework's tensors (on the
        device, no copy) for DLPack inputs; "numpy" always copies to the host; "device" keeps them
        on the device (the framework's tensors, or TVM tensors for numpy inputs)."""
        if outputs not in _OUTPUT_MODES:
            raise PersistRNNError(f"run(outputs={outputs!r}): expected 'auto', 'numpy' or 'device'")
        arrays, framework, views = self._validate(inputs)
        main = getattr(self._local, "main", None)
        if main is None:
            self._refuse_other_gpu()
            self._local.vm = relax.VirtualMachine(self.executable, self.device)
            main = self._local.main = self._local.vm["main"]
        dev = self.device
        to_host = outputs == "numpy" or (outputs == "auto" and framework is None and
                                         not any(isinstance(a, tvm.runtime.Tensor) for a in arrays))
        # A framework's own tensors go to the VM as they are when the outputs stay with it:
        # tvm_ffi then hands the outputs back as that framework's tensors, in C (torch's DLPack
        # exchange API), where a from_dlpack per output costs ~5 us of host time on the H100 box.
        args = [v if v is not None and not to_host else a if isinstance(a, tvm.runtime.Tensor)
                else tvm.runtime.tensor(a, dev) for a, v in zip(arrays, views)]
        if framework is not None and self._on_cuda and framework.__name__ == "torch":
            # torch CUDA tensors: launch on torch's current stream (and into a torch.cuda.graph
            # capture), so that the call is ordered with the user's torch work, and after the last
            # call on any other stream (stream_order: the VM's memory pool is not stream-aware).
            # The raw-stream context stays even when torch's own tensors go to the VM: tvm_ffi
            # did not take torch's stream from them on the H100 box (the side-stream tests trapped)
            handle = current_stream_handle(framework, dev.index)
            with tvm_ffi.use_raw_stream(dev, handle), ordered_after_other_streams(framework, dev.index,
                                                                                  handle) as captured:
                out = main(*args)
        else:
            captured = False
            out = main(*args)
        outs = list(out) if isinstance(out, (tvm_ffi.Array, tuple, list)) else [out]
        if to_host:
            return [o.numpy() for o in outs]
        # once a CUDA graph was captured on the device, its replays write into pool memory that the
        # pool hands out again: device outputs leave the pool (stream_order.pool_shared_with_graph);
        # a captured call's own outputs are the graph's, and stay where its replays write them
        copy_out = not captured and self._on_cuda and pool_shared_with_graph(dev.index)
        if framework is None:
            return [_copied(o) if isinstance(o, tvm.runtime.Tensor) else o for o in outs] if copy_out else outs
        outs = [framework.from_dlpack(o) if isinstance(o, tvm.runtime.Tensor) else o for o in outs]
        return [_framework_copy(o) for o in outs] if copy_out else outs

    def export_library(self, path: str) -> None:
        """Write the shared library, plus `path`.json describing inputs, outputs and the report."""
        self.executable.export_library(path)
        meta = {
            "target": json.loads(str(self.target)),
            "inputs": [dataclasses.asdict(i) for i in self.inputs],
            "outputs": self.output_names,
            "report": [r.as_dict() for r in self._report],
            "checks": [dataclasses.asdict(c) for c in self._checks],
            "notes": self.notes,
            "origin": self.origin,
        }
        with open(str(path) + ".json", "w") as f:
            json.dump(meta, f, indent=1)


def load(path: str) -> CompiledModel:
    """A CompiledModel from `export_library`'s two files."""
    from .schedule.gpu import present_device

    with open(str(path) + ".json") as f:
        meta = json.load(f)
    target = tvm.target.Target(meta["target"])
    if target.kind.name == "cuda" and present_device() is None:
        raise PersistRNNError(f"{path} was compiled for cuda and there is no CUDA GPU here; compile the model "
                              "for llvm to run it on the CPU")
    ex = tvm.runtime.load_module(str(path))
    model = CompiledModel(ex, target, [LayerReport(**r) for r in meta["report"]],
                         [InputSpec(**i) for i in meta["inputs"]], meta["outputs"],
                         [check_from_dict(c) for c in meta["checks"]], meta.get("notes", []), meta.get("origin"))
    model._refuse_other_gpu()
    return model
