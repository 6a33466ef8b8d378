"""How h travels between the CTAs of a direction, and how they wait for each other.

The exchange buffer `hb` carries h between CTAs (slots 0/1 by step parity; slot 2 holds r * h(t-1)
of the two-phase GRU; the partial sums' slots follow, `Config.exchange_slots`). `ws` holds one
barrier counter per direction, zeroed by a one-warp kernel before each launch, so concurrent
launches never share a counter. A direction's CTAs meet once a step at that counter (the grid
barrier) or at the thread-block cluster's hardware barrier; one CTA that holds its direction
(resident) needs neither, and keeps h in shared memory, two copies by step parity. A cluster
with `Config.dsmem` keeps h so too, and its CTAs send each other their units of h(t) through
distributed shared memory, each counting what it received on an mbarrier of its own.
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..signature import BARRIER_FLAG_WORD, batch_row
from .cell_state import keep_cell_state
from .dot_mma import f16_pair
from .h16_exchange import load_h16, publish_h16
from .stamped_exchange import flat_words, load_stamped_h, publish, stamped_value

GRID_BARRIER = r"""
__device__ __forceinline__ void prnn_grid_barrier(unsigned int* counter, unsigned int target) {
  // Monotonic counter: one release-add per CTA, spin on acquire loads until every CTA arrived.
  // The caller has just run __syncthreads (a TIR storage sync, which TVM's sync planner sees).
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
    unsigned int seen;
    long long start = clock64();
    while (true) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= target) break;
      if (clock64() - start > (1LL << 36)) __trap();  // ~30 s: a CTA never arrived; fail, never hang
    }
  }
  __syncthreads();
}
"""

# the three helpers of the exchange through distributed shared memory (each source is emitted
# once per function that calls it, so each stands alone)
DSMEM_INIT = r"""
__device__ __forceinline__ void prnn_dsmem_init(void* bars, unsigned int bytes) {
  // Thread 0: one mbarrier per copy of h, one arrival (its own) and `bytes` from the peers a
  // step, armed for the first step; visible to the cluster after the next cluster barrier.
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      unsigned int bar = (unsigned int)__cvta_generic_to_shared((unsigned long long*)bars + i);
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}
"""
DSMEM_SEND = r"""
__device__ __forceinline__ void prnn_dsmem_send(void* src, unsigned int peer, void* bar) {
  // 16 bytes of this CTA's h(t) to the same address in cluster CTA `peer`, counted by its `bar`
  unsigned int to, to_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"((unsigned int)__cvta_generic_to_shared(src)),
               "r"(peer));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to_bar) : "r"((unsigned int)__cvta_generic_to_shared(bar)),
               "r"(peer));
  float4 v = *(const float4*)src;
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               :: "r"(to), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(to_bar) : "memory");
}
"""
DSMEM_WAIT = r"""
__device__ __forceinline__ void prnn_dsmem_wait(void* bar, unsigned int parity, unsigned int bytes) {
  // Every thread waits until the peers' bytes completed phase `parity` of `bar` (acquire: their
  // h(t) is visible), then thread 0 arms the next phase. The peers cannot send into this copy
  // again before this CTA has sent its next h, after a __syncthreads that follows every wait.
  // A ~30 s clock64 timeout traps instead of hanging.
  unsigned int addr = (unsigned int)__cvta_generic_to_shared(bar), done = 0;
  long long start = clock64();
  while (true) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    if (done) break;
    if (clock64() - start > (1LL << 36)) __trap();
  }
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(addr), "r"(bytes) : "memory");
  }
}
"""

@T.macro
def init_pair(L, a, d, b, j):
    """Stamped halves: the owner of an even unit j writes the pair (j, j + 1) of h0 into copy 0,
    stamp 1, and stamp 0 into copy 1 (`stamped_exchange.py`)."""
    if j % 2 == 0:
        publish(L, a, 0, d, b, j // 2, T.reinterpret("float32", f16_pair(
            a.h0[d, batch_row(L.spec, "h0", b), j], a.h0[d, batch_row(L.spec, "h0", b), j + 1], L.BF16)), 1)
        publish(L, a, 1, d, b, j // 2, T.float32(0), 0)


@T.macro
def init_state(L, a, t):
    """Each CTA copies its units (and batch rows) of h0 into slot 0 of hbuf and of c0 to C's home
    (stamped words: h0 into copy 0, stamp 1, and stamp 0 into copy 1, `stamped_exchange.py`)."""
    for e in range((L.own_rows(a.n_b) * L.TW + L.NT - 1) // L.NT):
        if L.owns_state(t.cta, t.tx, e, a.n_b):
            if L.stamped and not L.HALVES:
                publish(L, a, 0, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e), a.h0[
                    L.dir_of(t.cta), batch_row(L.spec, "h0", L.state_row(t.cta, t.tx, e)), L.state_unit(t.cta, t.tx, e)],
                    1)
                publish(L, a, 1, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e),
                        T.float32(0), 0)
            else:
                a.hb[0, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e)] = a.h0[
                    L.dir_of(t.cta), batch_row(L.spec, "h0", L.state_row(t.cta, t.tx, e)), L.state_unit(t.cta, t.tx, e)]
                if L.HALVES:
                    init_pair(L, a, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e))
                elif L.H16:
                    publish_h16(L, a, 0, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e),
                                a.h0[L.dir_of(t.cta), batch_row(L.spec, "h0", L.state_row(t.cta, t.tx, e)),
                                     L.state_unit(t.cta, t.tx, e)])
            if L.lstm:
                keep_cell_state(L, a, L.dir_of(t.cta), L.state_row(t.cta, t.tx, e), L.state_unit(t.cta, t.tx, e), a.c0[
                    L.dir_of(t.cta), batch_row(L.spec, "c0", L.state_row(t.cta, t.tx, e)), L.state_unit(t.cta, t.tx, e)])


@T.macro
def load_h(L, a, t, hs, slot, ch):
    """Exchange-buffer `slot` (h(t-1), or r * h(t-1)) of batch rows ch*BC .. ch*BC+BC-1 (all H
    units) into shared memory, VEC-wide. Through `hb` itself, never a second view of it: nvcc
    turns loads through a pointer the kernel never stores to into non-coherent (ld.global.nc)
    loads, which may return what another thread or CTA overwrote earlier in the launch."""
    for e in range((L.BC * L.H // L.VEC + L.NT - 1) // L.NT):
        if T.Cast("int64", (e * L.NT + t.tx) * L.VEC) < T.min(a.n_b - ch * L.BC, T.int64(L.BC)) * L.H:
            for v in T.vectorized(L.VEC):
                hs[(e * L.NT + t.tx) * L.VEC // L.H, (e * L.NT + t.tx) * L.VEC % L.H + v] = a.hb[
                    slot, L.dir_of(t.cta), ch * L.BC + (e * L.NT + t.tx) * L.VEC // L.H,
                    (e * L.NT + t.tx) * L.VEC % L.H + v]


@T.macro
def h_into_shared(L, a, t, hs, s, slot, ch):
    """Step s's exchange `slot` (h(t-1), or r * h(t-1)) of chunk ch into `hs`: from the stamped
    words (of fp32 units or 16-bit pairs) when the direction's CTAs exchange them
    (`stamped_exchange.py`), from the 16-bit halves (`h16_exchange.py`), else `load_h`."""
    if L.stamped:
        load_stamped_h(L, a, t, hs, s, ch)
    elif L.H16:
        load_h16(L, a, t, hs, slot, ch)
    else:
        load_h(L, a, t, hs, slot, ch)


@T.macro
def step_barrier(L, a, cta, index):
    """The one synchronisation per step: CTAs of one direction wait for each other (barrier
    `index`: each has arrived `index` times). It starts with the CTA's own __syncthreads: every
    thread's h(t) is written, and every read of shared memory done, before the next step
    overwrites it."""
    T.tvm_storage_sync("shared")
    if L.grid:
        T.cuda.func_call("prnn_grid_barrier", T.address_of(a.ws[L.counter_of(cta)]),
                         T.Cast("uint32", index * L.CPD), source_code=GRID_BARRIER)
    elif L.cluster:  # barrier.cluster arrive (release) + wait (acquire): h(t) in global memory is visible
        T.cuda.cluster_sync()


@T.macro
def end_of_step(L, a, cta, index):
    """The end of a step (or phase): barrier `index`, or with stamped words only the CTA's own
    __syncthreads (the next step's reads wait on the words themselves)."""
    if L.stamped:
        T.tvm_storage_sync("shared")
    else:
        step_barrier(L, a, cta, index)


@T.macro
def dsmem_init(L, bar):
    """A dsmem CTA's two mbarriers, armed for the first step's bytes (the launch's first cluster
    barrier, `step_barrier(.., 1)`, follows: no peer sends before both exist)."""
    T.cuda.func_call("prnn_dsmem_init", T.address_of(bar[0]), T.uint32(L.RECV_BYTES), source_code=DSMEM_INIT)


@T.macro
def dsmem_exchange(L, a, t, hs_next, bar, s):
    """The end of step s in a dsmem cluster: once the CTA's units of h(t) are in `hs_next` (and
    every read of h(t-1) is done), send them to the same place in every peer's `hs_next`, then
    wait for the peers' units. mbarrier s % 2 counts the bytes into `hs_next`, phase s // 2 of
    it. The last step sends nothing: the final states come from registers."""
    T.tvm_storage_sync("shared")
    if s + 1 < a.n_t:
        for e in T.unroll((L.SENDS + L.NT - 1) // L.NT):
            if L.sends(t.tx, e):
                peer, row, col = L.dsmem_store(t.cta, t.tx, e)
                T.cuda.func_call("prnn_dsmem_send", T.address_of(hs_next[row, col]), T.Cast("uint32", peer),
                                 T.address_of(bar[s % 2]), source_code=DSMEM_SEND)
        T.cuda.func_call("prnn_dsmem_wait", T.address_of(bar[s % 2]), T.Cast("uint32", s // 2 % 2),
                         T.uint32(L.RECV_BYTES), source_code=DSMEM_WAIT)


@T.macro
def emulated_dsmem_exchange(L, a, hs_next, s):
    """`dsmem_exchange` in the CPU twin: every CTA's stores, as the GPU's threads issue them, from
    its copy of h(t) (`hs_next`: one per CTA) into its peers'; a CTA receiving other than
    RECV_BYTES a step would wait forever or read early on the GPU: flag it."""
    if s + 1 < a.n_t:
        received = T.alloc_buffer((L.grid_size(a.n_b),), "int64")
        for cta in range(L.grid_size(a.n_b)):
            received[cta] = T.int64(0)
        for cta, tx in T.grid(L.grid_size(a.n_b), L.NT):
            for e in range((L.SENDS + L.NT - 1) // L.NT):
                if L.sends(tx, e):
                    peer, row, col = L.dsmem_store(cta, tx, e)
                    to = cta // L.CPD * L.CPD + peer
                    for v in range(4):
                        hs_next[to, row, col + v] = hs_next[cta, row, col + v]
                    received[to] = received[to] + T.int64(16)
        for cta in range(L.grid_size(a.n_b)):
            if received[cta] != T.int64(L.RECV_BYTES):
                a.ws[BARRIER_FLAG_WORD] = T.uint32(1)


@T.macro
def emulated_barrier(L, a, index):
    """`step_barrier` in the CPU twin: every CTA arrives once, as on the GPU's counters; after
    barrier `index` each counter (a direction's, or a batch tile's) must be index * CTAs per
    direction, else the GPU would wait forever or pass early: flag it."""
    if L.grid:
        for cta in range(L.grid_size(a.n_b)):
            a.ws[L.counter_of(cta)] = a.ws[L.counter_of(cta)] + T.uint32(1)
        for counter in range(L.grid_size(a.n_b) // L.CPD):
            if a.ws[counter] != T.Cast("uint32", index * L.CPD):
                a.ws[BARRIER_FLAG_WORD] = T.uint32(1)


@T.macro
def emulated_end_of_step(L, a, index):
    """`end_of_step` in the CPU twin."""
    if not L.stamped:
        emulated_barrier(L, a, index)


@T.macro
def resident_states_out(L, a, t):
    """A resident CTA after its last step: each owner's h(t) into the exchange slot that
    `final_state` reads, and C(t) into yc (steps left both on chip)."""
    cta, tx = t.cta, t.tx  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    if a.n_t > 0:
        for e in T.unroll(L.UPT):
            if L.owns(cta, tx, e, L.first_chunk(cta), a.n_b):
                b, j = L.pair(cta, tx, e, L.first_chunk(cta))
                a.hb[a.n_t % 2, L.dir_of(cta), b, j] = t.hn[t.row, e]
                if L.lstm:
                    a.yc[L.dir_of(cta), b, j] = t.xr[t.row, e * L.XR + L.G]


@T.macro
def final_state(L, a, t):
    """Y_h from the exchange buffer (stamped words: copy T % 2, stamp T + 1; with stamped halves
    the fp32 slot, which this CTA wrote: its __syncthreads after the last step orders the two);
    an empty sequence has zero final states (as ONNX Runtime)."""
    cta, tx = t.cta, t.tx  # known to this macro, so that `d = L.dir_of(cta)` copies (buffers.py)
    for e in range((L.own_rows(a.n_b) * L.TW + L.NT - 1) // L.NT):
        if L.owns_state(cta, tx, e, a.n_b):
            b = L.state_row(cta, tx, e)
            j = L.state_unit(cta, tx, e)
            if L.stamped and not L.HALVES:
                flat = flat_words(L, a)
                a.yh[L.dir_of(cta), b, j] = T.if_then_else(
                    a.lens[batch_row(L.spec, "lens", b)] > 0,
                    stamped_value(L, a, flat, a.n_t % 2, L.dir_of(cta), b, j, a.n_t + 1), T.float32(0))
            else:
                a.yh[L.dir_of(cta), b, j] = T.if_then_else(a.lens[batch_row(L.spec, "lens", b)] > 0,
                                                             a.hb[a.n_t % 2, L.dir_of(cta), b, j], T.float32(0))
            if L.lstm:
                if a.lens[batch_row(L.spec, "lens", b)] <= 0:
                    a.yc[L.dir_of(cta), b, j] = T.float32(0)
