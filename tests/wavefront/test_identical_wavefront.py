"""The wavefront kernel's generated code is byte for byte what ran on the H100 (the pipelined
kernel: docs/data/gpu-v27-wavefront.log), so that a restructuring can prove it changed nothing. The md5 of
each case's CUDA source (sm_90) and of its CPU twin's TVMScript must equal the values recorded in
`fixtures/wavefront_md5.json`; a deliberate kernel change re-records them
(`python tests/wavefront/test_identical_wavefront.py`) and says so in its commit, with the GPU
tests that ran since."""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import pytest
import tvm

from tir_templates.spec import CellSpec
from tir_templates.wavefront import StackConfig, emulated_stack_kernel, stack_kernel
from tir_templates.wavefront.plan import stack_configs

RECORD = pathlib.Path(__file__).parents[1] / "fixtures" / "wavefront_md5.json"
#: name -> (cell, hidden, layers, static batch, direction, (compute threads, cluster, rows a warp[,
#: lane updates[, batch tiles]])):
#: each cell, clusters of 2 to 16 CTAs; the configs the rule gave when the md5s were recorded (the
#: config space has more since)
CASES = {"lstm-h256-x3-b10": ("lstm", 256, 3, 10, "forward", (512, 16, 4)),
         "gru-h256-x2-b8": ("gru", 256, 2, 8, "forward", (512, 16, 3)),
         "lstm-h128-x3-b1": ("lstm", 128, 3, 1, "forward", (256, 8, 8)),
         "rnn-h64-x4-b4": ("rnn", 64, 4, 4, "forward", (256, 2, 4)),
         "lstm-h32-x2-reverse": ("lstm", 32, 2, 3, "reverse", (256, 2, 8)),
         # lane updates (GPU tests: docs/data/gpu-wavefront-lanes-h100.log)
         "lstm-h128-x3-b1-lanes": ("lstm", 128, 3, 1, "forward", (256, 16, 4, True)),
         "gru-h256-x2-b1-lanes": ("gru", 256, 2, 1, "forward", (256, 16, 6, True)),
         # the batch in tiles (timed on the H100 and checked against ONNX Runtime by
         # benchmarks/prebuilt_stacks.py, docs/data/wavefront-tiles-h100.jsonl; GPU tests in
         # docs/data/gpu-wavefront-tiles-h100.log)
         "lstm-h256-x3-b10-tiles2-lanes": ("lstm", 256, 3, 10, "forward", (512, 16, 4, True, 2)),
         "gru-h256-x2-b8-tiles4-lanes": ("gru", 256, 2, 8, "forward", (256, 16, 6, True, 4)),
         "lstm-h128-x3-b8-tiles4-lanes": ("lstm", 128, 3, 8, "forward", (256, 8, 8, True, 4))}


def digests(name: str) -> dict:
    cell, hidden, layers, batch, direction, (threads, cluster, rows, *lanes) = CASES[name]  # [lanes[, tiles]]
    specs = [CellSpec(cell, hidden, hidden, direction=direction, node=f"l{l}", linear_before_reset=cell == "gru")
             for l in range(layers)]
    lanes, tiles = lanes + [False, 1][len(lanes):]
    cfg = StackConfig(threads, cluster, rows, -(-batch // tiles), lanes, tiles)
    assert cfg in stack_configs(specs, batch, 132)
    lib = tvm.compile(tvm.IRModule({"main": stack_kernel(specs, cfg).with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    md5 = lambda text: hashlib.md5(text.encode()).hexdigest()
    return {"cuda": md5(lib.mod.imports[0].inspect_source()), "twin": md5(emulated_stack_kernel(specs, cfg).script())}


@pytest.mark.parametrize("name", list(CASES))
def test_wavefront_code_unchanged(name):
    assert digests(name) == json.loads(RECORD.read_text())[name]


if __name__ == "__main__" and sys.argv[1:] != ["--check"]:
    RECORD.write_text(json.dumps({name: digests(name) for name in CASES}, indent=1) + "\n")
    print(f"recorded {RECORD}")
