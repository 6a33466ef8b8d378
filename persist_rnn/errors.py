"""The one exception users see for bad models and bad inputs."""
from __future__ import annotations

import tvm_ffi


@tvm_ffi.register_error
class PersistRNNError(ValueError):
    """A model, attribute or input persist_rnn cannot accept; the message says which and why.
    Registered with TVM's FFI so that raised inside a pass it reaches the caller as itself."""


def node_error(node: str, op: str, what: str, problem: str, expected: str) -> PersistRNNError:
    """An error that names the node, the attribute or input at fault, and what is supported."""
    return PersistRNNError(f"node {node!r} ({op}): {what}: {problem}; expected {expected}")


def last_line(err: Exception) -> str:
    """The line of a TVM error that says what failed (its message ends there; the rest is context)."""
    lines = str(err).strip().splitlines()
    return lines[-1] if lines else type(err).__name__
