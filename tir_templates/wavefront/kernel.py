"""The layer wavefront: a stack of L recurrent layers in one persistent launch (issue 21).

Each layer runs on a thread-block cluster of its own (`plan.py`), its weights in registers for
the whole sequence, and walks its own time steps; the layers form a pipeline. A CTA's step t:

    compute warps:  h_l(t-1) into shared memory (its cluster's h, from L2)
                    -> the dot products with [W_l | R_l] (layer 0: R_l) over [h_{l-1}(t) ; h_l(t-1)]
                    -> the cell update -> h_l(t) into the exchange slot and Y_l
    comm warp:      meanwhile, h_{l-1}(t+1) into the other copy of shared memory, once the layer
                    below has published it
    all:            one cluster barrier (h_l(t) is the cluster's); the comm warp publishes
                    h_l(t) to the layer above inside it

so a layer's step waits for its own cluster only, never for the other layers: the layer above
runs a step or more behind, its input loaded a step ahead. The launch has no grid barrier and no
cooperative launch (which clusters cannot have): each cluster draws a ticket when it starts and
runs layer `ticket`, so a cluster only ever waits for layers whose clusters already run.

Read `cta_layer` top to bottom; the thread-level parts are `steps.py`; `emulated.py` is its CPU
twin (CTAs and threads as serial loops, layer after layer), for tests without a GPU.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec
from .layout import StackLayout
from .plan import LANES, StackConfig, check_stack
from .signature import stack_func
from .steps import (Regs, final_states, for_each_layer, init_states, load_constants, load_input, load_own,
                    load_projection, load_weights, update)

#: workspace words: the clusters' ticket counter, then each layer's count of published steps
TICKET_WORD = 0
FIRST_COUNTER_WORD = 1

CLUSTER_TICKET = r"""
__device__ __forceinline__ int prnn_cluster_ticket(unsigned int* counter) {
  // The cluster's place in the launch's start order: CTA rank 0 draws it, its peers read it from
  // rank 0's shared memory. A cluster that starts earlier draws a lower ticket, so one that waits
  // for a lower ticket's layer waits only for clusters already running (no cooperative launch).
  __shared__ unsigned int ticket;
  unsigned int rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (rank == 0 && threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  unsigned int remote, value;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote) : "r"((unsigned int)__cvta_generic_to_shared(&ticket)));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(value) : "r"(remote) : "memory");
  return (int)value;
}
"""
CLUSTER_ARRIVE = r"""
__device__ __forceinline__ void prnn_cluster_arrive() {
  // this thread's writes (h(t) in the exchange buffer) are released to the cluster
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
"""
CLUSTER_WAIT = r"""
__device__ __forceinline__ void prnn_cluster_wait() {
  // every thread of the cluster has arrived; their released writes are visible (acquire)
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""
PUBLISH = r"""
__device__ __forceinline__ void prnn_publish(unsigned int* counter) {
  // One arrival for this CTA's step. The caller's __syncthreads ordered every thread's Y(t)
  // before it; the release makes them visible to whoever acquires the count.
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
}
"""
WAIT_COUNT = r"""
__device__ __forceinline__ void prnn_wait_count(unsigned int* counter, unsigned int target) {
  // The whole warp: lane 0 spins on acquire loads until the layer below has published `target`
  // CTA-steps, then __syncwarp orders the warp's loads after it. ~30 s without progress traps.
  if ((threadIdx.x & 31) == 0) {
    unsigned int seen;
    long long start = clock64();
    while (true) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= target) break;
      if (clock64() - start > (1LL << 36)) __trap();
    }
  }
  __syncwarp();
}
"""


@T.macro
def dot_and_reduce(S, layer, tx, wreg, hs, gs, acc, t):
    """Batch row by batch row (so a lane keeps one row's sums at a time): the lane's partial dot
    products over step t's [h below ; h] (input part, then recurrent part), a shuffle-sum over the
    warp, and lane 0 writes each gate row's sums into `gs` (part-major: with two parts, input
    sums, then recurrent)."""
    for bi in T.unroll(S.BC):
        for k in T.unroll(S.PARTS[layer] * S.RPG):
            acc[k] = T.float32(0)
        if S.XK[layer] > 0:
            for i in T.unroll(S.XK[layer]):
                for q in T.unroll(S.RPG):
                    acc[q] = acc[q] + wreg[0, q * S.KPL[layer] + i] * hs[S.hs_row(t, bi), S.col(tx % LANES, i)]
        for i in T.unroll(S.H // LANES):
            for q in T.unroll(S.RPG):
                acc[(S.PARTS[layer] - 1) * S.RPG + q] = acc[(S.PARTS[layer] - 1) * S.RPG + q] + wreg[
                    0, q * S.KPL[layer] + S.XK[layer] + i] * hs[S.hs_row(t, bi), S.XK[layer] * LANES + S.col(tx % LANES, i)]
        for part in T.unroll(S.PARTS[layer]):
            for q in T.unroll(S.RPG):
                acc[part * S.RPG + q] = T.cuda.warp_sum(acc[part * S.RPG + q], LANES)
                if tx % LANES == 0:
                    gs[part * S.BC + bi, (tx // LANES) * S.RPG + q] = acc[part * S.RPG + q]


@T.macro
def cluster_barrier(S, a, layer, tx, publish):
    """The step's one synchronisation: the cluster barrier (h_l(t) in the exchange buffer is the
    cluster's), and inside it, if `publish`, the comm warp publishes this CTA's step to the layer
    above (the top layer has none)."""
    T.tvm_storage_sync("shared")
    T.cuda.func_call("prnn_cluster_arrive", source_code=CLUSTER_ARRIVE)
    if publish and layer + 1 < S.L:
        if tx == S.NT:
            T.cuda.func_call("prnn_publish", T.address_of(a.ws[FIRST_COUNTER_WORD + layer]), source_code=PUBLISH)
    T.cuda.func_call("prnn_cluster_wait", source_code=CLUSTER_WAIT)


@T.macro
def input_ahead(S, a, layer, tx, hs, t):
    """The comm warp: once the layer below has published step t, its h(t) into hs."""
    T.cuda.func_call("prnn_wait_count", T.address_of(a.ws[FIRST_COUNTER_WORD + layer - 1]),
                     T.Cast("uint32", (t + 1) * S.C), source_code=WAIT_COUNT)
    load_input(S, a, layer, tx - S.NT, hs, t)


@T.macro
def cta_layer(S, a, layer, c, tx, hs, gs):
    """CTA c of `layer`'s cluster, thread tx's view: weights in, states set up, then every step
    (one cluster barrier each), then the final states."""
    wreg = T.alloc_buffer((1, S.RPG * S.KPL[layer]), "float32", scope="local")
    acc = T.alloc_buffer((S.PARTS[layer] * S.RPG,), "float32", scope="local")
    xin = T.alloc_buffer((1, S.PAIRS * (S.G + 1)), "float32", scope="local")
    nv = T.alloc_buffer((1, S.PAIRS), "int64", scope="local")
    hn = T.alloc_buffer((1, S.PAIRS), "float32", scope="local")
    regs = T.meta_var(Regs(wreg, xin, nv, hn))
    if tx < S.NT:
        load_weights(S, a, layer, c, tx, wreg, 0)
        init_states(S, a, layer, c, tx)
        load_constants(S, a, layer, c, tx, regs, 0)
    elif layer > 0:
        if a.n_t > 0:
            input_ahead(S, a, layer, tx, hs, 0)
    cluster_barrier(S, a, layer, tx, False)  # h0 in the exchange buffer is the cluster's
    for t in range(a.n_t):
        if tx < S.NT:
            load_own(S, a, layer, tx, hs, t)
            if layer == 0:
                load_projection(S, a, c, tx, regs, 0, t)
        T.tvm_storage_sync("shared")
        if tx < S.NT:
            dot_and_reduce(S, layer, tx, wreg, hs, gs, acc, t)
        elif layer > 0:
            if t + 1 < a.n_t:
                input_ahead(S, a, layer, tx, hs, t + 1)
        T.tvm_storage_sync("shared")
        if tx < S.NT:
            update(S, a, layer, c, tx, hs, gs, regs, 0, t)
        cluster_barrier(S, a, layer, tx, True)
    if tx < S.NT:
        final_states(S, a, layer, c, tx)


@T.macro
def cta_if_drawn(S, a, ticket, c, tx, hs, gs, layer):
    """`cta_layer` if the CTA's cluster drew `layer`'s ticket."""
    if ticket[0] == layer:
        cta_layer(S, a, layer, c, tx, hs, gs)


@T.macro
def cuda_stack(S, a):
    """The CUDA kernels: the counters zeroed, then every cluster's layer."""
    for _zb in T.thread_binding(1, thread="blockIdx.x"):
        for zt in T.thread_binding(WORKSPACE_WORDS, thread="threadIdx.x"):
            a.ws[zt] = T.uint32(0)
    for cta in T.thread_binding(S.NCTA, thread="blockIdx.x"):
        for _rank in T.thread_binding(S.C, thread="clusterCtaIdx.x"):
            for tx in T.thread_binding(S.BLOCK, thread="threadIdx.x"):
                hs = T.alloc_buffer((2 * S.BC, 2 * S.H), "float32", scope=S.HS_SCOPE)
                gs = T.alloc_buffer((2 * S.BC, S.G * S.TW), "float32", scope="shared")
                ticket = T.alloc_buffer((1,), "int32", scope="local")
                ticket[0] = T.cuda.func_call("prnn_cluster_ticket", T.address_of(a.ws[TICKET_WORD]),
                                             source_code=CLUSTER_TICKET, return_type="int32")
                for_each_layer(S, cta_if_drawn, a, ticket, cta % S.C, tx, hs, gs)


def stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The CUDA wavefront kernel of the stack `specs` (lowest layer first) under `cfg`."""
    check_stack(specs)
    S = StackLayout(specs, cfg)

    @T.macro
    def body(a):
        cuda_stack(S, a)

    return stack_func(specs, body)
