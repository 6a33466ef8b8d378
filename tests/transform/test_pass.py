"""PersistentRNN as a Relax pass: in a user's pipeline, for each layer, with its report."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tvm
from tvm import relax

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.report import layer_report
from persist_rnn.bench.layer_models import LayerCase, cuda_source, make_model
from persist_rnn.transform import PersistentRNN
from tir_templates.config import Config
from tir_templates.early_launch import supports_early_launch
from tir_templates.spec import ATTR_KEY

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _kernels(mod):
    return {gv.name_hint: f for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and ATTR_KEY in f.attrs}


def test_pass_in_a_user_pipeline_replaces_the_scan():
    model, _ = make_model(LayerCase(op="LSTM", hidden_size=32, input_size=16, batch=4, direction="bidirectional"))
    mod = from_onnx(model)
    seq = tvm.ir.transform.Sequential([relax.transform.DeadCodeElimination(), PersistentRNN(CUDA, measure=False)])
    out = seq(mod)
    (name, kernel), = _kernels(out).items()
    assert str(kernel.attrs["persist_rnn.lowering"]) == "persistent"
    cfg = json.loads(str(kernel.attrs["persist_rnn.config"]))
    assert 32 % cfg["tile_units"] == 0
    [layer] = layer_report(out)
    assert (layer.cell, layer.directions, layer.lowering, layer.source) == ("lstm", 2, "persistent", "cost_model")
    assert layer["hidden_size"] == 32  # readable as a mapping too
    tvm.compile(out, target=CUDA)  # the whole module builds for CUDA


def test_pass_is_idempotent_and_leaves_other_functions_alone():
    model, _ = make_model(LayerCase(op="GRU", linear_before_reset=1))
    once = PersistentRNN(CUDA, measure=False)(from_onnx(model))
    twice = PersistentRNN(CUDA, measure=False)(once)
    tvm.ir.assert_structural_equal(once, twice)


def test_each_stacked_layer_gets_its_own_kernel_and_report_entry():
    compiled = persist_rnn.compile("tests/fixtures/torch_lstm_2layer_bidir.onnx", CUDA, measure=False)
    layers = compiled.report()
    assert [r.node for r in layers] == ["/LSTM", "/LSTM_1"]
    assert [r.input_size for r in layers] == [10, 32] and all(r.directions == 2 for r in layers)
    assert all(r.lowering == "persistent" for r in layers)


def test_fallbacks_keep_the_reference_and_say_why():
    """H=7 leaves most lanes of any work group idle: the space prunes every config, and the
    report names that rather than some generic limit."""
    model, _ = make_model(LayerCase(op="RNN", hidden_size=7, input_size=3))
    [layer] = persist_rnn.compile(model, CUDA, measure=False).report()
    assert layer.lowering == "reference" and "busy lanes waste most of 32 threads" in layer.reason
    [layer] = persist_rnn.compile(model, "llvm").report()
    assert layer.lowering == "reference" and "CUDA only" in layer.reason


def test_tuning_log_reuse_through_compile(tmp_path):
    log = str(tmp_path / "t.jsonl")
    model, _ = make_model(LayerCase(op="RNN", hidden_size=64, input_size=64, batch=2))
    first = persist_rnn.compile(model, CUDA, tuning_log=log, measure=False).report()[0]
    second = persist_rnn.compile(model, CUDA, tuning_log=log, measure=False).report()[0]
    assert first.source == "cost_model" and second.source == "tuning_log" and second.config == first.config


def test_export_and_load(tmp_path):
    model, feeds = make_model(LayerCase(op="LSTM", seq_lens=[5, 1, 3]))
    compiled = persist_rnn.compile(model, "llvm")
    path = str(tmp_path / "m.so")
    compiled.export_library(path)
    loaded = persist_rnn.load(path)
    for a, b in zip(compiled.run(feeds), loaded.run(feeds)):
        np.testing.assert_array_equal(a, b)
    assert loaded.report()[0].node == "rnn"


def test_partial_sums_kernel_gets_its_longer_exchange_buffer():
    """GRU linear_before_reset=0 with GRNN's partial sums keeps one slot per (parity, gate, CTA)
    in the exchange buffer: the pass writes that extent into the call site, and it builds."""
    model, _ = make_model(LayerCase(op="GRU", linear_before_reset=0, hidden_size=32, input_size=8, batch=2,
                                    direction="bidirectional"))
    cfg = Config(8, 8, 2, 2, gru_barriers=1)  # 4 CTAs per direction: 3 + 4 * 4 slots
    out = PersistentRNN(CUDA, config=cfg)(from_onnx(model))
    (name, kernel), = _kernels(out).items()
    assert str(kernel.attrs["persist_rnn.lowering"]) == "persistent"
    assert "assert n_slots >= T.int64(19)" in kernel.script()
    call_tir = tvm.ir.Op.get("relax.call_tir")
    calls = []
    relax.analysis.post_order_visit(out["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call)
                                    and e.op.same_as(call_tir) and e.args[0].name_hint == name else None)
    [call] = calls
    assert [int(d) for d in call.ty_args[0].fields[3].shape] == [19, 2, 2, 32]
    tvm.compile(out, target=CUDA)


def test_streamed_fragments_kernel_gets_its_longer_workspace():
    """A 16-bit tensor-core config that reads its last k-tiles' A fragments each step keeps them
    packed in the workspace: the pass writes that extent into the call site, and it builds."""
    model, _ = make_model(LayerCase(op="LSTM", hidden_size=64, input_size=8, batch=2, dtype="float16"))
    cfg = Config(16, 32, 16, 2, "float16", mma_k_split=2, smem_runs=1, global_runs=1)  # 4 CTAs of 256 threads
    out = PersistentRNN(CUDA, config=cfg)(from_onnx(model))
    (name, kernel), = _kernels(out).items()
    words = 32 + 4 * 256 * 1 * 4
    assert f"assert n_words >= T.int64({words})" in kernel.script()
    call_tir = tvm.ir.Op.get("relax.call_tir")
    calls = []
    relax.analysis.post_order_visit(out["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call)
                                    and e.op.same_as(call_tir) and e.args[0].name_hint == name else None)
    [call] = calls
    assert [int(d) for d in call.ty_args[0].fields[4].shape] == [words]
    tvm.compile(out, target=CUDA)


def _launched(mod, tag, field, phrase) -> dict:
    """Kernel name -> whether it asks TVM's runtime for launch `tag` (and the report says so in
    LayerReport.`field` and in its line as `phrase`)."""
    asked = {name: tag in list(f.attrs.get("tirx.kernel_launch_params", [])) for name, f in _kernels(mod).items()}
    assert sorted(asked.values()) == sorted(getattr(r, field) for r in layer_report(mod))
    assert all((phrase in r.line()) == getattr(r, field) for r in layer_report(mod))
    return asked


def _early(mod) -> dict:
    return _launched(mod, "tirx.use_programtic_dependent_launch", "early_launch", ", early launch")


def _computed_weights(model):
    """The same model with R computed in the graph (R = Ra + Rb, Ra a graph input): a kernel of
    the same call writes it, so the recurrence must not read it before griddepcontrol.wait."""
    from onnx import helper

    r = next(t for t in model.graph.initializer if t.name == "R")
    r.name = "Rb"
    model.graph.input.append(helper.make_tensor_value_info("Ra", r.data_type, list(r.dims)))
    model.graph.node.insert(0, helper.make_node("Add", ["Ra", "Rb"], ["R"]))
    return model


def test_early_launch_only_where_safe():
    """Programmatic dependent launch from sm_90 on, for kernels whose CTAs meet at most inside a
    cluster and whose
    weights and biases are constants or parameters (read before griddepcontrol.wait); the built
    module has the wait in the recurrence and the trigger in the GEMM (helpers defined once)."""
    case = LayerCase(op="LSTM", hidden_size=32, input_size=16, batch=1)
    model, _ = make_model(case)
    resident = Config(32, 4, 8, 1)  # one CTA holds the direction
    assert list(_early(PersistentRNN(CUDA, config=resident)(from_onnx(model))).values()) == [True]
    sm80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    assert list(_early(PersistentRNN(sm80, config=resident)(from_onnx(model))).values()) == [False]
    grid = Config(8, 8, 4, 1)  # four CTAs meet at a barrier every step
    assert list(_early(PersistentRNN(CUDA, config=grid)(from_onnx(model))).values()) == [False]
    for dsmem in (False, True):  # ... or as one cluster, placed whole by the hardware: early
        cluster = Config(8, 8, 4, 1, cluster=True, dsmem=dsmem)
        assert list(_early(PersistentRNN(CUDA, config=cluster)(from_onnx(model))).values()) == [True]
    computed = _computed_weights(make_model(case)[0])
    assert list(_early(PersistentRNN(CUDA, config=resident)(from_onnx(computed))).values()) == [False]
    out = PersistentRNN(CUDA, config=resident)(from_onnx(model))
    assert [supports_early_launch(a) for a in ("sm_80", "sm_89", "sm_90", "sm_90a", "sm_100a")] == [
        False, False, True, True, True]
    source = cuda_source(tvm.compile(out, target=CUDA).mod)
    assert source.count("griddepcontrol.wait") == 1 and source.count("griddepcontrol.launch_dependents") == 1


def _cooperative(mod) -> dict:
    return _launched(mod, "tirx.use_cooperative_launch", "cooperative_launch", ", cooperative launch")


def test_grid_barrier_kernels_launch_cooperatively():
    """CTAs that spin at a grid barrier must all be resident: such kernels (and only those) are
    launched cooperatively, on every arch, unless the pass is told not to; a bucketed kernel with
    one grid bucket is launched so in every bucket."""
    model, _ = make_model(LayerCase(op="LSTM", hidden_size=32, input_size=16, batch=1))
    grid, resident = Config(8, 8, 4, 1), Config(32, 4, 8, 1)
    cluster = Config(8, 8, 4, 1, cluster=True)
    sm80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    for target in (CUDA, sm80):
        assert list(_cooperative(PersistentRNN(target, config=grid)(from_onnx(model))).values()) == [True]
    assert list(_cooperative(PersistentRNN(CUDA, config=resident)(from_onnx(model))).values()) == [False]
    assert list(_cooperative(PersistentRNN(CUDA, config=cluster)(from_onnx(model))).values()) == [False]
    assert list(_cooperative(PersistentRNN(CUDA, config=grid, cooperative=False)(from_onnx(model))).values()) == [
        False]
    big, _ = make_model(LayerCase(op="LSTM", hidden_size=1024, input_size=64, batch=1, dynamic=True))
    out = PersistentRNN(CUDA, measure=False)(from_onnx(big))
    [report] = layer_report(out)
    assert report.buckets and any(b["config"]["cluster"] is False for b in report.buckets)
    assert list(_cooperative(out).values()) == [True]
    tvm.compile(PersistentRNN(CUDA, config=grid)(from_onnx(model)), target=CUDA)


def test_a_tf32_step_is_reported_and_a_bad_precision_named():
    """precision="tf32" lets a layer's step run at TF32; report() says so on the layer's line. An
    unknown precision is refused before anything is imported."""
    model, _ = make_model(LayerCase(op="LSTM", hidden_size=32, input_size=16, batch=4))
    cfg = Config(8, 32, 16, 4, mma_k_split=1, mma_precision="tf32")
    out = PersistentRNN(CUDA, measure=False, precision="tf32", config=cfg)(from_onnx(model))
    [layer] = layer_report(out)
    assert layer.lowering == "persistent" and layer.tf32_step and "TF32 step" in layer.line()
    [layer] = layer_report(PersistentRNN(CUDA, measure=False, precision="tf32")(from_onnx(model)))
    assert not layer.tf32_step  # no GPU to measure it: the FMA units
    with pytest.raises(persist_rnn.PersistRNNError, match="precision 'bf16'"):
        persist_rnn.compile(model, CUDA, precision="bf16")


def test_projections_go_to_the_tensor_cores_past_one_wave_of_small_tiles():
    """The tensor-core GEMM (projection_mma.py; its GPU tests passed on the H100) where the FMA
    GEMM's 32 x 32 grid would not fit one wave, and for a full 64 x 64 grid only with K >= 512, at
    the build's precision (3xTF32 for fp32, TF32 for tf32); the FMA GEMM elsewhere, and where M is
    known only at run time."""
    from tir_templates.projection_mma import tensor_cores_pay

    def projections(case, **kw):
        model, _ = make_model(case)
        out = PersistentRNN(CUDA, measure=False, **kw)(from_onnx(model))
        return [json.loads(str(f.attrs["persist_rnn.projection"])) for _, f in out.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "persist_rnn.projection" in f.attrs]

    past_a_wave = LayerCase(op="LSTM", hidden_size=256, input_size=16, batch=3, seq_len=100)  # M = 300, N = 1024
    assert [p.get("mma") for p in projections(past_a_wave)] == ["3xtf32"]  # 80 CTAs of 64 x 64, 320 of 32 x 32
    assert [p.get("k_groups") for p in projections(past_a_wave)] == [2]  # ... 80: one wave, two groups of warps
    assert [p.get("mma") for p in projections(past_a_wave, precision="tf32")] == ["tf32"]
    one_wave = LayerCase(op="GRU", hidden_size=32, input_size=16, batch=4, linear_before_reset=1)  # M = 20, N = 96
    assert [p.get("tile") for p in projections(one_wave)] == [[32, 32, 4, 64]]
    full = LayerCase(op="LSTM", hidden_size=256, input_size=512, batch=64, seq_len=200)  # 200 x 16 CTAs of 64 x 64
    assert [(p.get("mma"), p.get("k_groups"), p.get("stages")) for p in projections(full)] == [("3xtf32", 1, 0)]
    half_full = dataclasses.replace(full, dtype="float16")  # 16 bits, W constant: pairs copied as they lie
    assert [(p.get("mma"), p.get("k_groups"), p.get("stages"), p.get("w_pairs")) for p in projections(half_full)] == [
        ("f16", 1, 3, True)]
    shallow = LayerCase(op="LSTM", hidden_size=256, input_size=256, batch=64, seq_len=200)  # ... K = 256
    assert [p.get("mma") for p in projections(shallow)] == [None]
    for dtype, mma in (("float16", "f16"), ("bfloat16", "bf16")):  # 16-bit x and W: exact on 16-bit tensor cores
        assert [p.get("mma") for p in projections(dataclasses.replace(past_a_wave, dtype=dtype))] == [mma]
        assert [p.get("mma") for p in projections(dataclasses.replace(past_a_wave, dtype=dtype), precision="tf32")] == [mma]
    assert not tensor_cores_pay(None, 1024, 1024, 132)  # M known only at run time
