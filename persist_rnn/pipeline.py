"""`persist_rnn.pipeline`: PersistentRNN, then TVM's default build for the target, as one pass
for `tvm.compile(mod, target, relax_pipeline=...)`. `persist_rnn.compile` builds through it."""
from __future__ import annotations

import tvm
from tvm import relax

from .report import layer_report
from .targets import as_target
from .transform import ConvAsMatmul, DenseToProjection, ExactPower, PersistentRNN
from .transform.buildable_schedules import ApplyBuildableSchedule


def _record_report(sink: list) -> tvm.ir.transform.Pass:
    """A pass that changes nothing and appends the module's LayerReports to `sink`."""

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.RecordReport")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        sink.extend(layer_report(mod))
        return mod

    return _pass


def pipeline(target, *, tuning_log=None, report: list | None = None, persistent: bool = True,
             **options) -> tvm.ir.transform.Pass:
    """The Relax pipeline that makes each recurrence persistent, then builds the rest of the model
    the way TVM builds it for `target` (legalization, fusion, dlight on GPUs, memory planning),
    with `power` made exact first (ExactPower: TVM's CUDA fast math gets negative bases wrong),
    convolutions with long reductions as im2col and a matmul (ConvAsMatmul), dense layers over
    symbolic rows as the projection GEMM on CUDA (DenseToProjection) and, for
    CUDA, dlight's schedules kept to ones that build (`_cuda_pipeline`).
    `options` go to PersistentRNN (config, top_k, measure, unverified, precision); `report`, a list, receives
    one LayerReport per recurrent layer as the pass leaves them."""
    target = as_target(target)
    passes = [ExactPower()]
    if persistent:
        passes += [PersistentRNN(target, tuning_log=tuning_log, **options), ConvAsMatmul(target),
                   DenseToProjection(target)]
    if report is not None:
        passes.append(_record_report(report))
    passes.append(_cuda_pipeline(target) if target.kind.name == "cuda" else relax.get_default_pipeline(target))
    return tvm.ir.transform.Sequential(passes, name="persist_rnn.pipeline")


def _cuda_pipeline(target) -> tvm.ir.transform.Pass:
    """TVM's default CUDA pipeline, from its own parts, with dlight's ApplyDefaultSchedule (the last
    legalization pass) replaced by ApplyBuildableSchedule: some of TVM's schedules over symbolic
    extents do not build, and its Fallback reads long reductions with one thread
    (transform/buildable_schedules.py)."""
    from tvm.relax.backend.cuda import pipeline as cuda

    legalize = cuda.legalize_passes(target)
    if legalize[-1].info.name != "ApplyDefaultSchedule":  # TVM's pipeline changed shape: use it unchanged
        return relax.get_default_pipeline(target)
    passes = (cuda.library_dispatch_passes(target) + legalize[:-1] + [ApplyBuildableSchedule(target)]
              + cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target))

    @tvm.ir.transform.module_pass(opt_level=0, name="persist_rnn.cuda_pipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:
            return tvm.ir.transform.Sequential(passes)(mod)

    return _pipeline
