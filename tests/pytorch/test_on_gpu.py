"""On the GPU box: the PyTorch road on CUDA. Each shipped example's and corpus model's torch module,
through compile(module) with CUDA inputs, makes every recurrent layer persistent (or a wavefront)
and matches torch's eager fp32 output (TF32 off) within 1e-4 of the output scale at the example
and at another batch and length; the backend does too, its layers built persistent."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import persist_rnn  # noqa: E402
from persist_rnn.pytorch import backend  # noqa: E402
from torch_models import CORPUS, corpus, examples, relative_error  # noqa: E402

MODELS = sorted(examples()) + CORPUS


def _case(name):
    return examples()[name] if name in examples() else corpus(name)


@pytest.fixture(autouse=True)
def fp32_torch():
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = False, False
    torch._dynamo.reset()


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_compile_module_on_cuda_matches_torch(name):
    module, example, dynamic, other = _case(name)
    module = module.cuda()
    compiled = persist_rnn.compile(module, (example.cuda(),), dynamic=dynamic, measure=False)
    assert compiled.compiled.target.kind.name == "cuda"
    assert {r.lowering for r in compiled.report()} <= {"persistent", "wavefront"}
    with torch.no_grad():
        for x in (example.cuda(), other.cuda()):
            assert relative_error(compiled(x), module(x)) <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_backend_on_cuda_matches_torch(name):
    module, example, _, other = _case(name)
    module = module.cuda()
    compiled = torch.compile(module, backend="persist_rnn", options={"measure": False})
    with torch.no_grad():
        for x in (example.cuda(), other.cuda()):
            assert relative_error(compiled(x), module(x)) <= 1e-4
    met = backend.reports()[-1]
    assert met.runs_in == "persist_rnn" and {r.lowering for r in met.layers} <= {"persistent", "wavefront"}
