"""dlight's GPU schedules, with a Fallback rule wherever the chosen schedule would not build.

The rules are TVM's own CUDA list (`relax/backend/cuda/pipeline.py`: Matmul, GEMV, Reduction,
GeneralReduction), and last, where TVM has dlight's Fallback, RegisterReduction (a short reduction
summed in a register, its epilogue in the same kernel: transform/register_reduction.py) and
RowReductionFallback (the Fallback's mapping, with long reductions read by a thread block each:
transform/row_reduction_fallback.py).

dlight's Matmul rule (which takes convolutions too) stages tiles in local and shared buffers. When
an extent is symbolic and not a plain variable (an OCR model's width after three stride-2
convolutions, `(image_width - 1) // 8 + 1`), those buffers get symbolic sizes, and TVM 0.27's
CUDA codegen stops with "Can only handle constant size stack allocation" (ddddocr's OCR model: 11
fused convolutions and its final Gemm). This pass runs TVM's own ApplyDefaultSchedule, then, for
every function whose schedule allocates such a buffer, schedules the unscheduled function with
those last two rules instead: one output element a thread (a thread block where the reduction is
long), no staging buffers but a register. It builds and computes the same sums, slower than a
tiled kernel. Static sizes keep dlight's tiled schedule.

A rule can also fail outright on symbolic extents (NSNet2's MatMul over `batch * frames` rows:
compute_at's "intset.HasLowerBound() && intset.HasUpperBound()"). Then each function is
scheduled on its own, and the ones whose rule raised get the Fallback too.
"""
from __future__ import annotations

import tvm

from .register_reduction import RegisterReduction
from .row_reduction_fallback import RowReductionFallback
from .staging_buffers import declares_symbolic_staging


def default_schedule():
    """TVM's CUDA ApplyDefaultSchedule, its Fallback rule replaced by RegisterReduction then
    RowReductionFallback."""
    from tvm.s_tir import dlight as dl

    return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                   *untiled_rules())


def untiled_rules() -> list:
    """The rules for what no tiled rule takes: short reductions in a register with their epilogue
    (transform/register_reduction.py), then the Fallback's mapping."""
    return [RegisterReduction(), RowReductionFallback()]


def ApplyBuildableSchedule(target) -> tvm.ir.transform.Pass:
    """`default_schedule()`, then RowReductionFallback for each function whose schedule would
    allocate a symbolic-size local or shared buffer."""
    from tvm.s_tir import dlight as dl

    dlight_pass = default_schedule()

    def fallback(funcs: dict) -> dict:
        with target:
            done = dl.ApplyDefaultSchedule(*untiled_rules())(tvm.IRModule(funcs))
        return {gv: done[gv.name_hint] for gv in funcs}

    def one_by_one(funcs: dict) -> dict:
        """Each function scheduled alone; None where the rule raised."""
        done = {}
        for gv, func in funcs.items():
            try:
                done[gv] = dlight_pass(tvm.IRModule({gv: func}))[gv.name_hint]
            except Exception:  # a rule's own check on symbolic extents (see module doc)
                done[gv] = None
        return done

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.ApplyBuildableSchedule")
    def _pass(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        before = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        try:
            mod = dlight_pass(mod)
            scheduled = {gv: mod[gv] for gv in before}
        except Exception:  # a rule raised: schedule the functions one by one (module doc)
            scheduled = one_by_one(before)
            for gv, func in scheduled.items():
                if func is not None:
                    mod[gv] = func
        # (RegisterReduction's register is declared with the output's shape too: redone, it is
        # scheduled the same)
        redo = {gv: before[gv] for gv, f in scheduled.items() if f is None or declares_symbolic_staging(f)}
        for gv, func in (fallback(redo) if redo else {}).items():
            mod[gv] = func
        return mod

    return _pass
