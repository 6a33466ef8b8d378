"""Real models' stacks through the LayerWavefront rewrite, run by the kernel's CPU twin on llvm
against ONNX Runtime: the shipped examples (3 x LSTM, 2 x GRU, 2 x LSTM behind an embedding) and a
torch-exported GRU speech enhancer (TorchScript and dynamo exports), at their inputs' static shapes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

from persist_rnn.frontend import from_onnx, load_model
from persist_rnn.frontend.front_door import prepare
from persist_rnn.bench.layer_models import max_rel_error, ort_run
from persist_rnn.transform.layer_wavefront import fuse_stacks
from tir_templates.wavefront import STACK_KERNEL_ATTR

MODELS = {"examples/char_rnn.onnx": "examples/char_rnn_inputs.npz",
          "examples/speech_gru.onnx": "examples/speech_gru_inputs.npz",
          "examples/text_classifier.onnx": "examples/text_classifier_inputs.npz",
          "tests/fixtures/corpus/gru_enhancer_torchscript.onnx": "tests/fixtures/corpus/gru_enhancer.npz",
          "tests/fixtures/corpus/gru_enhancer_dynamo.onnx": "tests/fixtures/corpus/gru_enhancer.npz"}


@pytest.mark.parametrize("path", list(MODELS))
def test_real_stack_fused_matches_onnxruntime(path):
    inputs = {i.name for i in onnx.load(path).graph.input}
    feeds = {k: v for k, v in np.load(MODELS[path]).items() if k in inputs}  # the corpus files hold outputs too
    model, _ = prepare(load_model(path), {k: v.shape for k, v in feeds.items()}, None, True)
    mod = fuse_stacks(relax.transform.FoldConstant()(from_onnx(model)), "llvm", 132, emulate=True)
    assert any(isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and STACK_KERNEL_ATTR in f.attrs
               for f in mod.functions.values())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input])
    got = [got.numpy()] if hasattr(got, "numpy") else [g.numpy() for g in got]
    assert max_rel_error(got, ort_run(onnx.load(path), feeds)) <= 1e-4
