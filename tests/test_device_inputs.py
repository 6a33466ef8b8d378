"""run() with DLPack arrays: taken without a copy on the model's device, outputs handed back as the
same framework's tensors (or kept on the device on request); numpy in, numpy out as before."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error, ort_run

CASE = LayerCase(op="GRU", hidden_size=16, input_size=8, batch=3, seq_len=6, seq_lens=[6, 2, 0])


@pytest.fixture(scope="module")
def compiled_cpu():
    model, feeds = make_model(CASE)
    return persist_rnn.compile(model, "llvm"), feeds, ort_run(model, feeds)


def test_numpy_in_numpy_out(compiled_cpu):
    compiled, feeds, want = compiled_cpu
    got = compiled.run(feeds)
    assert all(isinstance(g, np.ndarray) for g in got) and max_rel_error(got, want) <= 1e-4


def test_tvm_tensors_in_tvm_tensors_out(compiled_cpu):
    compiled, feeds, want = compiled_cpu
    got = compiled.run({k: tvm.runtime.tensor(v) for k, v in feeds.items()})
    assert all(isinstance(g, tvm.runtime.Tensor) for g in got)
    assert max_rel_error([g.numpy() for g in got], want) <= 1e-4
    assert all(isinstance(g, np.ndarray) for g in compiled.run(feeds, outputs="numpy"))
    assert all(isinstance(g, tvm.runtime.Tensor) for g in compiled.run(feeds, outputs="device"))


def test_bad_lengths_are_caught_on_device_inputs_too(compiled_cpu):
    compiled, feeds, _ = compiled_cpu
    bad = dict(feeds, sequence_lens=np.array([7, 1, 2], "int32"))
    with pytest.raises(persist_rnn.PersistRNNError, match="sequence_lens"):
        compiled.run({k: tvm.runtime.tensor(v) for k, v in bad.items()})
    with pytest.raises(persist_rnn.PersistRNNError, match="outputs="):
        compiled.run(feeds, outputs="gpu")


def test_torch_tensors_in_torch_tensors_out(compiled_cpu):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    compiled, feeds, want = compiled_cpu
    got = compiled.run({k: torch.from_numpy(v) for k, v in feeds.items()})
    assert all(isinstance(g, torch.Tensor) for g in got)
    assert max_rel_error([g.numpy() for g in got], want) <= 1e-4


@pytest.mark.gpu
def test_torch_cuda_tensors_stay_on_the_gpu():
    """No host copy: torch's profiler sees no memcpy between host and device during the call (a
    model with a sequence_lens input copies those B lengths to the host, to check them)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    model, feeds = make_model(dataclasses.replace(CASE, seq_lens=None))
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    cuda = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    compiled.run(cuda)  # warm: the VM and its kernels
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = compiled.run(cuda)
        torch.cuda.synchronize()
    assert all(isinstance(g, torch.Tensor) and g.is_cuda for g in got)
    copies = [e.name for e in prof.events() if "memcpy" in e.name.lower() and ("htod" in e.name.lower() or "dtoh" in e.name.lower())]
    assert copies == []
    assert max_rel_error([g.cpu().numpy() for g in got], ort_run(model, feeds)) <= 1e-4
    with pytest.raises(persist_rnn.PersistRNNError, match="is on cpu"):
        compiled.run({k: torch.from_numpy(v) for k, v in feeds.items()})
