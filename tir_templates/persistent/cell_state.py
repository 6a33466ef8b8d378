"""Where an LSTM's cell state C lives between steps of a CTA that walks batch chunks (a resident
CTA keeps it in a register and writes Y_c once, `exchange.resident_states_out`).

An fp32 layer keeps C in Y_c itself. A 16-bit layer returns Y_c in its dtype (no cast kernel
after the kernel, `signature.recurrence_func`), so C keeps full precision in an fp32 slot of the
exchange buffer (`Config.cell_state_slot`) and Y_c gets each C(t) rounded beside it: the value
read back is the fp32 one, the value returned the last one written.
"""
from __future__ import annotations

from tvm.script import tirx as T


@T.macro
def keep_cell_state(L, a, d, b, j, value):
    """C of (direction d, batch row b, unit j) = value, where the next step reads it, and in Y_c."""
    if L.C_SLOT is not None:
        a.hb[L.C_SLOT, d, b, j] = value
    a.yc[d, b, j] = value


def cell_state(L, a, d, b, j):
    """C of (d, b, j) as `keep_cell_state` left it, in fp32."""
    return a.yc[d, b, j] if L.C_SLOT is None else a.hb[L.C_SLOT, d, b, j]
