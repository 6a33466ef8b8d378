"""torch.compile(model, backend="persist_rnn") on the CPU (llvm): the recurrent ops of dynamo's
graph run compiled by persist_rnn, the rest eager or through inductor, and every output matches
torch's own (fp32 bound 1e-4); one build serves every batch; what the backend does not take
(packed sequences, LSTM projections) runs as torch runs it, and reports() says so."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import persist_rnn  # noqa: E402
from persist_rnn.pytorch import recurrent_layer  # noqa: E402
from persist_rnn.pytorch.backend import persist_rnn_backend, reports  # noqa: E402
from torch_models import Packed, Projected, corpus, examples, relative_error  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _outcomes_since(count):
    return reports()[count:]


def test_the_installed_package_names_the_backend():
    from importlib import metadata

    try:
        points = metadata.distribution("persist_rnn").entry_points
    except metadata.PackageNotFoundError:
        pytest.skip("persist_rnn is not installed here (a source tree on PYTHONPATH)")
    [point] = [p for p in points if p.group == "torch_dynamo_backends"]
    assert point.name == "persist_rnn" and point.load() is persist_rnn_backend
    assert torch._dynamo.lookup_backend("persist_rnn") is persist_rnn_backend


@pytest.mark.parametrize("name", ["char_rnn", "speech_gru"])
def test_examples_match_torch_at_every_batch_with_one_build(name):
    module, example, _, other = examples()[name]
    before, builds = len(reports()), len(recurrent_layer._BUILDS)
    compiled = torch.compile(module, backend="persist_rnn")
    with torch.no_grad():
        for x in (example, other, torch.cat([other, other], dim=1 if name == "char_rnn" else 0)):
            assert relative_error(compiled(x), module(x)) <= 1e-4
    met = _outcomes_since(before)
    assert met and all(o.runs_in == "persist_rnn" for o in met)
    cell = "lstm" if name == "char_rnn" else "gru"
    assert {o.module for o in met} == {cell}
    count = len(met[-1].layers)
    assert [r.module for r in met[-1].layers] == [f"{cell}, layer {k} of {count}" for k in range(1, count + 1)]
    assert len(recurrent_layer._BUILDS) == builds + 1  # dynamo's recompile for a new batch found the build


class _TwoReads(torch.nn.Module):
    """An embedding read twice (so the layer cannot take it) and a GRU given its initial state."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.gru = torch.nn.GRU(8, 12)

    def forward(self, tokens, h0):
        x = self.emb(tokens)
        return self.gru(x, h0)[0].sum(-1) + x.sum(-1)


def test_the_layer_takes_the_embedding_and_zero_states_the_graph_made_for_it_alone():
    """The char-RNN's lookup and zero states go into the layer's build, which folds the input
    projection into the table as the ONNX build does; a lookup read twice and states passed in
    stay the graph's."""
    module, example, _, other = examples()["char_rnn"]
    compiled = torch.compile(module, backend="persist_rnn")
    with torch.no_grad():
        for x in (example, other):
            assert relative_error(compiled(x), module(x)) <= 1e-4
    assert reports()[-1].layers[0].embedding_folded
    torch.manual_seed(0)
    two = _TwoReads().eval()
    compiled = torch.compile(two, backend="persist_rnn", options={"rest": "inductor"})
    with torch.no_grad():
        for batch in (2, 5):
            tokens, h0 = torch.randint(0, 50, (7, batch)), torch.randn(1, batch, 12)
            assert relative_error(compiled(tokens, h0), two(tokens, h0)) <= 1e-4
    assert reports()[-1].runs_in == "persist_rnn" and not reports()[-1].layers[0].embedding_folded


def _matches_torch_and_last_build(module, inputs, options=None):
    """The module under the backend matches torch on each input; the key and build of the last
    layer built."""
    compiled = torch.compile(module, backend="persist_rnn", options=options)
    with torch.no_grad():
        for x in inputs:
            assert relative_error(compiled(x), module(x)) <= 1e-4
    build_key, (build, _) = next(reversed(recurrent_layer._BUILDS.items()))
    return build_key, build


@pytest.mark.parametrize("name, rest", [("char_rnn", "eager"), ("char_rnn", "inductor"), ("text_classifier", "inductor")])
def test_a_layer_whose_final_states_nobody_reads_returns_its_sequence_alone(name, rest):
    """The char-RNN reads the LSTM's output sequence alone, through its output Linear: the layer's
    build returns that Linear's output alone (an ONNX build of the model runs the Linear after the
    recurrence and drops the final states too); the text classifier reads h_n[-1] alone, through
    its Linear: the build returns that Linear's output of it."""
    module, example, _, other = examples()[name]
    build_key, build = _matches_torch_and_last_build(module, [example, other], {"rest": rest})
    assert len(build.compiled.output_names) == 1
    head = build_key[0][-1]  # (out_features, bias) of a Linear taken into the build
    assert head == ((module.out if name == "char_rnn" else module.fc).out_features, True)


class _ReadsStateAndSlice(torch.nn.Module):
    """h_n[-1] and the slice h_n[1:] read: more than one final state, so the build returns them all."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(6, 10, num_layers=2)

    def forward(self, x):
        _, h = self.rnn(x)
        return h[-1] + h[1:].sum(0)


def test_a_state_read_beside_a_slice_of_the_states_is_not_taken_alone():
    torch.manual_seed(0)
    build_key, build = _matches_torch_and_last_build(_ReadsStateAndSlice().eval(),
                                                     [torch.randn(5, batch, 6) for batch in (1, 3)])
    assert build_key[4] is None and len(build.compiled.output_names) == 2


class _ReadsHidden(torch.nn.Module):
    """A stack whose final hidden state `index` is read (and its output sequence too, `and_y`)."""

    def __init__(self, cell, index, and_y=False, bidirectional=False):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(6, 10, num_layers=2, bidirectional=bidirectional)
        self.index, self.and_y = index, and_y

    def forward(self, x):
        y, states = self.rnn(x)
        h = states[0] if isinstance(states, tuple) else states
        return h[self.index] + y.sum(0)[:, :10] if self.and_y else h[self.index] * 2


@pytest.mark.parametrize("cell, index, and_y, bidirectional, returned", [
    ("LSTM", -1, False, False, 1), ("GRU", 0, False, False, 0), ("LSTM", -2, False, True, 2),
    ("GRU", -1, True, False, None)], ids=["lstm h[-1]", "gru h[0]", "bidirectional h[-2]", "h[-1] and y"])
def test_one_final_hidden_state_read_alone_is_all_the_build_returns(cell, index, and_y, bidirectional, returned):
    torch.manual_seed(0)
    module = _ReadsHidden(cell, index, and_y, bidirectional).eval()
    build_key, build = _matches_torch_and_last_build(module, [torch.randn(5, batch, 6) for batch in (1, 3)])
    assert build_key[4] == returned  # the hidden state the build returns, by its index in h_n
    assert len(build.compiled.output_names) == (1 if returned is not None else 2 if cell == "GRU" else 3)


class _SequenceReadTwice(torch.nn.Module):
    """An LSTM's output sequence read by a Linear and by a sum: the Linear stays the graph's."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 12)
        self.out = torch.nn.Linear(12, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.out(y) + y.sum(-1, keepdim=True)


def test_a_linear_is_taken_only_where_it_alone_reads_the_sequence():
    torch.manual_seed(0)
    module = _SequenceReadTwice().eval()
    build_key, build = _matches_torch_and_last_build(module, [torch.randn(6, batch, 8) for batch in (1, 4)])
    assert build_key[0][-1] is None and len(build.compiled.output_names) == 1


def test_the_rest_through_inductor():
    module, example, _, other = corpus("gru_enhancer")
    compiled = torch.compile(module, backend="persist_rnn", options={"rest": "inductor"})
    with torch.no_grad():
        for x in (example, other):
            assert relative_error(compiled(x), module(x)) <= 1e-4
    assert reports()[-1].runs_in == "persist_rnn"


def test_the_rest_defaults_to_inductor_on_the_gpu_and_eager_on_the_cpu():
    from persist_rnn.pytorch.backend import _on_gpu

    cpu = [torch.randn(2, 3)]
    assert not _on_gpu("auto", cpu) and not _on_gpu("llvm", cpu)
    assert _on_gpu("cuda", cpu) and _on_gpu({"kind": "cuda", "arch": "sm_80"}, cpu)


def test_auto_leaves_graphs_with_a_matrix_product_to_eager():
    """What "auto" reads: a GEMM left beside the layers (inductor's over a dynamic batch took as long
    as the whole call left to eager)."""
    from persist_rnn.pytorch.backend import _matrix_products

    def bridge(x, w):
        return torch.tanh(torch.nn.functional.linear(x, w))

    def product(x, w):
        return x @ w

    def elementwise(x, w):
        return torch.log(torch.sqrt(x * x + w * w) + 1e-3)

    assert [_matrix_products(torch.fx.symbolic_trace(f)) for f in (bridge, product, elementwise)] == [True, True, False]


def test_a_graph_inductor_cannot_compile_runs_eagerly(monkeypatch):
    """Inductor raising on the graph's other ops: they run eagerly, the layers still persist_rnn's."""
    import torch._inductor.compile_fx as inductor

    def refuse(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(inductor, "compile_fx", refuse)
    module, example, _, other = corpus("gru_enhancer")
    compiled = torch.compile(module, backend="persist_rnn", options={"rest": "inductor"})
    with torch.no_grad(), pytest.warns(UserWarning, match="inductor could not compile.*no C.. compiler"):
        assert relative_error(compiled(example), module(example)) <= 1e-4
    assert reports()[-1].runs_in == "persist_rnn"


def test_what_the_backend_does_not_take_runs_as_torch():
    torch.manual_seed(0)
    before = len(reports())
    projected = Projected().eval()
    x = torch.randn(5, 2, 8)
    with torch.no_grad():
        assert relative_error(torch.compile(projected, backend="persist_rnn")(x), projected(x)) <= 1e-6
    met = {o.module: o for o in _outcomes_since(before)}
    assert met["gru"].runs_in == "persist_rnn"
    assert met["lstm"].runs_in == "torch" and "proj_size" in met["lstm"].why
    packed = Packed().eval()  # dynamo breaks the graph at a PackedSequence: torch runs the GRU
    x, lengths = torch.randn(3, 7, 8), torch.tensor([7, 2, 5])
    with torch.no_grad():
        assert relative_error(torch.compile(packed, backend="persist_rnn")(x, lengths), packed(x, lengths)) <= 1e-6
    plain = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    with torch.no_grad():
        assert relative_error(torch.compile(plain, backend="persist_rnn")(x), plain(x)) == 0


def test_weights_changed_in_place_make_a_new_build():
    module, example, _, _ = examples()["speech_gru"]
    compiled = torch.compile(module, backend="persist_rnn")
    with torch.no_grad():
        compiled(example)
        module.gru.weight_hh_l0.mul_(0.5)
        assert relative_error(compiled(example), module(example)) <= 1e-4


def test_other_backends_break_the_graph_again_once_allow_rnn_is_set_back():
    """The backend turns on dynamo's allow_rnn when looked up; set back, as its docstring says
    to for inductor, nn.LSTM is a graph break again for other backends."""
    module, example, _, _ = examples()["char_rnn"]  # an embedding before the LSTM: a graph to see
    torch.compile(module, backend="persist_rnn")(example)
    assert torch._dynamo.config.allow_rnn is True
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=False):
        torch.compile(module, backend=record)(example)
    assert not any(n.target in recurrent_layer.RECURRENT_OPS for gm in graphs for n in gm.graph.nodes)


def test_a_build_is_shared_by_the_weight_tensors_themselves():
    """Builds are found by the weights' addresses and versions, which a model freed leaves to the
    next: a build is reused only for the very tensors it was made from (held weakly)."""
    x = torch.randn(4, 2, 8)
    first, second = torch.nn.GRU(8, 12).eval(), torch.nn.GRU(8, 12).eval()
    layer = recurrent_layer.RecurrentLayer(torch.gru, "gru", {}, recurrent_layer.LayerOutcome("gru", "gru"))
    key = ("the same addresses and versions",)
    built = layer._built(key, x, list(first.parameters()), True, 1, False, False, None, False)
    assert layer._built(key, x, list(first.parameters()), True, 1, False, False, None, False) is built
    other = layer._built(key, x, list(second.parameters()), True, 1, False, False, None, False)
    assert other is not built
    with torch.no_grad():
        assert relative_error(other(x)[0], second(x)[0]) <= 1e-4


def test_bad_options_are_named():
    graph = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    with pytest.raises(persist_rnn.PersistRNNError, match=r"options\['rest'\] = 'fast'"):
        persist_rnn_backend(graph, [torch.randn(1, 2)], options={"rest": "fast"})
