"""The loop the rewriting passes share: each Relax function of a module visited by a fresh
PyExprMutator (made from the module and the function's bindings), its unused bindings dropped,
and the module taken back from the mutator's builder, which holds the PrimFuncs it added."""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax


def rewrite_functions(mod: tvm.IRModule, mutator_for: Callable, visited: Callable | None = None) -> tvm.IRModule:
    """`mod` with each Relax function rewritten by `mutator_for(mod, var2val)`; `visited(mod,
    new_func, mutator)` is called after each, for what a pass gathers along the way."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mutator = mutator_for(mod, relax.analysis.get_var2val(func))
            new_func = relax.analysis.remove_all_unused(mutator.visit_expr(func))
            mod = mutator.builder_.get()
            mod[gv] = new_func
            if visited is not None:
                visited(mod, new_func, mutator)
    return mod
