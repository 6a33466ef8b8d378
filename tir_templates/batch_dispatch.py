"""The host's branch on the runtime batch that a batch-bucketed PrimFunc runs (a layer's kernels,
`persistent/buckets.py`; a stack's, `wavefront/buckets.py`): each kernel launches with its own grid,
cluster shape and shared memory."""
from __future__ import annotations

from tvm.script import tirx as T


def dispatch_by_batch(kernel, layouts: list, bounds: list[int]):
    """A macro running `kernel(L, a)` with the first layout L whose bound a.n_b is within (the
    last layout takes the rest)."""
    L = layouts[0]
    if len(layouts) == 1:
        @T.macro
        def only(a):
            kernel(L, a)
        return only
    bound, rest = bounds[0], dispatch_by_batch(kernel, layouts[1:], bounds[1:])

    @T.macro
    def branch(a):
        if a.n_b <= bound:
            kernel(L, a)
        else:
            rest(a)
    return branch
