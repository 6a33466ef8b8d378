"""The unrolled lowering: the recurrence as T copies of the cell in primitive Relax ops.

This is how an unrolling compiler sees an RNN (static T only). It is the "TVM without
persist_rnn" baseline of the benchmarks and an input for the pass's cell matcher.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from ..errors import node_error
from .layer import RecurrentLayer, finish_outputs, input_projection

op = relax.op


def _c(v):
    return relax.const(np.float32(v))


def activation(act, x):
    """ONNX activation `act` in Relax ops."""
    n, a, b = act.name, act.alpha, act.beta
    zero = _c(0.0)
    table = {
        "Sigmoid": lambda: op.sigmoid(x),
        "Tanh": lambda: op.tanh(x),
        "Relu": lambda: op.nn.relu(x),
        "Affine": lambda: op.add(op.multiply(x, _c(a)), _c(b)),
        "LeakyRelu": lambda: op.where(op.greater_equal(x, zero), x, op.multiply(x, _c(a))),
        "ThresholdedRelu": lambda: op.where(op.greater(x, _c(a)), x, op.zeros_like(x)),
        "ScaledTanh": lambda: op.multiply(_c(a), op.tanh(op.multiply(x, _c(b)))),
        "HardSigmoid": lambda: op.clip(op.add(op.multiply(x, _c(a)), _c(b)), 0.0, 1.0),
        "Elu": lambda: op.where(op.greater_equal(x, zero), x,
                                op.multiply(_c(a), op.subtract(op.exp(x), _c(1.0)))),
        "Softsign": lambda: op.divide(x, op.add(_c(1.0), op.abs(x))),
        "Softplus": lambda: op.add(op.maximum(x, zero), op.log(op.add(_c(1.0), op.exp(op.negative(op.abs(x)))))),
    }
    return table[n]()


def _step_slice(e, s, axis=0):
    return op.squeeze(op.strided_slice(e, [axis], [s], [s + 1]), [axis])


def _cols(e, k, width):
    """Gate k's columns of a (B, G*H) tensor."""
    return op.strided_slice(e, [1], [k * width], [(k + 1) * width])


def _time_permutation(bb, lens, n_t, batch):
    """Index (T, B) that reverses each sequence within its own length; its own inverse."""
    s = relax.const(np.arange(n_t, dtype="int32").reshape(n_t, 1))
    rev = op.subtract(op.subtract(op.reshape(lens, (1, batch)), relax.const(np.int32(1))), s)
    return bb.emit(op.where(op.less(s, op.reshape(lens, (1, batch))), rev, op.broadcast_to(s, (n_t, batch))))


def _gather_time(bb, e, idx):
    """e[idx[t, b], b, :] for a (T, B, K) tensor."""
    k = e.ty.shape[2]
    full = op.broadcast_to(op.expand_dims(idx, [2]), (idx.ty.shape[0], idx.ty.shape[1], k))
    return bb.emit(op.gather_elements(e, full, axis=0))


def _cell(bb, spec, d, x_s, h, c, r_t, rb, p):
    """One step of direction d: returns (h_new, c_new)."""
    H = spec.hidden_size
    f, g, *rest = [lambda v, a=a: activation(a, v) for a in spec.direction_activations(d)] + [None]
    cl = (lambda v: op.clip(v, -spec.clip, spec.clip)) if spec.clip is not None else (lambda v: v)
    if spec.cell == "gru" and not spec.linear_before_reset:
        zr = op.add(op.add(op.strided_slice(x_s, [1], [0], [2 * H]), op.matmul(h, op.strided_slice(r_t, [1], [0], [2 * H]))),
                    op.strided_slice(rb, [0], [0], [2 * H]))
        z, r = f(cl(_cols(zr, 0, H))), f(cl(_cols(zr, 1, H)))
        hh = op.add(op.add(_cols(x_s, 2, H), op.matmul(op.multiply(r, h), op.strided_slice(r_t, [1], [2 * H], [3 * H]))),
                    op.strided_slice(rb, [0], [2 * H], [3 * H]))
        h_til = g(cl(hh))
        return bb.emit(op.add(op.multiply(op.subtract(_c(1.0), z), h_til), op.multiply(z, h))), None
    rec = bb.emit(op.add(op.matmul(h, r_t), rb))
    if spec.cell == "gru":
        z = f(cl(op.add(_cols(x_s, 0, H), _cols(rec, 0, H))))
        r = f(cl(op.add(_cols(x_s, 1, H), _cols(rec, 1, H))))
        h_til = g(cl(op.add(_cols(x_s, 2, H), op.multiply(r, _cols(rec, 2, H)))))
        return bb.emit(op.add(op.multiply(op.subtract(_c(1.0), z), h_til), op.multiply(z, h))), None
    pre = bb.emit(op.add(x_s, rec))
    if spec.cell == "rnn":
        return bb.emit(f(cl(pre))), None
    h_act = rest[0]
    pi, po, pf = (op.strided_slice(p, [0], [k * H], [(k + 1) * H]) for k in range(3))
    gi, go, gf, gc = (_cols(pre, k, H) for k in range(4))
    if spec.peepholes:
        gi, gf = op.add(gi, op.multiply(pi, c)), op.add(gf, op.multiply(pf, c))
    i = bb.emit(f(cl(gi)))
    fg = op.subtract(_c(1.0), i) if spec.input_forget else f(cl(gf))
    c_new = bb.emit(op.add(op.multiply(fg, c), op.multiply(i, g(cl(gc)))))
    if spec.peepholes:
        go = op.add(go, op.multiply(po, c_new))
    return bb.emit(op.multiply(f(cl(go)), h_act(c_new))), c_new


def emit_unrolled(bb, layer: RecurrentLayer):
    spec = layer.spec
    n_t, batch = layer.seq_len, layer.batch
    if not isinstance(n_t, int) or not isinstance(batch, int):
        raise node_error(spec.node, spec.cell.upper(), "input 'X'", "has a symbolic sequence length or batch",
                         "static T and B with unroll=True (use the default canonical form for dynamic shapes)")
    xw = input_projection(bb, layer)
    ys, hs, cs = [], [], []
    for d in range(spec.num_directions):
        xw_d = bb.emit(_step_slice(xw, d, axis=2))  # (T, B, G*H)
        idx = None
        if spec.is_reverse(d):
            if layer.lens is None:
                xw_d = bb.emit(op.flip(xw_d, 0))
            else:
                idx = _time_permutation(bb, layer.lens, n_t, batch)
                xw_d = _gather_time(bb, xw_d, idx)
        r_t = bb.emit(op.permute_dims(_step_slice(layer.r, d), [1, 0]))
        rb, p = bb.emit(_step_slice(layer.rb, d)), bb.emit(_step_slice(layer.p, d))
        h, c = bb.emit(_step_slice(layer.h0, d)), bb.emit(_step_slice(layer.c0, d))
        steps = []
        for s in range(n_t):
            h_new, c_new = _cell(bb, spec, d, bb.emit(_step_slice(xw_d, s)), h, c, r_t, rb, p)
            if layer.lens is None:
                h, c = h_new, c_new
                steps.append(h_new)
            else:
                live = bb.emit(op.expand_dims(op.less(relax.const(np.int32(s)), layer.lens), [1]))
                h = bb.emit(op.where(live, h_new, h))
                if c_new is not None:
                    c = bb.emit(op.where(live, c_new, c))
                steps.append(bb.emit(op.where(live, h_new, op.zeros_like(h_new))))
        if layer.lens is not None:  # an empty sequence has zero final states (ONNX Runtime's convention)
            some = bb.emit(op.expand_dims(op.greater(layer.lens, relax.const(np.int32(0))), [1]))
            h = bb.emit(op.where(some, h, op.zeros_like(h)))
            if c is not None and spec.cell == "lstm":
                c = bb.emit(op.where(some, c, op.zeros_like(c)))
        y_d = bb.emit(op.stack(steps, axis=0))  # (T, B, H)
        if spec.is_reverse(d):
            y_d = bb.emit(op.flip(y_d, 0)) if idx is None else _gather_time(bb, y_d, idx)
        ys.append(y_d)
        hs.append(h)
        cs.append(c)
    y = bb.emit(op.stack(ys, axis=1))
    y_h = bb.emit(op.stack(hs, axis=0))
    y_c = bb.emit(op.stack(cs, axis=0)) if spec.cell == "lstm" else None
    return finish_outputs(bb, layer, y, y_h, y_c)
