"""Programmatic dependent launch: a recurrence kernel starts while the projection GEMM still runs.

TVM's CUDA runtime launches a kernel whose `tirx.kernel_launch_params` list the PDL tag with
cudaLaunchAttributeProgrammaticStreamSerialization: its CTAs may start as soon as every CTA of
the kernel before it has called `griddepcontrol.launch_dependents` (the GEMM does so first
thing), and `griddepcontrol.wait` then blocks until that kernel has finished and its writes are
visible. The recurrence loads its weights and biases before the wait, so the GEMM hides the
launch and the weights' trip from memory. The GEMM scan's kernels (gemm_scan.py) touch nothing
before the wait (`after_previous_kernel`): launched early, each step's GEMM and update hide only
their launches. Both instructions exist from sm_90 on; compiled for an older GPU they are empty
(and the pass does not ask for the early launch there).
"""
from __future__ import annotations

from tvm.script import tirx as T

#: the attribute (key, value) that asks TVM's runtime for the early launch ("programtic" sic)
EARLY_LAUNCH = ("tirx.kernel_launch_params", ["tirx.use_programtic_dependent_launch"])
#: the attribute that asks for a cooperative launch (all CTAs resident at once, or a launch error);
#: TVM's runtime takes one of the two flags, the early launch first, so a kernel gets one or the other
COOPERATIVE_LAUNCH = ("tirx.kernel_launch_params", ["tirx.use_cooperative_launch"])
#: the first architecture with griddepcontrol
MIN_SM = 90

_SOURCE = r"""
__device__ __forceinline__ void prnn_%s() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.%s;" ::: "memory");
#endif
}
"""


def wait_for_previous_kernel():
    """Block until the kernel before this one has finished and its writes are visible (a no-op
    unless this kernel was launched early)."""
    return T.cuda.func_call("prnn_griddep_wait", source_code=_SOURCE % ("griddep_wait", "wait"))


def allow_next_kernel():
    """Let the next kernel, if it was launched early, start its CTAs now."""
    return T.cuda.func_call("prnn_griddep_launch",
                            source_code=_SOURCE % ("griddep_launch", "launch_dependents"))


def sm_number(arch: str | None) -> int:
    """The number of a CUDA arch string ("sm_90a" -> 90; 0 for none)."""
    digits = "".join(ch for ch in (arch or "").removeprefix("sm_") if ch.isdigit())
    return int(digits) if digits else 0


def supports_early_launch(arch: str) -> bool:
    """Whether a CUDA arch string ("sm_90", "sm_90a", ...) has programmatic dependent launch."""
    return sm_number(arch) >= MIN_SM


@T.macro
def after_previous_kernel():
    """What a kernel that may be launched early does first where it must touch nothing before the
    kernel ahead has finished (the GEMM scan's: each writes memory the one before may still
    read): let the next kernel place its CTAs, then wait for the one before."""
    T.evaluate(allow_next_kernel())
    T.evaluate(wait_for_previous_kernel())
