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
kernels, keeps those, and the report says why.
"""
from __future__ import annotations

import json
import re

import tvm
from tvm import relax

from tir_templates.config import Config
from tir_templates.early_launch import EARLY_LAUNCH, sm_number, supports_early_launch
from tir_templates.wavefront import STACK_KERNEL_ATTR, UnsupportedStack, emulated_stack_kernel, stack_kernel
from tir_templates.wavefront.plan import stack_configs

from ..errors import PersistRNNError
from ..report import CONFIG_ATTR, LOWERING_ATTR, STACK_REASON_ATTR
from ..schedule.stack_choice import StackChoice, choose_stack
from .call_sites import call_args, drop_uncalled, static_dim
from .layer_stacks import call_chains, layer_spec, projection_of

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
        self.fused = fused  # top call's var -> (stack kernel, its name, calls, vars, projections)
        self.lower = {v for entry in fused.values() for v in entry[3][:-1]}
        self.held = []  # bindings that read a lower layer, in order
        self.held_vars = set()

    def _holds(self, binding) -> bool:
        if binding.var in self.lower or any(v in self.held_vars for v in relax.analysis.free_vars(binding.value)):
            self.held.append(binding)
            self.held_vars.add(binding.var)
            return True
        return False

    def visit_match_cast_(self, binding):
        if not self._holds(binding):
            super().visit_match_cast_(binding)

    def visit_var_binding_(self, binding):
        if binding.var in self.fused:
            self._fuse(*self.fused[binding.var])
        elif not self._holds(binding):
            super().visit_var_binding_(binding)

    def _fuse(self, kernel, name, calls, old_vars, projections):
        gv = self.builder_.add_func(kernel, name)
        args = [[self.visit_expr(a) for a in call_args(c)] for c in calls]
        proj = [None] + [[self.visit_expr(a) for a in call_args(p)] for p in projections]
        operands = [args[0][0], args[0][3]]  # layer 0's input projection; the lengths (every layer's)
        for layer, a in enumerate(args):
            operands += a[1:3] + a[4:7] + (proj[layer][1:3] if layer else [])  # r, rb, h0, c0, p; w, wb
        outs = []
        for call in calls:  # each layer's results as its own kernel's; its h step by step, stamped
            y, yh, yc, _, ws = (call.ty_args[0] if call.ty_args else call.ty).fields
            n_t, _, n_b, hidden = list(y.shape)
            outs += [y, yh, yc, relax.TensorType([n_t, 1, n_b, hidden * 2], "float32")]
        fused = self.builder_.emit(relax.call_tir(gv, operands, outs + [ws]))
        n_l = len(calls)
        for layer, old in enumerate(old_vars):
            results = relax.Tuple([relax.TupleGetItem(fused, 4 * layer + k) for k in range(4)]
                                  + [relax.TupleGetItem(fused, 4 * n_l)])
            if layer == n_l - 1 and not isinstance(old, relax.DataflowVar) and self.builder_.current_block_is_dataflow():
                new = self.builder_.emit_output(results)
            else:
                new = self.builder_.emit(results)
            self.set_var_remap(old, new)
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
                emulate: bool = False, arch: str | None = None, tuning_log_path=None, precision: str = "fp32") -> tvm.IRModule:
    """`mod` with the stacks the wavefront can run as one kernel fused: each of them (`mode`
    True), none (False), or those that a measured record of the tuning log or else the cost model
    finds faster fused ("auto", `schedule/stack_choice.py`). The layers of the others carry
    STACK_REASON_ATTR. `arch`: the CUDA target's ("sm_90"); `emulate`: the kernel's CPU twin
    (tests on llvm)."""
    replaced = set()
    for gv_func, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
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
                batch = static_dim(call_args(calls[0])[0], 1)
                configs = stack_configs(specs, batch, num_sms)
                problem = fusion_problem(func, old_vars, calls, projections, where)
                span = (where[old_vars[0]], where[old_vars[-1]])
                if any(lo <= span[1] and span[0] <= hi for lo, hi in spans):
                    problem = "its layers interleave with another stack's, which the wavefront fuses"
                if problem:
                    raise UnsupportedStack(problem)
                choice = _choice(mod, calls, specs, configs, mode, arch, tuning_log_path, precision)
                if not choice.fuse:
                    raise UnsupportedStack(choice.why())
            except UnsupportedStack as err:
                for c in calls:
                    mod[c.args[0]] = mod[c.args[0]].with_attr(STACK_REASON_ATTR, str(err))
                continue
            kernel = (emulated_stack_kernel if emulate else stack_kernel)(specs, choice.config)
            why = "; ".join(w for w in (choice.why(), choice.config_why()) if w)
            kernel = kernel.with_attr(STACK_KERNEL_ATTR, json.dumps(
                {"layers": [s.to_json() for s in specs], "batch": batch, "config": choice.config.as_dict(),
                 "choice": {"fuse": choice.fuse, "source": choice.source, "why": why}}))
            if not emulate and supports_early_launch(arch):  # starts while layer 0's GEMM runs (kernel.cuda_stack)
                kernel = kernel.with_attr(*EARLY_LAUNCH)
            name = _kernel_name(specs)
            fused[old_vars[-1]] = (kernel, name, calls, old_vars, projections)
            spans.append(span)
            replaced |= {c.args[0] for c in calls} | {p.args[0] for p in projections}
        if not fused:
            continue
        mutator = _FuseStacks(mod, fused)
        new_func = mutator.visit_expr(func)
        mod = mutator.builder_.get()
        mod[gv_func] = relax.analysis.remove_all_unused(new_func)
    return drop_uncalled(mod, replaced)


def _choice(mod, calls, specs, configs, mode, arch, tuning_log_path, precision) -> StackChoice:
    """Whether the stack is fused (`mode` True: asked), with which of `configs`, by whose choice."""
    layer_configs = []
    for call in calls:
        func = mod[call.args[0]]
        persistent = func.attrs is not None and str(func.attrs.get(LOWERING_ATTR, "")) == "persistent"
        layer_configs.append(Config.from_dict(json.loads(str(func.attrs[CONFIG_ATTR]))) if persistent else None)
    xw = call_args(calls[0])[0]
    return choose_stack(specs, configs, layer_configs, arch or "sm_90", static_dim(xw, 1), static_dim(xw, 0),
                        tuning_log_path=tuning_log_path, precision=precision, asked=mode != "auto")


def _kernel_name(specs) -> str:
    """A C identifier for the stack's kernel: ONNX node names ("/lstm/LSTM_1") are not."""
    return re.sub(r"\W", "_", f"wavefront_{len(specs)}_{specs[0].node or 'layers'}")
