"""The shipped examples as exported (symbolic batch) on the GPU, against ONNX Runtime at batches
across the buckets, through run() with numpy and with torch CUDA tensors, and a torch.cuda.graph
capture of run() replayed on new inputs: the symbolic-batch path end to end (batch-invariant
operands, bucketed kernels, dense heads as the projection GEMM or the narrow kernel)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import persist_rnn
from persist_rnn.bench.suite import inputs_at_batch
from persist_rnn.bench.layer_models import max_rel_error, ort_run

pytestmark = pytest.mark.gpu
EXAMPLES = ("char_rnn", "speech_gru", "text_classifier")


@pytest.fixture(scope="module", params=EXAMPLES)
def example(request):
    path = f"examples/{request.param}.onnx"
    return persist_rnn.compile(path, "cuda", measure=False), onnx.load(path), f"examples/{request.param}_inputs.npz"


@pytest.mark.parametrize("batch", [1, 3, 8, 16, 32, 64, 100])
def test_matches_onnxruntime_with_numpy_and_torch(example, batch):
    torch = pytest.importorskip("torch")
    compiled, model, npz = example
    feeds = inputs_at_batch(compiled, npz, batch)
    want = ort_run(model, feeds)
    assert max_rel_error(compiled.run(feeds), want) <= 1e-4
    got = compiled.run({k: torch.from_numpy(v).cuda() for k, v in feeds.items()})
    assert all(isinstance(g, torch.Tensor) and g.is_cuda for g in got)
    assert max_rel_error([g.cpu().numpy() for g in got], want) <= 1e-4


def test_side_stream_views_and_graph_replay(example):
    """On a side stream; with inputs that are views at an odd offset (copied once, aligned);
    captured into a CUDA graph whose replay, on new values in the captured inputs, matches; and
    an eager call's outputs are left alone by later replays."""
    torch = pytest.importorskip("torch")
    compiled, model, npz = example
    first, second = (inputs_at_batch(compiled, npz, b) for b in (2, 2))
    second = {k: np.roll(v, 1, axis=tuple(range(v.ndim))) for k, v in second.items()}  # other values, same shapes
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        odd = {}
        for k, v in first.items():
            flat = torch.from_numpy(v).cuda().reshape(-1)
            odd[k] = torch.cat([flat[:1], flat])[1:].reshape(v.shape)  # storage offset of one element
        got = compiled.run(odd)
        stream.synchronize()
    assert max_rel_error([g.cpu().numpy() for g in got], ort_run(model, first)) <= 1e-4

    static = {k: torch.from_numpy(v).cuda() for k, v in first.items()}
    warm = torch.cuda.Stream()  # torch's recipe: a few calls on a side stream before capturing
    with torch.cuda.stream(warm):
        for _ in range(3):
            compiled.run(static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = compiled.run(static)
    for k, v in second.items():
        static[k].copy_(torch.from_numpy(v))
    graph.replay()
    torch.cuda.synchronize()
    assert max_rel_error([c.cpu().numpy() for c in captured], ort_run(model, second)) <= 1e-4

    # an eager call's outputs, held across a replay: the replay's temporaries are pool memory
    # that the pool hands out again, so run() copies outputs out of it once a graph was captured
    # (torch outputs, and TVM tensors kept on the device for numpy inputs)
    held = compiled.run({k: torch.from_numpy(v).cuda() for k, v in first.items()})
    held_tvm = compiled.run(first, outputs="device")
    torch.cuda.synchronize()
    before = [h.cpu().numpy().copy() for h in held] + [h.numpy().copy() for h in held_tvm]
    graph.replay()
    torch.cuda.synchronize()
    after = [h.cpu().numpy() for h in held] + [h.numpy() for h in held_tvm]
    assert all(np.array_equal(a, b) for a, b in zip(after, before))


def _host_copies(torch, call) -> list[str]:
    """Names of the host<->device copies that three calls of `call` made (torch profiler trace)."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "HtoD" in e.name or "DtoH" in e.name]


def test_torch_tensors_make_no_host_copies(example):
    """run() with torch CUDA tensors copies nothing between host and device (the trace of numpy
    inputs shows the copies, so the check sees them where they happen)."""
    torch = pytest.importorskip("torch")
    compiled, _, npz = example
    feeds = inputs_at_batch(compiled, npz, 1)
    on_gpu = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    assert _host_copies(torch, lambda: compiled.run(on_gpu)) == []
    assert _host_copies(torch, lambda: compiled.run(feeds))
