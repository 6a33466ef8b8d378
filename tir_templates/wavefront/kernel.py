"""The layer wavefront: a stack of L recurrent layers in one persistent launch (issue 21).

Each layer runs on a thread-block cluster of its own (`plan.py`), its weights in registers for
the whole sequence, and walks its own time steps; the layers form a pipeline. A CTA's step t:

    h_{l-1}(t), the layer below's, loaded from L2 two steps before (layer 0: its GEMM's row)
    -> the input part of the dot products, W_l h_{l-1}(t), while the peers' h(t-1) is on its way
    + the peers' units of h_l(t-1), sent into this CTA's shared memory (an mbarrier counts them)
    -> the recurrent part, R_l h_l(t-1), and the sums over the warp (`dots.py`)
    -> the cell update -> h_l(t): to Y, stamped to L2 for the layer above, to the next copy of
       shared memory, and from there into every peer's (distributed shared memory)

Only the recurrent part, the update and the exchange lie on the recurrence's path. (A batch too
big for a lane to keep every batch row's sums waits for the peers first and walks the batch
row by row.)

Nothing but data spans the layers: every h_l(t) carries its step's stamp (`stamped.py`), so a
reader waits only for the words it needs, as they arrive; a layer runs behind the one below and
never waits for the one above. Each cluster draws a ticket when it starts and runs layer
`ticket % L` of batch tile `ticket // L` (a big batch in tiles, each on clusters of its own:
`plan.batch_tilings`), so a cluster only ever waits for layers whose clusters already run: no
cooperative launch (which clusters cannot have), and no hang when other work holds SMs.

Read `cta_layer` and `one_step` top to bottom; the thread-level parts are `steps.py`;
`emulated.py` is its CPU twin (CTAs and threads as serial loops, layer after layer), for tests
without a GPU.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..built_once import built_once
from ..early_launch import allow_next_kernel, wait_for_previous_kernel
from ..persistent.exchange import DSMEM_INIT, DSMEM_SEND, DSMEM_WAIT
from ..signature import WORKSPACE_WORDS
from ..spec import CellSpec
from .dots import dot_row_by_row, input_dots, recurrent_dots, shuffle_sums, sums_to_gs, zero_sums
from .lanes import gather_sums
from .layout import StackLayout
from .plan import StackConfig, check_stack
from .signature import stack_func
from .steps import (Regs, final_states, for_each_layer, init_states, issue_inputs, load_constants, load_h0,
                    load_projection, load_weights, reissue_inputs, settle_input, update)

#: the workspace word that counts the clusters' tickets
TICKET_WORD = 0
#: CTAs and threads of the kernel that zeroes the workspace and the stamps before each launch
ZERO_CTAS, ZERO_THREADS = 32, 256

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


@T.macro
def exchange(S, layer, c, tx, hs, bar, t):
    """The end of step t: once h(t)'s units of this CTA are in the next step's copy of hs (and
    every read of this step's copy is done), send them to the same place in every peer's, each
    peer counting the bytes on its mbarrier (t + 1) % 2 (the caller's __syncthreads before)."""
    for k in T.unroll((S.SENDS + S.NT - 1) // S.NT):
        if S.sends(tx, k):
            T.cuda.func_call("prnn_dsmem_send", T.address_of(hs[S.hs_row(t + 1, S.send(layer, c, tx, k)[1]),
                                                                 S.send(layer, c, tx, k)[2]]),
                             T.Cast("uint32", S.send(layer, c, tx, k)[0]), T.address_of(bar[(t + 1) % 2]),
                             source_code=DSMEM_SEND)


@T.macro
def wait_for_peers(S, bar, t):
    """Step t >= 1: the peers' units of h(t-1) are in this step's copy of hs (mbarrier t % 2, its
    phase (t - 1) // 2)."""
    T.cuda.func_call("prnn_dsmem_wait", T.address_of(bar[t % 2]), T.Cast("uint32", (t - 1) // 2 % 2),
                     T.uint32(S.RECV_BYTES), source_code=DSMEM_WAIT)


@T.macro
def one_step(S, a, layer, c, tx, hs, gs, bar, regs, acc, raw, t):
    """Step t. `raw` holds the layer below's words for the steps of t's parity: t's (issued two
    steps before, so the layer below has usually written them), then t + 2's."""
    if layer > 0:  # the layer below's early words go out again
        reissue_inputs(S, a, layer, tx, raw, t)
    if S.live(layer):  # the input part of the dot before the wait: off the recurrence's path
        if layer > 0:
            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)
        T.tvm_storage_sync("shared")
        zero_sums(S, layer, acc)
        input_dots(S, layer, tx, regs.wreg, hs, acc, t)
        if t > 0:
            wait_for_peers(S, bar, t)
        recurrent_dots(S, layer, tx, regs.wreg, hs, acc, t)
        shuffle_sums(S, layer, tx, acc)
        if S.LANE:  # the lanes update from their own sums (`lanes.py`): no meeting in gs
            gather_sums(S, layer, tx, acc)
        else:
            sums_to_gs(S, layer, tx, gs, acc, t, 0)
            T.tvm_storage_sync("shared")
    else:  # a big batch: the reissued words' trip overlaps the wait
        if t > 0:
            wait_for_peers(S, bar, t)
        if layer > 0:
            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)
        T.tvm_storage_sync("shared")
        dot_row_by_row(S, layer, tx, regs.wreg, hs, gs, acc, t)
        T.tvm_storage_sync("shared")
    update(S, a, layer, c, tx, hs, gs, regs, 0, t)
    T.tvm_storage_sync("shared")
    if layer > 0:
        if t + 2 < a.n_t:
            issue_inputs(S, a, layer, tx, raw, t + 2)
    if t + 1 < a.n_t:  # the last step sends nothing
        if layer == 0:  # the next step's projection row in flight during the exchange
            load_projection(S, a, c, tx, regs, 0, t + 1)
        exchange(S, layer, c, tx, hs, bar, t)


@T.macro
def cta_layer(S, a, layer, c, tx, hs, gs, bar):
    """CTA c of `layer`'s cluster, thread tx's view: weights, constants and h0 in, then every
    step (in pairs, each with its own registers for the input words it has in flight), then the
    final states."""
    wreg = T.alloc_buffer((1, S.RPG * S.KPL[layer]), "float32", scope="local")
    acc = T.alloc_buffer((S.acc_size(layer),), "float32", scope="local")
    xin = T.alloc_buffer((1, S.PAIRS * (S.G + 1)), "float32", scope="local")
    rb = T.alloc_buffer((1, S.PAIRS * S.G), "float32", scope="local")
    nv = T.alloc_buffer((1, S.PAIRS), "int64", scope="local")
    hn = T.alloc_buffer((1, S.PAIRS), "float32", scope="local")
    in_len = T.alloc_buffer((1, max(S.input_words(), 1)), "int64", scope="local")
    raw_even = T.alloc_buffer((max(S.input_words(), 1),), "uint64", scope="local")
    raw_odd = T.alloc_buffer((max(S.input_words(), 1),), "uint64", scope="local")
    regs = T.meta_var(Regs(wreg, xin, rb, nv, hn, in_len, acc))
    load_weights(S, a, layer, c, tx, wreg, 0)
    init_states(S, a, layer, c, tx)
    load_constants(S, a, layer, c, tx, regs, 0)
    load_h0(S, a, layer, tx, hs)
    if tx == 0:
        T.cuda.func_call("prnn_dsmem_init", T.address_of(bar[0]), T.uint32(S.RECV_BYTES), source_code=DSMEM_INIT)
    if layer == 0:
        if a.n_t > 0:
            load_projection(S, a, c, tx, regs, 0, 0)
    else:  # steps 0 and 1's inputs in flight
        if a.n_t > 0:
            issue_inputs(S, a, layer, tx, raw_even, 0)
        if a.n_t > 1:
            issue_inputs(S, a, layer, tx, raw_odd, 1)
    T.tvm_storage_sync("shared")
    T.cuda.cluster_sync()  # every CTA's mbarriers exist before any peer sends
    for s2 in range((a.n_t + 1) // 2):
        one_step(S, a, layer, c, tx, hs, gs, bar, regs, acc, raw_even, 2 * s2)
        if 2 * s2 + 1 < a.n_t:
            one_step(S, a, layer, c, tx, hs, gs, bar, regs, acc, raw_odd, 2 * s2 + 1)
    final_states(S, a, layer, c, tx, raw_even)


@T.macro
def cta_if_drawn(S, a, ticket, c, tx, hs, gs, bar, layer):
    """`cta_layer` if the CTA's cluster drew `layer`'s ticket: ticket k runs layer k % L of batch
    tile k // L, so a cluster waits only for the layer below in its own tile, whose ticket is lower."""
    if S.TILES == 1:
        if ticket[0] == layer:
            cta_layer(S, a, layer, c, tx, hs, gs, bar)
    else:
        if ticket[0] % S.L == layer:
            tile_args = T.meta_var(a.tile(ticket[0] // S.L * S.BC))
            cta_layer(S, tile_args, layer, c, tx, hs, gs, bar)


@T.macro
def zero_stamps(S, a, zb, zt, layer):
    """Every stamp of the layer's hb zeroed (with its value) before the launch."""
    for i in range((a.n_t * a.n_b * 2 * S.H + ZERO_CTAS * ZERO_THREADS - 1) // (ZERO_CTAS * ZERO_THREADS)):
        if (i * ZERO_CTAS + zb) * ZERO_THREADS + zt < a.n_t * a.n_b * 2 * S.H:
            a.hb[layer][((i * ZERO_CTAS + zb) * ZERO_THREADS + zt) // (a.n_b * 2 * S.H), 0,
                        ((i * ZERO_CTAS + zb) * ZERO_THREADS + zt) // (2 * S.H) % a.n_b,
                        ((i * ZERO_CTAS + zb) * ZERO_THREADS + zt) % (2 * S.H)] = T.float32(0)


@T.macro
def cuda_stack(S, a):
    """The CUDA kernels: the ticket counter and the stamps zeroed, then every cluster's layer.
    Launched early (`early_launch.py`), the zeroing starts while layer 0's projection GEMM still
    runs and lets the layers' kernel launch at once; it finishes only once the GEMM has (its
    wait), and the layers' kernel waits for it before anything else, so the GEMM's rows, the zeroed
    stamps and the ticket counter are all there when a cluster draws its ticket."""
    for zb in T.thread_binding(ZERO_CTAS, thread="blockIdx.x"):
        for zt in T.thread_binding(ZERO_THREADS, thread="threadIdx.x"):
            T.evaluate(allow_next_kernel())
            if zb == 0 and zt < WORKSPACE_WORDS:
                a.ws[zt] = T.uint32(0)
            for_each_layer(S, zero_stamps, a, zb, zt)
            T.evaluate(wait_for_previous_kernel())
    for cta in T.thread_binding(S.NCTA, thread="blockIdx.x"):
        for _rank in T.thread_binding(S.C, thread="clusterCtaIdx.x"):
            for tx in T.thread_binding(S.NT, thread="threadIdx.x"):
                T.evaluate(wait_for_previous_kernel())
                hs = T.alloc_buffer((2 * S.BC, 2 * S.H), "float32", scope=S.HS_SCOPE)
                gs = T.alloc_buffer((4 * S.BC, S.G * S.TW), "float32", scope="shared")
                bar = T.alloc_buffer((2,), "uint64", scope="shared")
                ticket = T.alloc_buffer((1,), "int32", scope="local")
                ticket[0] = T.cuda.func_call("prnn_cluster_ticket", T.address_of(a.ws[TICKET_WORD]),
                                             source_code=CLUSTER_TICKET, return_type="int32")
                for_each_layer(S, cta_if_drawn, a, ticket, cta % S.C, tx, hs, gs, bar)


@built_once
def stack_kernel(specs: list[CellSpec], cfg: StackConfig) -> tvm.tirx.PrimFunc:
    """The CUDA wavefront kernel of the stack `specs` (lowest layer first) under `cfg`."""
    check_stack(specs)
    S = StackLayout(specs, cfg)

    @T.macro
    def body(a):
        cuda_stack(S, a)

    return stack_func(specs, body)
