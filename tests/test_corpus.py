"""The self-made half of the real-model corpus (tests/fixtures/corpus, exported by make_corpus.py
with torch 2.11's two exporters; docs/models.md): each file compiles as exported (batch and time
symbolic), matches torch's outputs and ONNX Runtime on llvm at the export size and at another
batch and length, makes every recurrent layer persistent for CUDA, and matches on the GPU."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import max_rel_error, ort_run

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "corpus")
FILES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(HERE, "*.onnx")))
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})

#: model -> (recurrent layers as (op, hidden, directions), steps of the second input)
LAYERS = {
    "crnn_ocr": ([("lstm", 96, 2)] * 2, 36),
    "conv_bilstm_speech": ([("lstm", 128, 2)], 17),
    "stft_lstm_vad": ([("lstm", 64, 1)], 700),
    "gru_enhancer": ([("gru", 128, 1)] * 2, 4),
    "seq2seq_encoder": ([("gru", 128, 2)], 6),
    "bilstm_tagger": ([("lstm", 96, 2)] * 2, 21),
}


def _model(file):
    return file.rsplit("_", 1)[0]


def _saved(file):
    """(inputs by name, torch's outputs) saved with the export."""
    data = np.load(os.path.join(HERE, _model(file) + ".npz"))
    outs = sorted(k for k in data.files if k.startswith("out"))
    return {k: data[k] for k in data.files if not k.startswith("out")}, [data[k] for k in outs]


def _other_input(file, feeds, batch=3):
    """`batch` rows and another length along the model's time axis, same dtype and value range."""
    [(name, x)] = feeds.items()
    steps = LAYERS[_model(file)][1]
    rng = np.random.default_rng(1)
    shape = list(x.shape)
    shape[0] = batch
    time_axis = {"crnn_ocr": 3, "conv_bilstm_speech": 2}.get(_model(file), 1)
    shape[time_axis] = steps
    if x.dtype == np.int64:
        return {name: rng.integers(0, 500, shape).astype("int64")}
    return {name: (rng.random(shape) if x.min() >= 0 else rng.standard_normal(shape) * float(x.std())).astype(x.dtype)}


def test_every_model_has_a_file_and_both_exporters_are_tried():
    assert {_model(f) for f in FILES} == set(LAYERS)
    assert any(f.endswith("_dynamo") for f in FILES) and any(f.endswith("_torchscript") for f in FILES)


@pytest.mark.parametrize("file", FILES)
def test_matches_torch_and_onnx_runtime_on_llvm(file):
    path = os.path.join(HERE, file + ".onnx")
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "llvm")
    layers = LAYERS[_model(file)][0]
    assert [(r.cell, r.hidden_size, r.directions) for r in compiled.report()] == layers
    feeds, torch_outputs = _saved(file)
    got = compiled.run(feeds)
    assert max_rel_error(got, torch_outputs) <= 1e-4
    assert max_rel_error(got, ort_run(model, feeds)) <= 1e-4
    other = _other_input(file, feeds)
    assert max_rel_error(compiled.run(other), ort_run(model, other)) <= 1e-4


#: CUDA builds in CI (a symbolic-batch build plans every bucket: 7-17 s each); the GPU test below
#: builds and runs all nine
CUDA_BUILDS_IN_CI = ("crnn_ocr_torchscript", "gru_enhancer_torchscript", "seq2seq_encoder_dynamo")


@pytest.mark.parametrize("file", CUDA_BUILDS_IN_CI)
def test_every_recurrent_layer_is_persistent_for_cuda(file):
    built = persist_rnn.compile(os.path.join(HERE, file + ".onnx"), CUDA, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"] * len(LAYERS[_model(file)][0])


@pytest.mark.gpu
@pytest.mark.parametrize("file", FILES)
def test_matches_onnx_runtime_on_cuda(file):
    path = os.path.join(HERE, file + ".onnx")
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "cuda")
    assert [r.lowering for r in compiled.report()] == ["persistent"] * len(LAYERS[_model(file)][0])
    feeds, torch_outputs = _saved(file)
    got = compiled.run(feeds)
    assert max_rel_error(got, torch_outputs) <= 1e-4
    for inputs in (feeds, _other_input(file, feeds)):
        assert max_rel_error(compiled.run(inputs), ort_run(model, inputs)) <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("file", FILES)
def test_matches_onnx_runtime_on_cuda_in_every_bucket(file):
    """The cost model's picks (nothing measured) for a batch in each of the compile's batch buckets
    past the export's, each against ONNX Runtime: a pick the model moves is a kernel that runs."""
    path = os.path.join(HERE, file + ".onnx")
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "cuda", measure=False)
    feeds, _ = _saved(file)
    for batch in (8, 16, 32, 40):
        inputs = _other_input(file, feeds, batch)
        assert max_rel_error(compiled.run(inputs), ort_run(model, inputs)) <= 1e-4, batch
