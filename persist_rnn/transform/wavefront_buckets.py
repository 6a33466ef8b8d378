"""The layer wavefront for a stack whose batch is known only at run time (the exporters' default).

Each batch bucket of the layers' own kernels (`schedule/planner.BATCH_BUCKETS`) is judged as a
static stack of its bound would be (`schedule/stack_choice.py`): fused where the wavefront can run
it and the tuning log or the cost model finds it faster. The fused buckets are the smallest
batches up to the first bucket kept apart (the wavefront wins at small batches, where a step is
its latency); they share one wavefront kernel with a config each
(`tir_templates/wavefront/buckets.py`), and the model's function branches on the runtime batch:

    if B <= the last fused bound:  the wavefront kernel                     (every layer's results)
    else:                          the layers' own kernels and projections  (the same results)

The branch is a Relax `If` on the batch, so the function leaves dataflow form around it
(`fuse_stacks` converts it and back); the VM decides it on the host before any kernel runs, so a
CUDA graph captured at one batch replays one side.
"""
from __future__ import annotations

import dataclasses

from tvm import relax

from tir_templates.wavefront import UnsupportedStack
from tir_templates.wavefront.plan import StackConfig, stack_configs

from ..report import kernel_config_at
from ..schedule.planner import BATCH_BUCKETS
from ..schedule.stack_choice import StackChoice, choose_stack
from .call_sites import call_args


@dataclasses.dataclass
class StackBucket:
    """One batch bucket of a runtime-batch stack: batches up to `max_batch` (None: every larger
    one), fused or each layer its own kernel, and why."""
    max_batch: int | None
    fuse: bool
    why: str
    config: StackConfig | None = None

    def as_dict(self) -> dict:
        return {"max_batch": self.max_batch, "fused": self.fuse, "why": self.why,
                "config": self.config.as_dict() if self.config is not None else None}


def _bucket(specs, calls, mod, bound: int, num_sms: int, arch: str, steps, asked: bool, tuning_log_path,
            precision: str) -> StackBucket:
    """Whether batches up to `bound` run fused, as a static stack of batch `bound` would be chosen."""
    try:
        configs = stack_configs(specs, bound, num_sms)
    except UnsupportedStack as err:
        return StackBucket(bound, False, str(err))
    layer_configs = [kernel_config_at(mod[c.args[0]], bound) for c in calls]
    choice: StackChoice = choose_stack(specs, configs, layer_configs, arch, bound, steps,
                                       tuning_log_path=tuning_log_path, precision=precision, asked=asked)
    return StackBucket(bound, choice.fuse, choice.report_why(), choice.config)


def plan_stack_buckets(specs, calls, mod, num_sms: int, arch: str, steps, *, asked: bool, tuning_log_path=None,
                       precision: str = "fp32", bounds=BATCH_BUCKETS) -> list[StackBucket]:
    """Every bucket of `bounds` and the open one past them, fused or not and why: the fused ones
    are the smallest up to the first kept apart (UnsupportedStack, the first bucket's reason,
    when none is fused)."""
    out, apart = [], None
    for bound in bounds:
        bucket = (StackBucket(bound, False, f"as from the bucket of B <= {apart} on: the wavefront's buckets are "
                                            "the smallest batches")
                  if apart is not None else
                  _bucket(specs, calls, mod, bound, num_sms, arch, steps, asked, tuning_log_path, precision))
        if not bucket.fuse and apart is None:
            apart = bound
        out.append(bucket)
    out.append(StackBucket(None, False, f"the wavefront's buckets end at B={bounds[-1]}"))
    if not out[0].fuse:
        raise UnsupportedStack(f"at B={bounds[0]}, the smallest batch bucket: {out[0].why}")
    return out


def fused_bound(buckets: list[StackBucket]) -> int:
    """The largest batch the wavefront kernel takes."""
    return max(b.max_batch for b in buckets if b.fuse)


def bucket_sides(fused_call, top_binding, held: list, calls, old_vars, bound: int):
    """(the branch's condition, B <= bound; the wavefront side; the layers' own side), each side a
    SeqExpr, un-normalized (the caller's mutator visits it), giving every layer's Y, Y_h and Y_c in
    order. The own side is `top_binding` (the top layer's call) after those of `held` it reads,
    transitively."""
    n_layers = len(calls)
    batch = call_args(calls[0])[0].ty.shape[1]
    fused = relax.Var("wavefront", relax.TupleType(list(fused_call.ty_args[0].fields)))
    wavefront = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(fused, fused_call)])],
                              relax.Tuple([relax.TupleGetItem(fused, 4 * l + k) for l in range(n_layers) for k in range(3)]))
    needed, chosen = set(relax.analysis.free_vars(top_binding.value)), []
    for binding in reversed(held):
        if binding.var in needed:
            chosen.append(binding)
            needed |= set(relax.analysis.free_vars(binding.value))
    own = relax.SeqExpr([relax.BindingBlock(chosen[::-1] + [top_binding])],
                        relax.Tuple([relax.TupleGetItem(old, k) for old in old_vars for k in range(3)]))
    return relax.prim_value(batch <= bound), wavefront, own


#: the Relax function attribute that marks a side of a runtime-batch stack's branch ("wavefront" or
#: "own_kernels"): its layers are a stack already handled, never fused again
SIDE_ATTR = "persist_rnn.stack_side"


def side_function(body: relax.SeqExpr, side: str) -> tuple[relax.Function, list]:
    """A side of the branch as a function of its own (its free variables its parameters, every
    variable fresh), and those variables to call it with. Each side's tensors are then planned in
    a function of their own: TVM's static memory planner lets one side of an If reuse a storage
    that the other side allocated (it segfaulted on llvm)."""
    free = list(relax.analysis.free_vars(body))
    func = relax.utils.copy_with_new_vars(relax.Function(free, body, body.ty))
    return func.with_attr(SIDE_ATTR, side), free


def is_side(func) -> bool:
    """Whether `func` is a side of a runtime-batch stack's branch (`side_function`)."""
    return isinstance(func, relax.Function) and func.attrs is not None and SIDE_ATTR in func.attrs
