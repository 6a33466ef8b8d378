"""The general lowering of a loop with a known trip count: T copies of its body."""
from __future__ import annotations

import numpy as np
from onnx import helper

from .describe import OuterGraph, TimeLoop, loop_error
from .nodes import constant_node, renamed_copy, unsqueeze


def unrolled(loop: TimeLoop, g: OuterGraph, hoisted: dict, prefix: str) -> list:
    """T copies of the body's varying nodes, states threaded through, per-step outputs stacked."""
    if loop.steps <= 0:
        raise loop_error(loop.node, "zero steps: the stacked outputs would have no extent to infer; not supported")
    out = []
    state = {b_in: initial for initial, b_in, _, _ in loop.carried}
    per_step = {o.body: [] for o in loop.outputs}
    for t in range(loop.steps):
        step = f"{prefix}t{t}/"
        names = dict(hoisted)
        names.update(state)
        if loop.counter:
            out.append(constant_node(f"{step}{loop.counter}", np.array(t, "int64")))
            names[loop.counter] = f"{step}{loop.counter}"
        if loop.cond:
            out.append(constant_node(f"{step}{loop.cond}", np.array(True)))
            names[loop.cond] = f"{step}{loop.cond}"
        for b_in, outer, axis, reverse in loop.step_inputs:
            index = f"{step}{b_in}/index"
            out.append(constant_node(index, np.array(loop.steps - 1 - t if reverse else t, "int64")))
            out.append(helper.make_node("Gather", [outer, index], [f"{step}{b_in}"], name=f"{step}{b_in}", axis=axis))
            names[b_in] = f"{step}{b_in}"
        for n in loop.body.node:
            if all(o in hoisted or not o for o in n.output) or (n.op_type == "SequenceInsert"
                                                                and n.input[0] in loop.sequences):
                continue
            out.append(renamed_copy(n, step, names))
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
                out += unsqueeze(g, part, f"{prefix}{o.outer}/{t}", o.axis, f"{prefix}{o.outer}/unsqueeze{t}")
                stacked.append(f"{prefix}{o.outer}/{t}")
            parts = stacked
        out.append(helper.make_node("Concat", parts, [o.outer], name=f"{prefix}{o.outer}", axis=o.axis))
    return out
