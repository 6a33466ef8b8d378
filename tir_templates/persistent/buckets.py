"""One recurrence kernel for a batch known only at run time: a persistent kernel per batch
bucket, and the host picks one by the runtime batch before launching it.

A layer exported with a symbolic batch (the exporters' default) ran up to 1.3x slower at one
config for every batch than builds for each batch on the H100 (docs/data/dynamic-batch-h100.jsonl):
the best tiling at B=1 (one CTA per direction, batch tiles) is not the best at B=64. Each
bucket (batch <= its bound; the last open-ended) gets the config planned for its bound; the
dispatch is a branch on the batch in the host function, so each kernel launches with its own
grid, cluster shape and shared memory. A quantized layer's buckets may hold int8 weights at some
batches and fp16 or fp32 at others; R then comes packed, and the others read it back as they load.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..batch_dispatch import dispatch_by_batch
from ..built_once import built_once
from ..config import Config
from ..int8_rows import PACKED_R_ATTR
from ..signature import recurrence_func
from ..spec import CellSpec
from .buffers import Args
from .checks import UnsupportedLayer, check
from .emulated import emulated_kernel
from .kernel import cuda_kernel
from .layout import Layout

#: (largest batch of the bucket, or None for every larger batch; its config)
Buckets = list[tuple[int | None, Config]]


def _build(spec: CellSpec, buckets: Buckets, kernel, emulate: bool, packed_r: bool) -> tvm.tirx.PrimFunc:
    bounds = [b for b, _ in buckets[:-1]]  # the last bucket takes the rest, whatever its bound says
    if not buckets or None in bounds or bounds != sorted(set(bounds)):
        raise ValueError(f"buckets need increasing bounds, only the last open-ended: {[b for b, _ in buckets]}")
    for _, cfg in buckets:
        check(spec, cfg)
        if packed_r and not reads_packed_r(cfg):
            raise UnsupportedLayer(f"config {cfg.as_dict()} reads R in global memory each step: R cannot come packed")
    run = dispatch_by_batch(kernel, [Layout(spec, cfg, emulate, packed_r) for _, cfg in buckets], bounds)

    @T.macro
    def body(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b):
        a = T.meta_var(Args(xw, r, rb, lens, h0, c0, p, y, yh, yc, hb, ws, n_t, n_b))
        run(a)

    func = recurrence_func(spec, body, max(cfg.exchange_slots(spec) for _, cfg in buckets), yh_written_only=True,
                           yc_written_only=all(cfg.cell_state_slot(spec) is not None for _, cfg in buckets),
                           workspace_words=max(cfg.workspace_words(spec) for _, cfg in buckets))
    return func.with_attr(PACKED_R_ATTR, True) if packed_r else func


def reads_packed_r(cfg: Config) -> bool:
    """Whether a bucket of `cfg` can take R packed (int8_rows.py): it reads R only while it loads
    its weights, not from global memory every step."""
    return cfg.global_runs == 0


@built_once
def bucketed_kernel(spec: CellSpec, buckets: Buckets, packed_r: bool = False) -> tvm.tirx.PrimFunc:
    """The CUDA kernels of `buckets` behind one signature; the last bucket takes every batch past
    the others' bounds (raises UnsupportedLayer). `packed_r`: R comes packed, as int8 buckets
    take it, and the others read it back (int8_rows.py); the kernel then carries PACKED_R_ATTR."""
    return _build(spec, buckets, cuda_kernel, emulate=False, packed_r=packed_r)


@built_once
def emulated_bucketed_kernel(spec: CellSpec, buckets: Buckets, packed_r: bool = False) -> tvm.tirx.PrimFunc:
    """The same dispatch over the CPU twins: for tests."""
    return _build(spec, buckets, emulated_kernel, emulate=True, packed_r=packed_r)
