"""Cell equations (ONNX LSTM / GRU / RNN) as TIR expressions, shared by every template.

`x` are the input-projection parts of a unit's gates, `rec` the recurrent parts (R h + Rb; for
GRU with linear_before_reset=0 the candidate's part is already R_h (r * h) + Rb_h). Gate order
is ONNX's: LSTM i, o, f, c; GRU z, r, h; RNN i. `fast`: CUDA's fast sigmoid (activations.apply).
"""
from __future__ import annotations

from tvm.script import tirx as T

from . import activations
from .spec import CellSpec


def activation(spec: CellSpec, d, k, x, fast=False):
    """Activation k of direction `d` (a TIR expr); a select only when the directions differ."""
    acts = [spec.direction_activations(i) for i in range(spec.num_directions)]
    if len(acts) == 1 or acts[0][k] == acts[1][k]:
        return activations.apply(acts[0][k], x, fast)
    return T.Select(d == 0, activations.apply(acts[0][k], x, fast), activations.apply(acts[1][k], x, fast))


def gru_gate(spec: CellSpec, d, x, rec, fast=False):
    """GRU's z or r. With linear_before_reset=0, r * h(t-1) feeds the candidate's GEMV, and the
    kernels compute the gates in a phase of their own."""
    return activation(spec, d, 0, activations.clip(spec.clip, x + rec), fast)


def gru_blend(spec: CellSpec, d, z, x_n, rec_n, h_prev, fast=False):
    """GRU's H(t) = (1 - z) * g(x_n + rec_n) + z * H(t-1), rec_n the candidate's recurrent part."""
    h_til = activation(spec, d, 1, activations.clip(spec.clip, x_n + rec_n), fast)
    return (T.float32(1.0) - z) * h_til + z * h_prev


def lstm_cell_state(spec: CellSpec, d, x, rec, c_prev, peep, fast=False):
    """LSTM's C(t) from C(t-1); `peep` lists P_i, P_o, P_f of the unit."""
    one = T.float32(1.0)
    cl = lambda v: activations.clip(spec.clip, v)
    pi, pf = (peep[0], peep[2]) if spec.peepholes else (T.float32(0.0), T.float32(0.0))
    i = activation(spec, d, 0, cl(x[0] + rec[0] + pi * c_prev), fast)
    fg = one - i if spec.input_forget else activation(spec, d, 0, cl(x[2] + rec[2] + pf * c_prev), fast)
    return fg * c_prev + i * activation(spec, d, 1, cl(x[3] + rec[3]), fast)


def hidden(spec: CellSpec, d, x, rec, h_prev, c_new=None, peep=None, fast=False):
    """A unit's H(t). LSTM needs its C(t) (`c_new`, computed first by lstm_cell_state)."""
    cl = lambda v: activations.clip(spec.clip, v)
    f = lambda k, v: activation(spec, d, k, v, fast)
    if spec.cell == "rnn":
        return f(0, cl(x[0] + rec[0]))
    if spec.cell == "gru":
        rec_n = gru_gate(spec, d, x[1], rec[1], fast) * rec[2] if spec.linear_before_reset else rec[2]
        return gru_blend(spec, d, gru_gate(spec, d, x[0], rec[0], fast), x[2], rec_n, h_prev, fast)
    po = peep[1] if spec.peepholes else T.float32(0.0)
    return f(0, cl(x[1] + rec[1] + po * c_new)) * f(2, c_new)


def gate_slice(buf, prefix, base, stride, count):
    """[buf[*prefix, base + k * stride] for k < count]: a unit's gates in a packed gate axis."""
    return [buf[(*prefix, base + k * stride)] for k in range(count)]
