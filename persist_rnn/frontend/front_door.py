"""The front door for real models: pin what the graph only imports with, then fold it.

Exported models carry shape arithmetic (Shape -> Gather -> Concat -> Pad), branches on inputs
such as a sample rate (`If`), and constants computed at run time; TVM 0.27's importer refuses
much of it ("Dynamic pads are not supported yet"). Before the import:
0. ONNX Runtime's quantized LSTMs (`DynamicQuantizeLSTM`) become LSTMs with their int8 weights
   dequantized (frontend.quantized).
1. `constants` turn graph inputs into initializers (`sr=16000`), `shapes` fix the extents of
   graph inputs (`input=(1, 512)`); both leave symbolic what is not named.
2. onnxslim folds what is now constant: shape arithmetic, `If` on a known condition (its branch
   inlined), dead nodes. Chosen over onnxsim (a compiled extension, and it fixes symbolic dims
   it cannot keep) and onnxoptimizer (no constant folding): onnxslim is pure Python, keeps
   symbolic dims symbolic, and made both static silero-vad variants importable as shipped.
3. Gathers of gathered shapes are composed, so that an extent picked from a permuted shape stays
   symbolic (frontend.shape_gathers).
4. `Loop` and `Scan` over time become one recurrent node or unrolled steps (frontend.loops).
What was pinned and folded is returned as notes, which `report_notes()` of the compiled model and
the CLI print.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import PersistRNNError
from .loops import rewrite_loops
from .quantized import dequantize_lstms
from .shape_gathers import compose_shape_gathers


def _graph_input(model: onnx.ModelProto, name: str, what: str):
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name == name and name not in inits:
            return vi
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    raise PersistRNNError(f"{what} {name!r}: the model has no graph input of that name; its inputs are {names}")


def pin_constants(model: onnx.ModelProto, constants: dict) -> list[str]:
    """Each named graph input becomes an initializer holding the value (in the input's dtype)."""
    notes = []
    for name, value in constants.items():
        vi = _graph_input(model, name, "constant")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        array = np.asarray(value, dtype=dtype)
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else None
        if dims is not None and len(dims) != array.ndim:
            raise PersistRNNError(f"constant {name!r}: rank {array.ndim}, but the input has rank {len(dims)}")
        model.graph.input.remove(vi)
        model.graph.initializer.append(numpy_helper.from_array(array, name))
        notes.append(f"input {name!r} pinned to the constant {array.tolist()}")
    return notes


def pin_shapes(model: onnx.ModelProto, shapes: dict) -> list[str]:
    """Each named graph input gets the given extents: an int is static, a str names a symbolic
    axis (("B", 1, "T") pins only the channels, e.g. to fold an If on them)."""
    notes = []
    for name, shape in shapes.items():
        vi = _graph_input(model, name, "shape")
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise PersistRNNError(f"shape {name!r}: {tuple(shape)} has rank {len(shape)}, the input has rank {len(dims)}")
        shape = tuple(e if isinstance(e, str) else int(e) for e in shape)
        for dim, extent in zip(dims, shape):
            if dim.HasField("dim_value") and dim.dim_value not in (0, extent):
                raise PersistRNNError(f"shape {name!r}: {shape} contradicts the model's static extent "
                                      f"{dim.dim_value}")
            dim.Clear()
            if isinstance(extent, str):
                dim.dim_param = extent
            else:
                dim.dim_value = extent
        notes.append(f"input {name!r} pinned to shape {shape}")
    return notes


def _dims(value_info) -> list:
    t = value_info.type.tensor_type
    return [d.dim_value or d.dim_param or "?" for d in t.shape.dim] if t.HasField("shape") else None


def _forget_declared_shapes(model: onnx.ModelProto) -> dict:
    """Clear the shapes the file declares for its outputs and intermediate values (keeping dtypes),
    and return the outputs' declared dims. They are hints, and can be wrong: ddddocr's OCR model
    declares (1, seqlen) for an output that is (T, 1, 8210), and onnxslim, trusting it, folded the
    final Reshape's shape to (1, -1): same numbers, wrong shape. Folding infers shapes afresh."""
    declared = {o.name: _dims(o) for o in model.graph.output}
    for o in model.graph.output:
        o.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]
    return declared


def fold(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """onnxslim's constant folding and dead-node removal; the model as it was if onnxslim fails."""
    import onnxslim

    before = _count_nodes(model.graph)
    work = onnx.ModelProto()
    work.CopyFrom(model)
    declared = _forget_declared_shapes(work)
    try:
        slim = onnxslim.slim(work)
    except Exception as err:  # onnxslim raises what its passes raise: keep the model and say so
        return model, [f"onnxslim could not simplify the graph ({type(err).__name__}: {str(err)[:120]}); imported as is"]
    after = _count_nodes(slim.graph)
    notes = [f"onnxslim folded the graph from {before} to {after} nodes"] if after != before else []
    for o in slim.graph.output:
        got, said = _dims(o), declared.get(o.name)
        if said is not None and got is not None and len(got) != len(said):
            notes.append(f"output {o.name!r} is declared as {said} but computes rank {len(got)} {got}; the "
                         "declared shape was not used")
    return slim, notes


def _count_nodes(graph) -> int:
    return sum(1 + sum(_count_nodes(a.g) for a in n.attribute if a.HasField("g")) for n in graph.node)


def prepare(model: onnx.ModelProto, shapes=None, constants=None, simplify=True) -> tuple[onnx.ModelProto, list[str]]:
    """(the model to import, notes on what was pinned and folded). `model` is not modified."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    notes = dequantize_lstms(work) + pin_constants(work, constants or {}) + pin_shapes(work, shapes or {})
    composed = compose_shape_gathers(work)
    if composed:
        notes.append(f"{composed} Gather(s) of a gathered Shape composed into one")
    if simplify:
        work, folded = fold(work)
        notes += folded
    looped = rewrite_loops(work)
    if looped and simplify:  # unrolled steps carry shape arithmetic of their own
        work, _ = fold(work)
    return work, notes + looped
