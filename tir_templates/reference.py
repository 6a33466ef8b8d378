"""The reference scan: a simple, always-correct recurrence kernel for every CellSpec.

It is what the importer emits (the *canonical recurrent form*) and what a layer keeps when no
persistent kernel applies. One (direction, batch row) pair is independent of every other, so
on CUDA each pair gets one thread block whose threads split the hidden units; on the CPU the
pairs run in parallel with one "thread" each. h(t-1) lives in a per-block buffer, and the only
synchronisation is the block's own barrier. Simple, not fast.

Signature: `signature.py` (the reference ignores the scratch outputs hbuf and ws).
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from . import cells, signature
from .signature import batch_row, recurrence_func
from .spec import CellSpec

#: threads per block of the CUDA variant
CUDA_THREADS = 128


def reference_scan(spec: CellSpec, target_kind: str = "llvm") -> tvm.tirx.PrimFunc:
    """Build the reference scan PrimFunc of `spec` for a target kind ("llvm" or "cuda")."""
    gpu = target_kind == "cuda"
    H, D, G = spec.hidden_size, spec.num_directions, spec.num_gates
    lstm, gru = spec.cell == "lstm", spec.cell == "gru"
    gru_two_phase = gru and not spec.linear_before_reset
    NT = CUDA_THREADS if gpu else 1
    UNITS = (H + NT - 1) // NT  # hidden units per thread
    scope = "shared" if gpu else "global"

    def time_index(d, s, n_valid):
        return signature.time_index(spec, d, s, n_valid)

    def block_loop(n):
        return T.thread_binding(n, thread="blockIdx.x") if gpu else T.parallel(n)

    def thread_loop(n):
        return T.thread_binding(n, thread="threadIdx.x") if gpu else T.serial(n)

    @T.macro
    def scan(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
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
                        hs[j] = h0[dd, batch_row(spec, "h0", b), j]
                        yh[dd, b, j] = h0[dd, batch_row(spec, "h0", b), j]
                        if lstm:
                            yc[dd, b, j] = c0[dd, batch_row(spec, "c0", b), j]
                if gpu:
                    T.tvm_storage_sync("shared")
                n_valid = T.max(T.min(T.Cast("int64", lens[batch_row(spec, "lens", b)]), n_t), T.int64(0))  # never index past T
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

    return recurrence_func(spec, scan).with_attr("persist_rnn.lowering", "reference")
