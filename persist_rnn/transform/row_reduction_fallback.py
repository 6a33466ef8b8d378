"""dlight's Fallback GPU schedule, with long reductions spread over a thread block.

dlight's Fallback gives each output element one thread and runs that element's reduction inside
the thread. For a short reduction (a convolution's 251 taps) that is fine. For a normalization
over a signal it is not: pyannote's InstanceNorm over a 10 s waveform has one output row per
batch item, so one thread reads all 160,000 samples, one dependent load after another, three times
(mean, then the variance's mean and sum of squares): most of a 22 ms call at batch 1.

This rule maps every block as the Fallback does, except a reduction whose extent is symbolic or
at least `LONG_REDUCTION`: it gets a thread block per output element, whose `ROW_THREADS`
threads read the row side by side (coalesced) and whose partial sums TVM's cross-thread
reduction (LowerCrossThreadReduction) combines. Like the Fallback it allocates no staging buffer,
so it builds over any symbolic extent.
"""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight import base
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.s_tir.dlight.gpu.fallback import _has_internal_thread_env  # dlight's own check, kept identical

from .schedule_blocks import inlined_blocks, loops_by_kind

#: a reduction at least this long (or of a length known only at run time) is read by a thread block
LONG_REDUCTION = 2048
#: threads that share one output element's reduction
ROW_THREADS = 256


def _reduction_extent(sch: s_tir.Schedule, r_loops) -> int | None:
    """The reduction's length, None where it is symbolic."""
    extent = 1
    for loop in r_loops:
        loop_extent = sch.get(loop).extent
        if not isinstance(loop_extent, tirx.IntImm):
            return None
        extent *= loop_extent.value
    return extent


def is_long(sch: s_tir.Schedule, r_loops) -> bool:
    """Whether a reduction over `r_loops` is worth a thread block per output element."""
    extent = _reduction_extent(sch, r_loops)
    return extent is None or extent >= LONG_REDUCTION


class RowReductionFallback(GPUScheduleRule):
    """dlight's Fallback, with long reductions read by a thread block each (module doc)."""

    def apply(self, func: tirx.PrimFunc, target, _tunable: bool) -> s_tir.Schedule | None:
        found = inlined_blocks(self, func, target)
        if found is None:
            return None
        sch, infos = found
        in_thread = []  # (block, first reduction loop) of reductions kept in one thread
        for info in infos:
            block = info.block_rv
            loops = sch.get_loops(block)
            if any(sch.get(loop).thread_binding is not None for loop in loops):
                continue
            if not loops and _has_internal_thread_env(sch.get(block).body):
                continue  # launches its own threads (an opaque sort)
            by_kind = loops_by_kind(sch, info)
            spatial, reduction, other = by_kind["S"], by_kind["R"], by_kind["O"]
            if not spatial:
                spatial.append(sch.add_unit_loop(block))
            sch.reorder(*spatial, *reduction, *other)
            if reduction and not other and is_long(sch, reduction):
                sch.bind(sch.fuse(*spatial), "blockIdx.x")
                _, thread = sch.split(sch.fuse(*reduction), factors=[None, ROW_THREADS])
                sch.bind(thread, "threadIdx.x")
                continue
            block_idx, thread = sch.split(sch.fuse(*spatial), factors=[None, base.max_threads_per_block(target)])
            sch.bind(block_idx, "blockIdx.x")
            sch.bind(thread, "threadIdx.x")
            if reduction:
                in_thread.append((block, reduction[0]))
        for block, first_loop in in_thread:
            sch.decompose_reduction(block, first_loop)
        return sch
