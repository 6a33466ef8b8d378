"""The reference scan: a simple, always-correct recurrence kernel for every CellSpec.

It is what the importer emits (the *canonical recurrent form*) and what a layer keeps when no
persistent kernel applies. One (direction, batch row) pair is independent of every other, so
on CUDA each pair gets one thread block whose threads split the hidden units; on the CPU the
pairs run in parallel with one "thread" each. h(t-1) lives in a per-block buffer, and the only
synchronisation is the block's own barrier. Simple, not fast.

Signature (T and B are runtime variables, everything else comes from the spec):
    xw   (T, B, D, G*H)  input projection X @ W^T + Wb of every step
    r    (D, G*H, H)     recurrent weights, ONNX layout
    rb   (D, G*H)        recurrent bias
    lens (B,) int32      sequence lengths
    h0   (D, B, H)       initial hidden state
    c0   (D, B, H)       initial cell state   (LSTM only)
    p    (D, 3*H)        peepholes i, o, f    (LSTM only)
    ->   y (T, D, B, H), yh (D, B, H), yc (D, B, H) (LSTM only),
         hbuf (3, D, B, H) float32, ws (WORKSPACE_WORDS,) uint32
The last two outputs are per-call scratch that the reference ignores and the persistent kernels
use (h exchanged between CTAs, grid-barrier counters), so that every lowering of a layer has
the same signature and can replace another without touching the call site.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from . import cells
from .spec import ATTR_KEY, CellSpec

#: size of the per-call scratch output every recurrence kernel takes
WORKSPACE_WORDS = 32
#: leading extent of the exchange buffer the importer allocates (a kernel may ask for more)
EXCHANGE_SLOTS = 3
#: threads per block of the CUDA variant
CUDA_THREADS = 128


def reference_scan(spec: CellSpec, target_kind: str = "llvm") -> tvm.tirx.PrimFunc:
    """Build the reference scan PrimFunc of `spec` for a target kind ("llvm" or "cuda")."""
    gpu = target_kind == "cuda"
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    GH = G * H
    lstm, gru = spec.cell == "lstm", spec.cell == "gru"
    gru_two_phase = gru and not spec.linear_before_reset
    NT = CUDA_THREADS if gpu else 1
    UNITS = (H + NT - 1) // NT  # hidden units per thread
    scope = "shared" if gpu else "global"

    def time_index(d, s, n_valid):
        """Position read and written at step s: reverse directions walk each sequence backwards."""
        if spec.direction == "forward":
            return s
        if spec.direction == "reverse":
            return n_valid - 1 - s
        return T.if_then_else(d == 1, n_valid - 1 - s, s)

    def block_loop(n):
        return T.thread_binding(n, thread="blockIdx.x") if gpu else T.parallel(n)

    def thread_loop(n):
        return T.thread_binding(n, thread="threadIdx.x") if gpu else T.serial(n)

    @T.prim_func(private=True)
    def scan(
        xw_h: T.handle, r: T.Buffer((D, GH, H), "float32"), rb: T.Buffer((D, GH), "float32"),
        lens_h: T.handle, h0_h: T.handle, c0_h: T.handle, p: T.Buffer((D, 3 * H), "float32"),
        y_h: T.handle, yh_h: T.handle, yc_h: T.handle, hb_h: T.handle,
        ws: T.Buffer((WORKSPACE_WORDS,), "uint32"),
    ):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True, "op_pattern": 8})  # 8: opaque, never fused
        n_t = T.int64()
        n_b = T.int64()
        xw = T.match_buffer(xw_h, (n_t, n_b, D, GH), "float32")
        lens = T.match_buffer(lens_h, (n_b,), "int32")
        h0 = T.match_buffer(h0_h, (D, n_b, H), "float32")
        c0 = T.match_buffer(c0_h, (D, n_b, H), "float32")
        y = T.match_buffer(y_h, (n_t, D, n_b, H), "float32")
        yh = T.match_buffer(yh_h, (D, n_b, H), "float32")
        yc = T.match_buffer(yc_h, (D, n_b, H), "float32")
        for blk in block_loop(D * n_b):
            for tx in thread_loop(NT):
                hs = T.alloc_buffer((H,), "float32", scope=scope)  # h(t-1) of this (d, b)
                rh = T.alloc_buffer((H,), "float32", scope=scope)  # r * h(t-1), GRU lbr=0
                acc = T.alloc_buffer((G,), "float32", scope="local")
                b = blk % n_b
                dd = blk // n_b
                for u in range(UNITS):
                    j = u * NT + tx
                    if j < H:
                        hs[j] = h0[dd, b, j]
                        yh[dd, b, j] = h0[dd, b, j]
                        if lstm:
                            yc[dd, b, j] = c0[dd, b, j]
                if gpu:
                    T.tvm_storage_sync("shared")
                n_valid = T.max(T.min(T.Cast("int64", lens[b]), n_t), T.int64(0))  # never index past T
                for s in range(n_t):
                    if s < n_valid:
                        t = time_index(dd, s, n_valid)
                        if gru_two_phase:
                            # phase 1: the reset gate of every unit, to form r * h(t-1)
                            for u in range(UNITS):
                                j = u * NT + tx
                                if j < H:
                                    acc[1] = rb[dd, H + j]
                                    for k in range(H):
                                        acc[1] = acc[1] + r[dd, H + j, k] * hs[k]
                                    rh[j] = cells.gru_gate(spec, dd, xw[t, b, dd, H + j], acc[1]) * hs[j]
                            if gpu:
                                T.tvm_storage_sync("shared")
                        for u in range(UNITS):
                            j = u * NT + tx
                            if j < H:
                                for g in T.unroll(G):
                                    acc[g] = rb[dd, g * H + j]
                                for k in range(H):
                                    for g in T.unroll(G):
                                        acc[g] = acc[g] + r[dd, g * H + j, k] * hs[k]
                                if gru_two_phase:  # the candidate's dot product runs over r * h(t-1)
                                    acc[2] = rb[dd, 2 * H + j]
                                    for k in range(H):
                                        acc[2] = acc[2] + r[dd, 2 * H + j, k] * rh[k]
                                if lstm:
                                    yc[dd, b, j] = cells.lstm_cell_state(
                                        spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G),
                                        cells.gate_slice(acc, (), 0, 1, G), yc[dd, b, j],
                                        cells.gate_slice(p, (dd,), j, H, 3))
                                yh[dd, b, j] = cells.hidden(
                                    spec, dd, cells.gate_slice(xw, (t, b, dd), j, H, G),
                                    cells.gate_slice(acc, (), 0, 1, G), hs[j], yc[dd, b, j],
                                    cells.gate_slice(p, (dd,), j, H, 3))
                                y[t, dd, b, j] = yh[dd, b, j]
                        if gpu:
                            T.tvm_storage_sync("shared")
                        for u in range(UNITS):
                            j = u * NT + tx
                            if j < H:
                                hs[j] = yh[dd, b, j]
                        if gpu:
                            T.tvm_storage_sync("shared")
                    else:
                        for u in range(UNITS):
                            j = u * NT + tx
                            if j < H:
                                y[s, dd, b, j] = T.float32(0)
                if n_valid == 0:  # an empty sequence has zero final states (ONNX Runtime's convention)
                    for u in range(UNITS):
                        j = u * NT + tx
                        if j < H:
                            yh[dd, b, j] = T.float32(0)
                            yc[dd, b, j] = T.float32(0)

    return scan.with_attr(ATTR_KEY, spec.to_json()).with_attr("persist_rnn.lowering", "reference")
