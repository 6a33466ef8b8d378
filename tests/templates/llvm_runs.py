"""Running a recurrence kernel (the signature of tir_templates/signature.py) on the CPU, for the
templates' numerical tests."""
from __future__ import annotations

import tvm

from persist_rnn.schedule.measure import as_params


def run_on_llvm(func, arrays) -> list:
    """`func` built for llvm and called on copies of `arrays` (kernel_arrays' order); every
    parameter's contents after the call, outputs included."""
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in as_params(func, arrays)]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]
