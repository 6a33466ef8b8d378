"""The layer wavefront (issue 21): a stack of recurrent layers in one persistent kernel. Read
`kernel.py` first.

    plan.py       which stacks it runs; the cluster, warps and rows a layer gets (StackConfig)
    layout.py     who owns which rows, columns and (batch row, unit) pairs; what goes to which peer
    stamped.py    how h travels between layers: each value beside its step's stamp, in L2
    steps.py      what a thread does in a step: inputs, [h below ; h] into shared memory, the update
    dots.py       the dot products (input part, then recurrent) and their sums over the warp
    lanes.py      lane updates: a warp's sums transposed by shuffles, each lane updating its pair
    kernel.py     the CUDA kernel, top to bottom
    emulated.py   its CPU twin, for tests without a GPU
    signature.py  each layer's own operands and results in one PrimFunc
"""
from .emulated import emulated_stack_kernel
from .kernel import stack_kernel
from .plan import StackConfig, UnsupportedStack, plan_stack, stack_problems
from .signature import STACK_KERNEL_ATTR

__all__ = ["STACK_KERNEL_ATTR", "StackConfig", "UnsupportedStack", "emulated_stack_kernel",
           "plan_stack", "stack_kernel", "stack_problems"]
