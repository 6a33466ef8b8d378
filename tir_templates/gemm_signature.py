"""What every input-projection kernel shares: its signature, x (M, K), w_t (K, N), b (N,) -> out
(M, N), float32 with M symbolic (x may be an fp16 or bf16 layer's own input, read as it is), and
the attribute that marks it (`gemm_func`); and the grid of a tiled one, a CTA per BM x BN tile of
out (`tile_grid`). The FMA GEMM (`projection.py`), the tensor-core GEMM (`projection_mma.py`) and
the narrow dense layer (`narrow_dense.py`) differ only in their bodies.
"""
from __future__ import annotations

import json

import tvm
from tvm.script import tirx as T

#: function attribute of a projection, reference or kernel: {"K": ..., "N": ...}
PROJECTION_ATTR = "persist_rnn.projection"
#: TVM's op pattern "opaque": FuseOps leaves the projection whole in any pipeline position, so
#: that PersistentRNN still finds it (reference) and no fused kernel swallows it (tiled GEMM)
OPAQUE = 8


def gemm_func(K: int, N: int, launch, info: dict, x_dtype: str = "float32", w_pairs: bool = False,
              w_nk: bool = False) -> tvm.tirx.PrimFunc:
    """The projection PrimFunc whose body is the macro launch(x, w, b, out, n_m); `info` joins K
    and N in its PROJECTION_ATTR. x in `x_dtype`: a 16-bit layer's input, which the kernel widens
    as it loads it into registers (TVMScript casts a store to its buffer's dtype), so that no cast
    kernel runs before the GEMM. `w_pairs`: w comes as w_t packed into 16-bit pairs along k,
    (K / 2, N) uint32 words (gemm_staging.pack_pairs); `w_nk`: those words transposed, (N, K / 2)
    (gemm_staging.pack_pairs_nk)."""
    w_shape, w_dtype = (((N, K // 2) if w_nk else (K // 2, N)), "uint32") if w_pairs else ((K, N), "float32")

    @T.prim_func(private=True)
    def kernel(x_h: T.handle, w: T.Buffer(w_shape, w_dtype), b: T.Buffer((N,), "float32"), out_h: T.handle):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True, "op_pattern": OPAQUE})
        n_m = T.int64()
        x = T.match_buffer(x_h, (n_m, K), x_dtype)
        out = T.match_buffer(out_h, (n_m, N), "float32")
        launch(x, w, b, out, n_m)

    return kernel.with_attr(PROJECTION_ATTR, json.dumps({"K": K, "N": N, **info}))


def launch_by_rows(cases: list, otherwise):
    """The macro launch(x, w, b, out, n_m) of a GEMM whose rows are known only at run time: the
    launch of the first (takes, launch) of `cases` whose takes(n_m) holds, else `otherwise` (the
    host picks; each launch is a kernel of its own)."""
    if not cases:
        return otherwise
    (takes, first), rest = cases[0], launch_by_rows(cases[1:], otherwise)

    @T.macro
    def launch(x, w, b, out, n_m):
        if takes(n_m):
            first(x, w, b, out, n_m)
        else:
            rest(x, w, b, out, n_m)

    return launch


def tile_grid(N: int, BM: int, BN: int, NT: int, block_program, emulated_blocks, emulate: bool):
    """The macro launch(x, w, b, out, n_m) of a tiled GEMM: block_program(x, w, b, out, by, bx,
    t, n_m) on a CTA of NT threads per BM x BN tile of out, or `emulated_blocks` (serially)."""

    @T.macro
    def launch(x, w, b, out, n_m):
        if emulate:
            emulated_blocks(x, w, b, out, n_m)
        else:
            for by in T.thread_binding((n_m + BM - 1) // BM, thread="blockIdx.y"):
                for bx in T.thread_binding((N + BN - 1) // BN, thread="blockIdx.x"):
                    for t in T.thread_binding(NT, thread="threadIdx.x"):
                        block_program(x, w, b, out, by, bx, t, n_m)

    return launch
