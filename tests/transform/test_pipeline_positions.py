"""PersistentRNN wherever a TVM user puts it in a Relax pipeline: each position x each shipped
example either builds for CUDA with every layer persistent (and nvcc compiles the CUDA, no GPU
needed), or is refused with an error that names the position and where the pass must go."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import tvm
from tvm import relax
from tvm.relax.backend.cuda import pipeline as cuda_pipeline

import persist_rnn
from persist_rnn.report import layer_report
from persist_rnn.bench.layer_models import cuda_source
from persist_rnn.transform import PersistentRNN

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
MODELS = ["char_rnn", "speech_gru", "text_classifier"]
LAYERS = {"char_rnn": 3, "speech_gru": 2, "text_classifier": 2}


def _seq(*passes):
    return tvm.ir.transform.Sequential(list(passes))


def _in_target(passes):
    def apply(mod):
        with CUDA:
            return _seq(*passes)(mod)
    return apply


#: what a user's pipeline did before PersistentRNN
POSITIONS = {
    "first": lambda mod: mod,
    "after FoldConstant+DCE": _seq(relax.transform.FoldConstant(), relax.transform.DeadCodeElimination()),
    "after LegalizeOps": relax.transform.LegalizeOps(),
    "after FuseOps+FuseTIR": _seq(relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                  relax.transform.FuseOps(), relax.transform.FuseTIR()),
    "after zero": relax.get_pipeline("zero"),
    "after legalization with dlight": _in_target(cuda_pipeline.legalize_passes(CUDA)),
}


def _nvcc(source, tmp_path):
    if shutil.which("nvcc") is None:
        return
    src = tmp_path / "model.cu"
    src.write_text(source)
    res = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "model.cubin"), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


#: every position for char-RNN; the two larger models (~30 s a build on CI's two cores) the first
#: and the last, the one furthest from where the pass began (char-RNN covers those between)
CASES = [(m, p) for m in MODELS for p in POSITIONS
         if m == "char_rnn" or p in ("first", "after legalization with dlight")]


@pytest.mark.parametrize("model,position", CASES)
def test_pass_in_every_position(model, position, tmp_path):
    mod = POSITIONS[position](persist_rnn.from_onnx(f"examples/{model}.onnx"))
    out = PersistentRNN(CUDA, measure=False)(mod)
    layers = layer_report(out)
    assert len(layers) == LAYERS[model] and all(r.lowering == "persistent" for r in layers), [r.line() for r in layers]
    _nvcc(cuda_source(tvm.compile(out, CUDA)), tmp_path)


@pytest.mark.parametrize("model", ["char_rnn", "text_classifier"])  # speech GRU's layers: test_pass_in_every_position
def test_inside_tvm_compile_through_persist_rnn_pipeline(model, tmp_path):
    report = []
    ex = tvm.compile(persist_rnn.from_onnx(f"examples/{model}.onnx"), CUDA,
                     relax_pipeline=persist_rnn.pipeline(CUDA, measure=False, report=report))
    assert len(report) == LAYERS[model] and all(r.lowering == "persistent" for r in report)
    source = cuda_source(ex)
    assert source.count("persist_rnn_") >= LAYERS[model]
    _nvcc(source, tmp_path)


@pytest.mark.parametrize("model", ["char_rnn", "text_classifier"])  # GRU layers: test_pass's idempotence test
def test_twice_changes_nothing(model):
    once = PersistentRNN(CUDA, measure=False)(persist_rnn.from_onnx(f"examples/{model}.onnx"))
    tvm.ir.assert_structural_equal(once, PersistentRNN(CUDA, measure=False)(once))


def test_after_dataflow_lowering_says_where_the_pass_goes():
    lowered = _in_target(cuda_pipeline.legalize_passes(CUDA) + cuda_pipeline.dataflow_lower_passes(CUDA))(
        persist_rnn.from_onnx("examples/char_rnn.onnx"))
    with pytest.raises(persist_rnn.PersistRNNError, match="after TVM's dataflow lowering.*before CallTIRRewrite"):
        PersistentRNN(CUDA, measure=False)(lowered)


def test_module_without_recurrences_comes_out_unchanged():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(tvm.runtime.tensor(__import__("numpy").ones((8, 8), "float32")))))
            out = bb.emit_output(relax.op.tanh(y))
        bb.emit_func_output(out)
    mod = bb.get()
    for before in (lambda m: m, relax.transform.LegalizeOps()):
        start = before(mod)
        assert PersistentRNN(CUDA, measure=False)(start).same_as(start)


def test_disabled_pass_turns_it_off():
    mod = persist_rnn.from_onnx("examples/char_rnn.onnx")
    with tvm.transform.PassContext(disabled_pass=["PersistentRNN"]):
        out = PersistentRNN(CUDA, measure=False)(mod)
    assert all(r.lowering == "reference" for r in layer_report(out))


@pytest.mark.gpu
@pytest.mark.parametrize("position", ["first", "after FuseOps+FuseTIR", "after zero", "after legalization with dlight"])
@pytest.mark.parametrize("model", MODELS)
def test_every_position_matches_onnx_runtime_on_the_gpu(model, position):
    import numpy as np

    from persist_rnn.frontend import load_model
    from persist_rnn.bench.layer_models import max_rel_error, ort_run

    out = PersistentRNN(CUDA, measure=False)(POSITIONS[position](persist_rnn.from_onnx(f"examples/{model}.onnx")))
    feeds = dict(np.load(f"examples/{model}_inputs.npz"))
    dev = tvm.cuda(0)
    got = relax.VirtualMachine(tvm.compile(out, CUDA), dev)["main"](*[tvm.runtime.tensor(a, dev) for a in feeds.values()])
    got = [got.numpy()] if hasattr(got, "numpy") else [g.numpy() for g in got]
    assert max_rel_error(got, ort_run(load_model(f"examples/{model}.onnx"), feeds)) <= 1e-4


@pytest.mark.parametrize("position", list(POSITIONS))
def test_a_16_bit_layer_in_every_position(position, tmp_path):
    """An fp16 LSTM's persistent kernel stores Y_h and Y_c in fp16 and the pass re-types its call
    site (tir_templates/signature.py): wherever the pass stands, whatever reads them (the
    importer's casts, or the kernels legalization or fusion made of them) still gets fp32, so the
    model builds; where the casts are still ops (before legalization), no cast is left."""
    from persist_rnn.bench.layer_models import LayerCase, make_model

    model, _ = make_model(LayerCase(op="LSTM", seq_len=10, batch=2, input_size=32, hidden_size=64, dtype="float16"))
    out = PersistentRNN(CUDA, measure=False)(POSITIONS[position](persist_rnn.from_onnx(model)))
    assert [r.lowering for r in layer_report(out)] == ["persistent"]
    main = out["main"].script()
    if position in ("first", "after FoldConstant+DCE"):
        assert main.count("R.astype") == 0, main
    _nvcc(cuda_source(tvm.compile(out, CUDA)), tmp_path)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_projection_that_dlight_schedules_builds(dtype):
    """A 16-bit layer's projection reference as dlight's Matmul rule takes it (K = 512: it tries
    tensor cores): with the pass after legalization, and without the pass (persistent=False). An
    fp16 x read straight into the product with the fp32 w_t crashed TVM there (a segfault in
    Tensorize); the reference widens x first (projection_reference). With the pass, the GEMM that
    replaces it copies 16-bit pairs, wherever the pass stands."""
    from persist_rnn.bench.layer_models import LayerCase, make_model

    model, _ = make_model(LayerCase(op="LSTM", seq_len=50, batch=16, input_size=512, hidden_size=512, dtype=dtype))
    out = PersistentRNN(CUDA, measure=False)(POSITIONS["after legalization with dlight"](persist_rnn.from_onnx(model)))
    assert [r.lowering for r in layer_report(out)] == ["persistent"]
    assert "prnn_cp_async16" in cuda_source(tvm.compile(out, CUDA))  # its GEMM copies 16-bit pairs (w_pairs)
    compiled = persist_rnn.compile(model, CUDA, measure=False, persistent=False)
    assert [r.lowering for r in compiled.report()] == ["reference"]


def test_a_16_bit_layer_built_for_sm_90a_takes_the_wgmma_gemm(tmp_path):
    """LSTM H=512 B=64 fp16, T=50: its (3200, 512) x (512, 2048) projection on a target of sm_90a
    is the wgmma GEMM (400 CTAs of 128 x 128), the recurrence as on sm_90; nvcc takes it."""
    from persist_rnn.bench.layer_models import LayerCase, make_model

    model, _ = make_model(LayerCase(op="LSTM", seq_len=50, batch=64, input_size=512, hidden_size=512, dtype="float16"))
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    out = PersistentRNN(target, measure=False)(persist_rnn.from_onnx(model))
    assert [r.lowering for r in layer_report(out)] == ["persistent"]
    source = cuda_source(tvm.compile(out, target))
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in source
    if shutil.which("nvcc") is None:
        return
    (tmp_path / "model.cu").write_text(source)
    res = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-o", str(tmp_path / "model.cubin"), str(tmp_path / "model.cu")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
