"""The wavefront for a batch known only at run time: a stack kernel per batch bucket behind one
signature, the host picking one by the runtime batch (as `persistent/buckets.py` does for one
layer's kernels).

Each bucket runs the config planned at its bound, a tile's rows past the runtime batch left out
(`layout.in_batch`), so every batch up to the bound runs. Batches above the last bound are not this
kernel's: the pass runs the layers' own kernels for them (`transform/layer_wavefront.py` puts the
two behind one branch of the model's function), and the kernel asserts that it is never handed one.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..batch_dispatch import dispatch_by_batch
from ..built_once import built_once
from .emulated import emulated_stack
from .kernel import cuda_stack
from .layout import StackLayout
from .plan import StackConfig, check_stack
from .signature import stack_func

#: (largest batch of the bucket, its config), smallest bound first
StackBuckets = list[tuple[int, StackConfig]]


def _build(specs, buckets: StackBuckets, run, emulate: bool) -> tvm.tirx.PrimFunc:
    bounds = [bound for bound, _ in buckets]
    if not buckets or any(b is None or b < 1 for b in bounds) or bounds != sorted(set(bounds)):
        raise ValueError(f"stack buckets need increasing bounds of at least 1: {bounds}")
    check_stack(specs)
    dispatch = dispatch_by_batch(run, [StackLayout(specs, cfg, emulate) for _, cfg in buckets], bounds)
    top = bounds[-1]

    @T.macro
    def body(a):
        assert a.n_b <= top, "the wavefront kernel's buckets end at this batch: larger ones run a kernel a layer"
        dispatch(a)

    return stack_func(specs, body)


@built_once
def bucketed_stack_kernel(specs, buckets: StackBuckets) -> tvm.tirx.PrimFunc:
    """The CUDA wavefront kernels of `buckets` behind one signature (UnsupportedStack if the
    wavefront cannot run `specs`)."""
    return _build(specs, buckets, cuda_stack, emulate=False)


@built_once
def emulated_bucketed_stack_kernel(specs, buckets: StackBuckets) -> tvm.tirx.PrimFunc:
    """The same dispatch over the CPU twins: for tests."""
    return _build(specs, buckets, emulated_stack, emulate=True)
