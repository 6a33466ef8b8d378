"""Read and validate the attributes of an ONNX LSTM / GRU / RNN node into a CellSpec.

Every check here runs before TVM sees the node, so a bad model fails with a message naming the
node and attribute instead of an internal error somewhere in the importer.
"""
from __future__ import annotations

from tir_templates.spec import ACTIVATION_PARAMS, NUM_ACTIVATIONS, Activation, CellSpec

from ..errors import node_error

OP_TO_CELL = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}
DIRECTIONS = ("forward", "reverse", "bidirectional")
_CANONICAL_ACT = {name.lower(): name for name in ACTIVATION_PARAMS}


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def _activations(node, op, cell, ndir, attr):
    n = NUM_ACTIVATIONS[cell] * ndir
    names = attr.get("activations")
    if names is None:
        return ()
    names = [_text(a) for a in names]
    if len(names) != n:
        raise node_error(node, op, "attribute 'activations'", f"has {len(names)} entries",
                         f"{n} ({NUM_ACTIVATIONS[cell]} per direction x {ndir} direction(s))")
    alphas = list(attr.get("activation_alpha", ()))
    betas = list(attr.get("activation_beta", ()))
    out = []
    for name in names:
        canon = _CANONICAL_ACT.get(name.lower())
        if canon is None:
            raise node_error(node, op, "attribute 'activations'", f"unknown activation {name!r}",
                             "one of " + ", ".join(ACTIVATION_PARAMS))
        defaults = ACTIVATION_PARAMS[canon]
        # ONNX: alpha/beta lists are consumed in order, only by the activations that take them
        alpha = alphas.pop(0) if len(defaults) >= 1 and alphas else (defaults[0] if defaults else 0.0)
        beta = betas.pop(0) if len(defaults) >= 2 and betas else (defaults[1] if len(defaults) > 1 else 0.0)
        out.append(Activation(canon, float(alpha), float(beta)))
    return tuple(out)


def cell_spec(node: str, op: str, attr: dict, input_size: int, dtype: str = "float32") -> CellSpec:
    """The CellSpec of ONNX node `node` of type `op` with parsed attributes `attr`."""
    cell = OP_TO_CELL[op]
    if "hidden_size" not in attr:
        raise node_error(node, op, "attribute 'hidden_size'", "is missing", "a positive integer")
    hidden = int(attr["hidden_size"])
    if hidden <= 0:
        raise node_error(node, op, "attribute 'hidden_size'", f"is {hidden}", "a positive integer")
    direction = _text(attr.get("direction", "forward"))
    if direction not in DIRECTIONS:
        raise node_error(node, op, "attribute 'direction'", f"is {direction!r}", " / ".join(DIRECTIONS))
    ndir = 2 if direction == "bidirectional" else 1
    layout = int(attr.get("layout", 0))
    if layout not in (0, 1):
        raise node_error(node, op, "attribute 'layout'", f"is {layout}", "0 or 1")
    clip = attr.get("clip")
    if clip is not None and not float(clip) > 0:
        raise node_error(node, op, "attribute 'clip'", f"is {clip}", "a positive float")
    flags = {}
    for name, cells in (("input_forget", ("lstm",)), ("linear_before_reset", ("gru",))):
        if name in attr:
            v = int(attr[name])
            if cell not in cells or v not in (0, 1):
                raise node_error(node, op, f"attribute {name!r}", f"is {v}",
                                 f"0 or 1, on {'/'.join(c.upper() for c in cells)} only")
            flags[name] = bool(v)
    return CellSpec(
        cell=cell, input_size=int(input_size), hidden_size=hidden, direction=direction,
        activations=_activations(node, op, cell, ndir, attr),
        clip=None if clip is None else float(clip), dtype=str(dtype), node=str(node), **flags,
    )
