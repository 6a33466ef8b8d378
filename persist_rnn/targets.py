"""Targets as users write them: a name, a JSON dict or string, or a tvm.target.Target."""
from __future__ import annotations

import json

import tvm

from .errors import PersistRNNError

#: the static shared memory a CUDA block may use without opting in. TVM's GPU schedules (dlight)
#: read it from the target and, where a target lacks it, warn once per kernel and take this same
#: value; a CUDA target gets it up front, so the build is the same and quiet.
CUDA_SHARED_BYTES_PER_BLOCK = 49152


def as_target(target) -> tvm.target.Target:
    """A Target from a name ("llvm", "cuda" = the present GPU's architecture, else sm_90), a JSON
    dict or string, or a Target; a CUDA target without `max_shared_memory_per_block` gets
    `CUDA_SHARED_BYTES_PER_BLOCK`."""
    target = _parsed(target)
    if target.kind.name == "cuda" and "max_shared_memory_per_block" not in target.attrs:
        target = tvm.target.Target({**json.loads(str(target)), "max_shared_memory_per_block": CUDA_SHARED_BYTES_PER_BLOCK})
    return target


def _present_arch() -> str:
    """"cuda"'s architecture: the GPU present's, else the H100's (sm_90); a Hopper GPU's in its
    arch-specific form (sm_90a), whose code runs only there and may use its wgmma
    (tir_templates/projection_wgmma.py)."""
    from .schedule.gpu import compute_capability, present_gpu

    present = present_gpu()
    if present is None:
        return "sm_90"
    hopper = compute_capability(present.arch) == 90 and not present.arch.endswith("a")
    return present.arch + "a" if hopper else present.arch


def _parsed(target) -> tvm.target.Target:
    if isinstance(target, tvm.target.Target):
        return target
    try:
        if isinstance(target, dict):
            return tvm.target.Target(target)
        if isinstance(target, str):
            if target.strip().startswith("{"):
                return tvm.target.Target(json.loads(target))
            if target == "cuda":
                return tvm.target.Target({"kind": "cuda", "arch": _present_arch()})
            return tvm.target.Target({"kind": target})
    except (ValueError, json.JSONDecodeError) as err:
        raise PersistRNNError(f"target {target!r}: {str(err).splitlines()[0]}; expected \"llvm\", \"cuda\" or a "
                              'JSON target such as {"kind": "cuda", "arch": "sm_80"}') from None
    raise PersistRNNError(f"target must be a name, a JSON dict or a tvm.target.Target, not {type(target).__name__}")
