"""Compiling an ONNX model, shared with the CLI and `persist_rnn.compile`: import, then
`persist_rnn.pipeline` (PersistentRNN and TVM's default build). A torch module takes the same road
from its ONNX capture (pytorch/module.py)."""
from __future__ import annotations

import hashlib
import os
import pathlib

import numpy as np
import tvm

from .cuda_limits import refuse_unsupported_on_cuda
from .errors import PersistRNNError, last_line
from .frontend import from_onnx, load_model
from .frontend.front_door import prepare
from .pipeline import pipeline
from .input_checks import input_checks
from .runtime import CompiledModel, graph_inputs
from .schedule.precision import checked as checked_precision
from .targets import as_target


def compile_onnx(model_or_path, target="llvm", *, tuning_log=None, shape_dict=None, unroll=False, config=None,
            top_k=5, measure=None, persistent=True, unverified=False, verbose=False, shapes=None, constants=None,
            simplify=True, precision="fp32", wavefront="auto") -> CompiledModel:
    """Compile an ONNX model. For CUDA targets each recurrent layer becomes a persistent kernel
    (unless `persistent=False`, or it cannot, in which case report() says why). `unverified`
    also allows kernel variants not yet run on a GPU (see tir_templates.persistent). TVM's
    converters print nothing unless `verbose`. `constants` ({"sr": 16000}) turn graph inputs into
    constants and `shapes` ({"input": (1, 512)}) fix input extents, for graphs that import only
    with known values; `simplify` then folds the graph with onnxslim (frontend.front_door); the
    compiled model's `notes` say what was pinned and folded. `precision` "tf32" lets fp32 layers'
    recurrent steps run on the tensor cores at TF32, as torch.backends.cudnn.allow_tf32 lets cuDNN
    (default "fp32": fp32 accuracy; schedule/precision.py). `wavefront` runs stacks of layers
    as one kernel (transform/layer_wavefront.py): "auto" (default) those a measured record of the
    tuning log, else the cost model, finds faster so; True every stack the wavefront takes (static
    batch, sm_90 or later); False none (docs/design.md, *The layer wavefront*)."""
    target = as_target(target)
    precision = checked_precision(precision)
    model, notes = prepare(load_model(model_or_path), shapes, constants, simplify)
    mod = from_onnx(model, shape_dict, unroll=unroll, target_kind=target.kind.name, verbose=verbose)
    refuse_unsupported_on_cuda(mod, target)
    layers = []
    build = pipeline(target, tuning_log=tuning_log, report=layers, persistent=persistent, config=config,
                     top_k=top_k, measure=measure, unverified=unverified, precision=precision, wavefront=wavefront)
    with tvm.transform.PassContext(opt_level=3):
        try:
            ex = tvm.compile(mod, target=target, relax_pipeline=build)
        except PersistRNNError:
            raise
        except Exception as err:  # TVM's passes raise ValueError, TVMError, AssertionError, ...
            raise PersistRNNError(f"TVM could not build the imported model for {target.kind.name}: {last_line(err)}; "
                                  "pinning input shapes or constants (shapes=, constants=) may let it fold "
                                  "what it cannot build") from err
    order = [n.name for n in model.graph.node]
    report = sorted(layers, key=lambda r: order.index(r.node) if r.node in order else len(order))
    outputs = [o.name for o in model.graph.output]
    inputs = graph_inputs(model)
    checks = input_checks(model, {i.name for i in inputs})
    return CompiledModel(ex, target, report, inputs, outputs, checks, notes,
                         _origin(model_or_path, constants, precision))


def _origin(model_or_path, constants, precision) -> dict:
    """What `CompiledModel.origin` records: the ONNX file (absolute path and digest; None for a
    ModelProto), the constants pinned in it, and the build's precision."""
    path = os.path.abspath(os.fspath(model_or_path)) if isinstance(model_or_path, (str, os.PathLike)) else None
    return {"model": path, "sha256": file_sha256(path) if path else None,
            "constants": {k: np.asarray(v).tolist() for k, v in (constants or {}).items()}, "precision": precision}


def file_sha256(path) -> str:
    """The digest `CompiledModel.origin` records of the ONNX file, and `run --check` compares."""
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
