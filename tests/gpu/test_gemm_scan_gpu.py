"""The GEMM scan on the GPU (marked gpu): its kernel against the reference scan's CPU run for each
cell form, precision and batch past one CTA tile, ragged lengths (one empty); and a layer the
planner gives it, compiled as a user compiles it, against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, max_rel_error, reference
from persist_rnn.schedule.measure import as_params, build_kernel, kernel_arrays
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


@pytest.mark.parametrize("cell,direction,hidden,batch,dtype,precision,flags", CASES, ids=str)
def test_gemm_scan_matches_the_reference(cell, direction, hidden, batch, dtype, precision, flags):
    spec = CellSpec(cell, 8, hidden, direction, linear_before_reset=1, dtype=dtype, **flags)
    arrays = kernel_arrays(spec, batch, 6, seed=5, slots=gemm_scan_slots(spec, batch))
    arrays[3] = np.random.default_rng(batch).integers(0, 7, batch).astype("int32")
    arrays[3][0] = 0  # an empty sequence
    if dtype != "float32":  # a 16-bit layer's R is 16-bit values
        arrays[1] = arrays[1].astype(dtype).astype("float32")
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    func = gemm_scan(spec, batch, precision=precision)
    lib = build_kernel(func.with_attr("global_symbol", "main"), tvm.target.Target("cuda"))
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
    lib["main"](*tensors)
    bound = BOUNDS["tf32" if precision == "tf32" else dtype]
    for name, g, w in zip(("Y", "Y_h", "Y_c"), tensors[7:10], want[7:10]):
        if name == "Y_c" and cell != "lstm":
            continue
        g, w = g.numpy().astype("float32"), w.astype("float32")
        assert np.abs(g - w).max() <= bound * max(np.abs(w).max(), 1e-6), name


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
    assert max_rel_error(built.run(feeds), want) <= 1e-4
