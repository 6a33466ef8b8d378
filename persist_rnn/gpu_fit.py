"""Which GPU a compiled model runs on: one of at least its architecture, and, where its recurrent
layers are persistent kernels, of at least the SMs it was planned for.

A persistent kernel launches up to one CTA an SM and needs them all resident at once (they meet at
a grid barrier each step): planned for the H100 SXM's 132 SMs, it cannot launch on an H100 PCIe's
114. CUDA would say so only as a launch error from deep in TVM's runtime (or, for code of a newer
architecture, "no kernel image"); `gpu_problem` says it first, naming both GPUs.
"""
from __future__ import annotations

from .schedule.gpu import PresentGPU, compute_capability, gpu_model

#: the lowerings whose kernels hold one CTA an SM, all resident at once
GRID_WIDE_LOWERINGS = ("persistent", "wavefront")


def compiled_for(target) -> dict:
    """{"arch", "num_sms"} a CUDA build for `target` is planned for, here and now (the SMs of the
    GPU present where it is of that architecture: `gpu.on_present_gpu`); "arch" as the target names
    it, so that code for an arch-specific form (sm_90a) is known to run on that architecture only."""
    from .schedule.planner import named_arch, target_arch

    arch = target_arch(target)
    return {"arch": named_arch(target) or arch, "num_sms": gpu_model(arch).num_sms}


def gpu_problem(planned: dict, present: PresentGPU | None, grid_wide: bool) -> str:
    """Why a build planned for `planned` ({"arch", "num_sms"}) cannot run on the `present` GPU
    ("" if it can); `grid_wide`: it has kernels of GRID_WIDE_LOWERINGS."""
    if present is None or not planned:
        return ""
    here = f"the GPU here, {present.name}, is {present.arch} with {present.num_sms} SMs"
    fix = 'compile it on this GPU (target "cuda" takes the architecture and SMs of the GPU present)'
    if compute_capability(present.arch) < compute_capability(planned["arch"]):
        return f"this model was compiled for {planned['arch']}; {here}: {fix}"
    if planned["arch"].endswith("a") and compute_capability(present.arch) != compute_capability(planned["arch"]):
        return f"this model was compiled for {planned['arch']}, whose code runs on that architecture only; {here}: {fix}"
    if grid_wide and present.num_sms < planned["num_sms"]:
        return (f"this model's persistent kernels were planned for {planned['num_sms']} SMs (up to one CTA an SM, all "
                f"resident at once); {here}: {fix}")
    return ""
