"""Calls on different CUDA streams run one after another on the GPU.

TVM's VM gives a call's temporaries (the projection's output, the barrier workspace) back to one
memory pool per device when the call returns on the host, while its kernels may still be queued
on the call's stream. On one stream that is safe: the next call's kernels queue behind them. A
call on another stream (a second thread with its own torch stream) can be handed the same memory
at once: on the H100 two threads with their own streams got each other's barrier counters
reset, and the grid barrier trapped (benchmarks/contention.py). So each call on a torch stream
first makes its stream wait for the last call made on any other stream (an event, on the GPU:
the host does not block). By induction every call is ordered after every earlier one. Calls on
one stream pay one event record, made right after the call on its own stream: recorded later,
when the other stream's call comes, it could land in a CUDA graph that another thread is
capturing on that stream by then. Not while a CUDA graph is being captured: there the graph's
own order holds, and an event from outside the capture may not be waited on.
"""
from __future__ import annotations

import contextlib
import threading

_LOCK = threading.Lock()
_LAST = {}  # device index -> (stream handle, torch event recorded after that call)


@contextlib.contextmanager
def ordered_after_other_streams(torch, stream):
    """Run the body (one VM call) on `stream`, torch's current stream, after the last call on another stream."""
    if torch.cuda.is_current_stream_capturing():
        yield
        return
    with _LOCK:  # the VM call and the bookkeeping happen as one, so `_LAST` is the true last call
        last = _LAST.get(stream.device.index)
        if last is not None and last[0] != stream.cuda_stream:
            stream.wait_event(last[1])
        yield
        done = torch.cuda.Event()
        done.record(stream)
        _LAST[stream.device.index] = (stream.cuda_stream, done)
