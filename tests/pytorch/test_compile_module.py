"""persist_rnn.compile(nn.Module, example_inputs): the shipped examples' torch definitions, the
corpus's six torch models, and batch_first / packed sequences / proj_size, against torch's own
output on llvm (fp32 bound 1e-4 of the output scale), at the example and at another batch and
length; each layer named by its module path; CUDA builds every layer persistent."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import persist_rnn  # noqa: E402
from persist_rnn.pytorch.module import CompiledModule  # noqa: E402
from torch_models import CORPUS, Packed, Projected, corpus, examples, relative_error  # noqa: E402

EXAMPLES = examples()


def _check(module, example, dynamic, other):
    compiled = persist_rnn.compile(module, (example,), dynamic=dynamic)
    assert isinstance(compiled, CompiledModule) and isinstance(compiled, torch.nn.Module)
    with torch.no_grad():
        for x in (example, other):
            assert relative_error(compiled(x), module(x)) <= 1e-4
    return compiled


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_shipped_examples_match_torch(name):
    compiled = _check(*EXAMPLES[name])
    layers = {"char_rnn": ("lstm", 3), "text_classifier": ("lstm", 2), "speech_gru": ("gru", 2)}[name]
    assert [r.module for r in compiled.report()] == [f"{layers[0]}, layer {k} of {layers[1]}"
                                                       for k in range(1, layers[1] + 1)]


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_models_match_torch(name):
    compiled = _check(*corpus(name))
    assert all(r.module for r in compiled.report())


def test_a_cuda_build_makes_every_layer_persistent_and_names_it():
    module, example, dynamic, _ = EXAMPLES["char_rnn"]
    compiled = persist_rnn.compile(module, (example,), target="cuda", dynamic=dynamic, measure=False)
    assert [r.lowering for r in compiled.report()] == ["persistent"] * 3
    assert compiled.compiled.target.kind.name == "cuda"
    assert "lstm, layer 2 of 3 (/lstm/LSTM_1): LSTM input 128 hidden 128" in compiled.report()[1].line()


def test_packed_sequences_become_sequence_lengths():
    """Unsorted lengths at a static batch; sorted ones (enforce_sorted=True) at a dynamic batch."""
    torch.manual_seed(0)
    module = Packed().eval()
    x, lengths = torch.randn(3, 7, 8), torch.tensor([7, 2, 5])
    compiled = persist_rnn.compile(module, (x, lengths))
    with torch.no_grad():
        for lengths in (lengths, torch.tensor([1, 7, 3])):
            assert relative_error(compiled(x, lengths), module(x, lengths)) <= 1e-4
    assert [r.module for r in compiled.report()] == ["rnn"]
    with pytest.raises(persist_rnn.PersistRNNError, match="enforce_sorted=False.*pass the lengths sorted"):
        persist_rnn.compile(module, (x, lengths), dynamic={"batch": 0})
    module = Packed(enforce_sorted=True).eval()
    compiled = persist_rnn.compile(module, (x, torch.tensor([7, 5, 2])), dynamic={"batch": 0})
    with torch.no_grad():
        for x, lengths in ((x, torch.tensor([7, 5, 2])), (torch.randn(5, 7, 8), torch.tensor([7, 6, 4, 4, 1]))):
            assert relative_error(compiled(x, lengths), module(x, lengths)) <= 1e-4


def test_a_projected_lstm_is_refused_naming_the_module_and_the_backend_that_takes_it():
    with pytest.raises(persist_rnn.PersistRNNError, match=r"\['lstm'\] are LSTMs with proj_size.*backend='persist_rnn'"):
        persist_rnn.compile(Projected().eval(), (torch.randn(4, 2, 8),))


def test_wrong_calls_get_clear_errors():
    module, example, dynamic, _ = EXAMPLES["speech_gru"]
    with pytest.raises(persist_rnn.PersistRNNError, match=r"dynamic\['batch'\]: axis 3 of 'frames'"):
        persist_rnn.compile(module, (example,), dynamic={"batch": {"frames": 3}})
    with pytest.raises(persist_rnn.PersistRNNError, match=r"'lengths' is not a tensor argument of forward"):
        persist_rnn.compile(module, (example,), dynamic={"batch": {"lengths": 0}})
    compiled = persist_rnn.compile(module, (example,))  # static: the example's shape only
    with pytest.raises(persist_rnn.PersistRNNError, match="compiled for 1 positional arguments, called with 2"):
        compiled(example, example)
    with pytest.raises(persist_rnn.PersistRNNError, match=r"input 'frames': shape \(3, 7, 40\), expected \(2, 13, 40\)"):
        compiled(torch.randn(3, 7, 40))
