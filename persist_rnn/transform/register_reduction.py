"""A short reduction a thread, summed in a register, its epilogue in the same kernel.

What no tiled dlight rule takes reaches the Fallback (a convolution over a symbolic width, a
pooling window). The Fallback gives each output element a thread, but that thread adds every term
into the output in global memory, and each block left after inlining is its own kernel: an OCR
model's first convolution (one input channel, 3x3) at batch 16 reads and writes its 67 MB output
ten times, then a second kernel reads it again for the bias and ReLU.

This rule takes a function of one reduction, over a constant extent shorter than
`LONG_REDUCTION` (longer ones are RowReductionFallback's), with only elementwise blocks after it.
Each thread sums its output element in a register (`cache_write` to local), and the blocks after
the reduction are inlined into the register's write-back, so the output is written once, after
its epilogue. Anything else returns None and goes on to the Fallback.
"""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .row_reduction_fallback import is_long
from .schedule_blocks import inlined_blocks, loops_by_kind
from .staging_buffers import symbolic_staging

#: threads a block: each sums one output element
THREADS = 256
#: the reduction's loops are unrolled up to this many terms
UNROLL = 64


class RegisterReduction(GPUScheduleRule):
    """A thread an output element, the sum in a register, the epilogue fused (module doc)."""

    def apply(self, func: tirx.PrimFunc, target, _tunable: bool) -> s_tir.Schedule | None:
        found = inlined_blocks(self, func, target)
        if found is None:
            return None
        sch, infos = found
        if not infos or not infos[0].is_reduction() or any(not info.is_injective() for info in infos[1:]):
            return None
        reduction_block, epilogue = infos[0].block_rv, [info.block_rv for info in infos[1:]]
        by_kind = loops_by_kind(sch, infos[0])
        spatial, reduction = by_kind["S"], by_kind["R"]
        if by_kind["O"] or not spatial or not reduction or is_long(sch, reduction):
            return None
        try:
            sch.reorder(*spatial, *reduction)
            thread = _bind_threads(sch, spatial)
            write_back = sch.cache_write(reduction_block, 0, "local")
            sch.reverse_compute_at(write_back, thread)
            for block in epilogue:
                sch.reverse_compute_inline(block)
            sch.decompose_reduction(reduction_block, reduction[0])
            sch.annotate(reduction[0], "pragma_auto_unroll_max_step", UNROLL)
            sch.annotate(reduction[0], "pragma_unroll_explicit", 1)
        except s_tir.ScheduleError:  # an epilogue that is not elementwise over the reduction's output
            return None
        # the register is declared with the output's shape; lowering shrinks it to one element,
        # which it cannot prove constant for every extent (a pooling over `(T - 271) // 30 + 1`)
        return None if symbolic_staging(sch.mod["main"]) else sch


def _bind_threads(sch: s_tir.Schedule, spatial) -> s_tir.schedule.LoopRV:
    """Bind the output elements to threads, neighbours along the last axis side by side; return the
    thread loop. Where that axis has a symbolic length (an image's width, a signal's frames), it is
    split into thread-sized pieces, and the block index counts the axes of run-time length
    slowest: a block then finds its place along the constant axes with shifts and masks, and
    divides by a run-time length only for the others (a 64-bit division takes longer than a
    short sum itself)."""
    last = spatial[-1]
    if isinstance(sch.get(last).extent, tirx.IntImm):
        block_idx, thread = sch.split(sch.fuse(*spatial), factors=[None, THREADS])
    else:
        pieces, thread = sch.split(last, factors=[None, THREADS])
        outer = [*spatial[:-1], pieces]
        symbolic = [loop for loop in outer if not isinstance(sch.get(loop).extent, tirx.IntImm)]
        constant = [loop for loop in outer if isinstance(sch.get(loop).extent, tirx.IntImm)]
        sch.reorder(*symbolic, *constant, thread)
        block_idx = sch.fuse(*symbolic, *constant)
    sch.bind(block_idx, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    return thread
