"""`torch.compile(model, backend="persist_rnn")`: the graph's recurrent ops on persistent kernels,
everything else as torch runs it.

dynamo does not trace nn.LSTM / nn.GRU / nn.RNN unless `torch._dynamo.config.allow_rnn` is set
(otherwise the call is a graph break and runs eagerly), so looking this backend up sets it, for
the process: torch.compile hands a backend nothing that runs before dynamo traces, so it cannot
be set for this backend's traces alone. Set it back (`torch._dynamo.config.allow_rnn = False`)
before compiling other models with inductor in the same process: inductor, traced into an LSTM,
unrolls it into kernels a step (14 ms a call for the char-RNN on the H100, where cuDNN takes 0.6).
In
each FX graph dynamo hands over, every recurrent op that persist_rnn takes is replaced by a
`RecurrentLayer` (recurrent_layer.py); the graph then runs as torch's eager code (`options`'s
"rest": "eager", the default) or through inductor ("inductor": each layer an opaque custom op for
it). What the backend does not take (packed sequences: a graph break in dynamo; LSTM projections)
runs as torch's own op, so every model torch runs, runs. `reports()` lists each layer's outcome.

    torch.compile(model, backend="persist_rnn", options={"target": "cuda", "precision": "fp32"})
"""
from __future__ import annotations

import re

import torch

from ..errors import PersistRNNError
from .recurrent_layer import RECURRENT_OPS, LayerOutcome, RecurrentLayer, refusal

#: every layer the backend has met, in the order met
_OUTCOMES: list[LayerOutcome] = []


def reports() -> list[LayerOutcome]:
    """What became of each recurrent op of the graphs the backend compiled (latest last)."""
    return list(_OUTCOMES)


def _module_path(node) -> str:
    """The op's module ("encoder.lstm") from dynamo's nn_module_stack ("L['self'].encoder.lstm")."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return node.name
    path = list(stack.values())[-1][0]
    return re.sub(r"^L\['[^']*'\]\.?", "", path) or node.name


def persist_rnn_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The backend: `options` are persist_rnn.compile's (target, precision, tuning_log, wavefront,
    ...) plus "rest": "eager" (default) or "inductor" for the graph's other ops."""
    options = dict(options or {})
    rest = options.pop("rest", "eager")
    if rest not in ("eager", "inductor"):
        raise PersistRNNError(f"options['rest'] = {rest!r}: expected 'eager' or 'inductor'")
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in RECURRENT_OPS:
            continue
        outcome = LayerOutcome(_module_path(node), RECURRENT_OPS[node.target][0])
        _OUTCOMES.append(outcome)
        why = refusal(node.target, node.args)
        if why:
            outcome.runs_in, outcome.why = "torch", why
            continue
        layer = RecurrentLayer(node.target, outcome.module, options, outcome)
        _build_now(layer, node, gm, example_inputs)
        node.target = _as_custom_op(layer) if rest == "inductor" else layer
    gm.graph.lint()
    gm.recompile()
    if rest == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)
    return gm.forward


def _example_value(arg, gm, placeholders: dict):
    """A graph value's example: its example input (a parameter's real tensor), else what dynamo
    recorded (a fake tensor)."""
    if arg in placeholders:
        return placeholders[arg]
    if arg.op == "get_attr":
        return getattr(gm, arg.target)
    return arg.meta.get("example_value")


def _build_now(layer: RecurrentLayer, node, gm, example_inputs) -> None:
    """Build the layer while the backend runs, from the example inputs (its weights are among
    them): not inside the graph's first run, where inductor's runtime allows no tracing."""
    placeholders = dict(zip([n for n in gm.graph.nodes if n.op == "placeholder"], example_inputs))
    x, _, params, has_biases, num_layers, _, _, bidirectional, batch_first = node.args
    x = _example_value(x, gm, placeholders)
    params = [_example_value(p, gm, placeholders) for p in params]
    if isinstance(x, torch.Tensor) and all(isinstance(p, torch.Tensor) and not _is_fake(p) for p in params):
        layer.ready(x, params, has_biases, num_layers, bidirectional, batch_first)


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


torch._dynamo.config.allow_rnn = True  # nn.LSTM / GRU / RNN traced into dynamo's graph, not a graph break


def _register_where_not_installed() -> None:
    """An installed persist_rnn names the backend through its `torch_dynamo_backends` entry point
    (pyproject.toml); from a source tree on PYTHONPATH, importing this module names it."""
    if "persist_rnn" not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(persist_rnn_backend, name="persist_rnn")


def _as_custom_op(layer: RecurrentLayer):
    """`layer` behind torch.ops.persist_rnn.recurrent, which inductor leaves opaque (custom_op.py)."""
    from .custom_op import as_custom_op

    return as_custom_op(layer)


_register_where_not_installed()
