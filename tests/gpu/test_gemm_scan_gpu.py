"""The GEMM scan on the GPU (marked gpu): its kernel against the reference scan's CPU run for each
cell form, precision and batch past one CTA tile, and for each wider tile of the step GEMM, ragged
lengths (one empty); and a layer the planner gives it, compiled as a user compiles it, against
ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, cuda_source, max_rel_error, reference
from persist_rnn.schedule.gpu import compute_capability, present_gpu
from persist_rnn.schedule.measure import as_params, build_kernel, kernel_arrays
from persist_rnn.targets import as_target
from tir_templates.gemm_scan import gemm_scan, gemm_scan_slots
from tir_templates.reference import reference_scan
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

pytestmark = pytest.mark.gpu

#: the bound of each GEMM precision over Y's scale: 3xTF32 is fp32's; TF32 and the 16-bit mma
#: round h(t-1) and R to 10 and 7-10 mantissa bits, over 64-160 products a sum
BOUNDS = {"float32": 1e-4, "tf32": 5e-3, "float16": 5e-3, "bfloat16": 3e-2}

CASES = [
    # (cell, direction, hidden, batch, dtype, build precision, spec flags)
    ("lstm", "bidirectional", 64, 70, "float32", "fp32", dict(peepholes=True, clip=5.0)),  # two tiles of rows
    ("gru", "reverse", 96, 20, "float32", "fp32", {}),
    ("lstm", "forward", 160, 9, "float32", "tf32", dict(input_forget=True)),
    ("gru", "bidirectional", 128, 33, "float16", "fp32", {}),
    ("lstm", "forward", 64, 16, "bfloat16", "fp32", {}),
    ("rnn", "forward", 68, 5, "float32", "fp32", {}),
]


def check_against_the_reference(spec: CellSpec, batch: int, precision: str, plan: dict | None = None,
                                wgmma: dict | None = None):
    """The scan's Y, Y_h (Y_c) on the GPU, its kernels launched early (each placed while the one
    before runs, as the pass has it where the step GEMM's tiles are wider; launched one after
    another they gave the same outputs in docs/data/gemm-scan-h200.jsonl runs H and I), against the
    reference scan's on the CPU, lengths ragged."""
    arrays = kernel_arrays(spec, batch, 6, seed=5, slots=gemm_scan_slots(spec, batch, wgmma))
    arrays[3] = np.random.default_rng(batch).integers(0, 7, batch).astype("int32")
    arrays[3][0] = 0  # an empty sequence
    if spec.hidden_size >= 256:  # R of N(0, 1/H): at R's std of 0.3 a layer this wide is chaotic, and any
        arrays[1] /= 0.3 * spec.hidden_size ** 0.5  # rounding of h grows past the bounds (either GEMM)
    if spec.dtype != "float32":  # a 16-bit layer's R is 16-bit values
        arrays[1] = arrays[1].astype(spec.dtype).astype("float32")
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    func = gemm_scan(spec, batch, precision=precision, plan=plan, early_launch=True, wgmma=wgmma)
    lib = build_kernel(func.with_attr("global_symbol", "main"), as_target("cuda") if wgmma else tvm.target.Target("cuda"))
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
    lib["main"](*tensors)
    bound = BOUNDS["tf32" if precision == "tf32" else spec.dtype]
    for name, g, w in zip(("Y", "Y_h", "Y_c"), tensors[7:10], want[7:10]):
        if name == "Y_c" and spec.cell != "lstm":
            continue
        g, w = g.numpy().astype("float32"), w.astype("float32")
        assert np.abs(g - w).max() <= bound * max(np.abs(w).max(), 1e-6), name


@pytest.mark.parametrize("cell,direction,hidden,batch,dtype,precision,flags", CASES, ids=str)
def test_gemm_scan_matches_the_reference(cell, direction, hidden, batch, dtype, precision, flags):
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=1, dtype=dtype, **flags)
    check_against_the_reference(spec, batch, precision)


@pytest.mark.parametrize("cell,hidden,batch,dtype,tile", [
    ("lstm", 40, 70, "float32", "64x80"),  # 160 gate columns: two tiles wide, two of rows
    ("gru", 36, 66, "float16", "64x96"),  # 108 columns: a ragged second tile
    ("lstm", 48, 65, "bfloat16", "64x128"),  # 192 columns: a ragged second tile
], ids=str)
def test_gemm_scan_in_wider_tiles_matches_the_reference(cell, hidden, batch, dtype, tile):
    """The step GEMM in the wider tiles `gemm_scan_cost.step_plan` gives past one wave of 64 x 64."""
    spec = CellSpec(cell, 8, hidden, "bidirectional" if cell == "gru" else "forward", linear_before_reset=1,
                    dtype=dtype)
    check_against_the_reference(spec, batch, "fp32", {"bk": 64, "k_groups": 2, "stages": 0, "tile": tile})


@pytest.mark.parametrize("cell,direction,hidden,batch,dtype,wgmma", [
    ("lstm", "forward", 256, 40, "float16", {"bm": 64, "tile_n": 128, "splits": 2}),  # ragged rows of a 64-row tile
    ("gru", "bidirectional", 192, 70, "bfloat16", {"bm": 64, "tile_n": 128, "splits": 3}),  # two tiles of rows
    ("lstm", "reverse", 128, 130, "float16", {"bm": 128, "tile_n": 96, "splits": 1}),  # ragged columns
    ("rnn", "forward", 512, 16, "bfloat16", {"bm": 64, "tile_n": 128, "splits": 8}),
    ("gru", "forward", 1280, 24, "float16", {"bm": 64, "tile_n": 128, "splits": 1, "stages": 9}),  # a ring 9 deep
    ("lstm", "bidirectional", 320, 8, "bfloat16", {"bm": 64, "tile_n": 128, "splits": 1, "stages": 6}),  # 5 k-tiles, 6 slots
], ids=str)
def test_gemm_scan_on_wgmma_matches_the_reference(cell, direction, hidden, batch, dtype, wgmma):
    """The step GEMM on Hopper's wgmma in each CTA tile, split of K and ring depth (sm_90a only)."""
    if compute_capability(present_gpu().arch) != 90:
        pytest.skip("wgmma needs a Hopper GPU")
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=1, dtype=dtype)
    check_against_the_reference(spec, batch, "fp32", wgmma=wgmma)


def test_a_layer_past_the_chip_at_a_large_batch_runs_the_gemm_scan():
    """LSTM H=1280 B=128 fp32: no config holds its weights on chip, and the planner gives it the
    GEMM scan; lengths ragged (one empty), initial states, peepholes."""
    batch = 128
    lens = [(7 * i) % 8 for i in range(batch)]
    case = LayerCase(op="LSTM", hidden_size=1280, input_size=64, batch=batch, seq_len=7, seq_lens=lens,
                     initial_h=True, initial_c=True, peepholes=True, weight_scale=1.0 / 1280 ** 0.5)
    model, feeds, want = reference(case)
    built = persist_rnn.compile(model, "cuda", measure=False)
    assert [r.lowering for r in built.report()] == ["gemm_scan"], built.report()[0].line()
    assert "* 88)" in cuda_source(built.executable)  # the step GEMM in 64 x 80 tiles (w_t's rows 88 words apart)
    assert max_rel_error(built.run(feeds), want) <= 1e-4


def test_a_16_bit_layer_past_the_chip_runs_the_wgmma_step():
    """fp16 LSTM H=2560 B=64 on a Hopper GPU: its persistent configs read weights from global memory,
    and the planner gives it the GEMM scan with its step GEMM on wgmma (a build for sm_90a), priced
    shorter than its streamed-fragments configs; lengths ragged, initial states; against ONNX
    Runtime's fp32 run of the same fp16 weights."""
    if compute_capability(present_gpu().arch) != 90:
        pytest.skip("wgmma needs a Hopper GPU")
    batch = 64
    case = LayerCase(op="LSTM", hidden_size=2560, input_size=64, batch=batch, seq_len=6, dtype="float16",
                     seq_lens=[(5 * i) % 7 for i in range(batch)], initial_h=True, initial_c=True,
                     weight_scale=1.0 / 2560 ** 0.5)
    model, feeds, want = reference(case)
    built = persist_rnn.compile(model, "cuda", measure=False)
    (layer,) = built.report()
    assert layer.lowering == "gemm_scan" and "wgmma" in layer.line(), layer.line()
    assert "wgmma.mma_async" in cuda_source(built.executable)
    assert max_rel_error(built.run(feeds), want) <= BOUNDS["float16"]
