"""PersistentRNN: swap each recurrence's reference scan for a persistent CUDA kernel.

It finds recurrences by the CellSpec attribute the importer's reference scan carries (the
canonical form; chains of primitive-op LSTM, GRU and RNN cells are first turned into it, see
match_cells), wherever their call_tir sites stand (call_sites: any position in a Relax pipeline
before TVM's dataflow lowering, which it refuses by name), asks the scheduler for a config, and
replaces the callee with the kernel the templates generate for it. All lowerings share one
signature, so call sites stay as they are, except that a kernel may want a longer exchange buffer
(GRU's partial sums, a 16-bit LSTM's C: `exchange_slots`) or write Y_h and Y_c of an fp16 or bf16
layer in that dtype (tir_templates/signature.py), which is then written into its call sites
(`_conform_call_sites`; the casts after them go).
What cannot be made persistent runs, on CUDA, the GEMM scan where the planner prices it shortest
(tir_templates/gemm_scan.py: a tensor-core GEMM and an update a step, for layers whose weights no
config holds on chip, at a batch known at build time), else the streamed scan where its weights
are large (tir_templates/streamed.py: a kernel a step, weights from L2/HBM), else keeps the
reference scan (re-targeted to the target's variant); the reason is recorded where `report()`
reads it.
On CUDA the layers' input projections (the importer's projection reference) become tiled GEMMs
(projection_gemms: the tensor cores' where they pay, tiled for the call sites' rows), and from
sm_90 on a persistent kernel whose CTAs never meet and whose weights are constants or parameters
launches early, while the GEMM before it still runs (tir_templates.early_launch).
"""
from __future__ import annotations

import dataclasses
import json

import tvm
from tvm import relax

from tir_templates.early_launch import COOPERATIVE_LAUNCH, EARLY_LAUNCH, sm_number, supports_early_launch
from tir_templates.gemm_scan import GEMM_SCAN, gemm_scan, gemm_scan_slots
from tir_templates.int8_rows import PACKED_R_ATTR
from tir_templates.projection_wgmma import wgmma_arch
from tir_templates.reference import reference_scan
from tir_templates.signature import EXCHANGE_SLOTS, WORKSPACE_WORDS
from tir_templates.spec import ATTR_KEY, CellSpec
from tir_templates.streamed import streamed_scan

from ..errors import PersistRNNError
from ..report import (BUCKETS_ATTR, CONFIG_ATTR, EMBEDDING_FOLDED_ATTR, LOWERING_ATTR, REASON_ATTR, SOURCE_ATTR,
                      kernel_configs)
from ..schedule.gemm_scan_cost import step_launched_early, step_plan
from ..schedule.gpu import gpu_model
from ..schedule.planner import named_arch, plan_layer, target_arch
from ..schedule.precision import checked as checked_precision
from ..targets import as_target
from .batch_invariants import broadcast_batch_invariants
from .embedding_projection import fold_embedding_projections
from .int8_weights import int8_layers, pack_int8_weights
from .call_sites import call_args, call_site_batches, call_tir_sites
from .layer_stacks import mark_stacks
from .layer_wavefront import fuse_stacks, wavefront_mode
from .projection_gemms import tile_projections
from .match_cells import MatchCells


#: the oldest GPU the kernels run on: Ampere (mma.sync on TF32 and bf16, cp.async)
MIN_CUDA_SM = 80

#: recurrent weights from which a layer no persistent kernel takes is streamed (a kernel a step,
#: tir_templates/streamed.py) rather than scanned by the reference (a CTA per batch row): at 1 MiB
#: of fp32 weights the reference's 128 threads do 2048 FMAs each per step, longer than a launch
STREAM_MIN_BYTES = 1 << 20
#: what the report says of a streamed layer, before the planner's reason
STREAMED_WHY = "a kernel a step, its weights read from L2/HBM"


def streams_pay(spec: CellSpec) -> bool:
    """Whether a layer that no persistent kernel takes runs the streamed scan on CUDA."""
    return spec.num_directions * spec.num_gates * spec.hidden_size ** 2 * 4 >= STREAM_MIN_BYTES


def recurrences(mod: tvm.IRModule):
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and ATTR_KEY in func.attrs:
            yield gv, func, CellSpec.from_json(str(func.attrs[ATTR_KEY]))


#: the results a recurrence kernel may write in a dtype other than its call site's (signature.py),
#: output index -> (parameter index, buffer name): Y_h, and an LSTM's Y_c
_RETYPED_OUTPUTS = {1: (8, "yh"), 2: (9, "yc")}


#: casts that keep every value: a 16-bit float widened to fp32 (its narrowing back is exact)
_WIDENINGS = {("float16", "float32"), ("bfloat16", "float32")}
#: ops that move a tensor's values without changing them (the importer's layout=1 transposes)
_LAYOUT_OPS = ("relax.permute_dims", "relax.reshape", "relax.squeeze", "relax.expand_dims")


@relax.expr_functor.mutator
class _CallSiteConformer(relax.PyExprMutator):
    """call_tir sites of the kernels in `slots` (GlobalVar name -> exchange slots) get an exchange
    buffer (output 3) of that many slots, those in `words` (name -> workspace words) a workspace
    (output 4) of that many words; those of the kernels in `dtypes` (GlobalVar name ->
    {output: dtype}) results of those dtypes. Whatever used such a result gets it in the dtype it
    had, widened by a cast (exact: the importer rounds Y_h and Y_c to the layer's dtype before
    anything reads them), and that cast followed by the importer's cast back is dropped, so that
    where the importer's cast is still an op (PersistentRNN before legalization) no cast kernel is
    left."""

    def __init__(self, mod, slots: dict, dtypes: dict, retyped: dict, words: dict):
        super().__init__(mod)
        self.slots, self.dtypes, self.words = slots, dtypes, words
        # a GlobalVar keeps the type of the function it was made for: a kernel whose results
        # change dtype is added afresh under its name (the old one was taken out of the module)
        self.callees = {name: self.builder_.add_func(func, name) for name, func in retyped.items()}
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.astype = tvm.ir.Op.get("relax.astype")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = call.args[0].name_hint if call.op.same_as(self.call_tir) else None
        if name in self.slots or name in self.dtypes or name in self.words:
            call = relax.Call(call.op, [self.callees.get(name, call.args[0]), *call.args[1:]], call.attrs, call.ty_args)
            outs = list(call.ty_args[0].fields)
            if name in self.slots:
                ex = outs[3]
                outs[3] = relax.TensorType([self.slots[name], *list(ex.shape)[1:]], ex.dtype)
            if name in self.words:
                outs[4] = relax.TensorType([self.words[name]], outs[4].dtype)
            for index, dtype in self.dtypes.get(name, {}).items():
                outs[index] = relax.TensorType(outs[index].shape, dtype)
            return relax.Call(call.op, call.args, call.attrs, [relax.TupleType(outs)])  # tir_vars kept
        if call.op.same_as(self.astype):
            narrow = self._unwidened(call.args[0], str(call.attrs.dtype))
            return call if narrow is None else narrow
        return call

    def _unwidened(self, value, dtype: str):
        """`value` computed from the 16-bit result itself, where `value` is that result widened
        (a cast this pass made), then moved by layout ops only, and `dtype` is the result's own;
        else None."""
        bound = self.lookup_binding(value) if isinstance(value, relax.Var) else None
        if not isinstance(bound, relax.Call) or not isinstance(bound.op, tvm.ir.Op):
            return None
        if bound.op.same_as(self.astype):
            source = bound.args[0]
            widening = (str(source.ty.dtype), str(bound.attrs.dtype))
            return source if widening in _WIDENINGS and widening[0] == dtype else None
        if bound.op.name in _LAYOUT_OPS:
            inner = self._unwidened(bound.args[0], dtype)
            return None if inner is None else self.builder_.normalize(relax.Call(bound.op, [inner, *bound.args[1:]], bound.attrs))
        return None

    def visit_tuple_getitem_(self, op):
        new = self.builder_.normalize(super().visit_tuple_getitem_(op))
        was, now = op.ty, new.ty
        if isinstance(was, relax.TensorType) and isinstance(now, relax.TensorType) and str(was.dtype) != str(now.dtype):
            return self.builder_.normalize(relax.op.astype(new, str(was.dtype)))  # its users as they were
        return new


def _retyped_outputs(mod: tvm.IRModule, kernels) -> dict:
    """GlobalVar name -> {output: dtype} for each kernel of `kernels` that writes a result in a
    dtype other than its call sites give it."""
    out = {}
    for func, call in call_tir_sites(mod, kernels):
        callee = mod[call.args[0]]
        fields = call.ty_args[0].fields
        for index, (param, name) in _RETYPED_OUTPUTS.items():
            buf = callee.params[param] if len(callee.params) > param else None  # a Var of BufferType
            if buf is not None and buf.name == name and str(fields[index].dtype) != str(buf.dtype):
                out.setdefault(call.args[0].name_hint, {})[index] = str(buf.dtype)
    return out


def _conform_call_sites(mod: tvm.IRModule, slots: dict, dtypes: dict, words: dict) -> tvm.IRModule:
    retyped = {}
    for name in dtypes:
        gv = mod.get_global_var(name)
        retyped[name] = mod[gv]
        del mod[gv]
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            conformer = _CallSiteConformer(mod, slots, dtypes, retyped, words)  # (add_func finds a kernel added before)
            new_func = relax.analysis.remove_all_unused(conformer.visit_expr(func))  # widenings left unread
            mod = conformer.builder_.get()
            mod[gv] = new_func
    return mod


def _made_before_the_call(arg, func: relax.Function) -> bool:
    """Whether `arg` exists before the function's first kernel runs: a constant, or a parameter of
    a function the user calls (a private function's, such as a side of a runtime-batch stack's
    branch, may come from the kernel its caller ran just before)."""
    public = func.attrs is not None and "global_symbol" in func.attrs
    return isinstance(arg, tvm.ir.expr.Constant) or (public and any(arg.same_as(p) for p in func.params))


def early_launch_safe(mod: tvm.IRModule, callees) -> set:
    """Names of the recurrence kernels `callees` that may launch early (tir_templates.early_launch): at every
    call site their weights and biases (arguments 1 and 2, read before `griddepcontrol.wait`)
    are constants or parameters, never the output of a kernel of the same call, which might still
    be running."""
    safe, unsafe = set(), set()
    for func, v in call_tir_sites(mod, callees):
        args = call_args(v)
        ok = len(args) > 2 and all(_made_before_the_call(a, func) for a in args[1:3])
        (safe if ok else unsafe).add(v.args[0].name_hint)
    return safe - unsafe


#: the kernels that may launch early, by how their CTAs meet: one CTA a direction or batch tile
#: ("cta"), or one thread-block cluster ("cluster", placed whole by the hardware, its CTAs held
#: one to an SM by their registers); not CTAs behind a grid barrier
EARLY_LAUNCH_BARRIERS = ("cta", "cluster")


def _holds_int8(func) -> bool:
    """Whether `func` is a persistent kernel some of whose buckets hold their weights as int8, so
    that its call sites take R packed; its other buckets must then read R packed too
    (PACKED_R_ATTR, `planner.plan_buckets`)."""
    if str(func.attrs.get(LOWERING_ATTR, "")) != "persistent":
        return False
    kinds = {cfg.int8_weights() for cfg in kernel_configs(func)}
    if len(kinds) > 1 and not func.attrs.get(PACKED_R_ATTR, False):
        raise PersistRNNError(f"{func.attrs.get('global_symbol', 'a layer')}: buckets with and without int8 weights "
                              "share one R, and those without cannot read it packed")
    return True in kinds


def _may_launch_early(func, spec: CellSpec) -> bool:
    """Whether `func` is a persistent kernel whose CTAs meet at most inside a cluster. Kernels with
    a grid barrier were slower launched early on the H100 (GRU H=256 B=20: 0.32 -> 0.60 ms),
    placed by the block scheduler around the GEMM's still-running CTAs, several to an SM."""
    if str(func.attrs.get(LOWERING_ATTR, "")) != "persistent":
        return False
    return all(cfg.barrier(spec) in EARLY_LAUNCH_BARRIERS for cfg in kernel_configs(func))


def _needs_cooperative_launch(func, spec: CellSpec) -> bool:
    """Whether `func` is a persistent kernel with a grid barrier in some bucket. Its CTAs spin
    until every CTA of their direction has arrived, so all of them must be on the GPU at once.
    The planner never launches more CTAs than SMs, but another kernel (a second stream, another
    process under MPS) can hold SMs, and a CTA that cannot be placed never arrives. A cooperative
    launch is placed whole or not at all (cuLaunchCooperativeKernel), so it never hangs there.
    Cluster barriers need no such launch (the hardware places a cluster whole), nor do CTAs that
    wait for no one."""
    if str(func.attrs.get(LOWERING_ATTR, "")) != "persistent":
        return False
    return any(cfg.barrier(spec) == "grid" for cfg in kernel_configs(func))


def PersistentRNN(target, *, tuning_log=None, config=None, top_k=5, measure=None,
                  unverified=False, cooperative=True, precision="fp32", wavefront="auto") -> tvm.ir.transform.Pass:
    """The pass. `config` forces one schedule config (a dict or Config) for every layer;
    `tuning_log` is a JSON-lines path whose records are reused; `measure` (default: when a GPU is
    present) times the cost model's top_k candidates; `unverified` lets the planner pick kernel
    variants that have not yet run on a GPU; `cooperative` (default) launches grid-barrier kernels
    cooperatively (see `_needs_cooperative_launch`; off only to measure what it costs);
    `precision` "tf32" lets fp32 layers' steps use the tensor cores at TF32 (schedule/precision.py);
    `wavefront` runs stacks of layers as one kernel (layer_wavefront.py): "auto" (default) those
    that a measured stack record of `tuning_log`, else the cost model, finds faster so
    (schedule/stack_choice.py); True every stack the wavefront takes; False none."""
    target = as_target(target)
    precision = checked_precision(precision)
    wavefront = wavefront_mode(wavefront)
    if target.kind.name == "cuda" and sm_number(target_arch(target)) < MIN_CUDA_SM:
        raise PersistRNNError(
            f"target arch {target_arch(target)}: persist_rnn's CUDA kernels need sm_{MIN_CUDA_SM} or newer (TF32 and "
            "16-bit mma, cp.async); build with persistent=False for TVM's own CUDA schedules")

    @tvm.ir.transform.module_pass(opt_level=0, name="PersistentRNN")
    def _pass(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        if "PersistentRNN" in [str(name) for name in ctx.disabled_pass]:  # also when called directly
            return mod
        mod = MatchCells(target.kind.name)(mod)  # recurrences written as primitive ops
        layers = {gv.name_hint for gv, _, _ in recurrences(mod)}
        if not layers:
            return mod
        check_position(mod, layers)
        mod = relax.transform.FoldConstant()(mod)  # weights sliced from initializers become constants
        mod = broadcast_batch_invariants(mod, target.kind.name)  # a symbolic batch's default operands
        mod, embedded = fold_embedding_projections(mod)
        batches = call_site_batches(mod, layers)
        quantized = {gv.name_hint for gv, func, spec in recurrences(mod)
                     if spec.int8_weights and str(func.attrs.get(LOWERING_ATTR, "reference")) == "reference"}
        int8 = int8_layers(mod, quantized) if target.kind.name == "cuda" and quantized else set()
        cuda = target.kind.name == "cuda"
        arch = target_arch(target) if cuda else None
        gpu = gpu_model(arch) if cuda else None
        slots, words, plans = {}, {}, {}
        for gv, func, spec in list(recurrences(mod)):
            if str(func.attrs.get(LOWERING_ATTR, "reference")) != "reference":
                continue  # already lowered
            if gv.name_hint in int8:  # R is int8 values times a scale a row: the kernel may hold them so
                spec = dataclasses.replace(spec, int8_rows=True)
            same = (dataclasses.replace(spec, node=""), batches.get(gv.name_hint))  # stacked twins plan once
            if same not in plans:
                plans[same] = plan_layer(spec, target, batch=same[1], tuning_log_path=tuning_log, config=config,
                                         top_k=top_k, measure=measure, unverified=unverified, precision=precision)
            plan = plans[same]
            if plan.kernel is None and plan.lowering == GEMM_SCAN:
                step = step_plan(spec, same[1], gpu.num_sms)
                early = supports_early_launch(arch) and (plan.wgmma is not None or step_launched_early(step))
                new = (gemm_scan(spec, same[1], precision, plan=step, early_launch=early, wgmma=plan.wgmma)
                       .with_attr(REASON_ATTR, plan.reason))
                slots[gv.name_hint] = gemm_scan_slots(spec, same[1], plan.wgmma)
            elif plan.kernel is None and target.kind.name == "cuda" and streams_pay(spec):
                new = streamed_scan(spec).with_attr(REASON_ATTR, f"{STREAMED_WHY}: {plan.reason}")
            elif plan.kernel is None:
                new = reference_scan(spec, target.kind.name).with_attr(REASON_ATTR, plan.reason)
            else:
                new = (plan.kernel.with_attr(LOWERING_ATTR, "persistent")
                       .with_attr(CONFIG_ATTR, json.dumps(plan.config.as_dict()))
                       .with_attr(SOURCE_ATTR, plan.source))
                if plan.buckets:
                    new = new.with_attr(BUCKETS_ATTR, json.dumps(plan.buckets))
                if plan.reason:  # why a 16-bit (or TF32) layer's step is on the FMA units
                    new = new.with_attr(REASON_ATTR, plan.reason)
                need = max(cfg.exchange_slots(spec) for cfg in kernel_configs(new))
                if need != EXCHANGE_SLOTS:
                    slots[gv.name_hint] = need
                need = max(cfg.workspace_words(spec) for cfg in kernel_configs(new))
                if need != WORKSPACE_WORDS:  # a packed copy of the weights some steps read (dot_mma.py)
                    words[gv.name_hint] = need
            if gv.name_hint in embedded:
                new = new.with_attr(EMBEDDING_FOLDED_ATTR, 1)
            mod[gv] = new.with_attr(ATTR_KEY, spec.to_json())
        mod = mark_stacks(mod)  # report() names each layer's stack
        num_sms = gpu.num_sms if cuda else 0
        mod = fuse_stacks(mod, target.kind.name, num_sms, mode=wavefront, arch=arch, tuning_log_path=tuning_log,
                          precision=precision)  # a stack as one kernel, or why not
        layers = {gv.name_hint for gv, _, _ in recurrences(mod)}
        mod = pack_int8_weights(mod, {gv.name_hint for gv, func, _ in recurrences(mod)
                                      if gv.name_hint in int8 and _holds_int8(func)})
        if cuda:
            # the tensor cores' GEMM where it pays, else FMA
            mod = tile_projections(mod, num_sms, precision, gpu.max_shared_bytes, wgmma_arch(named_arch(target)))
            early = early_launch_safe(mod, layers) if supports_early_launch(arch) else set()
            for gv, func, spec in list(recurrences(mod)):
                if gv.name_hint in early and _may_launch_early(func, spec):
                    mod[gv] = func.with_attr(*EARLY_LAUNCH)
                elif cooperative and _needs_cooperative_launch(func, spec):
                    mod[gv] = func.with_attr(*COOPERATIVE_LAUNCH)
        dtypes = _retyped_outputs(mod, {gv.name_hint for gv, _, _ in recurrences(mod)})
        return _conform_call_sites(mod, slots, dtypes, words) if slots or dtypes or words else mod

    return _pass


def check_position(mod: tvm.IRModule, layers: set) -> None:
    """Refuse a module whose recurrences are no longer called through `call_tir`: TVM's dataflow
    lowering (CallTIRRewrite, in the default build after legalization and fusion) has turned the
    call sites into explicit allocations and calls, which the pass cannot re-type."""
    called = {call.args[0].name_hint for _, call in call_tir_sites(mod, layers)}
    referenced = {gv.name_hint for func in mod.functions.values() if isinstance(func, relax.Function)
                  for gv in relax.analysis.all_global_vars(func)}
    lost = sorted((layers & referenced) - called)
    if lost:
        raise PersistRNNError(
            f"PersistentRNN: the recurrence kernels {lost} are not called through relax.call_tir here, so the pass "
            "stands after TVM's dataflow lowering (CallTIRRewrite). Put PersistentRNN before the build pipeline: "
            "anywhere before CallTIRRewrite (before or after LegalizeOps, FuseOps/FuseTIR, dlight, the 'zero' "
            "pipeline), or build with tvm.compile(mod, target, relax_pipeline=persist_rnn.pipeline(target))")
