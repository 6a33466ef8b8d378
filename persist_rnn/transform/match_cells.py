"""Find LSTM, GRU and RNN cells written as primitive ops, repeated with shared recurrent weights,
and turn each chain of them into the canonical recurrent form that PersistentRNN lowers.

This is how `nn.LSTMCell` stepped in a Python loop exports, and what `from_onnx(unroll=True)`
emits. A cell is recognised from its equations, whatever the order of commutative operands and
of the gates inside the packed gate tensor:
    gates = <terms without h> + h(t-1) @ W        (W: a constant (H, 4H))
    c(t)  = sigmoid(f) * c(t-1) + sigmoid(i) * tanh(g)
    h(t)  = sigmoid(o) * tanh(c(t))
with i, f, g, o equal-width slices of `gates` (split or strided_slice on the last axis). Cells
chain when one's h(t), c(t) are the next one's h(t-1), c(t-1) and W and the gate order agree.
GRU (linear_before_reset=1, torch's GRUCell) is matched in both the ONNX form
(1 - z) * n + z * h and torch's (h - n) * z + n, with linear_before_reset 1 or 0; see _match_gru. An RNN cell is
tanh or relu of <terms without h> + h(t-1) @ W (W: (H, H)). When the input size equals the hidden
size, x(t) @ W_ih looks like a recurrent term too: each cell keeps every reading, and the chain
decides (the one whose h(t-1) is the previous cell's h(t) with the same W). Anything else (an
extra op inside a cell, clip, peepholes, a c(t) used outside the chain) is a near miss and is
left untouched.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from tir_templates.spec import Activation, CellSpec

from ..frontend.canonical import call_scan, full_lengths
from .call_sites import op_calls


@dataclasses.dataclass
class _Cell:
    h_new: relax.Var
    c_new: relax.Var
    h_prev: relax.Expr
    c_prev: relax.Expr
    weight: np.ndarray  # (H, 4H): h(t-1) @ weight
    order: tuple  # slice index of i, f, g, o in the packed gates
    inputs: list  # the gate terms that do not involve h(t-1)

    def follows(self, prev, blk) -> bool:
        """Whether this cell continues `prev`: same weights and gate order, c(t-1) its c(t), and
        that c(t) feeds nothing but its own tanh and this cell."""
        return (isinstance(prev, _Cell) and prev.order == self.order and np.array_equal(prev.weight, self.weight)
                and self.c_prev.same_as(prev.c_new) and blk.uses.get(prev.c_new, 0) == 2)


class _Block:
    """Bindings of one dataflow block, looked through by variable."""

    def __init__(self, block):
        self.value = {b.var: b.value for b in block.bindings}
        self.uses = {}
        for b in block.bindings:
            for v in relax.analysis.free_vars(b.value) if not isinstance(b.value, relax.Var) else [b.value]:
                self.uses[v] = self.uses.get(v, 0) + 1

    def op(self, e, name):
        """The call `relax.<name>` that `e` is bound to, else None."""
        v = self.value.get(e, e) if isinstance(e, relax.Var) else e
        if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "relax." + name:
            return v
        return None

    def through_reshape(self, e):
        """`e` with reshapes that only add or drop unit axes looked through: torch's decomposed
        cells keep states as (1, B, H) and reshape them to (B, H) around each matmul."""
        for name in ("reshape", "squeeze", "expand_dims"):
            call = self.op(e, name)
            if call is not None and _drops_unit_axes(call.args[0], e):
                return self.through_reshape(call.args[0])
        return e

    def add_terms(self, e):
        """Leaves of a tree of `add` calls (looked at through unit reshapes)."""
        call = self.op(self.through_reshape(e), "add")
        return self.add_terms(call.args[0]) + self.add_terms(call.args[1]) if call is not None else [e]

    def gate_slice(self, e, width):
        """(packed gates, slice index) when `e` is an equal-width slice of the last axis."""
        v = self.value.get(e, e) if isinstance(e, relax.Var) else e
        last = (-1, _rank(e) - 1)
        if isinstance(v, relax.TupleGetItem):
            split = self.op(v.tuple_value, "split")
            if split is not None and int(split.attrs.axis) in last:
                return split.args[0], int(v.index)
        sl = self.op(e, "strided_slice")
        if sl is not None and len(sl.args) in (4, 5):  # data, axes, begin, end[, strides]
            axes, begin, end, *strides = ([int(f.value) if hasattr(f, "value") else int(f) for f in a.fields]
                                          for a in sl.args[1:])
            if (len(axes) == 1 and axes[0] in last and end[0] - begin[0] == width and begin[0] % width == 0
                    and all(s == [1] for s in strides)):
                return sl.args[0], begin[0] // width
        return None


def _rank(e) -> int:
    return e.ty.ndim if isinstance(e.ty, relax.TensorType) else -1


def _shape(e):
    ty = e.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in ty.shape]


def _drops_unit_axes(src, dst) -> bool:
    """Whether dst's shape is src's with unit axes added or dropped (same extents otherwise)."""
    a, b = _shape(src), _shape(dst)
    if a is None or b is None:
        return False
    rest = lambda shape: [d for d in shape if not (isinstance(d, int) and d == 1)]
    return all(isinstance(x, int) and isinstance(y, int) and x == y or
               not isinstance(x, int) and not isinstance(y, int) and tvm_ffi.structural_equal(x, y)
               for x, y in zip(rest(a), rest(b))) and len(rest(a)) == len(rest(b))


def _const_array(e):
    return e.value.numpy() if isinstance(e, tvm.ir.expr.Constant) else None


def _width(h_var) -> int | None:
    """H of a (B, H) or (1, B, H) state with a static H."""
    shape = _shape(h_var)
    if shape is None or len(shape) not in (2, 3) or not isinstance(shape[-1], int):
        return None
    if len(shape) == 3 and shape[0] != 1:
        return None
    return shape[-1]


def _match_lstm(blk: _Block, h_var) -> list:
    """Every reading of `h_var` as an LSTM cell's h(t) (see _recurrent_readings)."""
    mul = blk.op(h_var, "multiply")
    if mul is None:
        return []
    for sig_o, tanh_c in (mul.args, mul.args[::-1]):
        o, t = blk.op(sig_o, "sigmoid"), blk.op(tanh_c, "tanh")
        if o is None or t is None or not isinstance(t.args[0], relax.Var):
            continue
        cells = _match_state(blk, h_var, t.args[0], o.args[0])
        if cells:
            return cells
    return []


def _match_state(blk, h_var, c_new, o_pre):
    add = blk.op(c_new, "add")
    H = _width(h_var)
    if add is None or H is None:
        return []
    for fc, ig in (add.args, add.args[::-1]):
        m1, m2 = blk.op(fc, "multiply"), blk.op(ig, "multiply")
        if m1 is None or m2 is None:
            continue
        for sig_f, c_prev in (m1.args, m1.args[::-1]):
            f = blk.op(sig_f, "sigmoid")
            if f is None:
                continue
            for sig_i, tanh_g in (m2.args, m2.args[::-1]):
                i, g = blk.op(sig_i, "sigmoid"), blk.op(tanh_g, "tanh")
                if i is None or g is None:
                    continue
                slices = [blk.gate_slice(x, H) for x in (i.args[0], f.args[0], g.args[0], o_pre)]
                if any(s is None for s in slices):
                    continue
                if not all(s[0].same_as(slices[0][0]) for s in slices):
                    continue
                order = tuple(s[1] for s in slices)
                if sorted(order) != [0, 1, 2, 3]:
                    continue
                readings = _recurrent_readings(blk, slices[0][0], (H, 4 * H))
                if readings:
                    return [_Cell(h_var, c_new, h_prev, c_prev, w, order, inputs) for h_prev, w, inputs in readings]
    return []


def _recurrent_readings(blk, gates, shape) -> list:
    """Every way to read the add tree `gates` as h(t-1) @ W (W a constant of `shape`) plus at
    least one other term: [(h(t-1), W, other terms)]. Two readings when x(t) @ W_ih has W's shape."""
    terms = blk.add_terms(gates)
    out = []
    for k, term in enumerate(terms):
        mm = blk.op(blk.through_reshape(term), "matmul")
        w = _const_array(mm.args[1]) if mm is not None else None
        h_prev = blk.through_reshape(mm.args[0]) if mm is not None else None
        if w is not None and w.shape == shape and isinstance(h_prev, relax.Var) and len(terms) > 1:
            out.append((h_prev, w, terms[:k] + terms[k + 1:]))
    return out


#: the RNN activations the matcher recognises (op name -> ONNX activation)
RNN_ACTIVATIONS = {"tanh": "Tanh", "nn.relu": "Relu"}


@dataclasses.dataclass
class _RNNCell:
    h_new: relax.Var
    h_prev: relax.Expr
    weight: np.ndarray  # (H, H): h(t-1) @ weight
    activation: str  # ONNX name
    inputs: list  # the terms that do not involve h(t-1)
    c_new = None
    c_prev = None

    def follows(self, prev, blk) -> bool:
        return (isinstance(prev, _RNNCell) and prev.activation == self.activation
                and np.array_equal(prev.weight, self.weight))


def _match_rnn(blk: _Block, h_var) -> list:
    """h(t) = act(<terms> + h(t-1) @ W) with act tanh or relu: every reading of it."""
    H = _width(h_var)
    if H is None:
        return []
    for name, onnx_name in RNN_ACTIVATIONS.items():
        call = blk.op(h_var, name)
        if call is not None:
            return [_RNNCell(h_var, h_prev, w, onnx_name, inputs)
                    for h_prev, w, inputs in _recurrent_readings(blk, call.args[0], (H, H))]
    return []


@dataclasses.dataclass
class _GRUCell:
    h_new: relax.Var
    h_prev: relax.Expr
    weight: np.ndarray  # (H, 3H): h(t-1) @ weight + bias (linear_before_reset=0: (r * h(t-1)) @ its n part)
    bias: np.ndarray  # (3H,) recurrent bias, packed like weight (zero when folded into x_parts)
    order: tuple  # slice index of z, r, n in the packed recurrent gates
    x_parts: list  # input terms of z, r, n
    linear_before_reset: bool = True
    c_new = None
    c_prev = None

    def follows(self, prev, blk) -> bool:
        return (isinstance(prev, _GRUCell) and prev.order == self.order and np.array_equal(prev.weight, self.weight)
                and np.array_equal(prev.bias, self.bias) and prev.linear_before_reset == self.linear_before_reset)


def _either(blk, e, name, pred):
    """The first (a, b) ordering of the operands of call `name` bound to `e` for which pred holds."""
    call = blk.op(e, name)
    if call is None:
        return None
    for a, b in (call.args, call.args[::-1]):
        got = pred(a, b)
        if got is not None:
            return got
    return None


def _match_gru(blk: _Block, h_var):
    """h(t) = (1 - z) * n + z * h(t-1) (ONNX) or (h(t-1) - n) * z + n (torch), z = sigmoid(x_z + R_z h),
    r = sigmoid(x_r + R_r h), and n = tanh(x_n + r * (R_n h + b_n)) (linear_before_reset=1) or
    tanh(x_n + (r * h) @ R_n + b_n) (linear_before_reset=0)."""
    H = _width(h_var)
    if H is None:
        return None

    def onnx_form(p, q):  # p = (1 - z) * n, q = z * h
        def zn(a, b):
            sub = blk.op(a, "subtract")
            one = _const_array(sub.args[0]) if sub is not None else None
            if one is None or not np.all(one == 1) or blk.op(b, "tanh") is None:
                return None
            return sub.args[1], b
        z_n = _either(blk, p, "multiply", zn)
        if z_n is None:
            return None
        zh = _either(blk, q, "multiply", lambda a, b: b if a.same_as(z_n[0]) else None)
        return None if zh is None else (z_n[0], z_n[1], zh)

    def torch_form(p, q):  # p = (h - n) * z, q = n
        if blk.op(q, "tanh") is None:
            return None

        def hz(a, b):
            sub = blk.op(a, "subtract")
            if sub is None or not sub.args[1].same_as(q):
                return None
            return b, q, sub.args[0]
        return _either(blk, p, "multiply", hz)

    found = _either(blk, h_var, "add", lambda p, q: onnx_form(p, q) or torch_form(p, q))
    if found is None:
        return None
    z, n, h_prev = found
    h_prev = blk.through_reshape(h_prev)  # as _recurrent_readings reads it
    zs, ns = blk.op(z, "sigmoid"), blk.op(n, "tanh")
    if zs is None or ns is None:
        return None
    return _gru_reset_after(blk, h_var, h_prev, zs.args[0], ns.args[0], H) or \
        _gru_reset_before(blk, h_var, h_prev, zs.args[0], ns.args[0], H)


def _linear_in(blk, e, h_prev, shape):
    """(W, b) when `e` is h(t-1) @ W + b: one matmul of h(t-1) by a constant W of `shape`, and
    constant terms that do not vary over the batch (None otherwise)."""
    recurrent, consts = [], []
    for term in blk.add_terms(e):
        mm = blk.op(blk.through_reshape(term), "matmul")
        w = _const_array(mm.args[1]) if mm is not None else None
        if w is not None and w.shape == shape and blk.through_reshape(mm.args[0]).same_as(h_prev):
            recurrent.append(w)
        elif _const_array(term) is not None and _const_array(term).size == shape[1]:
            consts.append(_const_array(term).reshape(shape[1]))
        else:
            return None
    if len(recurrent) != 1:
        return None
    return recurrent[0], sum(consts, np.zeros(shape[1], "float32")).astype("float32")


def _gru_reset_after(blk, h_var, h_prev, z_pre, n_pre, H):
    """linear_before_reset=1: n_pre = x_n + r * (h(t-1) @ R_n + b_n), with R_n either slice n of
    one packed R (H, 3H) that z and r are slices of too (ONNX, torch's decomposition), or a
    matrix of its own, as z's and r's are (TVM's PyTorch frontend)."""
    def candidate(a, b):  # a = x_n, b = r * n_h
        return _either(blk, b, "multiply", lambda r, nh: (a, r, nh) if blk.op(r, "sigmoid") is not None else None)
    parts = _either(blk, n_pre, "add", candidate)
    if parts is None:
        return None
    x_n, r, n_h = parts
    r_pre = blk.op(r, "sigmoid").args[0]
    sl = blk.gate_slice(n_h, H)
    if sl is None:
        return _gru_reset_after_per_gate(blk, h_var, h_prev, z_pre, r_pre, x_n, n_h, H)
    rec, k_n = sl
    packed = _linear_in(blk, rec, h_prev, (H, 3 * H))
    if packed is None:
        return None

    def split(pre):  # (x part, slice index of the recurrent part)
        def pick(a, b):
            got = blk.gate_slice(b, H)
            return (a, got[1]) if got is not None and got[0].same_as(rec) else None
        return _either(blk, pre, "add", pick)
    zx, rx = split(z_pre), split(r_pre)
    if zx is None or rx is None or sorted([zx[1], rx[1], k_n]) != [0, 1, 2]:
        return None
    return _GRUCell(h_var, h_prev, packed[0], packed[1], (zx[1], rx[1], k_n), [zx[0], rx[0], x_n])


def _gru_reset_after_per_gate(blk, h_var, h_prev, z_pre, r_pre, x_n, n_h, H):
    """The per-gate form: z = sigmoid(<terms> + h(t-1) @ R_z), r likewise, n_h = h(t-1) @ R_n + b_n."""
    n_part = _linear_in(blk, n_h, h_prev, (H, H))
    gates = [_gate_reading(blk, pre, h_prev, H) for pre in (z_pre, r_pre)]
    if n_part is None or any(g is None for g in gates):
        return None
    weight = np.concatenate([gates[0][0], gates[1][0], n_part[0]], axis=1)
    bias = np.concatenate([np.zeros(2 * H, "float32"), n_part[1]])
    return _GRUCell(h_var, h_prev, weight, bias, (0, 1, 2), [gates[0][1], gates[1][1], x_n])


def _gru_reset_before(blk, h_var, h_prev, z_pre, n_pre, H):
    """linear_before_reset=0: n_pre = <terms> + (r * h(t-1)) @ R_n, and z, r either slices of one
    <terms> + h(t-1) @ R_zr (H, 2H) (the importer's unrolled form) or each <terms> + h(t-1) @ R_g."""
    def reset_matmul(term):  # (r, R_n) of a term (r * h(t-1)) @ R_n
        mm = blk.op(term, "matmul")
        w = _const_array(mm.args[1]) if mm is not None else None
        if w is None or w.shape != (H, H):
            return None
        return _either(blk, mm.args[0], "multiply", lambda r, h: (r, w) if blk.through_reshape(h).same_as(h_prev)
                       and blk.op(r, "sigmoid") is not None else None)
    n_terms = blk.add_terms(n_pre)
    hits = [(k, got) for k, got in enumerate(map(reset_matmul, n_terms)) if got is not None]
    if len(hits) != 1 or len(n_terms) < 2:
        return None
    k, (r, w_n) = hits[0]
    gates = [_gate_reading(blk, pre, h_prev, H) for pre in (z_pre, blk.op(r, "sigmoid").args[0])]
    if any(g is None for g in gates):
        return None
    weight = np.concatenate([gates[0][0], gates[1][0], w_n], axis=1)
    x_n = _sum_expr(n_terms[:k] + n_terms[k + 1:])
    return _GRUCell(h_var, h_prev, weight, np.zeros(3 * H, "float32"), (0, 1, 2),
                    [gates[0][1], gates[1][1], x_n], linear_before_reset=False)


def _gate_reading(blk, pre, h_prev, H):
    """(R_g (H, H), x part expr) of a gate pre-activation: <terms> + h(t-1) @ R_g, or slice k of
    <terms> + h(t-1) @ R (H, m*H)."""
    own = [(w, rest) for hp, w, rest in _recurrent_readings(blk, pre, (H, H)) if hp.same_as(h_prev)]
    if len(own) == 1:
        return own[0][0], _sum_expr(own[0][1])
    sl = blk.gate_slice(pre, H)
    if sl is None:
        return None
    packed, k = sl
    for width in range(2, 4):
        found = [(w, rest) for hp, w, rest in _recurrent_readings(blk, packed, (H, width * H)) if hp.same_as(h_prev)]
        if len(found) == 1:
            w, rest = found[0]
            return w[:, k * H:(k + 1) * H], relax.op.strided_slice(_sum_expr(rest), [-1], [k * H], [(k + 1) * H])
    return None


def _sum_expr(terms):
    """terms[0] + terms[1] + ... as one (unbound) expression."""
    x = terms[0]
    for term in terms[1:]:
        x = relax.op.add(x, term)
    return x


def _chains(blk: _Block, readings: dict):
    """Maximal runs of cells feeding each other, in order (length >= 2). `readings` maps each
    cell output (in binding order) to its candidate readings; a cell takes the reading whose
    h(t-1) is an earlier cell's h(t) that it follows, and that earlier cell the matching one."""
    chosen, nxt = {}, {}
    for var, cells in readings.items():
        for cell in cells:
            prevs = [p for p in readings.get(cell.h_prev, []) if cell.follows(p, blk)]
            if cell.h_prev in chosen:
                prevs = [p for p in prevs if p is chosen[cell.h_prev]]
            if prevs and cell.h_prev not in nxt:
                chosen.setdefault(cell.h_prev, prevs[0])
                chosen[var] = nxt[cell.h_prev] = cell
                break
    linked = {id(c) for c in nxt.values()}
    out = []
    for head in (c for c in chosen.values() if id(c) not in linked):
        chain = [head]
        while chain[-1].h_new in nxt:
            chain.append(nxt[chain[-1].h_new])
        out.append(chain)
    return out


def _rows(e, batch, width):
    """`e` ((B, W), (1, B, W) or a broadcastable constant) as (B, W) rows."""
    return relax.op.reshape(relax.op.broadcast_to(e, (1, batch, width)), (batch, width))


def _emit_canonical(bb: relax.BlockBuilder, chain, target_kind, index, remap):
    """The chain as input terms stacked over time + one reference scan; returns (Y, Y_c) vars.
    `remap` maps an expression of the original bindings to the rewritten ones (an earlier chain's
    h(t) feeding this one's inputs, in stacked layers)."""
    first = chain[0]
    H = first.weight.shape[0]
    batch = first.h_new.ty.shape[-2]
    gru = isinstance(first, _GRUCell)
    acts = ()
    if isinstance(first, _RNNCell):
        slots = [0]
        steps = [bb.emit(_rows(remap(_sum_expr(cell.inputs)), batch, H)) for cell in chain]
        rb = np.zeros((1, H), "float32")
        acts = (Activation(first.activation),)
    elif gru:  # ONNX order z, r, h; the input terms are already one per gate
        slots = list(first.order)
        steps = [bb.emit(relax.op.concat([_rows(remap(x), batch, H) for x in cell.x_parts], axis=1)) for cell in chain]
        rb = first.bias.reshape(3, H)[slots].reshape(1, 3 * H)
    else:  # where i, f, g, o sit; ONNX wants i, o, f, c
        order = first.order
        slots = [order[0], order[3], order[1], order[2]]
        steps = []
        for cell in chain:
            x = bb.emit(_rows(remap(_sum_expr(cell.inputs)), batch, 4 * H))
            parts = [relax.op.strided_slice(x, [1], [k * H], [(k + 1) * H]) for k in slots]
            steps.append(bb.emit(relax.op.concat(parts, axis=1)))
        rb = np.zeros((1, 4 * H), "float32")
    G = len(slots)
    n_t = len(chain)
    xw = bb.emit(relax.op.reshape(relax.op.stack(steps, axis=0), (n_t, batch, 1, G * H)))
    r = first.weight.T.reshape(G, H, H)[slots].reshape(1, G * H, H)
    cell_kind = {_Cell: "lstm", _GRUCell: "gru", _RNNCell: "rnn"}[type(first)]
    lbr = gru and first.linear_before_reset
    spec = CellSpec(cell_kind, H, H, activations=acts, linear_before_reset=lbr, node=f"matched_{cell_kind}_{index}")
    h0 = bb.emit(relax.op.reshape(remap(first.h_prev), (1, batch, H)))
    c0 = bb.emit(relax.op.zeros_like(h0)) if first.c_prev is None else \
        bb.emit(relax.op.reshape(remap(first.c_prev), (1, batch, H)))
    args = [xw, relax.const(np.ascontiguousarray(r)), relax.const(rb), bb.emit(full_lengths(batch)), h0, c0,
            relax.const(np.zeros((1, 3 * H), "float32"))]
    y, _, y_c = call_scan(bb, spec, target_kind, args, n_t, batch, f"persist_rnn_{cell_kind}_matched_{index}")
    return y, y_c


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod, chains, target_kind):
        super().__init__(mod)
        self.last = {chain[-1].h_new: (k, chain) for k, chain in enumerate(chains)}
        self.target_kind = target_kind

    def visit_var_binding_(self, binding):
        hit = self.last.get(binding.var)
        if hit is None:
            super().visit_var_binding_(binding)
            return
        k, chain = hit
        is_output = not isinstance(binding.var, relax.DataflowVar)
        if not is_output:
            super().visit_var_binding_(binding)  # dead once its uses are remapped; DCE drops it
        y, y_c = _emit_canonical(self.builder_, chain, self.target_kind, k, self.visit_expr)
        for t, cell in enumerate(chain):  # later uses of h(t) read the scan's output, in h(t)'s shape
            h_t = relax.op.reshape(relax.op.strided_slice(y, [0], [t], [t + 1]), cell.h_new.ty.shape)
            last_output = is_output and t == len(chain) - 1
            self.set_var_remap(cell.h_new, self.builder_.emit_output(h_t) if last_output else self.builder_.emit(h_t))
        if chain[-1].c_new is not None:
            self.set_var_remap(chain[-1].c_new, self.builder_.emit(relax.op.reshape(y_c, chain[-1].c_new.ty.shape)))


def _has_matmul(mod: tvm.IRModule) -> bool:
    """Whether any Relax function still calls relax.matmul: a cell needs one, and after
    LegalizeOps none is left, so the pass skips the (costly) constant folding."""
    return any(True for _ in op_calls(mod, "relax.matmul"))


def MatchCells(target_kind: str = "llvm") -> tvm.ir.transform.Pass:
    """Replace each chain of primitive-op LSTM, GRU or RNN cells with the canonical recurrent form.
    A module without such chains comes back as it went in."""

    @tvm.ir.transform.module_pass(opt_level=0, name="MatchCells")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not _has_matmul(mod):
            return mod
        original, mod = mod, relax.transform.FoldConstant()(mod)  # weights behind permute_dims become constants
        matched = False
        for gv, func in list(mod.functions.items()):
            if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
                continue
            chains = []
            for block in func.body.blocks:
                blk = _Block(block)
                readings = {}
                for b in block.bindings:
                    gru = _match_gru(blk, b.var)
                    cells = _match_lstm(blk, b.var) or ([gru] if gru is not None else []) or _match_rnn(blk, b.var)
                    if cells:
                        readings[b.var] = cells
                chains += _chains(blk, readings)
            if chains:
                matched = True
                rewriter = _Rewriter(mod, chains, target_kind)
                new_func = rewriter.visit_expr(func)
                mod = rewriter.builder_.get()
                mod[gv] = new_func
        if not matched:
            return original
        return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))

    return _pass
