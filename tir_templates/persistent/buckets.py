"""One recurrence kernel for a batch known only at run time: a persistent kernel per batch
bucket, and the host picks one by the runtime batch before launching it.

A layer exported with a symbolic batch (the exporters' default) ran up to 1.3x slower at one
config for every batch than builds for each batch on the H100 (docs/data/dynamic-batch-h100.jsonl):
the best tiling at B=1 (one CTA per direction, batch tiles) is not the best at B=64. Each
bucket (batch <= its bound; the last open-ended) gets the config planned for its bound; the
dispatch is a branch on the batch in the host function, so each kernel launches with its own
grid, cluster shape and shared memory.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..batch_dispatch import dispatch_by_batch
from ..built_once import built_once
from ..config import Config
from ..signature import recurrence_func
from ..spec import CellSpec
from .buffers import Args
from .checks import check
from .emulated import emulated_kernel
from .kernel import cuda_kernel
from .layout import Layout

#: (largest batch of the bucket, or None for every larger batch; its config)
Buckets = list[tuple[int | None, Config]]


def _build(spec: CellSpec, buckets: Buckets, kernel, emulate: bool) -> tvm.tirx.PrimFunc:
    bounds = [b for b, _ in buckets[:-1]]  # the last bucket takes the rest, whatever its bound says
    if not buckets or None in bounds or bounds != sorted(set(bounds)):
        raise ValueError(f"buckets need increasing bounds, only the last open-ended: {[b for b, _ in buckets]}")
    for _, cfg in buckets:
        check(spec, cfg)
    run = dispatch_by_batch(kernel, [Layout(spec, cfg, emulate) for _, cfg in buckets], bounds)

    @T.macro
    def body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        a = T.meta_var(Args(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b))
        run(a)

    return recurrence_func(spec, body, max(cfg.exchange_slots(spec) for _, cfg in buckets), yh_written_only=True,
                           yc_written_only=all(cfg.cell_state_slot(spec) is not None for _, cfg in buckets))


@built_once
def bucketed_kernel(spec: CellSpec, buckets: Buckets) -> tvm.tirx.PrimFunc:
    """The CUDA kernels of `buckets` behind one signature; the last bucket takes every batch past
    the others' bounds (raises UnsupportedLayer)."""
    return _build(spec, buckets, cuda_kernel, emulate=False)


@built_once
def emulated_bucketed_kernel(spec: CellSpec, buckets: Buckets) -> tvm.tirx.PrimFunc:
    """The same dispatch over the CPU twins: for tests."""
    return _build(spec, buckets, emulated_kernel, emulate=True)
