"""The one signature of every recurrence kernel, reference scan and persistent kernels alike, so
that a pass can swap one lowering of a layer for another without touching its call site.

T and B are runtime variables, everything else comes from the layer's CellSpec:
    xw   (T, B, D, G*H)  input projection X @ W^T + Wb of every step
    r    (D, G*H, H)     recurrent weights, ONNX layout
    rb   (D, G*H)        recurrent bias
    lens (B,) int32      sequence lengths
    h0   (D, B, H)       initial hidden state
    c0   (D, B, H)       initial cell state   (LSTM only)
    (lens, h0 and c0 have batch extent 1 when the spec's `batch_broadcast` names them: every
    batch row reads row 0, `batch_row`)
    p    (D, 3*H)        peepholes i, o, f    (LSTM only)
    ->   y (T, D, B, H) in the layer's dtype (every kernel only writes it, so an fp16 or bf16
         layer's Y leaves the kernel as the model wants it, with no cast kernel after it),
         yh (D, B, H), yc (D, B, H) (LSTM only) in float32 (the reference scan keeps its states there;
         a kernel that only writes them may declare them in the layer's dtype, `recurrence_func`),
         hbuf (EXCHANGE_SLOTS or more, D, B, H) float32, ws (WORKSPACE_WORDS or more,) uint32
The last two outputs are per-call scratch that the reference ignores and the persistent kernels
use (h exchanged between CTAs, grid-barrier counters, a packed copy of weights read each step);
a kernel may want a longer exchange buffer or workspace, which the pass then writes into the
call site.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .spec import ATTR_KEY, CellSpec

#: size of the per-call scratch output every recurrence kernel takes
WORKSPACE_WORDS = 32
#: where a CPU twin flags a barrier or exchange that would not match on the GPU (its workspace's last word)
BARRIER_FLAG_WORD = WORKSPACE_WORDS - 1
#: leading extent of the exchange buffer the importer allocates (a kernel may ask for more)
EXCHANGE_SLOTS = 3


#: operands a call site may give once for the whole batch (CellSpec.batch_broadcast)
BROADCASTABLE = ("lens", "h0", "c0")


def batch_row(spec: CellSpec, operand: str, b):
    """The row of `operand` (lens, h0 or c0) that batch row b reads: 0 when the call site gives
    it once for the whole batch."""
    return 0 if operand in spec.batch_broadcast else b


def batch_extent(spec: CellSpec, operand: str, n_b):
    """`operand`'s batch extent in the signature: 1 when given once for the whole batch."""
    return 1 if operand in spec.batch_broadcast else n_b


def time_index(spec: CellSpec, d, s, n_valid):
    """Position of xw and y that step s of direction d reads and writes: reverse directions walk
    each sequence backwards from its last valid step (`n_valid`: its length)."""
    if spec.direction == "forward":
        return s
    if spec.direction == "reverse":
        return n_valid - 1 - s
    return T.if_then_else(d == 1, n_valid - 1 - s, s)


def recurrence_func(spec: CellSpec, body, slots: int = EXCHANGE_SLOTS, yh_written_only: bool = False,
                    yc_written_only: bool = False, workspace_words: int = WORKSPACE_WORDS) -> tvm.tirx.PrimFunc:
    """A PrimFunc with the signature above whose body is the TIR macro `body`, called as
    body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b); it carries `spec`. The exchange
    buffer's leading extent stays symbolic (at least `slots`), so that a pass can swap the callee
    of a call site without changing the callee's type. `yh_written_only`: the body never reads yh,
    which is then in the layer's dtype too (the pass that swaps such a kernel in re-types Y_h at
    its call sites, so that no cast kernel follows it); `yc_written_only` likewise for an LSTM's yc
    (a GRU's yc is fp32 scratch: the two-phase kernel keeps z there). The workspace's extent is
    symbolic too, at least `workspace_words` (a kernel that keeps a packed copy of some weights
    there asks for more: `Config.workspace_words`)."""
    H, D = spec.hidden_size, spec.num_directions
    GH = spec.num_gates * H
    y_dtype = spec.dtype  # stores into y round to it (TVMScript casts a store to its buffer's dtype)
    yh_dtype = spec.dtype if yh_written_only else "float32"
    yc_dtype = spec.dtype if yc_written_only and spec.cell == "lstm" else "float32"

    @T.prim_func(private=True)
    def kernel(
        xw_h: T.handle, r: T.Buffer((D, GH, H), "float32"), rb: T.Buffer((D, GH), "float32"),
        lens_h: T.handle, h0_h: T.handle, c0_h: T.handle, p: T.Buffer((D, 3 * H), "float32"),
        y_h: T.handle, yh_h: T.handle, yc_h: T.handle, hb_h: T.handle,
        ws_h: T.handle,
    ):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True, "op_pattern": 8})  # 8: opaque, never fused
        n_t = T.int64()
        n_b = T.int64()
        n_slots = T.int64()  # symbolic, so that every lowering has one type; the kernel needs `slots`
        xw = T.match_buffer(xw_h, (n_t, n_b, D, GH), "float32")
        lens = T.match_buffer(lens_h, (batch_extent(spec, "lens", n_b),), "int32")
        h0 = T.match_buffer(h0_h, (D, batch_extent(spec, "h0", n_b), H), "float32")
        c0 = T.match_buffer(c0_h, (D, batch_extent(spec, "c0", n_b), H), "float32")
        y = T.match_buffer(y_h, (n_t, D, n_b, H), y_dtype)
        yh = T.match_buffer(yh_h, (D, n_b, H), yh_dtype)
        yc = T.match_buffer(yc_h, (D, n_b, H), yc_dtype)
        hb = T.match_buffer(hb_h, (n_slots, D, n_b, H), "float32")
        n_words = T.int64()
        ws = T.match_buffer(ws_h, (n_words,), "uint32")
        assert n_slots >= slots, "the exchange buffer is shorter than this kernel needs"
        assert n_words >= workspace_words, "the workspace is shorter than this kernel needs"
        body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b)

    return kernel.with_attr(ATTR_KEY, spec.to_json())
