"""The wavefront kernel's signature: each layer's own operands and results, as its own kernel's
(`tir_templates/signature.py`), in one PrimFunc, so that the pass passes the layers' own tensors in
and hands each layer's results on unchanged."""
from __future__ import annotations

import dataclasses
from typing import Any

import tvm
from tvm.script import tirx as T

from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec

#: the attribute that marks a wavefront kernel: {"layers": [each layer's CellSpec JSON], "config": ...}
STACK_KERNEL_ATTR = "persist_rnn.stack_kernel"


@dataclasses.dataclass(frozen=True)
class StackArgs:
    """The stack kernel's tensors (`stack_func`) and the runtime extents T and B."""
    xw: Any
    r: Any
    rb: Any
    w: Any
    wb: Any
    lens: Any
    h0: Any
    c0: Any
    p: Any
    y: Any
    yh: Any
    yc: Any
    hb: Any
    ws: Any
    n_t: Any
    n_b: Any
    b0: Any = 0  # the batch tile's first row (`layout.glob`)

    def tile(self, b0) -> "StackArgs":
        """The same tensors, seen by the batch tile whose first row is b0."""
        return dataclasses.replace(self, b0=b0)


def _signature_source(specs: list[CellSpec]) -> str:
    """The TVMScript of the stack kernel's PrimFunc for len(specs) layers (`stack_func`)."""
    spec, n_l = specs[0], len(specs)
    H, GH = spec.hidden_size, spec.num_gates * spec.hidden_size
    lens_b, h0_b, c0_b = (("1" if name in spec.batch_broadcast else "n_b") for name in ("lens", "h0", "c0"))
    params, shapes = ["xw_h: T.handle", "lens_h: T.handle"], {"xw": "(n_t, n_b, 1, GH)", "lens": f"({lens_b},)"}
    for l in range(n_l):
        params += [f"r{l}: T.Buffer((1, {GH}, {H}), 'float32')", f"rb{l}: T.Buffer((1, {GH}), 'float32')",
                   f"h0{l}_h: T.handle", f"c0{l}_h: T.handle", f"p{l}: T.Buffer((1, {3 * H}), 'float32')"]
        shapes.update({f"h0{l}": f"(1, {h0_b}, {H})", f"c0{l}": f"(1, {c0_b}, {H})"})
        if l > 0:
            params += [f"w{l}: T.Buffer(({H}, {GH}), 'float32')", f"wb{l}: T.Buffer(({GH},), 'float32')"]
    for l in range(n_l):
        params += [f"y{l}_h: T.handle", f"yh{l}_h: T.handle", f"yc{l}_h: T.handle", f"hb{l}_h: T.handle"]
        shapes.update({f"y{l}": f"(n_t, 1, n_b, {H})", f"yh{l}": f"(1, n_b, {H})", f"yc{l}": f"(1, n_b, {H})",
                       f"hb{l}": f"(n_t, 1, n_b, {2 * H})"})
    params.append(f"ws: T.Buffer(({WORKSPACE_WORDS},), 'uint32')")
    shapes["xw"] = f"(n_t, n_b, 1, {GH})"
    dtypes = {"lens": "int32", **{f"y{l}": specs[l].dtype for l in range(n_l)}}  # Y in the layer's dtype, as signature.py
    lines = [f"    {name} = T.match_buffer({name}_h, {shape}, {dtypes.get(name, 'float32')!r})"
             for name, shape in shapes.items()]
    per_layer = lambda name, first=0: "[" + ", ".join(["None"] * first + [f"{name}{l}" for l in range(first, n_l)]) + "]"
    args = ", ".join(["xw", per_layer("r"), per_layer("rb"), per_layer("w", 1), per_layer("wb", 1), "lens",
                      per_layer("h0"), per_layer("c0"), per_layer("p"), per_layer("y"), per_layer("yh"), per_layer("yc"),
                      per_layer("hb"), "ws", "n_t", "n_b"])
    return "\n".join(["@T.prim_func(private=True)", f"def wavefront({', '.join(params)}):",
                      '    T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True, "op_pattern": 8})',
                      "    n_t = T.int64()", "    n_b = T.int64()", *lines, f"    body(StackArgs({args}))", ""])


def stack_func(specs: list[CellSpec], body) -> tvm.tirx.PrimFunc:
    """The wavefront's PrimFunc: each layer's operands and results as its own kernel's
    (`signature.py`), in one signature, so that the pass passes the layers' own tensors in and
    hands each layer's results on unchanged:
        xw (T, B, 1, G*H)  layer 0's input projection    lens (B,) int32 (all layers')
        per layer l: r_l (1, G*H, H), rb_l (1, G*H), h0_l, c0_l (1, B, H), p_l (1, 3*H),
                     and above the first w_l (H, G*H), wb_l (G*H,) (its projection's operands)
        -> per layer: y_l (T, 1, B, H) in the layer's dtype, yh_l, yc_l (1, B, H), hb_l (T, 1, B, 2H): the layer's
           h after each step, each value beside its step's stamp (`steps.py`); then ws
    (lens, h0, c0 of batch extent 1 where the specs broadcast them). TVMScript has no parameter
    lists of variable length, so the signature is written out for len(specs) layers and parsed;
    the macros index the per-layer lists with Python ints."""
    return tvm.script.from_source(_signature_source(specs), extra_vars={"T": T, "body": body, "StackArgs": StackArgs})
