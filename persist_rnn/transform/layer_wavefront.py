"""LayerWavefront: each stack of recurrent layers (layer_stacks.py) becomes one wavefront kernel
(tir_templates.wavefront), where the wavefront can run it.

At the call of the stack's top layer it emits one call_tir of the stack kernel, which takes
layer 0's input projection and every layer's own operands (the upper layers' projection weights
among them) and returns every layer's own results (one tensor each: a view at an offset would
break TVM's kernels, which take tensors at offset 0). Each layer's result becomes the tuple of its
results, so every use reads the fused kernel: whatever read a lower layer before the top layer's
call (the importer takes each layer's Y_h right after it) is held back and emitted after the fused
call. The per-layer kernels and the upper layers' projections are then unused and dropped.
A stack the wavefront cannot run, or (under `wavefront="auto"`) runs slower than its per-layer
kernels, keeps those, and the report says why. A stack whose batch is known only at run time is
fused for the batch buckets where it pays and branches to its layers' own kernels above them
(`wavefront_buckets.py`).
"""
from __future__ import annotations

import json
import re

import tvm
from tvm import relax

from tir_templates.early_launch import EARLY_LAUNCH, sm_number, supports_early_launch
from tir_templates.wavefront import STACK_KERNEL_ATTR, UnsupportedStack, emulated_stack_kernel, stack_kernel
from tir_templates.wavefront.buckets import bucketed_stack_kernel, emulated_bucketed_stack_kernel
from tir_templates.wavefront.plan import stack_configs

from ..errors import PersistRNNError
from ..report import STACK_REASON_ATTR, kernel_config_at
from ..schedule.planner import BATCH_BUCKETS
from ..schedule.stack_choice import StackChoice, choose_stack
from .call_sites import call_args, drop_uncalled, static_dim
from .layer_stacks import call_chains, layer_spec, projection_of
from .wavefront_buckets import bucket_sides, fused_bound, is_side, plan_stack_buckets, side_function

#: the first architecture with thread-block clusters (the wavefront gives each layer one)
MIN_CLUSTER_SM = 90


#: `wavefront=` values: fuse every stack the wavefront takes, none, or those it runs faster
WAVEFRONT_MODES = {True: True, "on": True, False: False, "off": False, "auto": "auto"}


def wavefront_mode(value) -> bool | str:
    """True, False or "auto" for a `wavefront=` value (True/"on", False/"off", "auto")."""
    if isinstance(value, (bool, str)) and value in WAVEFRONT_MODES:
        return WAVEFRONT_MODES[value]
    raise PersistRNNError(f"wavefront={value!r}: expected True or 'on', False or 'off', or 'auto'")


def has_clusters(arch: str | None) -> bool:
    """Whether CUDA architecture `arch` ("sm_90a", ...) has thread-block clusters."""
    return sm_number(arch) >= MIN_CLUSTER_SM


def _chains(func: relax.Function, mod: tvm.IRModule):
    """Each stack in `func` as (calls lowest first, binding vars of those calls, projections of
    the upper layers)."""
    chains, bound = call_chains(func, mod)
    var_of = {value: var for var, value in bound.items()}
    for chain in chains:
        yield chain, [var_of[c] for c in chain], [projection_of(c, bound) for c in chain[1:]]


def _operands(calls, projections) -> list:
    """What the fused call reads: layer 0's projection, every layer's weights, lengths, states and
    peepholes, the upper projections' weights."""
    args = [call_args(c) for c in calls]
    return [args[0][0]] + [a[k] for a in args for k in range(1, 7)] + [call_args(p)[k] for p in projections for k in (1, 2)]


def _blocks(func: relax.Function) -> list:
    body = func.body
    return list(body.blocks) if isinstance(body, relax.SeqExpr) else []


def _downstream(func: relax.Function, roots) -> set:
    """The variables bound (in binding order) to values that read any of `roots`, transitively."""
    tainted = set(roots)
    for block in _blocks(func):
        for binding in block.bindings:
            if any(v in tainted for v in relax.analysis.free_vars(binding.value)):
                tainted.add(binding.var)
    return tainted


def _positions(func: relax.Function) -> dict:
    """Each bound variable's (block, index in the block)."""
    return {b.var: (k, i) for k, block in enumerate(_blocks(func)) for i, b in enumerate(block.bindings)}


def fusion_problem(func: relax.Function, old_vars, calls, projections, where: dict) -> str:
    """Why the stack's calls cannot become one call at the top layer's place (empty if they can):
    the fused call must read nothing computed from the lower layers, and sit in their block
    (`where`: `_positions(func)`)."""
    if len({where[v][0] for v in old_vars}) != 1:
        return "the layers' calls stand in different binding blocks"
    tainted = _downstream(func, old_vars[:-1])
    if any(v in tainted for op in _operands(calls, projections) for v in relax.analysis.free_vars(op)):
        return "an upper layer's weights or initial state are computed from a lower layer's output"
    return ""


@relax.expr_functor.mutator
class _FuseStacks(relax.PyExprMutator):
    """The lower layers' calls and everything computed from them are held back; at the top layer's
    binding come the fused call, each layer's result tuple, then the held-back bindings, which now
    read those tuples (the chain of per-layer calls and projections among them is then unused)."""

    def __init__(self, mod, fused: dict):
        super().__init__(mod)
        self.fused = fused  # top call's var -> (stack kernel, its name, calls, vars, projections, bound)
        self.lower = {v for entry in fused.values() for v in entry[3][:-1]}
        self.held = []  # bindings that read a lower layer, in order
        self.held_vars = set()
        self.in_branch = False  # inside a side of a runtime-batch stack's branch: every binding as it is

    def _holds(self, binding) -> bool:
        if self.in_branch:
            return False
        if binding.var in self.lower or any(v in self.held_vars for v in relax.analysis.free_vars(binding.value)):
            self.held.append(binding)
            self.held_vars.add(binding.var)
            return True
        return False

    def visit_match_cast_(self, binding):
        if not self._holds(binding):
            super().visit_match_cast_(binding)

    def visit_var_binding_(self, binding):
        if binding.var in self.fused and not self.in_branch:
            self._fuse(binding, *self.fused[binding.var])
        elif not self._holds(binding):
            super().visit_var_binding_(binding)

    def _fused_call(self, gv, calls, projections, visit):
        """The stack kernel's call_tir on the layers' operands (each through `visit`)."""
        args = [[visit(a) for a in call_args(c)] for c in calls]
        proj = [None] + [[visit(a) for a in call_args(p)] for p in projections]
        operands = [args[0][0], args[0][3]]  # layer 0's input projection; the lengths (every layer's)
        for layer, a in enumerate(args):
            operands += a[1:3] + a[4:7] + (proj[layer][1:3] if layer else [])  # r, rb, h0, c0, p; w, wb
        outs = []
        for call in calls:  # each layer's results as its own kernel's; its h step by step, stamped
            y, yh, yc, _, ws = (call.ty_args[0] if call.ty_args else call.ty).fields
            n_t, _, n_b, hidden = list(y.shape)
            outs += [y, yh, yc, relax.TensorType([n_t, 1, n_b, hidden * 2], "float32")]
        return relax.call_tir(gv, operands, outs + [ws])

    def _fuse(self, top_binding, kernel, name, calls, old_vars, projections, bound):
        gv = self.builder_.add_func(kernel, name)
        if bound is not None:
            self._fuse_below(top_binding, gv, calls, old_vars, projections, bound)
            return
        fused = self.builder_.emit(self._fused_call(gv, calls, projections, self.visit_expr))
        n_l = len(calls)
        for layer, old in enumerate(old_vars):
            results = relax.Tuple([relax.TupleGetItem(fused, 4 * layer + k) for k in range(4)]
                                  + [relax.TupleGetItem(fused, 4 * n_l)])
            if layer == n_l - 1 and not isinstance(old, relax.DataflowVar) and self.builder_.current_block_is_dataflow():
                new = self.builder_.emit_output(results)
            else:
                new = self.builder_.emit(results)
            self.set_var_remap(old, new)
        self._release_held(old_vars)

    def _fuse_below(self, top_binding, gv, calls, old_vars, projections, bound):
        """A runtime-batch stack: the wavefront for batches up to `bound`, else the layers' own
        calls (`wavefront_buckets.bucket_sides`), each side a function of its own; each layer's
        result becomes its Y, Y_h, Y_c."""
        cond, *sides = bucket_sides(self._fused_call(gv, calls, projections, lambda a: a), top_binding, self.held,
                                    calls, old_vars, bound)
        self.in_branch = True
        branches = []
        for side, suffix in zip(sides, ("wavefront", "own_kernels")):
            func, args = side_function(self.visit_expr(side), suffix)
            branches.append(relax.Call(self.builder_.add_func(func, f"{gv.name_hint}_{suffix}"), args))
        self.in_branch = False
        for side in sides:  # a variable a side rebound stands for itself again in this function
            for binding in side.blocks[0].bindings:
                self.set_var_remap(binding.var, binding.var)
        results = self.builder_.emit(relax.If(cond, *branches), "stack")
        for layer, old in enumerate(old_vars):
            self.set_var_remap(old, self.builder_.emit(relax.Tuple([relax.TupleGetItem(results, 3 * layer + k)
                                                                   for k in range(3)])))
        self._release_held(old_vars)

    def _release_held(self, old_vars):
        held, self.held = self.held, []
        for binding in held:  # what read the lower layers, now reading their result tuples
            if binding.var in old_vars:
                continue  # a lower layer's own call: its result tuple stands in for it
            self.held_vars.discard(binding.var)
            if isinstance(binding, relax.MatchCast):
                super().visit_match_cast_(binding)
            else:
                super().visit_var_binding_(binding)


def fuse_stacks(mod: tvm.IRModule, target_kind: str, num_sms: int, mode: bool | str = True,
                emulate: bool = False, arch: str | None = None, tuning_log_path=None, precision: str = "fp32",
                bucket_bounds=BATCH_BUCKETS) -> tvm.IRModule:
    """`mod` with the stacks the wavefront can run as one kernel fused: each of them (`mode`
    True), none (False), or those that a measured record of the tuning log or else the cost model
    finds faster fused ("auto", `schedule/stack_choice.py`). The layers of the others carry
    STACK_REASON_ATTR. A stack whose batch is known only at run time is fused for the buckets of
    `bucket_bounds` where it pays (`wavefront_buckets.py`). `arch`: the CUDA target's ("sm_90");
    `emulate`: the kernel's CPU twin (tests on llvm)."""
    branching = mode and (emulate or (target_kind == "cuda" and has_clusters(arch))) and _runtime_batch_stacks(mod)
    if branching:  # the runtime-batch branch is a Relax If, which no dataflow block holds
        mod = relax.transform.ToNonDataflow()(mod)
    replaced = set()
    for gv_func, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or is_side(func):  # a side: its stack is handled
            continue
        fused, spans = {}, []
        where = _positions(func)
        for calls, old_vars, projections in _chains(func, mod):
            specs = [layer_spec(c, mod) for c in calls]
            try:
                if target_kind != "cuda" and not emulate:
                    raise UnsupportedStack("the layer wavefront is a CUDA kernel")
                if not mode:
                    raise UnsupportedStack("the layer wavefront is off (compile(..., wavefront=False), "
                                           "--wavefront off)")
                if not emulate and not has_clusters(arch):
                    raise UnsupportedStack(f"the layer wavefront needs thread-block clusters (sm_{MIN_CLUSTER_SM} or "
                                           f"later, not {arch})")
                problem = fusion_problem(func, old_vars, calls, projections, where)
                span = (where[old_vars[0]], where[old_vars[-1]])
                if any(lo <= span[1] and span[0] <= hi for lo, hi in spans):
                    problem = "its layers interleave with another stack's, which the wavefront fuses"
                if problem:
                    raise UnsupportedStack(problem)
                kernel, bound = _stack_kernel(mod, calls, specs, num_sms, mode, emulate, arch, tuning_log_path,
                                              precision, bucket_bounds)
            except UnsupportedStack as err:
                for c in calls:
                    mod[c.args[0]] = mod[c.args[0]].with_attr(STACK_REASON_ATTR, str(err))
                continue
            fused[old_vars[-1]] = (kernel, _kernel_name(specs), calls, old_vars, projections, bound)
            spans.append(span)
            if bound is None:  # a static stack's layers run in the wavefront only (a runtime-batch
                # stack's run their own kernels past its buckets)
                replaced |= {c.args[0] for c in calls} | {p.args[0] for p in projections}
        if not fused:
            continue
        mutator = _FuseStacks(mod, fused)
        new_func = mutator.visit_expr(func)
        mod = mutator.builder_.get()
        mod[gv_func] = relax.analysis.remove_all_unused(new_func)
    if branching:  # dataflow blocks again, and what the branch left unread (unused outside them) gone
        mod = relax.transform.ConvertToDataflow()(mod)
        for gv_func, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gv_func] = relax.analysis.remove_all_unused(func)
    return drop_uncalled(mod, replaced)


def _runtime_batch_stacks(mod: tvm.IRModule) -> bool:
    """Whether some stack of `mod` has a batch known only at run time."""
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not is_side(func):
            chains, _ = call_chains(func, mod)
            if any(static_dim(call_args(chain[0])[0], 1) is None for chain in chains):
                return True
    return False


def _stack_kernel(mod, calls, specs, num_sms, mode, emulate, arch, tuning_log_path, precision, bucket_bounds):
    """(the stack's wavefront kernel, carrying STACK_KERNEL_ATTR; the largest batch it takes, or
    None for a static batch, which it takes whole), or UnsupportedStack with the reason."""
    xw = call_args(calls[0])[0]
    batch = static_dim(xw, 1)
    if batch is None:
        buckets = plan_stack_buckets(specs, calls, mod, num_sms, arch or "sm_90", static_dim(xw, 0),
                                     asked=mode != "auto", tuning_log_path=tuning_log_path, precision=precision,
                                     bounds=bucket_bounds)
        fused = [(b.max_batch, b.config) for b in buckets if b.fuse]
        kernel = (emulated_bucketed_stack_kernel if emulate else bucketed_stack_kernel)(specs, fused)
        info = {"batch": None, "config": fused[0][1].as_dict(), "buckets": [b.as_dict() for b in buckets],
                "choice": {"fuse": True, "source": "buckets", "why": buckets[0].why}}
        bound = fused_bound(buckets)
    else:
        choice = _choice(mod, calls, specs, stack_configs(specs, batch, num_sms), mode, arch, tuning_log_path,
                         precision)
        if not choice.fuse:
            raise UnsupportedStack(choice.why())
        kernel = (emulated_stack_kernel if emulate else stack_kernel)(specs, choice.config)
        info = {"batch": batch, "config": choice.config.as_dict(),
                "choice": {"fuse": choice.fuse, "source": choice.source, "why": choice.report_why()}}
        bound = None
    kernel = kernel.with_attr(STACK_KERNEL_ATTR, json.dumps({"layers": [s.to_json() for s in specs], **info}))
    if not emulate and supports_early_launch(arch):  # starts while layer 0's GEMM runs (kernel.cuda_stack)
        kernel = kernel.with_attr(*EARLY_LAUNCH)
    return kernel, bound


def _choice(mod, calls, specs, configs, mode, arch, tuning_log_path, precision) -> StackChoice:
    """Whether the stack is fused (`mode` True: asked), with which of `configs`, by whose choice."""
    xw = call_args(calls[0])[0]
    batch = static_dim(xw, 1)
    layer_configs = [kernel_config_at(mod[c.args[0]], batch) for c in calls]
    return choose_stack(specs, configs, layer_configs, arch or "sm_90", batch, static_dim(xw, 0),
                        tuning_log_path=tuning_log_path, precision=precision, asked=mode != "auto")


def _kernel_name(specs) -> str:
    """A C identifier for the stack's kernel: ONNX node names ("/lstm/LSTM_1") are not."""
    return re.sub(r"\W", "_", f"wavefront_{len(specs)}_{specs[0].node or 'layers'}")
