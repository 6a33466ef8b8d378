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
              num_layers: int, bidirectional: bool, batch_first: bool, table: torch.Tensor | None,
              final_states: bool, head: list[torch.Tensor], head_bias: bool, hidden_index: int | None = None
              ) -> list[torch.Tensor]:
    """`states`: the initial states, or none (zero); `table`: the embedding table where x is token ids;
    `final_states`: whether the final states are returned after the output sequence (the layer's own);
    `hidden_index`: the one final hidden state returned in the sequence's place, where set;
    `head`: the weight (and bias, where `head_bias`) of a Linear taken after the sequence, or none."""
    hx = None if not states else tuple(states) if len(states) == 2 else states[0]
    taken = None if not head else (head[0], head[1] if head_bias else None)
    outputs = _LAYERS[layer](x, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first, table,
                             taken)
    return [o.contiguous() for o in outputs]  # as the fake implementation says: a batch-first Y is a transposed view


@recurrent.register_fake
def _(x, states, params, layer, has_biases, num_layers, bidirectional, batch_first, table, final_states, head,
      head_bias, hidden_index=None):
    directions, hidden = 2 if bidirectional else 1, params[1].shape[-1]
    rows = x.shape if table is not None else x.shape[:-1]  # token ids, or features last
    batch, dtype = rows[0 if batch_first else 1], params[0].dtype
    if hidden_index is not None:  # one final hidden state (B, hidden), or the head's output of it
        return [x.new_empty((batch, head[0].shape[0] if head else hidden), dtype=dtype)]
    y = x.new_empty((*rows, head[0].shape[0] if head else directions * hidden), dtype=dtype)
    if not final_states:
        return [y]
    state = (num_layers * directions, batch, hidden)
    return [y] + [x.new_empty(state, dtype=dtype) for _ in range(2 if _LAYERS[layer].cell == "lstm" else 1)]


def as_custom_op(layer: RecurrentLayer):
    """A function with the FX op's arguments that calls the custom op for `layer`."""
    _LAYERS.append(layer)
    index = len(_LAYERS) - 1

    def call(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, table=None, head=None):
        states = [] if hx is None else list(hx) if isinstance(hx, (tuple, list)) else [hx]
        weights = [] if head is None else [t for t in head if t is not None]
        return tuple(torch.ops.persist_rnn.recurrent(x, states, list(params), index, has_biases, num_layers,
                                                     bidirectional, batch_first, table, layer.final_states, weights,
                                                     head is not None and head[1] is not None, layer.hidden_index))

    return call
