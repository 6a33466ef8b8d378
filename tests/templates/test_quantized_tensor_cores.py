"""An fp32 layer of int8 weights (a quantized model's, `CellSpec.int8_weights`) on the 16-bit mma:
its weights held in fp16, h(t-1) rounded to fp16 for the mma, every other value fp32
(`config.tensor_core_dtypes`). The CPU twin of each kernel path against the reference scan on
the fp32 weights, within the int8 weights' bound; and the rules that keep such configs to
quantized layers."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from persist_rnn.schedule.gpu import gpu_model
from persist_rnn.schedule.measure import kernel_arrays
from persist_rnn.schedule.precision import INT8_WEIGHTS_TOLERANCE
from persist_rnn.schedule.space import candidate_configs
from tir_templates.config import Config, problems
from tir_templates.persistent import BARRIER_FLAG_WORD, emulated_persistent_kernel
from tir_templates.reference import reference_scan
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

I, STEPS = 8, 5

CASES = [
    # (cell, direction, batch, hidden, config)
    ("lstm", "bidirectional", 3, 16, Config(4, 32, 16, 3, "float16", mma_k_split=1)),  # grid, 16-bit exchange
    ("lstm", "forward", 7, 16, Config(4, 32, 16, 3, "float16", mma_k_split=1, stamped=True)),  # stamped halves, chunks
    ("lstm", "forward", 5, 32, Config(8, 32, 16, 2, "float16", mma_k_split=2, smem_runs=1)),  # A fragments in shared
    ("lstm", "bidirectional", 5, 16, Config(4, 32, 16, 2, "float16", cluster=True, batch_tile=2, mma_k_split=1)),
    ("gru", "reverse", 5, 16, Config(8, 32, 16, 2, "float16", mma_k_split=1)),  # padded row tile, three chunks
    ("rnn", "forward", 4, 16, Config(4, 32, 16, 4, "float16", mma_k_split=1)),
]


@pytest.mark.parametrize("cell,direction,batch,hidden,cfg", CASES, ids=str)
def test_fp16_mma_of_a_quantized_fp32_layer_matches_the_reference(cell, direction, batch, hidden, cfg):
    spec = CellSpec(cell, I, hidden, direction, linear_before_reset=(cell == "gru"), int8_weights=True)
    assert not problems(spec, cfg, 132, max_cluster=16), problems(spec, cfg, 132, max_cluster=16)
    assert cfg.f16_mma() and cfg.h16_exchange(spec)
    arrays = kernel_arrays(spec, batch, STEPS, seed=3, slots=cfg.exchange_slots(spec))
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    want = run_on_llvm(reference_scan(spec, "llvm"), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    assert got[11][BARRIER_FLAG_WORD] == 0, "a barrier's arrivals would not match on the GPU"
    outputs = list(zip(("Y", "Y_h", "Y_c")[:3 if cell == "lstm" else 2], got[7:10], want[7:10]))
    scale = max(np.abs(w).max() for _, _, w in outputs)
    assert scale > 0.05  # the layer did compute
    for name, g, w in outputs:
        assert g.dtype == np.float32, name  # the layer's outputs stay fp32
        assert np.abs(g - w).max() <= INT8_WEIGHTS_TOLERANCE * scale, name


def test_only_a_quantized_fp32_layer_takes_fp16_weights_on_the_tensor_cores():
    """A plain fp32 layer may not lose fp32's precision: its fp16 mma configs are problems, and the
    space offers none; a quantized one's space offers them beside its fp32 and int8 configs. bf16
    weights stay a bf16 layer's own."""
    plain = CellSpec("lstm", 256, 256)
    quantized = dataclasses.replace(plain, int8_weights=True, int8_rows=True)
    cfg = Config(8, 32, 16, 8, "float16", mma_k_split=2)
    assert any("fp32 layers of int8 weights" in p for p in problems(plain, cfg, 132))
    assert not problems(quantized, cfg, 132)
    assert problems(quantized, dataclasses.replace(cfg, weight_dtype="bfloat16"), 132)
    gpu = gpu_model("sm_90")
    assert not any(c.f16_mma() for c in candidate_configs(plain, gpu, 16))
    offered = candidate_configs(quantized, gpu, 16)
    assert any(c.f16_mma() for c in offered) and any(c.int8_weights() for c in offered)
    assert all(c.mma_precision == "3xtf32" for c in offered if c.f16_mma())
