"""Asynchronous copies from global into shared memory (cp.async, sm_80 on): 16 bytes at a time
without registers, in groups a thread commits and later waits for. The projection GEMMs stage
their k-tiles so, and a step that computes its own input projections its next x
(persistent/step_inputs.py)."""
from __future__ import annotations

from tvm.script import tirx as T

CP_ASYNC = r"""
__device__ __forceinline__ void prnn_cp_async16(void* dst, const void* src, int bytes) {
  // 16 bytes global -> shared through L2 only (.cg), no registers; the bytes past `bytes` are zeros
  unsigned int to = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(to), "l"(src), "r"(bytes) : "memory");
}
"""
CP_COMMIT = r"""
__device__ __forceinline__ void prnn_cp_commit() {
  // the copies this thread issued since the last commit form one group
  asm volatile("cp.async.commit_group;" ::: "memory");
}
"""
CP_WAIT = r"""
__device__ __forceinline__ void prnn_cp_wait_%d() {
  // until at most %d of this thread's groups are still in flight
  asm volatile("cp.async.wait_group %d;" ::: "memory");
}
"""


def commit_copies():
    """Close this thread's group of async copies."""
    return T.cuda.func_call("prnn_cp_commit", source_code=CP_COMMIT)


def wait_copies(pending: int):
    """Wait until at most `pending` of this thread's groups of async copies are in flight."""
    return T.cuda.func_call(f"prnn_cp_wait_{pending}", source_code=CP_WAIT % (pending, pending, pending))
