"""Grid-barrier and wavefront kernels beside other work on the GPU (marked gpu: run on the GPU box).

benchmarks/contention.py has the full experiment (plain launches, another process, MPS); this is
the product's promise: two threads, each on its own torch stream, each running an H=1024 layer
(128 CTAs at a grid barrier) 200 times, all get the serial answer, and nothing traps or hangs;
the same for a layer wavefront whose two launches want more clusters than the GPU holds.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model

pytestmark = pytest.mark.gpu


def assert_two_threads_agree(torch, compiled, feeds):
    """Two threads, each on its own torch stream, call `compiled` 200 times: every 50th answer
    equals the serial one, nothing raises, and both finish within 120 s."""
    inputs = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in feeds.items()}
    want = [o.clone() for o in compiled.run(inputs)]
    torch.cuda.synchronize()
    failures = []

    def loop(tag):
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream):
                for k in range(200):
                    outs = compiled.run(inputs)
                    if k % 50 == 49:
                        stream.synchronize()
                        err = max(float((o - w).abs().max()) for o, w in zip(outs, want))
                        if err > 1e-6:
                            failures.append((tag, k, err))
            stream.synchronize()
        except Exception as err:
            failures.append((tag, repr(err)[:300]))

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread is still running after 120 s"
    assert not failures, failures


def test_two_streams_two_threads_grid_layer():
    torch = pytest.importorskip("torch")
    model, feeds = make_model(LayerCase(op="LSTM", hidden_size=1024, input_size=1024, batch=1, seq_len=100,
                                        weight_scale=1.0 / 32))
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    assert compiled.report()[0].cooperative_launch, compiled.report()[0].line()
    assert_two_threads_agree(torch, compiled, feeds)


def test_two_streams_two_threads_wavefront_in_tiles():
    """The layer wavefront's promise under contention: 3 x LSTM H=256 at B=10 in 2 batch tiles is 6
    clusters of 16 CTAs a launch, and two launches at once ask for 12 where the H100 holds 7. A
    cluster waits only for lower tickets of its own launch (clusters already running), so both
    threads' 200 calls each finish with the serial answer."""
    torch = pytest.importorskip("torch")
    from persist_rnn.bench.layer_models import stacked_layers_model

    model, feeds = stacked_layers_model("LSTM", 256, 3, 100, 10, lengths=True, states=True)
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True)
    config = compiled.report()[0].config
    assert compiled.report()[0].lowering == "wavefront", compiled.report()[0].line()
    assert 2 * config.get("batch_tiles", 1) * 3 > 7, config  # two launches' clusters of 16 CTAs, 7 resident
    assert_two_threads_agree(torch, compiled, feeds)
