"""A RecurrentLayer as `torch.ops.persist_rnn.recurrent`, for the backend's "rest": "inductor": a
custom op with a fake implementation (its outputs' shapes) is one that inductor compiles around,
calling it as it is, where a plain Python callable would be traced into."""
from __future__ import annotations

import torch

from .recurrent_layer import RecurrentLayer

#: the layers behind the op, by the id the op carries
_LAYERS: list[RecurrentLayer] = []


@torch.library.custom_op("persist_rnn::recurrent", mutates_args=())
def recurrent(x: torch.Tensor, states: list[torch.Tensor], params: list[torch.Tensor], layer: int, has_biases: bool,
              num_layers: int, bidirectional: bool, batch_first: bool) -> list[torch.Tensor]:
    hx = tuple(states) if len(states) == 2 else states[0]
    outputs = _LAYERS[layer](x, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
    return [o.contiguous() for o in outputs]  # as the fake implementation says: a batch-first Y is a transposed view


@recurrent.register_fake
def _(x, states, params, layer, has_biases, num_layers, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    y = x.new_empty((*x.shape[:-1], directions * states[0].shape[-1]))
    return [y] + [s.new_empty(s.shape) for s in states]


def as_custom_op(layer: RecurrentLayer):
    """A function with the FX op's arguments that calls the custom op for `layer`."""
    _LAYERS.append(layer)
    index = len(_LAYERS) - 1

    def call(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        states = list(hx) if isinstance(hx, (tuple, list)) else [hx]
        return tuple(torch.ops.persist_rnn.recurrent(x, states, list(params), index, has_biases, num_layers,
                                                     bidirectional, batch_first))

    return call
