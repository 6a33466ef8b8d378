"""h between the CTAs of a grid direction as stamped words (`Config.stamped`): no barrier a step.

Each owner publishes h(t)[b, j] as one 8-byte word, the value beside the stamp t + 2, into copy
(t + 1) % 2 of the words (`stamped_words.py`); step t + 1 reads every word of that copy and
reloads those whose stamp is not there yet (`load_stamped_h`). So a step ends with the CTA's own
`__syncthreads`, not a grid barrier: the barrier's release fence, atomic and poll, and the
second trip to L2 that follows them, leave the step.

Copy 0 holds h0 with stamp 1, copy 1 the stamp 0 (no step's), both written by their owners before
the launch's one grid barrier: a word from an earlier launch can never carry a stamp a reader
waits for. No word is overwritten while a reader may still want it: the writer of h(t + 1) into a
copy has read every CTA's h(t), which each CTA published only after reading h(t - 1) from that copy.

The words sit in the exchange buffer (`Config.exchange_slots`: two slots a copy), read through a
flat view: word w = ((copy * D + d) * B + b) * H + j, its value at float 2w and its stamp at 2w + 1.
The CPU twin stores the stamp as a float and flags a read whose stamp is not the expected one
(the GPU would spin forever, or the twin's order of CTAs hides a race).

A 16-bit mma step's words (`Config.stamped_halves`) hold a pair of units instead: units 2q and
2q + 1 of h(t) rounded to the layer's 16 bits, as the B fragment reads them from `hs`
(`h16_exchange.py`), in the value's place; H / 2 words a row, from the 16-bit slot on, a slot a
copy. The owner of unit 2q + 1 hands its half to its neighbour lane, the owner of 2q, which
stores the word (`publish_pairs`); the fp32 h(t) still goes to its exchange slot, for the owner
alone (its own h(t-1), the final state). Kernel alone on the H200, LSTM H=768 fp16 in grid batch
tiles of 8 rows: 2.03 -> 1.63 us a step at B=16, 2.24 -> 1.88 at B=32, the outputs those of the
barrier bit for bit (docs/data/stamped-halves-h200.jsonl, runs A and E).
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..signature import BARRIER_FLAG_WORD
from ..stamped_words import ISSUE, SETTLE, STORE
from .h16_exchange import with_half

CLOCK = r"""
__device__ __forceinline__ long long prnn_clock() { return clock64(); }
"""
NEXT_LANE = r"""
__device__ __forceinline__ unsigned int prnn_next_lane(unsigned int bits) {
  // the next lane's value (every lane of the warp calls this)
  return __shfl_down_sync(0xffffffffu, bits, 1);
}
"""
SPIN_CHECK = r"""
__device__ __forceinline__ void prnn_spin_check(long long since) {
  // ~30 s of rounds since `since` without every word's stamp: a writer never came; fail, never hang
  if (clock64() - since > (1LL << 36)) __trap();
}
"""


def flat_words(L, a):
    """The exchange buffer as one flat float array (both copies of the words)."""
    return T.decl_buffer((L.SLOTS * L.D * a.n_b * L.H,), "float32", data=a.hb.data)


def row_words(L):
    """Words of one batch row of h: a unit each, or (stamped halves) a pair of units each."""
    return L.H // 2 if L.HALVES else L.H


def word(L, a, copy, d, b, j):
    """Index of h[b, j]'s word of direction d in `copy` (its value at 2 * word); with stamped
    halves j is a pair, and the words start at the 16-bit slot."""
    first = L.H16_SLOT * L.D * a.n_b * L.H // 2 if L.HALVES else 0
    return first + ((copy * L.D + d) * a.n_b + b) * row_words(L) + j


@T.macro
def publish(L, a, copy, d, b, j, value, stamp):
    """h[b, j] of direction d = value, stamped `stamp`, into `copy`."""
    flat = flat_words(L, a)
    if L.emulate:
        flat[2 * word(L, a, copy, d, b, j)] = value
        flat[2 * word(L, a, copy, d, b, j) + 1] = T.Cast("float32", stamp)
    else:
        T.cuda.func_call("prnn_stamped_store", T.address_of(flat[2 * word(L, a, copy, d, b, j)]), value,
                         T.Cast("uint32", stamp), source_code=STORE)


@T.macro
def publish_half(L, a, copy, d, b, j, value, stamp):
    """The CPU twin's `publish_pairs`: h[b, j] rounded to 16 bits into its half of its pair's
    word (`with_half`), and the stamp."""
    flat = flat_words(L, a)
    at = 2 * word(L, a, copy, d, b, j // 2)
    flat[at] = with_half(flat[at], j, value, L.BF16)
    flat[at + 1] = T.Cast("float32", stamp)


@T.macro
def publish_pairs(L, a, t, s, ch):
    """Step s's pairs of h(t) into copy (s + 1) % 2, stamp s + 2: each owner's 16 bits (`hh`)
    went to its lane's register; the owner of an even unit takes its neighbour's (the next unit,
    the next lane's: `Layout.pair` puts consecutive units on consecutive threads, and every
    tensor-core tile has an even number of units) and stores the word. Every lane runs the
    shuffle, outside the owners' branch."""
    cta, tx = t.cta, t.tx  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    for e in T.unroll(L.UPT):
        upper = T.cuda.func_call("prnn_next_lane", t.hh[t.row, e], source_code=NEXT_LANE, return_type="uint32")
        if L.owns(cta, tx, e, ch, a.n_b):
            b, j = L.pair(cta, tx, e, ch)
            if j % 2 == 0:
                publish(L, a, (s + 1) % 2, L.dir_of(cta), b, j // 2,
                        T.reinterpret("float32", t.hh[t.row, e] | T.shift_left(upper, T.uint32(16))), s + 2)


def stamped_value(L, a, flat, copy, d, b, j, stamp):
    """The value of h[b, j]'s word once it carries `stamp` (the twin: the value as stored)."""
    at = 2 * word(L, a, copy, d, b, j)
    if L.emulate:
        return flat[at]
    issued = T.cuda.func_call("prnn_stamped_issue", T.address_of(flat[at]), source_code=ISSUE, return_type="uint64")
    return T.cuda.func_call("prnn_stamped_settle", issued, T.address_of(flat[at]), T.Cast("uint32", stamp),
                            source_code=SETTLE, return_type="float32")


@T.macro
def check_stamp(L, a, flat, copy, d, b, j, stamp):
    """The twin: flag a read of h[b, j] whose word does not carry `stamp`."""
    if L.emulate:
        if flat[2 * word(L, a, copy, d, b, j) + 1] != T.Cast("float32", stamp):
            a.ws[BARRIER_FLAG_WORD] = T.uint32(1)


def words_of_thread(L, a, t, e, rows):
    """Whether thread t's e-th word of a chunk (of `rows` batch rows) exists, and its (row in the
    chunk, unit or pair): the threads take the chunk's rows x `row_words` words in turn. Stamped
    halves clamp instead: a word past the chunk's last (past the thread's share, or in a row the
    ragged last tile lacks) is that last row's, loaded twice and stored where the mma reads only
    padding. Guarded, LSTM H=768 B=32 fp16's step took 2.80 us kernel alone, unguarded 1.80
    (docs/data/stamped-halves-h200.jsonl)."""
    i = e * L.NT + t.tx
    if L.HALVES:
        i = T.min(i, L.BC * row_words(L) - 1)
        return True, T.min(T.Cast("int64", i // row_words(L)), rows - 1), i % row_words(L)
    return T.Cast("int64", i) < rows * row_words(L), i // row_words(L), i % row_words(L)


def issued(L, a, flat, copy, d, b, j):
    """h[b, j]'s word of direction d in `copy`, loaded as L2 holds it now (its stamp unchecked)."""
    return T.cuda.func_call("prnn_stamped_issue", T.address_of(flat[2 * word(L, a, copy, d, b, j)]),
                            source_code=ISSUE, return_type="uint64")


@T.macro
def issue_words(L, a, t, raw, flat, copy, d, ch, rows):
    """Every word of chunk ch that thread t reads, from `copy`, into `raw`, all in flight together."""
    for e in T.unroll(L.WORDS):
        mine, bi, j = T.meta_var(words_of_thread(L, a, t, e, rows))
        if mine:
            raw[e] = issued(L, a, flat, copy, d, ch * L.BC + bi, j)


@T.macro
def words_into_shared(L, a, t, hs, raw, rows):
    """The values of thread t's words in `raw` into `hs` (stamped halves: the pairs, where the
    16-bit exchange puts them)."""
    for e in T.unroll(L.WORDS):
        mine, bi, j = T.meta_var(words_of_thread(L, a, t, e, rows))
        if mine:
            if L.HALVES:
                hs[bi * L.HSW + j] = T.Cast("uint32", raw[e])
            else:
                hs[bi, j] = T.reinterpret("float32", T.Cast("uint32", raw[e]))


@T.macro
def load_stamped_h(L, a, t, hs, s, ch):
    """h(t-1) of chunk ch's batch rows (all H units) into `hs` for step s: copy s % 2 of the words,
    stamp s + 1. A thread's words go out together; then, round by round, those that came back
    without their stamp go out again together, until none is missing: each round costs one trip
    to L2 however many words are late (settling them one at a time would cost a trip per word)."""
    cta = t.cta  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    d = L.dir_of(cta)
    flat = flat_words(L, a)
    rows = T.min(a.n_b - ch * L.BC, T.int64(L.BC))
    if L.emulate:
        for e in range(L.WORDS):
            mine, bi, j = T.meta_var(words_of_thread(L, a, t, e, rows))
            if mine:
                if L.HALVES:
                    hs[bi * L.HSW + j] = T.reinterpret("uint32", stamped_value(L, a, flat, s % 2, d, ch * L.BC + bi,
                                                                               j, s + 1))
                else:
                    hs[bi, j] = stamped_value(L, a, flat, s % 2, d, ch * L.BC + bi, j, s + 1)
                check_stamp(L, a, flat, s % 2, d, ch * L.BC + bi, j, s + 1)
    else:
        raw = T.alloc_buffer((L.WORDS,), "uint64", scope="local")
        late = T.alloc_buffer((1,), "int32", scope="local")
        since = T.alloc_buffer((1,), "int64", scope="local")
        issue_words(L, a, t, raw, flat, s % 2, d, ch, rows)
        since[0] = T.cuda.func_call("prnn_clock", source_code=CLOCK, return_type="int64")
        late[0] = 1
        while late[0] == 1:  # a round: every word still without its stamp loaded again, together
            late[0] = 0
            for e in T.unroll(L.WORDS):
                mine, bi, j = T.meta_var(words_of_thread(L, a, t, e, rows))
                if mine:
                    if T.Cast("uint32", T.shift_right(raw[e], T.uint64(32))) != T.Cast("uint32", s + 1):
                        raw[e] = issued(L, a, flat, s % 2, d, ch * L.BC + bi, j)
                        late[0] = 1
            T.cuda.func_call("prnn_spin_check", since[0], source_code=SPIN_CHECK)
        words_into_shared(L, a, t, hs, raw, rows)
