"""Whether a scheduled function would allocate a local or shared buffer of run-time size, which
TVM 0.27's CUDA codegen refuses ("Can only handle constant size stack allocation").

A schedule declares its staging buffers at the function's root with whatever shape the primitive
gave them (`cache_write` to local: the output's whole shape), and TVM's lowering shrinks each to
the region its allocation site touches (CompactBufferAllocation). `declares_symbolic_staging`
reads the declared sizes (dlight's tiled rules stage over a symbolic extent there);
`symbolic_staging` the compacted ones, which are what codegen sees: it runs the lowering up to
that pass and reads them.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

#: the scopes of the buffers that codegen allocates on chip
ON_CHIP = ("local", "shared", "shared.dyn")
#: TVM's default lowering (s_tir/pipeline.py) up to and with the compaction
_TO_COMPACTION = (s_tir.transform.LowerCrossThreadReduction, s_tir.transform.LowerInitBlock,
                  s_tir.transform.PlanAndUpdateBufferAllocationLocation, s_tir.transform.ConvertBlocksToOpaque,
                  s_tir.transform.CompactBufferAllocation)


def _run_time_sized(buffers) -> bool:
    """Whether one of `buffers` is on chip and not of a constant size."""
    return any(buf.scope() in ON_CHIP and not all(isinstance(d, tirx.IntImm) for d in buf.shape) for buf in buffers)


def declares_symbolic_staging(func) -> bool:
    """Whether `func` declares, in its root block, an on-chip buffer whose size is not a constant."""
    root = getattr(func.body, "block", None) if isinstance(func, tirx.PrimFunc) else None
    return root is not None and _run_time_sized(root.alloc_buffers)


def symbolic_staging(func) -> bool:
    """Whether `func` (a scheduled PrimFunc) allocates, once its lowering compacts its buffers, an
    on-chip buffer whose size is not a constant."""
    if not isinstance(func, tirx.PrimFunc):
        return False
    lowered = tvm.transform.Sequential([p() for p in _TO_COMPACTION])(tvm.IRModule({"main": func}))
    allocated = []
    tvm_ffi.structural_walk(lowered["main"].body, [(s_tir.SBlock, lambda block: allocated.extend(block.alloc_buffers))],
                            order="post")
    return _run_time_sized(allocated)
