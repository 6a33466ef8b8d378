"""Whether a scheduled function would allocate a local or shared buffer of run-time size, which
TVM 0.27's CUDA codegen refuses ("Can only handle constant size stack allocation").

A schedule declares its staging buffers at the function's root with whatever shape the primitive
gave them (`cache_write` to local: the output's whole shape), and TVM's lowering shrinks each to
the region its allocation site touches (CompactBufferAllocation). So the sizes that count are the
compacted ones: this runs the lowering up to that pass and reads them.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

#: TVM's default lowering (s_tir/pipeline.py) up to and with the compaction
_TO_COMPACTION = (s_tir.transform.LowerCrossThreadReduction, s_tir.transform.LowerInitBlock,
                  s_tir.transform.PlanAndUpdateBufferAllocationLocation, s_tir.transform.ConvertBlocksToOpaque,
                  s_tir.transform.CompactBufferAllocation)


def on_chip_buffers(func: tirx.PrimFunc) -> list:
    """The local and shared buffers `func` allocates, as its lowering compacts them."""
    lowered = tvm.transform.Sequential([p() for p in _TO_COMPACTION])(tvm.IRModule({"main": func}))
    found = []

    def visit(block: s_tir.SBlock):
        found.extend(buf for buf in block.alloc_buffers if buf.scope() in ("local", "shared", "shared.dyn"))

    tvm_ffi.structural_walk(lowered["main"].body, [(s_tir.SBlock, visit)], order="post")
    return found


def symbolic_staging(func) -> bool:
    """Whether `func` (a scheduled PrimFunc) allocates an on-chip buffer whose size is not a constant."""
    if not isinstance(func, tirx.PrimFunc):
        return False
    return any(not all(isinstance(d, tirx.IntImm) for d in buf.shape) for buf in on_chip_buffers(func))
