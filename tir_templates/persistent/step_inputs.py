"""The input projection inside the recurrence (`Layout.STEP_INPUTS`): a tensor-core step in batch
tiles of a grid computes x(t+1) W^T + Wb itself, while it waits at the grid barrier, so that no
projection GEMM runs before the kernel.

The step's CTAs spend part of every step waiting for the slowest CTA's h(t). Between its arrival
at the barrier and its wait (`arrive_and_project`), each warp multiplies its 16 gate rows of W
(16-bit A fragments held in shared memory for the whole sequence, `wxs`) by x(t+1) of the CTA's
8 batch rows (B fragments read from global memory as the 16-bit pairs they are), one m16n8k16
mma a k-tile, as `dot_mma.mma_dot` does with R and h(t-1). The column splits' sums, the input
bias added to split 0's, go to shared memory (`gx`); the next step's owners add them up
(`inputs_from_shared`) where they would have read the projection GEMM's output.

The kernel then takes x, W^T and Wb in place of xw (`signature.recurrence_func`'s
`input_size`). Only forward layers in fp16 or bf16: x(t+1)'s time index is then one for every
batch row, and x is already in the mma's 16 bits.
"""
from __future__ import annotations

from tvm.script import tirx as T

from ..config import Config
from ..spec import CellSpec
from .dot_mma import MMA_BF16, MMA_F16, f16_half, f16_pair, pair_convert

def step_inputs_bytes(spec: CellSpec, cfg: Config) -> int:
    """Shared memory the step's own input projection adds: W's A fragments (`wxs`, a word per
    lane per register of every k-tile of x) and the column splits' sums (`gx`, as `gs`)."""
    k_tiles = spec.input_size // 16 // cfg.k_splits()
    return 4 * 4 * k_tiles * cfg.threads(spec) + cfg.dot_result_bytes(spec)


def step_inputs_problem(spec: CellSpec, cfg: Config, shared_limit: int | None = None) -> str:
    """Why `cfg` cannot compute its layer's input projections in its steps ("" where it can);
    shared memory is checked against `shared_limit`, the GPU's (the template does not know it)."""
    if not (cfg.f16_mma() and cfg.batch_tile and cfg.n_tiles() == 1 and cfg.barrier(spec) == "grid"
            and not cfg.stamped):
        return "only a 16-bit tensor-core step in batch tiles of 8 rows meeting at a grid barrier waits there for it"
    if spec.direction != "forward":
        return f"direction {spec.direction}: x(t+1)'s time index would depend on each row's length"
    if spec.input_size % (16 * cfg.k_splits()):
        return f"input_size {spec.input_size} is not a multiple of 16 x {cfg.k_splits()} column splits"
    need = cfg.shared_bytes(spec) + step_inputs_bytes(spec, cfg)
    if shared_limit is not None and need > shared_limit:
        return f"{need} bytes of shared memory with W's fragments, over the {shared_limit} a CTA may have"
    return ""


#: k-tiles of x whose B fragments a warp loads at once (8: 16 registers, which the largest
#: configs hold without spilling; all 24 of LSTM H=768 B=32's spilled 108 bytes)
X_GROUP = 8

GRID_ARRIVE = r"""
__device__ __forceinline__ void prnn_grid_arrive(unsigned int* counter) {
  // The first half of prnn_grid_barrier: thread 0's release-add, after the caller's __syncthreads.
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
  }
}
"""

GRID_WAIT = r"""
__device__ __forceinline__ void prnn_grid_wait(unsigned int* counter, unsigned int target) {
  // The second half: thread 0 spins on acquire loads until every CTA arrived, then the CTA syncs.
  if (threadIdx.x == 0) {
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


def input_weight(L, a, t, j, col):
    """W's element (as W^T holds it) in A-fragment register j's row and input column `col` (a
    padded tile's rows: zero)."""
    d = L.dir_of(t.cta)
    return T.if_then_else(L.mma_row_in_tile(t.tx, j) < L.GTW,
                          a.wt[col, d * L.G * L.H + L.mma_row(t.cta, t.tx, j)], T.float32(0))


def input_col(L, tx, i, j, e):
    """Input column of half e of A-fragment register j in the warp's i-th k-tile of x (B
    fragments: the same k, j < 2): `Layout.mma_col_f16` over the XK k-tiles a split holds."""
    return ((tx // 32 // L.RT) * L.XK + i) * 16 + 2 * (tx % 4) + e + 8 * (j // 2)


@T.macro
def load_input_weights(L, a, t):
    """The warp's rows of W over its split's input columns, as 16-bit A fragments in shared memory
    for the whole sequence: word j of k-tile i at `wxs[block, 4 i + j, tx]`, 32 lanes on 32 banks."""
    for i in T.unroll(L.XK):
        for j in T.unroll(4):
            if L.emulate:
                t.wxs[t.block, i * 4 + j, t.tx] = f16_pair(input_weight(L, a, t, j, input_col(L, t.tx, i, j, 0)),
                                                          input_weight(L, a, t, j, input_col(L, t.tx, i, j, 1)), L.BF16)
            else:
                pair_convert(L.BF16)(t.wxs[0, i * 4 + j, t.tx], input_weight(L, a, t, j, input_col(L, t.tx, i, j, 1)),
                                     input_weight(L, a, t, j, input_col(L, t.tx, i, j, 0)))


def input_bias(L, a, cta, lr):
    """Wb of the CTA's gate row lr (gate-major, as `gs` and `gx` index them)."""
    return a.wb[L.dir_of(cta) * L.G * L.H + L.local_row(cta, lr)]


def x_row(L, t, nt):
    """The batch row of B-fragment column lane / 4 of n-tile nt: the CTA's tile's."""
    return L.first_chunk(t.cta) * L.BC + nt * 8 + t.tx % 32 // 4


def x_step(a, s):
    """The time index of x that step s reads (forward only), clamped: the last step's projection
    of a step past the end is computed and never read."""
    return T.min(T.Cast("int64", s), a.n_t - 1)


@T.macro
def project_inputs(L, a, t, gx, s):
    """Step s's input projection of the CTA's rows and batch rows into `gx`: each warp's 16 rows
    over its split's k-tiles of x(s) (the last split's sums plus nothing, split 0's plus Wb)."""
    for c in T.unroll(L.NTL * 4 * L.ACC_SETS):
        t.acc[c] = T.float32(0)
    # the B fragments of X_GROUP k-tiles at a time first (the pair (k, k + 1) as it lies in x: one
    # 32-bit word), so that their loads from global memory are in flight together, then their mma
    bx = T.alloc_buffer((X_GROUP * L.NTL * 2,), "uint32", scope="local")
    ah = T.alloc_buffer((4,), "uint32", scope="local")
    for g in T.unroll((L.XK + X_GROUP - 1) // X_GROUP):
        for i in T.unroll(X_GROUP):
            if g * X_GROUP + i < L.XK:
                for nt in T.unroll(L.NTL):
                    for j in T.unroll(2):
                        bx[(i * L.NTL + nt) * 2 + j] = T.if_then_else(
                            x_row(L, t, nt) < a.n_b,
                            a.xp[(x_step(a, s) * a.n_b + x_row(L, t, nt)) * (L.I // 2)
                                 + input_col(L, t.tx, g * X_GROUP + i, 2 * j, 0) // 2], T.uint32(0))
        for i in T.unroll(X_GROUP):
            if g * X_GROUP + i < L.XK:
                for j in T.unroll(4):
                    ah[j] = t.wxs[0, (g * X_GROUP + i) * 4 + j, t.tx]
                for nt in T.unroll(L.NTL):
                    c = T.meta_var(((g * X_GROUP + i) % L.ACC_SETS * L.NTL + nt) * 4)
                    T.ptx[MMA_BF16 if L.BF16 else MMA_F16](
                        t.acc[c], t.acc[c + 1], t.acc[c + 2], t.acc[c + 3], ah[0], ah[1], ah[2], ah[3],
                        bx[(i * L.NTL + nt) * 2], bx[(i * L.NTL + nt) * 2 + 1], t.acc[c], t.acc[c + 1],
                        t.acc[c + 2], t.acc[c + 3])
    if L.ACC_SETS > 1:
        for k in T.unroll(1, L.ACC_SETS):
            for c in T.unroll(L.NTL * 4):
                t.acc[c] = t.acc[c] + t.acc[k * L.NTL * 4 + c]
    for nt in T.unroll(L.NTL):
        for j in T.unroll(4):  # C fragment: row lane / 4 (+8 for 2, 3), batch row 2 * (lane % 4) (+1 for 1, 3)
            if nt * 8 + t.tx % 4 * 2 + j % 2 < L.BC and L.mma_row_in_tile(t.tx, j // 2) < L.GTW:
                gx[(t.tx // 32 // L.RT) * L.BC + nt * 8 + t.tx % 4 * 2 + j % 2, L.mma_row_in_tile(t.tx, j // 2)] = (
                    t.acc[nt * 4 + j] + T.if_then_else(t.tx // 32 // L.RT == 0, input_bias(L, a, t.cta, L.mma_row_in_tile(t.tx, j // 2)),
                                                       T.float32(0)))


@T.macro
def arrive_and_project(L, a, t, gx, s, index):
    """The end of step s: the CTA's own __syncthreads, its arrival at the grid barrier, step
    s+1's input projection (`project_inputs`), then the wait for the other CTAs (barrier `index`)."""
    T.tvm_storage_sync("shared")
    T.cuda.func_call("prnn_grid_arrive", T.address_of(a.ws[L.counter_of(t.cta)]), source_code=GRID_ARRIVE)
    project_inputs(L, a, t, gx, s + 1)
    T.cuda.func_call("prnn_grid_wait", T.address_of(a.ws[L.counter_of(t.cta)]),
                     T.Cast("uint32", index * L.CPD), source_code=GRID_WAIT)


@T.macro
def inputs_from_shared(L, a, t, gx, ch):
    """Each owned pair's gate inputs of this step into `xr`: the column splits' sums in `gx`."""
    for e in T.unroll(L.UPT):
        if L.owns(t.cta, t.tx, e, ch, a.n_b):
            for g in T.unroll(L.G):
                t.xr[t.row, e * L.XR + g] = gx[L.chunk_row(t.tx, e), L.gate_pos(g, L.pair(t.cta, t.tx, e, ch)[1] % L.TW)]
                for kk in T.unroll(1, L.KS):
                    t.xr[t.row, e * L.XR + g] = (t.xr[t.row, e * L.XR + g]
                                                 + gx[kk * L.BC + L.chunk_row(t.tx, e),
                                                      L.gate_pos(g, L.pair(t.cta, t.tx, e, ch)[1] % L.TW)])


def x_value(L, a, row, col, s):
    """x(s)[row, col] as an fp32 value (exact: x is fp16 or bf16), 0 past the batch."""
    word = a.xp[(x_step(a, s) * a.n_b + row) * (L.I // 2) + col // 2]
    return T.if_then_else(row < a.n_b, f16_half(word, col % 2, L.BF16), T.float32(0))


@T.macro
def emulated_project_inputs(L, a, regs, gx, cta, s):
    """`project_inputs` of one CTA in the CPU twin: the mma's product as PTX defines it, with A
    read back from where `load_input_weights` put it (`dot_mma.emulated_mma_dot_f16`'s layout)."""
    for w, nt, m, nn in T.grid(L.RT * L.KS, L.NTL, 16, 8):
        if nt * 8 + nn < L.BC and (w % L.RT) * 16 + m < L.GTW:
            gx[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = T.if_then_else(
                w // L.RT == 0, input_bias(L, a, cta, (w % L.RT) * 16 + m), T.float32(0))
            for i, k in T.grid(L.XK, 16):
                gx[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m] = (
                    gx[(w // L.RT) * L.BC + nt * 8 + nn, (w % L.RT) * 16 + m]
                    + f16_half(regs.wxs[cta, i * 4 + m // 8 + 2 * (k // 8), w * 32 + 4 * (m % 8) + k % 8 // 2],
                               k % 2, L.BF16)
                    * x_value(L, a, L.first_chunk(cta) * L.BC + nt * 8 + nn, ((w // L.RT) * L.XK + i) * 16 + k, s))
