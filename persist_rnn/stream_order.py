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

import threading

_LOCK = threading.Lock()
_LAST = {}  # device index -> (stream handle, event recorded after the last call, on that stream)
_STREAMS = {}  # (device index, stream handle) -> (torch stream, the event its calls record)
_MAX_STREAMS = 256  # past this many streams seen, the cache starts again (external streams come and go)
_CAPTURED = set()  # device indices on which a call was captured into a CUDA graph


def current_stream_handle(torch, device_index: int) -> int:
    """torch's current CUDA stream on the device, as a raw handle: the call torch's compiled code
    and tvm_ffi use (`torch.cuda.current_stream()` cost ~5 us of host time a call on the H100 box)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device_index) if raw is not None else torch.cuda.current_stream(device_index).cuda_stream


def _stream_and_event(torch, device_index: int, handle: int):
    """The torch stream object for `handle` and the one event its calls record, made once: a
    stream waits only for the last record made before its wait was issued, so one event per
    stream, recorded again each call, orders exactly as a fresh one would."""
    known = _STREAMS.get((device_index, handle))
    if known is None:
        if len(_STREAMS) >= _MAX_STREAMS:
            _STREAMS.clear()
        known = _STREAMS[(device_index, handle)] = (torch.cuda.current_stream(device_index), torch.cuda.Event())
    return known


def pool_shared_with_graph(device_index: int) -> bool:
    """Whether a call was captured into a CUDA graph on the device. The graph keeps the addresses
    of that call's temporaries, which the VM's pool hands out again after the capture, so every
    replay writes into memory that later calls' outputs may occupy: those outputs must be copied
    out of the pool (the VM allocates from one pool per device, with no graph-private pool)."""
    return device_index in _CAPTURED


class ordered_after_other_streams:  # noqa: N801 (used as a function: `with ordered_after_other_streams(...)`)
    """Run the body (one VM call) on torch's current stream `handle`, after the last call on another
    stream. `with` gives whether the call is being captured into a CUDA graph (the device is then
    noted for `pool_shared_with_graph`). A class, not a generator: run() pays it on every call."""

    __slots__ = ("torch", "device_index", "handle", "stream", "done", "captured")

    def __init__(self, torch, device_index: int, handle: int):
        self.torch, self.device_index, self.handle = torch, device_index, handle

    def __enter__(self) -> bool:
        self.captured = self.torch.cuda.is_current_stream_capturing()
        if self.captured:
            _CAPTURED.add(self.device_index)
            return True
        _LOCK.acquire()  # the VM call and the bookkeeping happen as one, so `_LAST` is the true last call
        try:
            self.stream, self.done = _stream_and_event(self.torch, self.device_index, self.handle)
            last = _LAST.get(self.device_index)
            if last is not None and last[0] != self.handle:
                self.stream.wait_event(last[1])
        except BaseException:
            _LOCK.release()
            raise
        return False

    def __exit__(self, exc_type, *exc) -> None:
        if self.captured:
            return
        try:
            if exc_type is None:  # after a failed call, its own error is the one to see
                self.done.record(self.stream)
                _LAST[self.device_index] = (self.handle, self.done)
        finally:
            _LOCK.release()
