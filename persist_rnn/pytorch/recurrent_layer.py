"""One recurrent op of a torch FX graph (torch.lstm / gru / rnn_tanh / rnn_relu, as dynamo records an
nn.LSTM, nn.GRU or nn.RNN call) run by a persistent kernel, where persist_rnn takes it.

The op's weights arrive with each call (dynamo passes parameters as graph inputs). The layer is
compiled at its first call from an nn module of the same configuration holding those weights, with
batch and time symbolic, so one build serves every batch (a kernel per batch bucket) and length.
Builds are shared by weights and configuration: dynamo's recompile for a new shape finds its build.
Weights changed in place (a training step) make a new build. What the kernels cannot take, or a
build that fails, runs as torch's own op, and `reports()` says why.
"""
from __future__ import annotations

import collections
import dataclasses
import warnings

import torch

from ..errors import PersistRNNError

#: the FX targets of dynamo's recurrent ops -> (cell, the nn module class, gate mode for RNN)
RECURRENT_OPS = {torch.lstm: ("lstm", torch.nn.LSTM, None), torch.gru: ("gru", torch.nn.GRU, None),
                 torch.rnn_tanh: ("rnn", torch.nn.RNN, "tanh"), torch.rnn_relu: ("rnn", torch.nn.RNN, "relu")}

#: builds kept, by (weights, configuration, target, options)
_BUILDS: collections.OrderedDict = collections.OrderedDict()
_MAX_BUILDS = 64


@dataclasses.dataclass
class LayerOutcome:
    """What became of one recurrent op of a torch.compile'd graph: its module path, and the
    compiled layer's reports (persistent, wavefront, ...) or why torch runs it."""

    module: str
    cell: str
    runs_in: str = "pending"  # "persist_rnn" | "torch" | "pending" (not called yet)
    why: str = ""
    layers: list = dataclasses.field(default_factory=list)  # LayerReports of the build

    def line(self) -> str:
        if self.runs_in == "persist_rnn":
            return "\n".join(r.line() for r in self.layers)
        return f"{self.module}: {self.cell.upper()}: {self.runs_in}" + (f" ({self.why})" if self.why else "")


def refusal(target, args) -> str:
    """Why the op `target(*args)` stays torch's (empty if persist_rnn takes it): packed sequences,
    training with dropout, LSTM projections."""
    cell, _, _ = RECURRENT_OPS[target]
    if len(args) < 9 or not isinstance(args[2], (list, tuple)):
        return "a packed sequence (the batch_sizes form of the op): runs as torch's op"
    params, has_biases, num_layers, dropout, train, bidirectional = args[2], *args[3:8]
    if train and dropout > 0:
        return "dropout in training mode"
    per_layer = (2 if bidirectional else 1) * (4 if has_biases else 2)
    if len(params) != num_layers * per_layer:
        return "an LSTM with proj_size (ONNX and the persistent kernels have no projection)"
    return ""


class RecurrentLayer:
    """The callable that stands in the FX graph for one recurrent op (`RECURRENT_OPS`)."""

    def __init__(self, target, module_path: str, options: dict, outcome: LayerOutcome):
        self.__name__ = "persist_rnn_layer"  # FX's code generation names a call_function target by it
        self.torch_op = target
        self.cell, self.module_class, self.nonlinearity = RECURRENT_OPS[target]
        self.options = options
        self.outcome = outcome
        self.build = None
        self.key = None

    def __call__(self, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        args = (x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        if not self.ready(x, params, has_biases, num_layers, bidirectional, batch_first):
            return self.torch_op(*args)
        states = list(hx) if isinstance(hx, (tuple, list)) else [hx]
        return tuple(_flat(self.build(x, *states)))

    def ready(self, x, params, has_biases, num_layers, bidirectional, batch_first) -> bool:
        """Whether the layer is built for these weights and this input (building it if not); False:
        torch's op runs it. `x` may be a fake tensor: its feature size, dtype and device are read."""
        if self.outcome.runs_in == "torch":
            return False
        key = (tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params),
               int(x.shape[-1]), num_layers, has_biases, bidirectional, batch_first, x.dtype, x.device)
        if key != self.key:
            try:
                self.build = self._built(key, x, params, has_biases, num_layers, bidirectional, batch_first)
            except PersistRNNError as err:
                self.outcome.runs_in, self.outcome.why = "torch", f"persist_rnn could not build it: {err}"
                warnings.warn(f"persist_rnn: {self.outcome.module} runs as torch's op: {err}", stacklevel=3)
                return False
            self.key = key
            self.outcome.runs_in, self.outcome.layers = "persist_rnn", self.build.report()
        return True

    def _built(self, key, x, params, has_biases, num_layers, bidirectional, batch_first):
        """The compiled layer for these weights and this configuration (shared, `_BUILDS`)."""
        target = self.options.get("target", "auto")
        options = {k: v for k, v in self.options.items() if k != "target"}
        build_key = (key, self.cell, self.nonlinearity, repr(target), repr(sorted(options.items())))
        if build_key in _BUILDS:
            _BUILDS.move_to_end(build_key)
            return _BUILDS[build_key]
        from .module import compile_module

        hidden = params[1].shape[-1]
        extra = {"nonlinearity": self.nonlinearity} if self.nonlinearity else {}
        layer = self.module_class(int(x.shape[-1]), hidden, num_layers=num_layers, bias=has_biases, batch_first=batch_first,
                                  bidirectional=bidirectional, **extra).to(device=x.device, dtype=x.dtype).eval()
        with torch.no_grad():
            for name, value in zip(layer._flat_weights_names, params):
                getattr(layer, name).copy_(value)
        batch_axis, time_axis = (0, 1) if batch_first else (1, 0)
        examples = [torch.zeros(2 if batch_first else 3, 3 if batch_first else 2, int(x.shape[-1]), dtype=x.dtype,
                                device=x.device)]
        n_states = 2 if self.cell == "lstm" else 1
        directions = 2 if bidirectional else 1
        examples += [torch.zeros(num_layers * directions, 2, hidden, dtype=x.dtype, device=x.device)
                     for _ in range(n_states)]
        names = ["x", "h0", "c0"][:1 + n_states]
        dynamic = {"batch": {"x": batch_axis, **{n: 1 for n in names[1:]}}, "time": {"x": time_axis}}
        build = compile_module(_WithStates(layer, self.cell), tuple(examples), target=target, dynamic=dynamic,
                               **options)
        for report in build.compiled._report:  # "layer, layer 2 of 3" (_WithStates.layer) -> "encoder.lstm, layer 2 of 3"
            report.module = self.outcome.module + report.module[len("layer"):]
        _BUILDS[build_key] = build
        while len(_BUILDS) > _MAX_BUILDS:
            _BUILDS.popitem(last=False)
        return build


class _WithStates(torch.nn.Module):
    """An nn.LSTM / GRU / RNN called with its initial states as arguments (x, h0[, c0]), as the FX op is."""

    def __init__(self, layer, cell: str):
        super().__init__()
        self.layer = layer
        self.cell = cell

    def forward(self, x, h0, c0=None):
        return self.layer(x, (h0, c0) if self.cell == "lstm" else h0)


def _flat(outputs):
    """(y, h[, c]) from the module's (y, (h, c)) or (y, h)."""
    y, states = outputs
    return [y, *states] if isinstance(states, (tuple, list)) else [y, states]
