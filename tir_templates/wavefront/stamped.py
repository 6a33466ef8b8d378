"""How h travels in the wavefront: every layer's h after each step, each value beside its step's
stamp in one 8-byte word (`hb_l[t, 0, b, 2j : 2j + 2]` = h_l(t)[b, j], t + 1).

A reader that sees the stamp it expects has the value too (an aligned 8-byte store is seen whole
or not at all), so no counter, fence or barrier stands between a writer and its readers: a CTA
reads h_l(t-1) of its own layer and h_{l-1}(t) of the layer below in one trip to L2, and spins
only on a word whose stamp is not there yet. Each step has its own words (the buffer holds the
whole sequence), so a reader that runs behind never finds a word overwritten. The stamps are
zeroed before every launch (a word left from an earlier call must never match).

On the GPU a thread's loads go out together (`issue`), those that came back without their stamp
go out again together (`reissue`), and only then is each checked and, if still early, reloaded
until it is there (`settled`); the CPU twin reads the pair and flags a stamp that is not there.
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..signature import BARRIER_FLAG_WORD
from ..stamped_words import ISSUE, SETTLE, STORE


@T.macro
def store(S, a, layer, t, b, j, value):
    """h_l(t)[b, j] = value, stamped t + 1."""
    if S.emulate:
        a.hb[layer][t, 0, b, 2 * j] = value
        a.hb[layer][t, 0, b, 2 * j + 1] = T.Cast("float32", t + 1)
    else:
        T.cuda.func_call("prnn_stamped_store", T.address_of(a.hb[layer][t, 0, b, 2 * j]), value,
                         T.Cast("uint32", t + 1), source_code=STORE)


@T.macro
def issue(S, a, layer, t, b, j, raw, e):
    """Start loading h_l(t)[b, j] into raw[e] (the twin: nothing yet)."""
    if not S.emulate:
        raw[e] = T.cuda.func_call("prnn_stamped_issue", T.address_of(a.hb[layer][t, 0, b, 2 * j]),
                                  source_code=ISSUE, return_type="uint64")


@T.macro
def reissue(S, a, layer, t, b, j, raw, e):
    """Load h_l(t)[b, j] into raw[e] again if the word issued first lacks its stamp (readers
    start as the writers finish: this second round goes out at once, where settling each word
    in turn would take a trip to L2 per word)."""
    if not S.emulate:
        if T.Cast("uint32", T.shift_right(raw[e], T.uint64(32))) != T.Cast("uint32", t + 1):
            raw[e] = T.cuda.func_call("prnn_stamped_issue", T.address_of(a.hb[layer][t, 0, b, 2 * j]),
                                      source_code=ISSUE, return_type="uint64")


def settled(S, a, layer, t, b, j, raw, e):
    """h_l(t)[b, j] once its stamp (t + 1) is there: from raw[e], or reloaded until it is."""
    if S.emulate:
        return a.hb[layer][t, 0, b, 2 * j]
    return T.cuda.func_call("prnn_stamped_settle", raw[e], T.address_of(a.hb[layer][t, 0, b, 2 * j]),
                            T.Cast("uint32", t + 1), source_code=SETTLE, return_type="float32")


@T.macro
def check(S, a, layer, t, b, j):
    """The twin: flag a read of h_l(t)[b, j] whose stamp is not t + 1 (the GPU would spin forever)."""
    if S.emulate:
        if a.hb[layer][t, 0, b, 2 * j + 1] != T.Cast("float32", t + 1):
            a.ws[BARRIER_FLAG_WORD] = T.uint32(1)
