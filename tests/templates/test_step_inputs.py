"""A step that computes its own input projections (`Layout.STEP_INPUTS`, persistent/step_inputs.py),
checked on the CPU: its twin, fed x, W^T and Wb, must compute what the same config's twin
computes from xw = x W^T + Wb (W rounded to the layer's 16 bits, as its fragments hold it), with
ragged and empty sequences, a batch that ends inside a tile, and the barrier counts the GPU's
counter would see; and a config or layer it cannot serve is refused with the reason."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from persist_rnn.schedule.measure import kernel_arrays
from tir_templates.config import Config
from tir_templates.persistent import BARRIER_FLAG_WORD, emulated_persistent_kernel
from tir_templates.persistent.checks import UnsupportedLayer
from tir_templates.persistent.step_inputs import step_inputs_problem
from tir_templates.spec import CellSpec
from templates.llvm_runs import run_on_llvm

H, STEPS = 16, 5

CASES = [
    # (cell, input size, hidden size, batch, config): grid batch tiles of 8 rows, one n-tile, 16-bit mma
    ("lstm", 32, 32, 10, Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2)),  # ragged second tile
    ("gru", 48, 16, 8, Config(8, 32, 16, 8, "bfloat16", batch_tile=8, mma_k_split=1)),  # padded row tile, 3 k-tiles
    ("rnn", 64, 64, 3, Config(16, 32, 16, 8, "float16", batch_tile=8, mma_k_split=4)),  # four splits, 5 rows pad
]


def _x_and_weights(spec, batch, dtype, seed):
    """x in the layer's dtype, W^T rounded to it (as the kernel's fragments hold W), Wb."""
    rng = np.random.default_rng(seed)
    rounded = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    gh = spec.num_directions * spec.num_gates * spec.hidden_size
    x = (rng.standard_normal((STEPS, batch, spec.input_size)) * 0.5).astype(rounded)
    wt = (rng.standard_normal((spec.input_size, gh)) * 0.2).astype(rounded).astype("float32")
    wb = (rng.standard_normal(gh) * 0.2).astype("float32")
    return x, wt, wb


@pytest.mark.parametrize("cell,inputs,hidden,batch,cfg", CASES, ids=lambda v: str(v))
def test_the_steps_own_projection_matches_the_projection_it_replaces(cell, inputs, hidden, batch, cfg):
    spec = CellSpec(cell, inputs, hidden, "forward", linear_before_reset=(cell == "gru"), dtype=cfg.weight_dtype)
    assert not step_inputs_problem(spec, cfg)
    arrays = kernel_arrays(spec, batch, STEPS, seed=4, slots=cfg.exchange_slots(spec))
    arrays[1] = arrays[1].astype(ml_dtypes.bfloat16 if cfg.weight_dtype == "bfloat16" else np.float16).astype("float32")
    arrays[3] = np.random.default_rng(batch).integers(0, STEPS + 1, batch).astype("int32")  # ragged, some empty
    x, wt, wb = _x_and_weights(spec, batch, cfg.weight_dtype, seed=batch)
    arrays[0] = (x.astype("float32").reshape(STEPS * batch, inputs) @ wt + wb).reshape(arrays[0].shape)
    want = run_on_llvm(emulated_persistent_kernel(spec, cfg), [a.copy() for a in arrays])
    got = run_on_llvm(emulated_persistent_kernel(spec, cfg, True), [x, wt, wb] + [a.copy() for a in arrays[1:]])
    outputs = 3 if cell == "lstm" else 2
    for name, g, w in zip(("Y", "Y_h", "Y_c")[:outputs], got[9:9 + outputs], want[7:7 + outputs]):
        np.testing.assert_allclose(g.astype("float32"), w.astype("float32"), atol=2e-3, rtol=0, err_msg=name)
    # the same config's two kernels differ only in how the inputs' sums are ordered: their Y agree
    # far inside the 16-bit bound, which random inputs miss by a wide margin
    assert float(np.abs(got[9].astype("float32") - want[7].astype("float32")).max()) < 2e-3
    ws = got[13]
    assert ws[BARRIER_FLAG_WORD] == 0, "a barrier's target does not match the CTAs that reach it"
    tiles = -(-batch // cfg.batch_tile)
    assert list(ws[:tiles]) == [(1 + STEPS) * cfg.ctas_per_direction(spec)] * tiles


def test_a_config_or_layer_it_cannot_serve_is_refused_with_the_reason():
    tiles = Config(8, 32, 16, 8, "float16", batch_tile=8, mma_k_split=2)
    lstm = CellSpec("lstm", 32, 32, "forward", dtype="float16")
    assert "direction reverse" in step_inputs_problem(CellSpec("lstm", 32, 32, "reverse", dtype="float16"), tiles)
    assert "input_size 24" in step_inputs_problem(CellSpec("lstm", 24, 32, "forward", dtype="float16"), tiles)
    assert "16-bit tensor-core step" in step_inputs_problem(
        CellSpec("lstm", 32, 32, "forward"), Config(8, 32, 16, 8, batch_tile=8, mma_k_split=2))
    assert "16-bit tensor-core step" in step_inputs_problem(lstm, Config(8, 32, 16, 16, "float16", batch_tile=16,
                                                                         mma_k_split=2))
    assert "shared memory" in step_inputs_problem(lstm, tiles, shared_limit=1024)
    with pytest.raises(UnsupportedLayer, match="direction reverse"):
        emulated_persistent_kernel(CellSpec("lstm", 32, 32, "reverse", dtype="float16"), tiles, True)
