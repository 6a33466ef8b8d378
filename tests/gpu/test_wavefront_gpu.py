"""The layer wavefront on the GPU: stacks of 2-4 layers (LSTM, GRU with linear_before_reset=1,
RNN) with sequence lengths (empty rows among them) and initial states, against ONNX Runtime at
fp32's bound (1e-4 of the output scale), and the shipped examples built for a static batch (their
stacks fused) against it too; fp16 and bf16 stacks against ONNX
Runtime's fp32 layers on the same 16-bit-exact weights and inputs, at the dtype's bound
(torch_layers.BOUNDS: four unit roundoffs of the output scale)."""
from __future__ import annotations

import onnx
import pytest

import persist_rnn
from persist_rnn.bench.suite import inputs_at_batch
from persist_rnn.bench.torch_layers import BOUNDS
from persist_rnn.bench.layer_models import max_rel_error, ort_run, sixteen_bit_model, stacked_layers_model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op,hidden,layers,batch", [
    ("LSTM", 256, 3, 1), ("LSTM", 128, 4, 10), ("GRU", 256, 2, 3), ("GRU", 64, 3, 16), ("RNN", 128, 2, 5),
    ("LSTM", 32, 2, 7)])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_stack_matches_onnxruntime(op, hidden, layers, batch, direction):
    model, feeds = stacked_layers_model(op, hidden, layers, 37, batch, direction=direction, lengths=True, states=True)
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True)
    assert [r.lowering for r in compiled.report()] == ["wavefront"] * layers
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


@pytest.mark.parametrize("op,hidden,layers,batch,dtype", [
    ("LSTM", 256, 3, 1, "float16"), ("GRU", 256, 2, 3, "bfloat16"), ("RNN", 128, 2, 5, "float16"),
    ("LSTM", 128, 4, 10, "bfloat16")])
def test_16_bit_stack_matches_onnxruntime(op, hidden, layers, batch, dtype):
    model, feeds = stacked_layers_model(op, hidden, layers, 37, batch, lengths=True, states=True)
    half, ours, ref, exact = sixteen_bit_model(model, feeds, dtype)
    compiled = persist_rnn.compile(half, "cuda", measure=False, wavefront=True)
    assert [r.lowering for r in compiled.report()] == ["wavefront"] * layers
    got = [g.astype("float32") for g in compiled.run(ours)]
    assert max_rel_error(got, ort_run(ref, exact)) <= BOUNDS["fp16" if dtype == "float16" else "bf16"]


@pytest.mark.parametrize("name", ["char_rnn", "speech_gru", "text_classifier"])
@pytest.mark.parametrize("batch", [1, 8])
def test_shipped_examples_fused_match_onnxruntime(name, batch):
    path = f"examples/{name}.onnx"
    shipped = persist_rnn.compile(path, "llvm")
    feeds = inputs_at_batch(shipped, f"examples/{name}_inputs.npz", batch)
    compiled = persist_rnn.compile(path, "cuda", measure=False, wavefront=True,
                                   shapes={k: v.shape for k, v in feeds.items()})
    assert "wavefront" in [r.lowering for r in compiled.report()]
    assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(path), feeds)) <= 1e-4


def _stack_space(model, batch):
    """(stacks as tune sees them, the config space of the first) for `model` on this GPU."""
    from tvm import relax

    from persist_rnn.frontend import from_onnx
    from persist_rnn.schedule.gpu import gpu_model
    from persist_rnn.schedule.planner import target_arch
    from persist_rnn.stack_tuning import fusable_stacks
    from persist_rnn.targets import as_target
    from persist_rnn.transform.layer_wavefront import fuse_stacks
    from tir_templates.wavefront.plan import stack_configs

    arch = target_arch(as_target("cuda"))
    mod = fuse_stacks(relax.transform.FoldConstant()(from_onnx(model)), "cuda", gpu_model(arch).num_sms, arch=arch)
    stacks = fusable_stacks(mod)
    return stacks, stack_configs(stacks[0][0], batch, gpu_model(arch).num_sms), arch


@pytest.mark.parametrize("index", range(10))
def test_every_config_of_the_space_matches_onnxruntime(index, tmp_path):
    """The char-RNN's stack at each of its ten configs (warps x cluster, lane updates or not),
    built as a tuning log that names the config makes it (stack_tuning._log_naming), with lengths
    and initial states."""
    from persist_rnn.stack_tuning import _log_naming

    model, feeds = stacked_layers_model("LSTM", 128, 3, 29, 3, lengths=True, states=True)
    stacks, space, arch = _stack_space(model, 3)
    space = [c for c in space if c.batch_tiles == 1]  # the batch in tiles: test_batch_tiles_match_onnxruntime
    assert len(space) == 10  # six shapes, four of them also with lane updates
    log = _log_naming(str(tmp_path / "none.jsonl"), stacks, [space[index]], arch, "fp32", str(tmp_path))
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True, tuning_log=log)
    assert compiled.report()[0].config == space[index].as_dict()
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


@pytest.mark.parametrize("op,hidden,layers,batch,direction", [
    ("LSTM", 128, 3, 1, "forward"), ("GRU", 256, 2, 1, "reverse"), ("GRU", 64, 3, 2, "forward"),
    ("RNN", 128, 2, 5, "forward"), ("LSTM", 32, 2, 7, "reverse")])
def test_lane_updates_match_onnxruntime(op, hidden, layers, batch, direction, tmp_path):
    """Each cell at the first config of its space whose lanes update their units themselves
    (lanes.py: the sums never meet in shared memory), with lengths and initial states: built as
    a tuning log that names the config makes it."""
    from persist_rnn.stack_tuning import _log_naming

    model, feeds = stacked_layers_model(op, hidden, layers, 29, batch, direction=direction, lengths=True, states=True)
    stacks, space, arch = _stack_space(model, batch)
    cfg = next(c for c in space if c.lane_updates)
    log = _log_naming(str(tmp_path / "none.jsonl"), stacks, [cfg], arch, "fp32", str(tmp_path))
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True, tuning_log=log)
    assert compiled.report()[0].config == cfg.as_dict()
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


@pytest.mark.parametrize("op,hidden,layers,batch,tiles,lanes,direction", [
    ("LSTM", 256, 3, 10, 2, True, "forward"), ("GRU", 256, 2, 8, 4, True, "reverse"),
    ("LSTM", 64, 2, 9, 3, False, "reverse"), ("RNN", 128, 2, 5, 5, False, "forward"),
    ("GRU", 64, 3, 16, 2, False, "forward")])
def test_batch_tiles_match_onnxruntime(op, hidden, layers, batch, tiles, lanes, direction, tmp_path):
    """The batch in tiles, each on clusters of its own (the ticket names layer and tile; the
    last tile short where the batch does not divide), with lengths and initial states: built as
    a tuning log that names the config makes it."""
    from persist_rnn.stack_tuning import _log_naming

    model, feeds = stacked_layers_model(op, hidden, layers, 29, batch, direction=direction, lengths=True, states=True)
    stacks, space, arch = _stack_space(model, batch)
    cfg = next(c for c in space if c.batch_tiles == tiles and c.lane_updates == lanes)
    log = _log_naming(str(tmp_path / "none.jsonl"), stacks, [cfg], arch, "fp32", str(tmp_path))
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True, tuning_log=log)
    assert compiled.report()[0].config == cfg.as_dict()
    assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4


@pytest.mark.parametrize("op,hidden,layers", [("LSTM", 128, 3), ("GRU", 64, 2)])
def test_runtime_batch_stack_matches_onnxruntime_at_each_bucket_edge(op, hidden, layers):
    """A stack with a symbolic batch, fused for every bucket the wavefront takes (wavefront=True;
    "auto" keeps the GRU's apart): every fused bucket at its smallest and largest batch, and the
    batches past them (a kernel a layer), with lengths (empty rows among them) and initial states."""
    model, _ = stacked_layers_model(op, hidden, layers, 23, "batch", lengths=True, states=True)
    compiled = persist_rnn.compile(model, "cuda", measure=False, wavefront=True)
    buckets = compiled.report()[0].stack_buckets
    fused = [b["max_batch"] for b in buckets if b["fused"]]
    assert fused and fused[0] == 1, buckets
    edges, low = set(), 1
    for top in fused:
        edges |= {low, top}
        low = top + 1
    for batch in sorted(edges | {low, 2 * low + 1}):
        _, feeds = stacked_layers_model(op, hidden, layers, 23, batch, lengths=True, states=True)
        assert max_rel_error(compiled.run(feeds), ort_run(model, feeds)) <= 1e-4, batch


def test_shipped_char_rnn_as_shipped_matches_onnxruntime():
    """The char-RNN as shipped (symbolic batch, compile's default): its wavefront buckets and the
    layers' own kernels past them."""
    path = "examples/char_rnn.onnx"
    compiled = persist_rnn.compile(path, "cuda", measure=False)
    assert any(b["fused"] for b in compiled.report()[0].stack_buckets)
    for batch in (1, 2, 3, 4, 16, 17, 40):
        feeds = inputs_at_batch(compiled, "examples/char_rnn_inputs.npz", batch)
        assert max_rel_error(compiled.run(feeds), ort_run(onnx.load(path), feeds)) <= 1e-4, batch
