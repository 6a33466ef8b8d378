"""A loop whose body is one LSTM/GRU/RNN node run for one step, rewritten as that node over the
whole sequence (T stays symbolic)."""
from __future__ import annotations

import numpy as np
import onnx

from .describe import OuterGraph, TimeLoop, attribute
from .nodes import squeeze, unsqueeze

RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def as_one_layer(loop: TimeLoop, g: OuterGraph, hoisted: dict, prefix: str):
    """(outer nodes, op) when the varying body is: x(t) read from X along axis 0 in order, one
    forward LSTM/GRU/RNN node run for that one step from the carried states, and the new states
    and stacked outputs its Y_h (and Y_c) squeezed. None otherwise."""
    varying = [n for n in loop.body.node if not all(o in hoisted or not o for o in n.output)]
    producer = {o: n for n in varying for o in n.output}
    cells = [n for n in varying if n.op_type in RECURRENT_OPS]
    if len(cells) != 1:
        return None
    cell = cells[0]
    if attribute(cell, "direction", b"forward") not in (b"forward", "forward") or attribute(cell, "layout", 0) != 0:
        return None
    ins = list(cell.input) + [""] * (8 - len(cell.input))  # every optional input named, "" if absent
    outer = _outer_names(g)
    if ins[4] or any(i and i not in hoisted and i not in outer for i in ins[1:4] + ins[7:8]):
        return None  # sequence_lens, or weights that change per step
    x_outer = _sequence_read(loop, producer, _through_unsqueeze0(producer, ins[0], g), g)
    if x_outer is None:
        return None
    states = {b_in: (initial, b_out, final) for initial, b_in, b_out, final in loop.carried}
    n_states = 2 if cell.op_type == "LSTM" else 1
    initial_states = []
    for k in range(n_states):
        src = _through_unsqueeze0(producer, ins[5 + k], g)
        if src not in states:
            return None
        initial_states.append(src)
    ys = list(cell.output) + [""] * (3 - len(cell.output))
    finals = {}
    for k, b_in in enumerate(initial_states):  # each carried state must come back as this step's Y_h / Y_c
        initial, b_out, final = states[b_in]
        if _through_squeeze0(producer, b_out, g) != ys[1 + k]:
            return None
        finals[k] = (initial, final)
    if len(states) != n_states:
        return None
    if any(_through_squeeze0(producer, o.body, g) != ys[1] or o.axis != 0 or o.reverse or not o.new_axis
           for o in loop.outputs):
        return None
    consumed = {ins[0], *ins[5:5 + n_states], *ys, *(o.body for o in loop.outputs),
                *(states[b][1] for b in initial_states)}
    if any(o for n in varying if n is not cell for o in n.output if o not in consumed and not _is_plumbing(n)):
        return None  # the body computes something else too
    return _one_layer_nodes(loop, g, cell, ins, hoisted, x_outer, finals, ys, prefix), cell.op_type


def _outer_names(g):
    return set(g.values) | set(g.producer) | {i.name for i in g.model.graph.input}


def _is_plumbing(n) -> bool:
    return n.op_type in ("Constant", "Identity", "Unsqueeze", "Squeeze", "Gather", "SequenceInsert")


def _axes(n, g):
    axes = attribute(n, "axes")
    if axes is None and len(n.input) > 1:
        axes = g.values.get(n.input[1])
    return None if axes is None else [int(a) for a in np.asarray(axes).ravel()]


def _through_unsqueeze0(producer, name, g):
    n = producer.get(name)
    if n is not None and n.op_type == "Unsqueeze" and _axes(n, g) == [0]:
        return n.input[0]
    return None


def _through_squeeze0(producer, name, g):
    n = producer.get(name)
    while n is not None and n.op_type == "Identity":
        name, n = n.input[0], producer.get(n.input[0])
    if n is not None and n.op_type == "Squeeze" and _axes(n, g) == [0]:
        return n.input[0]
    return None


def _sequence_read(loop, producer, name, g):
    """The outer X (T, ...) when `name` is x(t): Scan's input along axis 0 in order, or a Loop's
    Gather(X, t) along axis 0 with the trip count X's first extent."""
    for b_in, outer, axis, reverse in loop.step_inputs:
        if name == b_in:
            return outer if axis == 0 and not reverse and len(loop.step_inputs) == 1 else None
    n = producer.get(name)
    if n is None or n.op_type != "Gather" or n.input[1] != loop.counter or (attribute(n, "axis", 0) != 0):
        return None
    x = n.input[0]
    trip = loop.node.input[0]
    dims = g.dims.get(x)
    if loop.steps is not None and dims and dims[0] == loop.steps:
        return x
    return x if _first_extent_of(g, trip) == x else None


def _first_extent_of(g, name):
    """X when `name` is Gather(Shape(X), 0) (through Cast / Squeeze / Reshape to a scalar)."""
    n = g.producer.get(name)
    while n is not None and n.op_type in ("Cast", "Squeeze", "Reshape", "Identity"):
        n = g.producer.get(n.input[0])
    if n is None or n.op_type != "Gather" or g.scalar(n.input[1]) != 0 or attribute(n, "axis", 0) != 0:
        return None
    shape = g.producer.get(n.input[0])
    if shape is None or shape.op_type != "Shape" or attribute(shape, "start", 0) != 0:
        return None
    return shape.input[0]


def _one_layer_nodes(loop, g, cell, ins, hoisted, x_outer, finals, ys, prefix):
    """The recurrent node over X, its initial states the loop's, its Y_h / Y_c squeezed into the
    loop's final states and its Y squeezed into the stacked outputs."""
    out = []
    initial_names = []
    for k in sorted(finals):
        initial, _ = finals[k]
        out += unsqueeze(g, initial, f"{prefix}initial{k}", 0, f"{prefix}initial{k}")
        initial_names.append(f"{prefix}initial{k}")
    ins = [hoisted.get(i, i) for i in ins]
    ins[0] = x_outer
    for k, name in enumerate(initial_names):
        ins[5 + k] = name
    while ins and not ins[-1]:
        ins.pop()
    y, y_states = f"{prefix}Y", [f"{prefix}Y_h", f"{prefix}Y_c"][:len(finals)]
    layer = onnx.NodeProto()
    layer.CopyFrom(cell)
    layer.name = f"{prefix}{cell.name or cell.op_type}"
    layer.input[:] = ins
    layer.output[:] = [y] + y_states
    out.append(layer)
    for k in sorted(finals):
        out += squeeze(g, y_states[k], finals[k][1], 0, f"{prefix}final{k}")
    for o in loop.outputs:  # Y (T, 1, B, H) -> (T, B, H)
        out += squeeze(g, y, o.outer, 1, f"{prefix}{o.outer}")
    return out
