"""The LayerWavefront rewrite (transform/layer_wavefront.py): a stack becomes one call of the
wavefront kernel whose results the layers' uses read, checked end to end on llvm with the
kernel's CPU twin against ONNX Runtime; report() names the fused layers, or why a stack kept a
kernel a layer; the CUDA build of a model with ONNX's slash-named nodes goes through nvcc."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
import tvm
from tvm import relax

import persist_rnn
from persist_rnn.frontend import from_onnx
from persist_rnn.bench.layer_models import cuda_source, max_rel_error, ort_run, sixteen_bit_model, stacked_layers_model
from persist_rnn.transform.layer_wavefront import fuse_stacks
from tir_templates.spec import ATTR_KEY, CellSpec
from tir_templates.wavefront.plan import UnsupportedStack, plan_stack
from tir_templates.wavefront import STACK_KERNEL_ATTR

SM90 = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32,
        "max_shared_memory_per_block": 49152}


def fused_on_llvm(model):
    """The imported model with its stacks fused (the kernel's CPU twin), built for llvm."""
    mod = relax.transform.FoldConstant()(from_onnx(model))
    mod = fuse_stacks(mod, "llvm", 132, emulate=True)
    return mod, relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


def kernels(mod, attr):
    return [gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and attr in f.attrs]


@pytest.mark.parametrize("op,layers,direction", [("LSTM", 3, "forward"), ("GRU", 2, "reverse"), ("RNN", 4, "forward")])
def test_fused_stack_matches_onnxruntime(op, layers, direction):
    """Lengths with empty rows, initial states; every layer's Y_h (and Y_c) is an output, read
    between the layers' calls in the imported graph: the rewrite holds those reads back until the
    fused call, so no per-layer kernel stays."""
    model, feeds = stacked_layers_model(op, 32, layers, 6, 5, direction=direction, lengths=True, states=True)
    mod, vm = fused_on_llvm(model)
    assert len(kernels(mod, STACK_KERNEL_ATTR)) == 1 and kernels(mod, ATTR_KEY) == []
    got = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input])
    assert max_rel_error([g.numpy() for g in got], ort_run(model, feeds)) <= 1e-5


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_runtime_batch_stack_branches_on_the_batch(op):
    """A symbolic batch: the wavefront (its twin) for batches up to the last fused bucket, the
    layers' own kernels above it, each side a private function behind an If on the batch; both
    match ONNX Runtime, with lengths and initial states, at each bucket and past them."""
    model, _ = stacked_layers_model(op, 32, 2, 6, "batch", lengths=True, states=True)
    mod = relax.transform.FoldConstant()(from_onnx(model))
    mod = fuse_stacks(mod, "llvm", 132, emulate=True, bucket_bounds=(1, 2))
    assert len(kernels(mod, STACK_KERNEL_ATTR)) == 1 and len(kernels(mod, ATTR_KEY)) == 2
    sides = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function) and gv.name_hint != "main"]
    assert sorted(name.endswith("_wavefront") for name in sides) == [False, True]
    assert any(name.endswith("_own_kernels") for name in sides)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    for batch in (1, 2, 3, 7):
        _, feeds = stacked_layers_model(op, 32, 2, 6, batch, lengths=True, states=True)
        got = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input])
        assert max_rel_error([g.numpy() for g in got], ort_run(model, feeds)) <= 1e-5, batch


def test_a_stack_whose_first_layer_reads_another_width_is_fused():
    """Layer 0 reads its input projection's rows, whatever its input size: the text classifier as
    shipped (embedding 128 -> LSTM 256 -> LSTM 256, symbolic batch) fuses, and matches ONNX Runtime
    in the fused bucket and past it."""
    import onnx

    model = onnx.load("examples/text_classifier.onnx")
    mod = fuse_stacks(relax.transform.FoldConstant()(from_onnx(model)), "llvm", 132, emulate=True, bucket_bounds=(1,))
    assert len(kernels(mod, STACK_KERNEL_ATTR)) == 1
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    tokens = np.load("examples/text_classifier_inputs.npz")["tokens"]
    for batch in (1, 3):
        feeds = {"tokens": np.ascontiguousarray(tokens[:, :batch])}
        got = vm["main"](tvm.runtime.tensor(feeds["tokens"]))
        got = [got.numpy()] if hasattr(got, "numpy") else [g.numpy() for g in got]
        assert max_rel_error(got, ort_run(model, feeds)) <= 1e-4, batch


def test_the_wavefronts_buckets_are_the_smallest_batches():
    """A bucket the wavefront loses stops the fused buckets there: those above it run a kernel a
    layer too, and a stack whose smallest bucket stays apart is not fused at all."""
    from persist_rnn.transform.wavefront_buckets import StackBucket, plan_stack_buckets
    import persist_rnn.transform.wavefront_buckets as wb

    verdicts = {1: True, 2: True, 4: False, 8: True}
    real = wb._bucket
    try:
        wb._bucket = lambda specs, calls, mod, bound, *rest: StackBucket(bound, verdicts[bound], "model")
        buckets = plan_stack_buckets([], [], None, 132, "sm_90", None, asked=False, bounds=(1, 2, 4, 8))
        assert [(b.max_batch, b.fuse) for b in buckets] == [(1, True), (2, True), (4, False), (8, False), (None, False)]
        assert "B <= 4" in buckets[3].why
        verdicts[1] = False
        with pytest.raises(UnsupportedStack, match="at B=1, the smallest batch bucket: model"):
            plan_stack_buckets([], [], None, 132, "sm_90", None, asked=False, bounds=(1, 2, 4, 8))
    finally:
        wb._bucket = real


def test_an_upper_state_computed_from_a_lower_layer_keeps_the_layers_apart():
    """Layer 1 starts from layer 0's final state: the fused call could not read it."""
    model, feeds = stacked_layers_model("GRU", 32, 2, 6, 4, states=True)
    graph = model.graph
    graph.input.remove(next(i for i in graph.input if i.name == "h0_1"))
    graph.node[2].input[5] = "Yh0"  # layer 1's initial_h
    mod, _ = fused_on_llvm(model)
    assert kernels(mod, STACK_KERNEL_ATTR) == []
    assert "computed from a lower layer" in str(mod[kernels(mod, ATTR_KEY)[0]].attrs["persist_rnn.stack_reason"])


def test_report_names_the_wavefront_or_why_not():
    model, _ = stacked_layers_model("LSTM", 64, 3, 10, 2)
    target = tvm.target.Target(SM90)
    fused = persist_rnn.compile(model, target, measure=False, wavefront=True)
    assert [r.lowering for r in fused.report()] == ["wavefront"] * 3
    assert fused.report()[1].line().endswith("wavefront, early launch, layer 2 of 3 stacked (8 warps x 16 CTAs a "
                                             "layer, the batch in 2 tiles of 1 row, the cost model's fastest config)")
    apart = persist_rnn.compile(model, target, measure=False, wavefront="off")
    assert all("own kernel: the layer wavefront is off" in r.line() for r in apart.report())
    symbolic, _ = stacked_layers_model("LSTM", 64, 2, 10, "batch")
    runtime_batch = persist_rnn.compile(symbolic, target, measure=False, wavefront=True)
    assert [r.lowering for r in runtime_batch.report()] == ["persistent"] * 2  # its kernels run past the buckets
    assert all("(one wavefront kernel for B <= 64, own kernel above)" in r.line() for r in runtime_batch.report())
    assert runtime_batch.report()[0].bucket_lines()[-1] == "  stack, B >= 65: a kernel a layer (the wavefront's " \
                                                           "buckets end at B=64)"
    on_cpu = persist_rnn.compile(model, "llvm", wavefront=True)
    assert all("is a CUDA kernel" in r.stack_reason for r in on_cpu.report())
    ampere = persist_rnn.compile(model, tvm.target.Target({**SM90, "arch": "sm_80"}), measure=False, wavefront=True)
    assert all("needs thread-block clusters" in r.stack_reason for r in ampere.report())


def test_a_16_bit_stack_is_a_stack():
    """An fp16 stack: Y leaves layer 0 in fp16 and layer 1's projection reads it as it is, so the
    layers link as a stack (tir_templates/signature.py) and the wavefront takes it (its kernel's GPU
    tests: tests/gpu/test_wavefront_gpu.py); an fp64 stack it does not."""
    model, feeds = stacked_layers_model("LSTM", 64, 2, 10, 1)
    half, *_ = sixteen_bit_model(model, feeds)
    report = persist_rnn.compile(half, tvm.target.Target(SM90), measure=False, wavefront=True).report()
    assert [r.lowering for r in report] == ["wavefront"] * 2
    wide = [dataclasses.replace(CellSpec("lstm", 64, 64), dtype="float64")] * 2
    with pytest.raises(UnsupportedStack, match="takes float32, float16 and bfloat16"):
        plan_stack(wide, 1, 132)


#: how close the 16-bit wavefront's twin comes to the same model built a kernel a layer: fp16
#: agrees to fp32 rounding (without rounding h where the layer above reads it, 2.4e-4 to 4.9e-4
#: apart); bf16 to one unit in its last place at 1 (2^-8: an output rounded the other way)
APART = {"float16": 1e-5, "bfloat16": 2.0 ** -8}


@pytest.mark.parametrize("op,dtype", [("LSTM", "float16"), ("GRU", "float16"), ("RNN", "float16"), ("GRU", "bfloat16")])
def test_a_16_bit_stack_matches_onnxruntime_and_the_layers_own_kernels(op, dtype):
    """The twin of the 16-bit wavefront against ONNX Runtime (the fp32 model on the same 16-bit
    weights and inputs, within the dtype's bound: four unit roundoffs, torch_layers.BOUNDS) and against
    the same model built a kernel a layer (`APART`), whose layer 1 reads layer 0's Y stored in the
    dtype: the wavefront rounds h there too (`steps.as_layer_input`)."""
    from persist_rnn.bench.torch_layers import BOUNDS

    model, feeds = stacked_layers_model(op, 32, 2, 6, 5, lengths=True, states=True)
    half, ours, ref, exact = sixteen_bit_model(model, feeds, dtype)
    mod, vm = fused_on_llvm(half)
    assert len(kernels(mod, STACK_KERNEL_ATTR)) == 1 and kernels(mod, ATTR_KEY) == []
    got = [g.numpy().astype("float32") for g in vm["main"](*[tvm.runtime.tensor(ours[i.name]) for i in half.graph.input])]
    assert max_rel_error(got, ort_run(ref, exact)) <= BOUNDS["fp16" if dtype == "float16" else "bf16"]
    apart = persist_rnn.compile(half, "llvm").run(ours)
    assert max_rel_error(got, [np.asarray(a, "float32") for a in apart]) <= APART[dtype]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_build_of_slash_named_layers_compiles(tmp_path):
    """ONNX exporters name nodes "/lstm/LSTM_1"; the kernel's name must still be a C identifier."""
    model, _ = stacked_layers_model("LSTM", 128, 3, 10, 1)
    for node in model.graph.node:
        node.name = "/lstm/" + node.name
    built = persist_rnn.compile(model, tvm.target.Target(SM90), measure=False, wavefront=True)
    assert [r.lowering for r in built.report()] == ["wavefront"] * 3
    src = tmp_path / "m.cu"
    src.write_text(cuda_source(built.executable))
    res = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "m.cubin"), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
