"""FoldEmbeddingProjection: a layer's input projection whose x is rows of a constant table (an
embedding lookup, `take(E, ids, axis=0)`, perhaps transposed from batch-first, reshaped to rows)
becomes a lookup of the projected table: take(E @ w_t + b, ids), the transpose done on the ids.
The GEMM is gone; the gather reads N columns a row instead of K.

Why: text models feed their first recurrent layer from an embedding, and a model as exported
has a symbolic batch, so each call pays its kernels' launches on the host. The shipped text
classifier issued six kernels for 57 us of GPU work in 74 us of host time (measured on the
H100); the fold drops its GEMM launch and the GEMM's ~5 us on the GPU.

Numerics: E @ w_t + b is computed once in float64 and rounded to float32, so each folded value is
the exact projection rounded once, closer to it than the fp32 GEMM's sum (whose rounding errors
grow with K). A 16-bit layer's table and w_t hold 16-bit values; their products are summed the same
way, into the fp32 that the projection's output has.

The projected table is kept only up to `MAX_TABLE_BYTES` (a vocabulary of 50,000 words at 4H =
1024 would take 205 MB of device memory): a larger one keeps the GEMM. report() says which layers'
projections were folded.
"""
from __future__ import annotations

import json

import tvm
from tvm import relax

from tir_templates.gemm_signature import PROJECTION_ATTR
from tir_templates.spec import ATTR_KEY

from .batch_invariants import static_value
from .call_sites import call_args, drop_uncalled
from .function_rewrite import rewrite_functions
from .layer_stacks import callee, is_op, through_views

#: the largest projected table kept on the device (V x N x 4 bytes)
MAX_TABLE_BYTES = 64 << 20


def _reference_projection(mod: tvm.IRModule, call) -> bool:
    """Whether `call` is a call_tir of an input projection in the importer's reference form."""
    func = callee(call, mod, PROJECTION_ATTR)
    if func is None:
        return False
    info = json.loads(str(func.attrs[PROJECTION_ATTR]))
    return "tile" not in info and "mma" not in info


def _lookup(x, var2val):
    """(table, ids, mode, ids_axes) when `x` (the projection's rows) is a constant table's rows
    taken by ids along axis 0, perhaps transposed with the embedding axis kept last (a batch-first
    model's (B, T) -> (T, B)), and reshaped to (rows, K); `ids_axes` is that transpose done on the
    ids instead (None: none). Else None. Views (reshape, squeeze, expand_dims) keep the rows' order."""
    taken, ids_axes = through_views(x, var2val), None  # the reshape to rows, and any view before it
    if is_op(taken, "relax.permute_dims"):
        axes = taken.attrs.axes
        if axes is None or int(axes[-1]) != len(axes) - 1:
            return None  # the embedding axis moves: not a transpose of the rows
        ids_axes = [int(a) for a in axes[:-1]]
        taken = through_views(taken.args[0], var2val)
    if not is_op(taken, "relax.take") or taken.attrs.axis is None or int(taken.attrs.axis) != 0:
        return None
    table = static_value(taken.args[0], var2val)
    if table is None or table.ndim != 2:
        return None
    return table, taken.args[1], str(taken.attrs.mode), ids_axes


@relax.expr_functor.mutator
class _Fold(relax.PyExprMutator):
    def __init__(self, mod, var2val: dict, folded: set):
        super().__init__(mod)
        self.mod, self.var2val, self.folded = mod, var2val, folded
        self.lookups = set()  # the projected tables' takes emitted

    def visit_call_(self, call):
        new = super().visit_call_(call)
        if not _reference_projection(self.mod, call) or not isinstance(call.args[1], relax.Tuple):
            return new
        x, w_arg, b_arg = call.args[1].fields
        found = _lookup(x, self.var2val)
        w, b = static_value(w_arg, self.var2val), static_value(b_arg, self.var2val)
        if found is None or w is None or b is None:
            return new
        table, ids, mode, ids_axes = found
        if table.shape[1] != w.shape[0] or table.shape[0] * w.shape[1] * 4 > MAX_TABLE_BYTES:
            return new
        projected = (table.astype("float64") @ w.astype("float64") + b.astype("float64")).astype("float32")
        self.folded.add(call.args[0])
        ids = self.visit_expr(ids)
        if ids_axes is not None and ids_axes != sorted(ids_axes):  # transpose the ids, not the rows
            ids = self.builder_.emit(relax.op.permute_dims(ids, ids_axes))
        rows = self.builder_.emit(relax.op.take(relax.const(projected, "float32"), ids, axis=0, mode=mode))
        self.lookups.add(rows)
        return relax.op.reshape(rows, call.ty.shape)


def fold_embedding_projections(mod: tvm.IRModule) -> tuple[tvm.IRModule, set[str]]:
    """`mod` with every input projection of an embedding lookup folded into its table (the
    projection functions folded dropped, unused now), and the names of the layer functions whose
    input is such a lookup."""
    folded: set = set()
    layers: set[str] = set()

    def fed(mod, new_func, fold):
        layers.update(_fed_layers(mod, new_func, fold.lookups))

    mod = rewrite_functions(mod, lambda mod, var2val: _Fold(mod, var2val, folded), fed)
    return drop_uncalled(mod, folded), layers


def _fed_layers(mod, func, lookups: set) -> set[str]:
    """Names of the layers called in `func` whose input is, through reshapes, one of `lookups`."""
    var2val, out = relax.analysis.get_var2val(func), set()
    for value in var2val.values():
        if callee(value, mod, ATTR_KEY) is not None:
            x = call_args(value)[0]
            while isinstance(x, relax.Var) and x not in lookups and is_op(var2val.get(x), "relax.reshape"):
                x = var2val[x].args[0]
            if x in lookups:
                out.add(value.args[0].name_hint)
    return out
