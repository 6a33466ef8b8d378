"""The GPU box's wavefront tools still fit the kernel: `wavefront_phases.py`'s probes and
`wavefront_budget.py`'s ablations are anchored on lines of kernel.py's `one_step`, which a
kernel change can move, and `prebuilt_stacks.py` builds here what the GPU box only times. Each
is built for CUDA (sm_90) without a GPU, so a broken anchor shows in CI, not on the box."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import tvm

from tir_templates.spec import CellSpec
from tir_templates.wavefront import StackConfig

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

SPECS = [CellSpec("lstm", 64, 64, node=f"l{l}") for l in range(2)]
#: every batch row's sums live (B=1, with and without lane updates) and row by row (B=16)
CONFIGS = [StackConfig(256, 2, 16, 1), StackConfig(256, 2, 16, 1, True), StackConfig(256, 2, 16, 16)]


def cuda_source(func) -> str:
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    return lib.mod.imports[0].inspect_source()


def test_phase_probes_fit_both_step_branches():
    """Each of the ten stamps is taken in the step whose sums stay live and in the row-by-row one."""
    import wavefront_phases as phases

    with phases.patched_kernel("kernel_probed", phases.STAMPS, phases.PROBES) as kernel:
        for cfg in (CONFIGS[0], CONFIGS[2]):
            body = cuda_source(kernel(SPECS, cfg))
            assert all(f"prnn_probe({k})" in body for k in range(10)) and "prnn_probe_flush(" in body
    assert phases.phase_names("LSTM", 64, 2, CONFIGS[0].as_dict()) == phases.PHASES
    assert phases.phase_names("LSTM", 64, 2, CONFIGS[2].as_dict()) == phases.PHASES_ROW_BY_ROW


@pytest.mark.parametrize("parts,gone", [(("dot",), ["prnn_shfl_xor(", "prnn_shfl("]),
                                        (("dot", "exchange"), ["prnn_dsmem_wait(", "prnn_dsmem_send("])])
def test_ablations_take_their_parts_out_of_both_step_branches(parts, gone):
    import wavefront_budget as budget

    with budget.kernel_without(parts) as kernel:
        for cfg in CONFIGS:
            source = cuda_source(kernel(SPECS, cfg))
            body = source[source.index("extern \"C\" __global__"):]
            assert not any(name in body for name in gone), (cfg, parts)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_prebuilt_stacks_exports_each_named_build(tmp_path):
    import prebuilt_stacks

    prebuilt_stacks.build(str(tmp_path), "LSTM:64:2:1", ["per_layer", "w8c2r16L", "probed-w8c2r16"])
    d = tmp_path / "LSTM_64_2_1"
    assert (d / "model.onnx").exists() and (d / "per_layer.so").exists()
    assert json.loads((d / "probed-w8c2r16.phases.json").read_text())[2] == "input"
    report = json.loads((d / "w8c2r16L.so.json").read_text())["report"]
    assert report[0]["lowering"] == "wavefront" and report[0]["config"]["lane_updates"] is True
    with pytest.raises(SystemExit, match="expected per_layer"):
        prebuilt_stacks.build(str(tmp_path), "LSTM:64:2:1", ["w8c2"])
    with pytest.raises(SystemExit, match="working tree's kernel only"):
        prebuilt_stacks.build(str(tmp_path), "LSTM:64:2:1", ["probed-wavefront/w8c2r16"])
    with pytest.raises(SystemExit, match="the probes time one tile"):
        prebuilt_stacks.build(str(tmp_path), "LSTM:64:2:1", ["probed-w8c2r16t2"])
    with pytest.raises(SystemExit, match="expected w<warps>"):  # refused before anything is built
        prebuilt_stacks.build_example(str(tmp_path), "char_rnn:2", ["w8c4r16t2", "probed-w8c4r16"])
    assert prebuilt_stacks.example_config("w8c4r16Lt3", 8) == StackConfig(256, 4, 16, 3, True, 3)
