"""One recurrent op of a torch FX graph (torch.lstm / gru / rnn_tanh / rnn_relu, as dynamo records an
nn.LSTM, nn.GRU or nn.RNN call) run by a persistent kernel, where persist_rnn takes it.

The op's weights arrive with each call (dynamo passes parameters as graph inputs). The layer is
compiled when the backend meets it (from its example inputs; else at its first call) from an nn
module of the same configuration holding those weights, with batch and time symbolic, so one
build serves every batch (a kernel per batch bucket) and length. Builds are shared by the very
weight tensors (held weakly: memory a freed model's weights leave may hold another's) and the
configuration, so dynamo's recompile for a new shape finds its build. Weights changed in place (a
training step) make a new build. What the kernels cannot take, or a build that fails, runs as
torch's own op, and `reports()` says why.
"""
from __future__ import annotations

import collections
import dataclasses
import warnings
import weakref

import torch

from ..errors import PersistRNNError

#: the FX targets of dynamo's recurrent ops -> (cell, the nn module class, gate mode for RNN)
RECURRENT_OPS = {torch.lstm: ("lstm", torch.nn.LSTM, None), torch.gru: ("gru", torch.nn.GRU, None),
                 torch.rnn_tanh: ("rnn", torch.nn.RNN, "tanh"), torch.rnn_relu: ("rnn", torch.nn.RNN, "relu")}

#: builds kept, by (weights, configuration, target, options): (build, weak references to the weights)
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


def refusal(args) -> str:
    """Why a recurrent op with these arguments stays torch's (empty if persist_rnn takes it): packed sequences,
    training with dropout, LSTM projections."""
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
    """The callable that stands in the FX graph for one recurrent op (`RECURRENT_OPS`), with the op's
    arguments, except that `hx` is None where the graph made zero initial states for it, and `x`
    is token ids where the embedding lookup that fed it is taken into the build (`table`, its
    weights): the build then folds the layer's input projection into the table, as an ONNX build
    of the model does (transform/embedding_projection.py), and zeroes no states. Where the graph
    reads only the op's output sequence (`final_states` False), the build returns that alone, so
    the final states' gathers are not computed (an ONNX build drops outputs the model does not
    return); the op's result is then (y,). Where the graph reads one final hidden state alone
    (`h_n[-1]`, a classifier's input: `hidden_index`), the build returns that one, and the result is
    (h_n[hidden_index],). A Linear that alone reads what the build returns may be taken into the
    build too (`head`, its weight and bias): the result is then (its output,), computed by the
    build's dense kernel as in an ONNX build of the model."""

    def __init__(self, target, module_path: str, options: dict, outcome: LayerOutcome, final_states: bool = True,
                 hidden_index: int | None = None):
        self.__name__ = "persist_rnn_layer"  # FX's code generation names a call_function target by it
        self.torch_op = target
        self.cell, self.module_class, self.nonlinearity = RECURRENT_OPS[target]
        self.options = options
        self.outcome = outcome
        self.final_states = final_states
        self.hidden_index = None if final_states else hidden_index
        self.build = None
        self.key = None

    def __call__(self, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, table=None,
                 head=None):
        if not self.ready(x, params, has_biases, num_layers, bidirectional, batch_first, table, states=hx is not None,
                          head=head):
            outputs = self.torch_op(*self.torch_args(x, hx, params, has_biases, num_layers, dropout, train,
                                                     bidirectional, batch_first, table))
            if self.final_states:
                return tuple(outputs)
            read = outputs[0] if self.hidden_index is None else outputs[1][self.hidden_index]
            return (read,) if head is None else (torch.nn.functional.linear(read, *head),)
        states = [] if hx is None else list(hx) if isinstance(hx, (tuple, list)) else [hx]
        outputs = self.build(x, *states)
        return tuple(_flat(outputs)) if self.final_states else (outputs,)

    def torch_args(self, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, table):
        """The torch op's own arguments: the embedding looked up, zero initial states made."""
        if table is not None:
            x = torch.nn.functional.embedding(x, table)
        if hx is None:
            shape = (num_layers * (2 if bidirectional else 1), x.shape[0 if batch_first else 1], params[1].shape[-1])
            zeros = [x.new_zeros(shape) for _ in range(2 if self.cell == "lstm" else 1)]
            hx = tuple(zeros) if self.cell == "lstm" else zeros[0]
        return x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first

    def ready(self, x, params, has_biases, num_layers, bidirectional, batch_first, table=None, states=True,
              head=None) -> bool:
        """Whether the layer is built for these weights and this input (building it if not); False:
        torch's op runs it. `x` may be a fake tensor: its shape's last extent, dtype and device are
        read. `states`: whether the call passes initial states."""
        if self.outcome.runs_in == "torch":
            return False
        weights = _weights(params, table, head)
        key = (tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in weights),
               int(table.shape[1] if table is not None else x.shape[-1]), num_layers, has_biases, bidirectional,
               batch_first, x.dtype, x.device, table is not None, states, _head_form(head))
        if key != self.key:
            try:
                self.build = self._built(key, x, params, has_biases, num_layers, bidirectional, batch_first, table,
                                         states, head)
            except PersistRNNError as err:
                self.outcome.runs_in, self.outcome.why = "torch", f"persist_rnn could not build it: {err}"
                warnings.warn(f"persist_rnn: {self.outcome.module} runs as torch's op: {err}", stacklevel=3)
                return False
            self.key = key
            self.outcome.runs_in, self.outcome.layers = "persist_rnn", self.build.report()
        return True

    def _built(self, key, x, params, has_biases, num_layers, bidirectional, batch_first, table, states, head=None):
        """The compiled layer for these weights and this configuration (shared, `_BUILDS`)."""
        target = self.options.get("target", "auto")
        options = {k: v for k, v in self.options.items() if k != "target"}
        build_key = (key, self.cell, self.nonlinearity, self.final_states, self.hidden_index, repr(target),
                     repr(sorted(options.items())))
        weights = _weights(params, table, head)
        if build_key in _BUILDS:
            build, refs = _BUILDS[build_key]
            if all(ref() is w for ref, w in zip(refs, weights)):  # the same tensors, not new ones at their addresses
                _BUILDS.move_to_end(build_key)
                return build
            del _BUILDS[build_key]
        from .module import compile_module

        hidden, dtype = params[1].shape[-1], params[0].dtype
        input_size = int(table.shape[1] if table is not None else x.shape[-1])
        extra = {"nonlinearity": self.nonlinearity} if self.nonlinearity else {}
        layer = self.module_class(input_size, hidden, num_layers=num_layers, bias=has_biases, batch_first=batch_first,
                                  bidirectional=bidirectional, **extra).to(device=x.device, dtype=dtype).eval()
        with torch.no_grad():
            for name, value in zip(layer._flat_weights_names, params):
                getattr(layer, name).copy_(value)
        batch_axis, time_axis = (0, 1) if batch_first else (1, 0)
        extent = (2, 3) if batch_first else (3, 2)  # batch 2, time 3: the exporter tells the axes apart
        examples = [torch.zeros(extent, dtype=x.dtype, device=x.device) if table is not None
                    else torch.zeros(*extent, input_size, dtype=dtype, device=x.device)]
        names = ["x"]
        if states:
            names += ["h0", "c0"][:2 if self.cell == "lstm" else 1]
            examples += [torch.zeros(num_layers * (2 if bidirectional else 1), 2, hidden, dtype=dtype, device=x.device)
                         for _ in names[1:]]
        dynamic = {"batch": {"x": batch_axis, **{n: 1 for n in names[1:]}}, "time": {"x": time_axis}}
        build = compile_module(_Layer(layer, self.cell, table, self.final_states, head, self.hidden_index),
                               tuple(examples), target=target, dynamic=dynamic, **options)
        for report in build.compiled._report:  # "layer, layer 2 of 3" (_Layer.layer) -> "encoder.lstm, layer 2 of 3"
            report.module = self.outcome.module + report.module[len("layer"):]
        _BUILDS[build_key] = (build, [weakref.ref(w) for w in weights])
        while len(_BUILDS) > _MAX_BUILDS:
            _BUILDS.popitem(last=False)
        return build


def _weights(params, table, head) -> list:
    """The tensors a build is made from: the op's weights, the embedding table and the head's."""
    return list(params) + ([table] if table is not None else []) + [t for t in head or () if t is not None]


def _head_form(head):
    """What a build's shape depends on in a taken Linear: (out_features, with a bias), or None."""
    return None if head is None else (int(head[0].shape[0]), head[1] is not None)


class _Layer(torch.nn.Module):
    """An nn.LSTM / GRU / RNN called as the FX op is (x, h0[, c0]), or without initial states (zero),
    behind an embedding lookup of `table` where the op's input was one, returning the output
    sequence alone where `final_states` is False (the final hidden state `hidden_index` alone
    where that is set), through the Linear of `head` (weight, bias) where one was taken."""

    def __init__(self, layer, cell: str, table=None, final_states: bool = True, head=None, hidden_index=None):
        super().__init__()
        self.layer = layer
        self.cell = cell
        self.final_states = final_states
        self.hidden_index = hidden_index
        self.embedding = None if table is None else torch.nn.Embedding.from_pretrained(table.detach().clone())
        self.head = None
        if head is not None:
            weight, bias = head
            self.head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                                        device=weight.device, dtype=weight.dtype).eval()
            with torch.no_grad():
                self.head.weight.copy_(weight)
                if bias is not None:
                    self.head.bias.copy_(bias)

    def forward(self, x, h0=None, c0=None):
        if self.embedding is not None:
            x = self.embedding(x)
        outputs = self.layer(x) if h0 is None else self.layer(x, (h0, c0) if self.cell == "lstm" else h0)
        if self.final_states:
            return outputs
        if self.hidden_index is None:
            read = outputs[0]
        else:
            states = outputs[1]
            read = (states[0] if self.cell == "lstm" else states)[self.hidden_index]
        return read if self.head is None else self.head(read)


def _flat(outputs):
    """(y, h[, c]) from the module's (y, (h, c)) or (y, h)."""
    y, states = outputs
    return [y, *states] if isinstance(states, (tuple, list)) else [y, states]
