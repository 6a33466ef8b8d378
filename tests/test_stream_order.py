"""stream_order's bookkeeping with a stand-in for torch.cuda (no GPU here): a call on a new
stream waits for the last call on another; calls on one stream do not; a captured call waits
for nothing and marks the device, after which run() copies device outputs out of the pool."""
from __future__ import annotations

import types

import numpy as np
import pytest
import tvm

from persist_rnn import runtime, stream_order


class FakeCuda:
    def __init__(self):
        self.capturing, self.log = False, []
        cuda = self

        class Stream:
            def __init__(self, handle):
                self.handle = handle

            def wait_event(self, event):
                cuda.log.append(("wait", self.handle, event.stream))

        class Event:
            stream = None

            def record(self, stream):
                self.stream = stream.handle
                cuda.log.append(("record", stream.handle))

        self.Stream, self.Event, self.current = Stream, Event, None

    def is_current_stream_capturing(self):
        return self.capturing

    def current_stream(self, device_index):
        return self.Stream(self.current)


@pytest.fixture
def torch(monkeypatch):
    for name in ("_LAST", "_STREAMS"):
        monkeypatch.setattr(stream_order, name, {})
    monkeypatch.setattr(stream_order, "_CAPTURED", set())
    return types.SimpleNamespace(cuda=FakeCuda())


def _call(torch, handle):
    torch.cuda.current = handle
    with stream_order.ordered_after_other_streams(torch, 0, handle) as captured:
        return captured


def test_a_new_stream_waits_for_the_last_call_on_another(torch):
    assert [_call(torch, h) for h in (7, 7, 9)] == [False, False, False]
    assert torch.cuda.log == [("record", 7), ("record", 7), ("wait", 9, 7), ("record", 9)]


def test_a_captured_call_waits_for_nothing_and_marks_the_device(torch):
    _call(torch, 7)
    assert not stream_order.pool_shared_with_graph(0)
    torch.cuda.capturing = True
    assert _call(torch, 9) is True
    assert torch.cuda.log == [("record", 7)]  # no wait on an event from outside the capture
    assert stream_order.pool_shared_with_graph(0) and not stream_order.pool_shared_with_graph(1)


def test_a_failed_call_records_nothing_and_frees_the_lock(torch):
    torch.cuda.current = 7
    with pytest.raises(RuntimeError, match="kernel failed"):
        with stream_order.ordered_after_other_streams(torch, 0, 7):
            raise RuntimeError("kernel failed")
    assert torch.cuda.log == [] and not stream_order._LOCK.locked()
    assert _call(torch, 7) is False and torch.cuda.log == [("record", 7)]


def test_copied_tensor_leaves_the_pool():
    a = tvm.runtime.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    b = runtime._copied(a)
    assert b.data_ptr() != a.data_ptr() and np.array_equal(b.numpy(), a.numpy())


def test_framework_copy_takes_clone_or_copy():
    class Torchish:
        def clone(self):
            return "cloned"

    class Cupyish:
        def copy(self):
            return "copied"

    assert [runtime._framework_copy(a) for a in (Torchish(), Cupyish(), 3)] == ["cloned", "copied", 3]
