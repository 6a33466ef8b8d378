"""ONNX `Loop` and `Scan` over time, rewritten before the import (TVM 0.27's importer has neither).

Scripted torch loops (`for t in range(x.size(0))`) export as a `Loop` whose trip count is
computed from x's shape. The step reads `x[t]` with a `Gather`, and the per-step outputs are
collected in a sequence (`SequenceInsert`, then `ConcatFromSequence` after the loop). Keras models
converted with tf2onnx, and hand-written graphs, use `Scan`. The loop-invariant part of the body
(torch re-slices its weights every step) is hoisted out first. Then, in order of preference:
1. the body is one LSTM / GRU / RNN node run for one step (torch's `LSTMCell`): the loop becomes
   that node over the whole sequence, and a symbolic T stays symbolic;
2. the trip count is known (after pinning and folding): the body is unrolled, T copies. MatchCells
   makes a chain of primitive-op cells persistent, and anything else runs as the body says;
3. otherwise the loop is refused, with the node named and the way out (pin the sequence length).
A loop whose exit condition depends on data, or whose body holds its own subgraphs, is refused.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import PersistRNNError

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
#: ops that must not be hoisted out of a step although their inputs do not change
_NOT_INVARIANT = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                  "Bernoulli", "Dropout"}


@dataclasses.dataclass
class _Output:
    body: str  # the body's value for one step
    outer: str  # the stacked result in the outer graph
    axis: int  # where the steps go
    reverse: bool = False
    new_axis: bool = True  # False: ConcatFromSequence(new_axis=0) concatenates instead of stacking


@dataclasses.dataclass
class _TimeLoop:
    """A Loop or Scan in one shape: states carried from step to step, inputs read per step, and
    per-step outputs stacked."""
    node: onnx.NodeProto
    body: onnx.GraphProto
    steps: int | None
    carried: list  # (initial outer value, body input, body output, final outer value)
    step_inputs: list  # (body input, outer tensor, axis, reverse): Scan's inputs
    counter: str | None = None  # Loop: the body input holding t
    cond: str | None = None  # Loop: the body input holding the condition
    outputs: list = dataclasses.field(default_factory=list)  # [_Output]
    sequences: set = dataclasses.field(default_factory=set)  # Loop: body inputs of lists appended to, now outputs
    dropped: list = dataclasses.field(default_factory=list)  # outer nodes the rewrite replaces


def _error(node, what) -> PersistRNNError:
    return PersistRNNError(f"node {node.name!r} ({node.op_type}): {what}")


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Graph:
    """The outer graph, looked up by value: producers, consumers, constant values, static dims."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.producer = {out: n for n in model.graph.node for out in n.output}
        self.consumers = {}
        for n in model.graph.node:
            for name in n.input:
                self.consumers.setdefault(name, []).append(n)
        self.values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for n in model.graph.node:
            if n.op_type == "Constant" and _attr(n, "value") is not None:
                self.values[n.output[0]] = numpy_helper.to_array(_attr(n, "value"))
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
        except Exception:  # shape inference is a help here, not a requirement
            inferred = model.graph
        self.dims = {}
        for vi in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
            if vi.type.tensor_type.HasField("shape"):
                self.dims[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                      for d in vi.type.tensor_type.shape.dim]

    def add_constants(self, body: onnx.GraphProto) -> None:
        """The values of a body's Constant nodes (their names are unique in the whole model)."""
        for n in body.node:
            if n.op_type == "Constant" and _attr(n, "value") is not None:
                self.values[n.output[0]] = numpy_helper.to_array(_attr(n, "value"))

    def scalar(self, name):
        v = self.values.get(name)
        return None if v is None or v.size != 1 else v.reshape(()).item()


def _describe(node, g: _Graph) -> _TimeLoop:
    body = _attr(node, "body")
    if node.op_type == "Scan":
        return _describe_scan(node, body, g)
    return _describe_loop(node, body, g)


def _describe_scan(node, body, g) -> _TimeLoop:
    if g.opset < 9:
        raise _error(node, "Scan before opset 9 (with a batch axis) is not supported; re-export at opset >= 9")
    n_in = _attr(node, "num_scan_inputs")
    n_state = len(node.input) - n_in
    axes = list(_attr(node, "scan_input_axes", [0] * n_in))
    dirs = list(_attr(node, "scan_input_directions", [0] * n_in))
    b_in = [i.name for i in body.input]
    b_out = [o.name for o in body.output]
    carried = [(node.input[k], b_in[k], b_out[k], node.output[k]) for k in range(n_state)]
    steps_in = []
    lengths = set()
    for k in range(n_in):
        outer = node.input[n_state + k]
        dims = g.dims.get(outer)
        axis = axes[k] % len(dims) if dims else axes[k]
        steps_in.append((b_in[n_state + k], outer, axis, bool(dirs[k])))
        lengths.add(dims[axis] if dims and axis < len(dims) else None)
    n_out = len(b_out) - n_state
    out_axes = list(_attr(node, "scan_output_axes", [0] * n_out))
    out_dirs = list(_attr(node, "scan_output_directions", [0] * n_out))
    outputs = [_Output(b_out[n_state + k], node.output[n_state + k], out_axes[k], bool(out_dirs[k]))
               for k in range(n_out)]
    steps = lengths.pop() if len(lengths) == 1 else None
    return _TimeLoop(node, body, steps or None, carried, steps_in, outputs=outputs)


def _describe_loop(node, body, g) -> _TimeLoop:
    trip = node.input[0] if len(node.input) > 0 else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and g.scalar(cond) is not True:
        raise _error(node, f"input 'cond' ({cond!r}) is not the constant true; a loop that may stop early "
                           "is not a recurrence over time and is not supported")
    if not trip:
        raise _error(node, "no trip count (a while loop): not a recurrence over time, not supported")
    b_in = [i.name for i in body.input]
    b_out = [o.name for o in body.output]
    if not _always_true(body, b_in[1], b_out[0], g):
        raise _error(node, f"the body's condition output {b_out[0]!r} depends on the step; a loop that may "
                           "stop early is not supported")
    n_carried = len(node.input) - 2
    carried, outputs, dropped, sequences = [], [], [], set()
    for k in range(n_carried):
        initial, b_i, b_o, final = node.input[2 + k], b_in[2 + k], b_out[1 + k], node.output[k]
        seq = _sequence_output(node, body, g, initial, b_i, b_o, final)
        if seq is None:
            carried.append((initial, b_i, b_o, final))
        else:
            outputs.append(seq[0])
            dropped.append(seq[1])
            sequences.add(b_i)
    for k, b_o in enumerate(b_out[1 + n_carried:]):
        outputs.append(_Output(b_o, node.output[n_carried + k], 0))
    steps = g.scalar(trip)
    return _TimeLoop(node, body, int(steps) if steps is not None else None, carried, [], counter=b_in[0],
                     cond=b_in[1], outputs=outputs, sequences=sequences, dropped=dropped)


def _always_true(body, cond_in, cond_out, g) -> bool:
    """Whether the body's condition output is its condition input or the constant true."""
    producer = {out: n for n in body.node for out in n.output}
    name = cond_out
    while name in producer and producer[name].op_type == "Identity":
        name = producer[name].input[0]
    if name == cond_in or g.scalar(name) is True:
        return True
    n = producer.get(name)
    return n is not None and n.op_type == "Constant" and bool(numpy_helper.to_array(_attr(n, "value")).all())


def _sequence_output(node, body, g, initial, b_in, b_out, final):
    """(output, the ConcatFromSequence it replaces) when a carried value is a list of steps:
    SequenceEmpty before the loop, SequenceInsert at the end every step, ConcatFromSequence after."""
    start = g.producer.get(initial)
    if start is None or start.op_type != "SequenceEmpty":
        return None
    insert = next((n for n in body.node if b_out in n.output), None)
    users = g.consumers.get(final, [])
    if (insert is None or insert.op_type != "SequenceInsert" or insert.input[0] != b_in or len(insert.input) > 2
            or len(users) != 1 or users[0].op_type != "ConcatFromSequence"):
        raise _error(node, f"the list {final!r} built in the loop is used other than by appending each step "
                           "and concatenating after the loop; not supported")
    concat = users[0]
    axis, new_axis = _attr(concat, "axis"), bool(_attr(concat, "new_axis", 0))
    return _Output(insert.input[1], concat.output[0], axis, new_axis=new_axis), concat


def _hoist(loop: _TimeLoop, prefix: str) -> tuple[list, dict]:
    """Body nodes that compute the same value every step, as outer nodes (renamed under `prefix`),
    and the body value -> outer name map for their outputs."""
    varying = {i.name for i in loop.body.input}
    hoisted, renamed = [], {}
    for init in loop.body.initializer:  # a body's own initializers (onnxslim makes some) are constants too
        value = numpy_helper.to_array(init)
        renamed[init.name] = f"{prefix}{init.name}"
        hoisted.append(_const(renamed[init.name], value))
    for n in loop.body.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise _error(loop.node, f"its body holds a subgraph (node {n.name!r}, {n.op_type}); not supported")
        if n.op_type in _NOT_INVARIANT or any(i in varying for i in n.input if i):
            varying.update(n.output)
            continue
        hoisted.append(_renamed_copy(n, prefix, renamed))
    return hoisted, renamed


def _renamed_copy(n, prefix, names: dict) -> onnx.NodeProto:
    """`n` with its name and outputs under `prefix`, its inputs looked up in `names` (which
    learns the outputs' new names)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(n)
    copy.name = f"{prefix}{n.name}"
    copy.input[:] = [names.get(i, i) for i in n.input]
    for k, out in enumerate(n.output):
        if out:
            names[out] = copy.output[k] = f"{prefix}{out}"
    return copy


def rewrite_loops(model: onnx.ModelProto) -> list[str]:
    """Rewrite every top-level Loop and Scan in `model` (in place); notes on what became of each."""
    g = _Graph(model)
    notes, nodes, dropped = [], [], set()
    for node in model.graph.node:
        if node.op_type not in ("Loop", "Scan"):
            nodes.append(node)
            continue
        g.add_constants(_attr(node, "body"))
        loop = _describe(node, g)
        prefix = f"{node.name or node.op_type}/"
        hoisted, renamed = _hoist(loop, prefix)
        whole = _as_one_layer(loop, g, renamed, prefix)
        if whole is not None:
            nodes += hoisted + whole[0]
            notes.append(f"{node.op_type} {node.name!r}: one {whole[1]} step per iteration, made one {whole[1]} "
                         "node over the whole sequence")
        elif loop.steps is not None:
            nodes += hoisted + _unrolled(loop, g, renamed, prefix)
            notes.append(f"{node.op_type} {node.name!r}: unrolled, {loop.steps} steps (cells among them are "
                         "matched as one recurrence)")
        else:
            raise _error(node, "its number of steps is known only at run time and its body is not a single "
                               "LSTM/GRU/RNN node; pin the sequence length (shapes={input: (T, ...)}, CLI "
                               "--shape) so that it can be unrolled")
        dropped.update(id(n) for n in loop.dropped)
    del model.graph.node[:]
    model.graph.node.extend(n for n in nodes if id(n) not in dropped)
    if notes:
        _remove_dead_nodes(model.graph)
    return notes


def _remove_dead_nodes(graph):
    """Drop nodes nothing reads (the lists' SequenceEmpty); a kept node's subgraphs read the
    outer values they name, so those stay live too."""
    live = {o.name for o in graph.output}
    keep = []
    for n in reversed(graph.node):
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(n.input)
            live.update(_names_read_in_subgraphs(n))
    del graph.node[:]
    graph.node.extend(reversed(keep))


def _names_read_in_subgraphs(node) -> set:
    out = set()
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                out.update(n.input)
                out.update(_names_read_in_subgraphs(n))
    return out


def _const(name, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(value), name))


def _unsqueeze(g, inp, out, axis, name) -> list:
    if g.opset >= 13:
        return [_const(f"{out}/axes", np.array([axis], "int64")),
                helper.make_node("Unsqueeze", [inp, f"{out}/axes"], [out], name=name)]
    return [helper.make_node("Unsqueeze", [inp], [out], name=name, axes=[axis])]


def _squeeze(g, inp, out, axis, name) -> list:
    if g.opset >= 13:
        return [_const(f"{out}/axes", np.array([axis], "int64")),
                helper.make_node("Squeeze", [inp, f"{out}/axes"], [out], name=name)]
    return [helper.make_node("Squeeze", [inp], [out], name=name, axes=[axis])]


def _unrolled(loop: _TimeLoop, g: _Graph, hoisted: dict, prefix: str) -> list:
    """T copies of the body's varying nodes, states threaded through, per-step outputs stacked."""
    if loop.steps <= 0:
        raise _error(loop.node, "zero steps: the stacked outputs would have no extent to infer; not supported")
    out = []
    state = {b_in: initial for initial, b_in, _, _ in loop.carried}
    per_step = {o.body: [] for o in loop.outputs}
    for t in range(loop.steps):
        step = f"{prefix}t{t}/"
        names = dict(hoisted)
        names.update(state)
        if loop.counter:
            out.append(_const(f"{step}{loop.counter}", np.array(t, "int64")))
            names[loop.counter] = f"{step}{loop.counter}"
        if loop.cond:
            out.append(_const(f"{step}{loop.cond}", np.array(True)))
            names[loop.cond] = f"{step}{loop.cond}"
        for b_in, outer, axis, reverse in loop.step_inputs:
            index = f"{step}{b_in}/index"
            out.append(_const(index, np.array(loop.steps - 1 - t if reverse else t, "int64")))
            out.append(helper.make_node("Gather", [outer, index], [f"{step}{b_in}"], name=f"{step}{b_in}", axis=axis))
            names[b_in] = f"{step}{b_in}"
        for n in loop.body.node:
            if all(o in hoisted or not o for o in n.output) or (n.op_type == "SequenceInsert"
                                                                and n.input[0] in loop.sequences):
                continue
            out.append(_renamed_copy(n, step, names))
        state = {b_in: names.get(b_out, b_out) for _, b_in, b_out, _ in loop.carried}
        for o in loop.outputs:
            per_step[o.body].append(names.get(o.body, o.body))
    for initial, b_in, _, final in loop.carried:
        out.append(helper.make_node("Identity", [state[b_in]], [final], name=f"{prefix}{final}"))
    for o in loop.outputs:
        parts = per_step[o.body][::-1] if o.reverse else per_step[o.body]
        if o.new_axis:
            stacked = []
            for t, part in enumerate(parts):
                out += _unsqueeze(g, part, f"{prefix}{o.outer}/{t}", o.axis, f"{prefix}{o.outer}/unsqueeze{t}")
                stacked.append(f"{prefix}{o.outer}/{t}")
            parts = stacked
        out.append(helper.make_node("Concat", parts, [o.outer], name=f"{prefix}{o.outer}", axis=o.axis))
    return out


def _as_one_layer(loop: _TimeLoop, g: _Graph, hoisted: dict, prefix: str):
    """(outer nodes, op) when the varying body is: x(t) read from X along axis 0 in order, one
    forward LSTM/GRU/RNN node run for that one step from the carried states, and the new states
    and stacked outputs its Y_h (and Y_c) squeezed. None otherwise."""
    varying = [n for n in loop.body.node if not all(o in hoisted or not o for o in n.output)]
    producer = {o: n for n in varying for o in n.output}
    cells = [n for n in varying if n.op_type in RECURRENT_OPS]
    if len(cells) != 1:
        return None
    cell = cells[0]
    if _attr(cell, "direction", b"forward") not in (b"forward", "forward") or _attr(cell, "layout", 0) != 0:
        return None
    ins = list(cell.input) + [""] * (8 - len(cell.input))
    if ins[4] or any(i and i not in hoisted and i not in _outer_names(g) for i in ins[1:4] + ins[7:8]):
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
    return _one_layer_nodes(loop, g, cell, hoisted, x_outer, finals, ys, prefix), cell.op_type


def _outer_names(g):
    return set(g.values) | set(g.producer) | {i.name for i in g.model.graph.input}


def _is_plumbing(n) -> bool:
    return n.op_type in ("Constant", "Identity", "Unsqueeze", "Squeeze", "Gather", "SequenceInsert")


def _axes(n, g):
    axes = _attr(n, "axes")
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
    if n is None or n.op_type != "Gather" or n.input[1] != loop.counter or (_attr(n, "axis", 0) != 0):
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
    if n is None or n.op_type != "Gather" or g.scalar(n.input[1]) != 0 or _attr(n, "axis", 0) != 0:
        return None
    shape = g.producer.get(n.input[0])
    if shape is None or shape.op_type != "Shape" or _attr(shape, "start", 0) != 0:
        return None
    return shape.input[0]


def _one_layer_nodes(loop, g, cell, hoisted, x_outer, finals, ys, prefix):
    """The recurrent node over X, its initial states the loop's, its Y_h / Y_c squeezed into the
    loop's final states and its Y squeezed into the stacked outputs."""
    out = []
    initial_names = []
    for k in sorted(finals):
        initial, _ = finals[k]
        out += _unsqueeze(g, initial, f"{prefix}initial{k}", 0, f"{prefix}initial{k}")
        initial_names.append(f"{prefix}initial{k}")
    ins = list(cell.input) + [""] * (8 - len(cell.input))
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
        out += _squeeze(g, y_states[k], finals[k][1], 0, f"{prefix}final{k}")
    for o in loop.outputs:  # Y (T, 1, B, H) -> (T, B, H)
        out += _squeeze(g, y, o.outer, 1, f"{prefix}{o.outer}")
    return out
