"""What the scans of a kernel a step (streamed.py, gemm_scan.py) share: how many steps a batch row
runs, and the launch that starts the states before the first step.

Each keeps h(t-1) in the exchange buffer's slot 0 (streamed.py alternates slots 0 and 1 from
there), the final states in yh and yc (an LSTM's C is its state), as the reference scan does
(zero for an empty sequence: ONNX Runtime's convention).
"""
from __future__ import annotations

from tvm.script import tirx as T

from .early_launch import after_previous_kernel
from .signature import batch_row
from .spec import CellSpec

#: threads per CTA of the launch that starts the states
INIT_THREADS = 256


def valid_steps(spec: CellSpec, lens, b, n_t):
    """The steps batch row b runs: its length, clamped to [0, n_t]."""
    return T.max(T.min(T.Cast("int64", lens[batch_row(spec, "lens", b)]), n_t), T.int64(0))


def initial_states(spec: CellSpec, emulate: bool, early: bool = False):
    """The macro start(lens, h0, c0, yh, yc, hb, n_t, n_b): h(-1) into slot 0 and the final
    states' start, a thread per (direction, batch row, unit) (serially: `emulate`); `early`: a
    kernel that may be launched early, touching nothing before the kernel ahead has finished."""
    H, D = spec.hidden_size, spec.num_directions
    lstm = spec.cell == "lstm"

    @T.macro
    def init_state(lens, h0, c0, yh, yc, hb, i, n_t, n_b):
        """Element i of (direction, batch row, unit)."""
        if i < D * n_b * H:
            dd = i // (n_b * H)
            b = i // H % n_b
            j = i % H
            empty = valid_steps(spec, lens, b, n_t) == 0
            hb[0, dd, b, j] = h0[dd, batch_row(spec, "h0", b), j]
            yh[dd, b, j] = T.Select(empty, T.float32(0), h0[dd, batch_row(spec, "h0", b), j])
            if lstm:
                yc[dd, b, j] = T.Select(empty, T.float32(0), c0[dd, batch_row(spec, "c0", b), j])

    @T.macro
    def start(lens, h0, c0, yh, yc, hb, n_t, n_b):
        if emulate:
            for i in range(D * n_b * H):
                init_state(lens, h0, c0, yh, yc, hb, i, n_t, n_b)
        else:
            for blk in T.thread_binding((D * n_b * H + INIT_THREADS - 1) // INIT_THREADS, thread="blockIdx.x"):
                for tx in T.thread_binding(INIT_THREADS, thread="threadIdx.x"):
                    if early:
                        after_previous_kernel()
                    init_state(lens, h0, c0, yh, yc, hb, blk * INIT_THREADS + tx, n_t, n_b)

    return start
