"""An fp16 or bf16 layer crosses no cast kernel on CUDA: its X reaches the projection GEMM as it
is, and its Y, Y_h and Y_c leave the kernels in its dtype (tir_templates/signature.py; an LSTM
walking batch chunks keeps C in fp32 in its exchange buffer, persistent/cell_state.py). Each cast
launch cost ~2 us on the H100, a twentieth of an fp16 LSTM H=64 B=1 layer (docs/benchmarks.md)."""
from __future__ import annotations

import re
import shutil

import pytest

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")

_CALL = re.compile(r"^\s*call\s+(\S+)\s+in:", re.M)


def kernels_called(model, target) -> list[str]:
    """The kernels the compiled model's VM launches, in order (its builtins left out)."""
    compiled = persist_rnn.compile(model, target, measure=False)
    return [name for name in _CALL.findall(compiled.executable.as_text()) if not name.startswith("vm.builtin")]


@pytest.mark.parametrize("op,dtype,layout", [("LSTM", "float16", 0), ("GRU", "bfloat16", 1), ("RNN", "float16", 0),
                                             ("LSTM", "bfloat16", 1)])
def test_a_16_bit_layer_launches_what_the_fp32_layer_does(op, dtype, layout):
    target = {"kind": "cuda", "arch": "sm_90"}
    case = LayerCase(op=op, seq_len=10, batch=2, input_size=32, hidden_size=64, layout=layout)
    fp32 = kernels_called(make_model(case)[0], target)
    half = kernels_called(make_model(LayerCase(**{**case.__dict__, "dtype": dtype}))[0], target)
    assert half == fp32
    assert not any("cast" in name for name in fp32), fp32
