"""The sizes at the edges on the GPU (marked gpu; docs/reliability.md): T=1, T=20,000, B=4,096,
all-zero sequence_lens and B=0 through one persistent kernel with symbolic T and B. Each matches
ONNX Runtime (B=0, which aborts ONNX Runtime, gives empty outputs) or is refused with a clear
error; none hangs."""
from __future__ import annotations

import time

import pytest

import persist_rnn
from persist_rnn.errors import PersistRNNError
from persist_rnn.bench.size_cases import CASES, empty_outputs, size_feeds, size_model
from persist_rnn.bench.layer_models import max_rel_error, ort_run

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def compiled():
    model = size_model()
    return model, persist_rnn.compile(model, "cuda")


@pytest.mark.parametrize("name", list(CASES))
def test_sizes_at_the_edges_on_gpu(name, compiled):
    model, built = compiled
    assert [r.lowering for r in built.report()] == ["persistent"]
    feeds = size_feeds(name)
    start = time.perf_counter()
    try:
        got = built.run(feeds)
    except PersistRNNError as err:  # a refusal must name the input
        pytest.fail(f"refused: {err}") if "B=0" not in name else None
        assert "'X'" in str(err) or "batch" in str(err), err
        return
    print(f"{name}: {time.perf_counter() - start:.3f} s")
    want = empty_outputs(feeds) if name == "B=0" else ort_run(model, feeds)
    assert max_rel_error(got, want) <= 1e-4


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_hidden_2048_fp16_is_persistent(op):
    """H=2048 fp16 (32 MiB of LSTM weights): persistent, with part of each lane's weights in shared
    memory, within fp16's bound of ONNX Runtime at T=20, B=1 and B=3 (one build, symbolic B)."""
    from persist_rnn.bench.layer_models import LayerCase, reference

    case = LayerCase(op=op, hidden_size=2048, input_size=64, batch=1, seq_len=20, dtype="float16", dynamic=True,
                     weight_scale=1.0 / 2048 ** 0.5, linear_before_reset=1 if op == "GRU" else None)
    built = persist_rnn.compile(reference(case)[0], "cuda", measure=False)
    [layer] = built.report()
    assert layer.lowering == "persistent", layer.line()
    for batch in (1, 3):
        _, feeds, want = reference(LayerCase(**{**case.__dict__, "batch": batch}))
        built.run(feeds)
        start = time.perf_counter()
        got = built.run(feeds)
        print(f"{op} H=2048 fp16 B={batch}: {time.perf_counter() - start:.4f} s per call, {layer.config}")
        assert max_rel_error(got, want) <= 2e-3  # fp16 outputs: test_persistent_gpu.TOLERANCE


@pytest.mark.parametrize("hidden", [2048, 4096])
def test_hidden_sizes_past_the_chip_read_the_rest_from_global_memory(hidden):
    """H=2048 and 4096: the recurrent weights (64 and 256 MiB in fp32) fit no config on chip, so
    the forward layer's persistent kernel reads what does not fit from global memory each step,
    and matches ONNX Runtime (T=20, B=1)."""
    from persist_rnn.bench.layer_models import LayerCase, reference

    model, feeds, want = reference(LayerCase(op="LSTM", hidden_size=hidden, input_size=64, batch=1, seq_len=20,
                                             weight_scale=1.0 / hidden ** 0.5))
    built = persist_rnn.compile(model, "cuda")
    [layer] = built.report()
    assert layer.lowering == "persistent" and layer.config["global_runs"] > 0, layer.line()
    built.run(feeds)
    start = time.perf_counter()
    got = built.run(feeds)
    print(f"H={hidden}: {time.perf_counter() - start:.3f} s per call ({layer.config})")
    assert max_rel_error(got, want) <= 1e-4


@pytest.mark.parametrize("lowering", ["persistent", "streamed"])
@pytest.mark.parametrize("op,direction,batch", [("LSTM", "bidirectional", 6), ("GRU", "forward", 5)])
def test_layers_past_the_chip_with_lengths_and_initial_states_match(op, direction, batch, lowering):
    """H=2048 past one batch tile, ragged lengths (one empty), initial states, both directions,
    and GRU's two phases (linear_before_reset=0), against ONNX Runtime: the persistent kernel
    reading weights from global memory (the default) and the streamed scan (forced: no config
    offered)."""
    import contextlib
    from unittest import mock

    from persist_rnn.bench.layer_models import LayerCase, reference

    case = LayerCase(op=op, hidden_size=2048, input_size=32, batch=batch, seq_len=7, direction=direction,
                     seq_lens=[7, 0, 3, 7, 5, 1][:batch], initial_h=True, initial_c=op == "LSTM",
                     peepholes=op == "LSTM", linear_before_reset=0 if op == "GRU" else None,
                     weight_scale=1.0 / 2048 ** 0.5)
    model, feeds, want = reference(case)
    offered = mock.patch("persist_rnn.schedule.planner.candidate_configs", return_value=[])
    with offered if lowering == "streamed" else contextlib.nullcontext():
        built = persist_rnn.compile(model, "cuda", measure=False)
    assert [r.lowering for r in built.report()] == [lowering]
    assert max_rel_error(built.run(feeds), want) <= 1e-4
