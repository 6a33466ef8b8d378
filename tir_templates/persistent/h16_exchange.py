"""h(t-1) in 16 bits between the CTAs of a 16-bit mma step (`Config.h16_exchange`).

The mma reads h(t-1) rounded to the layer's fp16 or bf16. So each owner rounds its unit of h(t)
once and publishes the 16 bits beside the fp32 value, and every CTA copies the 16-bit slot into
shared memory as it stands: uint32 words of two halves, which are the B fragments' registers
(one LDS.32 each, no conversion). That is half the bytes of the fp32 copy, on the step's
critical path. The dot products are the same as when each CTA rounded the fp32 copy itself.

The fp32 h(t) is still published: it is the final state, and the owner's own h(t-1) (GRU's
z * h(t-1), a finished sequence's carried state) in a register (`hp`): the h(t) it computed a step
before where its CTA's batch rows are one chunk, else loaded while the dot runs.

The halves sit in exchange slot `H16_SLOT`: the fp32 row of (direction d, batch row b) holds both
step parities' pairs, parity p in words p * H / 2 .. p * H / 2 + H / 2 - 1, unit j in half j % 2
of word j // 2. `hs` is flat: batch row r's pairs at r * HSW (a stride of 4 mod 8 words: the
eight rows a B fragment reads fall into different banks).
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..config import MAX_THREAD_REGISTERS, REGISTER_FILE, REGISTER_STEP, SPILL_SLACK
from .dot_mma import half_bits
from .layout import Layout


STORE_HALF = r"""
__device__ __forceinline__ void prnn_store_half(float* word, unsigned int half, unsigned int bits) {
  // the low 16 bits of `bits` into half `half` (0: low) of the 32-bit word at `word`
  reinterpret_cast<unsigned short*>(word)[half] = (unsigned short)bits;
}
"""


def pair_word(L, parity, j):
    """Column of the 16-bit slot's row that holds unit j's half, at `parity`."""
    return parity * (L.H // 2) + j // 2


def with_half(word, j, value, bf16):
    """The fp32-typed pair `word` with unit j's half (j % 2; 0: low) replaced by `value` rounded
    to 16 bits, the other half kept: how the CPU twin, whose threads run one at a time, writes one
    unit of a pair."""
    return T.reinterpret("float32", (T.reinterpret("uint32", word)
                                     & T.shift_left(T.uint32(0xFFFF), T.Cast("uint32", 16 * (1 - j % 2))))
                         | T.shift_left(half_bits(value, bf16), T.Cast("uint32", 16 * (j % 2))))


@T.macro
def publish_h16(L, a, parity, d, b, j, value):
    """h[b, j] of direction d = value, rounded to the layer's 16 bits, into `parity`'s pairs (the
    CPU twin: the word's other half kept, `with_half`)."""
    if L.emulate:
        a.hb[L.H16_SLOT, d, b, pair_word(L, parity, j)] = with_half(
            a.hb[L.H16_SLOT, d, b, pair_word(L, parity, j)], j, value, L.BF16)
    else:
        T.cuda.func_call("prnn_store_half", T.address_of(a.hb[L.H16_SLOT, d, b, pair_word(L, parity, j)]),
                         T.Cast("uint32", j % 2), half_bits(value, L.BF16), source_code=STORE_HALF)


#: 16-byte loads of h a thread keeps in flight before it stores them into shared memory, at most
#: and at least. Issued together they cost one trip to L2, where a loop that stores each as it
#: arrives pays one trip per load (nvcc unrolled such a loop by 4 and branched around each load:
#: 1.19x slower than the fp32 exchange on LSTM H=768 B=32). Each takes 4 registers: past the
#: register file they spill, and GRU H=2048 B=16 bf16 (128 registers of weights of 168) ran 7.66 us
#: a step with 16, 4.75 with 4; LSTM H=768 B=32 fp16, 3.74 with all 12, 5.49 with 8
#: (docs/data/exchange-ab-h200.jsonl).
MOST_LOADS_IN_FLIGHT, LEAST_LOADS_IN_FLIGHT = 16, 4
#: registers a thread needs besides its live ones (`Config.live_registers`) around the copy
REGISTER_SLACK = 16
#: a number of loads in flight that overrides the rule (benchmarks/exchange_ab.py's variants)
FORCED_LOADS = None


def loads_in_flight(L) -> int:
    """16-byte loads a thread issues together: as many as the registers its live ones leave
    (ptxas gives a thread at most 65536 / threads, in steps of 8, and 255), within the bounds.
    A-fragments in shared memory (`smem_runs`) count as held, unless the thread's estimated
    registers (`Config.registers`) leave room for every vector in one turn (`one_turn_fits`):
    else the registers they free go to the step's spills, not to more turns' loads (GRU H=2048
    B=16 fp16 with 8 of 32 k-tiles there spilled 360 bytes at 10 loads of 11, none at 4: ptxas -v,
    sm_90; GRU H=640 B=128 fp16, 5 vectors, ran 7.10 us a step with 15 of 20 k-tiles there and
    one turn, 8.65 with 14 and two: docs/data/tc-shared-fragments-h200.jsonl, run G)."""
    if FORCED_LOADS:
        return FORCED_LOADS
    if L.cfg.smem_runs and one_turn_fits(L.spec, L.cfg, h16_vectors(L)):
        return h16_vectors(L)
    # the whole register file's share, as this rule was fitted (not `register_cap_of`'s busiest
    # sub-partition's, which would change the loads of 10-warp CTAs)
    limit = min(MAX_THREAD_REGISTERS, REGISTER_FILE // L.NT // REGISTER_STEP * REGISTER_STEP)
    spare = (limit - L.cfg.live_registers(L.spec) - 4 * L.cfg.smem_runs - REGISTER_SLACK) // 4
    return max(LEAST_LOADS_IN_FLIGHT, min(MOST_LOADS_IN_FLIGHT, spare))


def one_turn_fits(spec, cfg, vectors: int) -> bool:
    """Whether `cfg`'s estimated registers and `vectors` loads in flight stay within SPILL_SLACK
    of the thread's cap."""
    return vectors <= MOST_LOADS_IN_FLIGHT and cfg.registers(spec) + 4 * vectors <= cfg.register_cap(spec) + SPILL_SLACK


def h16_vectors(L):
    """16-byte vectors (4 words) of a chunk's halves each thread copies, at most."""
    return (L.BC * L.H // 8 + L.NT - 1) // L.NT


def vectors_in_flight(L):
    """Vectors a thread loads before it stores them (a turn of `load_h16`)."""
    return min(h16_vectors(L), loads_in_flight(L))


def in_one_turn(spec, cfg) -> bool:
    """Whether `cfg`'s 16-bit loads of h are all in flight at once (True without the exchange,
    and with stamped halves, whose words all go out together)."""
    if not cfg.h16_exchange(spec) or cfg.stamped_halves(spec):
        return True
    L = Layout(spec, cfg)
    return vectors_in_flight(L) == h16_vectors(L)


def load_registers(spec, cfg) -> int:
    """Registers a thread of `cfg` holds for its 16-bit h loads in flight (none without the
    16-bit exchange; stamped halves: two a word): what `Config.registers` leaves out, and what A
    fragments moved to shared memory must make room for too."""
    if not cfg.h16_exchange(spec):
        return 0
    if cfg.stamped_halves(spec):
        return 2 * cfg.stamped_words(spec)
    return 4 * vectors_in_flight(Layout(spec, cfg))


def vector_of(L, a, t, e, ch):
    """Whether thread t's e-th vector of chunk ch exists, and its (row in the chunk, first word)."""
    q = (e * L.NT + t.tx) * 4
    return T.Cast("int64", q) < T.min(a.n_b - ch * L.BC, T.int64(L.BC)) * (L.H // 2), q // (L.H // 2), q % (L.H // 2)


@T.macro
def load_h16(L, a, t, hs, parity, ch):
    """`parity`'s halves of batch rows ch*BC .. ch*BC+BC-1 (all H units) into `hs`, 16 bytes
    (4 words) a vector: up to `loads_in_flight` vectors loaded into registers together, then stored."""
    cta = t.cta  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    d = L.dir_of(cta)
    held = T.alloc_buffer((4 * vectors_in_flight(L),), "uint32", scope="local")
    for g in range((h16_vectors(L) + vectors_in_flight(L) - 1) // vectors_in_flight(L)):
        for i in T.unroll(vectors_in_flight(L)):
            mine, row, word = T.meta_var(vector_of(L, a, t, g * vectors_in_flight(L) + i, ch))
            if mine:
                for v in T.vectorized(4):
                    held[4 * i + v] = T.reinterpret("uint32", a.hb[L.H16_SLOT, d, ch * L.BC + row,
                                                                   pair_word(L, parity, word * 2) + v])
        for i in T.unroll(vectors_in_flight(L)):
            mine, row, word = T.meta_var(vector_of(L, a, t, g * vectors_in_flight(L) + i, ch))
            if mine:
                for v in T.vectorized(4):
                    hs[row * L.HSW + word + v] = held[4 * i + v]


@T.macro
def own_h_prev(L, a, t, into, slot, ch):
    """Each owned pair's fp32 h(t-1) from exchange `slot` into register buffer `into` (a chunked
    step's `hp`, in flight during the dot; a one-chunk CTA's `hn` once, before its first step)."""
    cta, tx = t.cta, t.tx  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    for e in T.unroll(L.UPT):
        if L.owns(cta, tx, e, ch, a.n_b):
            b, j = L.pair(cta, tx, e, ch)
            into[t.row, e] = a.hb[slot, L.dir_of(cta), b, j]


@T.macro
def keep_h_prev(L, t):
    """A one-chunk CTA's pairs keep their owners: h(t-1) is the h(t) each owner wrote to `hn` a
    step before (no load)."""
    for e in T.unroll(L.UPT):
        t.hp[t.row, e] = t.hn[t.row, e]
