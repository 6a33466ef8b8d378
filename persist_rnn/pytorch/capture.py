"""A torch module as ONNX, the way persist_rnn's ONNX path takes it: torch's TorchScript exporter,
the dimensions the user names symbolic, the module's outputs' structure kept for the way back.

Why the ONNX exporter and not TVM's `from_exported_program` (docs/design.md, *PyTorch in*): each
nn.LSTM / nn.GRU / nn.RNN layer becomes one ONNX recurrent node named after its module
("/encoder/lstm/LSTM_1"), which the importer, the front door, the input checks, the report and the
real-model corpus already take; TVM's torch converters refuse num_layers > 1 in their own form, and
torch.export could not export three of the corpus's six models with a symbolic time axis.
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import warnings

import onnx
import torch
from torch.utils import _pytree as pytree

from ..errors import PersistRNNError
from ..frontend.graph_values import constant_names

#: the opset of the capture: the corpus's exports, and every LSTM/GRU/RNN attribute the importer takes
OPSET = 17


@dataclasses.dataclass
class Capture:
    """The ONNX model of a module, and how its torch call maps onto the model's inputs and outputs."""

    model: onnx.ModelProto
    #: per positional argument of forward: its ONNX input name, or None (not a tensor, or unused by the graph)
    input_names: list
    #: the arguments that are not tensors, as in the example: a call must pass the same
    constants: dict
    #: the structure of forward's output (torch's pytree), its leaves the ONNX outputs in order
    output_spec: object


def _argument_names(module: torch.nn.Module, count: int) -> list[str]:
    """ONNX input names for forward's first `count` positional arguments: their own names."""
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input_{k}" for k in range(len(names), count)]


def dynamic_axes(dynamic, names: list[str], examples: list) -> dict:
    """The exporter's dynamic_axes ({input name: {axis: dim name}}) from `dynamic`:
    {dim name: axis} (that axis of every tensor argument), or {dim name: {argument (name or
    position): axis}}."""
    if dynamic is None:
        return {}
    if not isinstance(dynamic, dict):
        raise PersistRNNError(f"dynamic={dynamic!r}: expected a dict such as {{'batch': 0}} (dimension name -> axis "
                              "of every input) or {'batch': {'x': 0, 'lengths': 0}} (-> axis of each input)")
    tensors = {n: x for n, x in zip(names, examples) if isinstance(x, torch.Tensor)}
    out: dict = {}
    for dim, where in dynamic.items():
        if isinstance(where, int):
            where = {n: where for n, x in tensors.items() if x.dim() > where}
        if not isinstance(where, dict) or not where:
            raise PersistRNNError(f"dynamic[{dim!r}] = {where!r}: expected an axis, or a dict of argument -> axis, that "
                                  "names at least one tensor argument")
        for arg, axis in where.items():
            name = names[arg] if isinstance(arg, int) and 0 <= arg < len(names) else arg
            if name not in tensors:
                raise PersistRNNError(f"dynamic[{dim!r}]: {arg!r} is not a tensor argument of forward; the tensor "
                                      f"arguments are {list(tensors)}")
            if not isinstance(axis, int) or not -tensors[name].dim() <= axis < tensors[name].dim():
                raise PersistRNNError(f"dynamic[{dim!r}]: axis {axis!r} of {name!r}, which has shape "
                                      f"{tuple(tensors[name].shape)}")
            out.setdefault(name, {})[axis % tensors[name].dim()] = dim
    return out


def capture(module: torch.nn.Module, example_inputs, dynamic=None) -> Capture:
    """Export `module` (in eval mode, as inference runs it) at `example_inputs` to ONNX; `dynamic`
    names the dimensions that vary between calls (`dynamic_axes`)."""
    if not isinstance(module, torch.nn.Module):
        raise PersistRNNError(f"expected a torch.nn.Module, got {type(module).__name__}")
    examples = list(example_inputs) if isinstance(example_inputs, (tuple, list)) else [example_inputs]
    names = _argument_names(module, len(examples))
    axes = dynamic_axes(dynamic, names, examples)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            outputs = module(*examples)
        leaves, spec = pytree.tree_flatten(outputs)
        if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise PersistRNNError(f"{type(module).__name__}.forward returns {type(outputs).__name__} with values that "
                                  "are not tensors; persist_rnn compiles modules whose outputs are tensors")
        buffer = io.BytesIO()
        tensor_names = [n for n, x in zip(names, examples) if isinstance(x, torch.Tensor)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation and batch-size notes
            torch.onnx.export(module, tuple(examples), buffer, input_names=tensor_names,
                              output_names=[f"output_{k}" for k in range(len(leaves))], dynamic_axes=axes,
                              opset_version=OPSET, dynamo=False)
    except PersistRNNError:
        raise
    except Exception as err:  # the exporter's refusals: RuntimeError, SymbolicValueError, UnsupportedOperatorError
        raise PersistRNNError(f"torch's ONNX exporter could not export {type(module).__name__}: "
                              f"{str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}"
                              f"{_hint(module)}") from err
    finally:
        module.train(was_training)
    model = onnx.load_from_string(buffer.getvalue())
    _refuse_runtime_sort(model, module)
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input if i.name not in inits}
    return Capture(model, [n if n in graph_inputs else None for n in names],
                   {k: x for k, x in enumerate(examples) if not isinstance(x, torch.Tensor)}, spec)


def _runtime_sorts(model: onnx.ModelProto) -> list[str]:
    """The TopK nodes whose k is not a constant."""
    constants = constant_names(model.graph)
    return [n.name for n in model.graph.node if n.op_type == "TopK" and len(n.input) > 1 and n.input[1] not in constants]


def _refuse_runtime_sort(model: onnx.ModelProto, module: torch.nn.Module) -> None:
    """pack_padded_sequence(..., enforce_sorted=False) exports as a TopK of the lengths whose k is
    the batch; over a dynamic batch, k stays unknown once the graph is folded (front_door.fold), and
    TVM's ONNX importer refuses it and the shape arithmetic after it. Say so, and what works,
    before the importer fails on a node the user never wrote."""
    if not _runtime_sorts(model):
        return
    from ..frontend.front_door import fold

    left = _runtime_sorts(fold(model)[0])
    if left:
        raise PersistRNNError(
            f"{type(module).__name__}: node {left[0]!r} sorts by a count known only at run time, as torch exports "
            "pack_padded_sequence(..., enforce_sorted=False) over a dynamic batch, which TVM's ONNX importer cannot "
            "take; pass the lengths sorted with enforce_sorted=True, or compile for a static batch (leave the batch "
            "out of dynamic=)")


def _hint(module: torch.nn.Module) -> str:
    """What to do about layers ONNX cannot hold: an LSTM with a projection."""
    projected = [name or type(module).__name__ for name, m in module.named_modules()
                 if isinstance(m, torch.nn.LSTM) and m.proj_size > 0]
    if projected:
        return (f"; {projected} are LSTMs with proj_size, which ONNX has no operator for: torch.compile(module, "
                "backend='persist_rnn') keeps such a layer in torch and runs the others persistent")
    return ""
