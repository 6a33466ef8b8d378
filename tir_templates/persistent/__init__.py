"""The persistent recurrence kernel as a package, one concern a file; read `kernel.py` first.

    layout.py          who owns which units, gate rows and batch rows (plain Python)
    buffers.py         the buffers the macros share, grouped by role
    inputs.py          a step's inputs into registers
    dots.py            h(t-1) . R: dot_fma.py (FMA units, shuffles), dot_mma.py (3xTF32 tensor cores)
    update.py          each owned pair; the cell update (LSTM, GRU linear_before_reset=1, RNN)
    gru_two_phase.py   GRU linear_before_reset=0, two barriers a step
    gru_partial_sums.py  ... and one barrier a step (GRNN's partial sums)
    exchange.py        h between CTAs, the grid and cluster barriers, the final states
    kernel.py          the CUDA kernel, top to bottom
    emulated.py        its CPU twin, for tests without a GPU
    buckets.py         a kernel per batch bucket behind one signature, for a batch known at run time
    checks.py          which configs the template builds, and which the planner may pick
"""
from ..config import two_phase
from .checks import UnsupportedLayer, unverified_reason
from .emulated import emulated_persistent_kernel
from .exchange import BARRIER_FLAG_WORD, GRID_BARRIER
from .kernel import persistent_kernel

__all__ = ["BARRIER_FLAG_WORD", "GRID_BARRIER", "UnsupportedLayer", "emulated_persistent_kernel",
           "persistent_kernel", "two_phase", "unverified_reason"]
