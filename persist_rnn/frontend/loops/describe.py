"""A Loop or a Scan described in one shape (`TimeLoop`): carried states, per-step inputs, stacked
per-step outputs, and the outer graph they live in (`OuterGraph`)."""
from __future__ import annotations

import dataclasses

import onnx
from onnx import helper

from ...errors import PersistRNNError
from ..graph_values import constant_values


@dataclasses.dataclass
class StepOutput:
    body: str  # the body's value for one step
    outer: str  # the stacked result in the outer graph
    axis: int  # where the steps go
    reverse: bool = False
    new_axis: bool = True  # False: ConcatFromSequence(new_axis=0) concatenates instead of stacking


@dataclasses.dataclass
class TimeLoop:
    """A Loop or Scan in one shape: states carried from step to step, inputs read per step, and
    per-step outputs stacked."""
    node: onnx.NodeProto
    body: onnx.GraphProto
    steps: int | None
    carried: list  # (initial outer value, body input, body output, final outer value)
    step_inputs: list  # (body input, outer tensor, axis, reverse): Scan's inputs
    counter: str | None = None  # Loop: the body input holding t
    cond: str | None = None  # Loop: the body input holding the condition
    outputs: list = dataclasses.field(default_factory=list)  # [StepOutput]
    sequences: set = dataclasses.field(default_factory=set)  # Loop: body inputs of lists appended to, now outputs
    dropped: list = dataclasses.field(default_factory=list)  # outer nodes the rewrite replaces


def loop_error(node, what) -> PersistRNNError:
    return PersistRNNError(f"node {node.name!r} ({node.op_type}): {what}")


def attribute(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class OuterGraph:
    """The outer graph, looked up by value: producers, consumers, constant values, static dims."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.producer = {out: n for n in model.graph.node for out in n.output}
        self.consumers = {}
        for n in model.graph.node:
            for name in n.input:
                self.consumers.setdefault(name, []).append(n)
        self.values = {}
        self.add_constants(model.graph)
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
        except Exception:  # shape inference is a help here, not a requirement
            inferred = model.graph
        self.dims = {}
        for vi in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
            if vi.type.tensor_type.HasField("shape"):
                self.dims[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                      for d in vi.type.tensor_type.shape.dim]

    def add_constants(self, graph: onnx.GraphProto) -> None:
        """The values of `graph`'s initializers and Constant nodes, the outer graph's or a loop
        body's (names are unique in the whole model)."""
        self.values.update(constant_values(graph))

    def scalar(self, name):
        v = self.values.get(name)
        return None if v is None or v.size != 1 else v.reshape(()).item()


def describe(node, g: OuterGraph) -> TimeLoop:
    """`node` (a Loop or a Scan) as a TimeLoop; its body's constants join `g`'s values."""
    body = attribute(node, "body")
    g.add_constants(body)
    if node.op_type == "Scan":
        return _describe_scan(node, body, g)
    return _describe_loop(node, body, g)


def _describe_scan(node, body, g) -> TimeLoop:
    if g.opset < 9:
        raise loop_error(node, "Scan before opset 9 (with a batch axis) is not supported; re-export at opset >= 9")
    n_in = attribute(node, "num_scan_inputs")
    n_state = len(node.input) - n_in
    axes = list(attribute(node, "scan_input_axes", [0] * n_in))
    dirs = list(attribute(node, "scan_input_directions", [0] * n_in))
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
    out_axes = list(attribute(node, "scan_output_axes", [0] * n_out))
    out_dirs = list(attribute(node, "scan_output_directions", [0] * n_out))
    outputs = [StepOutput(b_out[n_state + k], node.output[n_state + k], out_axes[k], bool(out_dirs[k]))
               for k in range(n_out)]
    steps = lengths.pop() if len(lengths) == 1 else None
    return TimeLoop(node, body, steps or None, carried, steps_in, outputs=outputs)


def _describe_loop(node, body, g) -> TimeLoop:
    trip = node.input[0] if len(node.input) > 0 else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and g.scalar(cond) is not True:
        raise loop_error(node, f"input 'cond' ({cond!r}) is not the constant true; a loop that may stop early "
                           "is not a recurrence over time and is not supported")
    if not trip:
        raise loop_error(node, "no trip count (a while loop): not a recurrence over time, not supported")
    b_in = [i.name for i in body.input]
    b_out = [o.name for o in body.output]
    if not _always_true(body, b_in[1], b_out[0], g):
        raise loop_error(node, f"the body's condition output {b_out[0]!r} depends on the step; a loop that may "
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
        outputs.append(StepOutput(b_o, node.output[n_carried + k], 0))
    steps = g.scalar(trip)
    return TimeLoop(node, body, int(steps) if steps is not None else None, carried, [], counter=b_in[0],
                     cond=b_in[1], outputs=outputs, sequences=sequences, dropped=dropped)


def _always_true(body, cond_in, cond_out, g) -> bool:
    """Whether the body's condition output is its condition input or the constant true."""
    producer = {out: n for n in body.node for out in n.output}
    name = cond_out
    while name in producer and producer[name].op_type == "Identity":
        name = producer[name].input[0]
    return name == cond_in or g.scalar(name) is True  # g holds the body's constants (describe)


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
        raise loop_error(node, f"the list {final!r} built in the loop is used other than by appending each step "
                           "and concatenating after the loop; not supported")
    concat = users[0]
    axis, new_axis = attribute(concat, "axis"), bool(attribute(concat, "new_axis", 0))
    return StepOutput(insert.input[1], concat.output[0], axis, new_axis=new_axis), concat
