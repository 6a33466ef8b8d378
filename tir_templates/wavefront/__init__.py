"""The layer wavefront (issue 21): a stack of recurrent layers in one persistent kernel. Read
`kernel.py` first.

    plan.py     which stacks it runs; how a launch's CTAs go to the layers (StackConfig)
    layout.py   who owns which rows, columns and (batch row, unit) pairs
    kernel.py   the CUDA kernel, top to bottom, and its CPU twin
"""
from .kernel import STACK_KERNEL_ATTR, STACK_SLOTS, emulated_stack_kernel, stack_kernel
from .plan import StackConfig, UnsupportedStack, plan_stack, stack_problems

__all__ = ["STACK_KERNEL_ATTR", "STACK_SLOTS", "StackConfig", "UnsupportedStack", "emulated_stack_kernel",
           "plan_stack", "stack_kernel", "stack_problems"]
