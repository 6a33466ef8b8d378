"""`benchmarks/configs_in_turn.py`'s config strings: what each flag sets, and a clear error for
anything else (the script runs on the GPU box, where a typo would cost device time)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

from configs_in_turn import parse_config, parse_gemm  # noqa: E402

from tir_templates.config import Config  # noqa: E402


def test_config_strings():
    assert parse_config("16x8x4:cluster:dsmem") == Config(16, 8, 4, 1, cluster=True, dsmem=True)
    assert parse_config("8x16x2:stamped:float16") == Config(8, 16, 2, 1, "float16", stamped=True)
    assert parse_config("32x8x4:cluster:tile=2:chunk=2") == Config(32, 8, 4, 2, cluster=True, batch_tile=2)
    assert parse_config("8x32x16:bfloat16:mma=8:chunk=20") == Config(8, 32, 16, 20, "bfloat16", mma_k_split=8)
    assert parse_config("8x32x16:tf32:mma=4") == Config(8, 32, 16, 1, mma_k_split=4, mma_precision="tf32")


@pytest.mark.parametrize("text,says", [("16x8", "TILExGROUPxROWS"), ("16x8x4:dsmen", "unknown flag 'dsmen'"),
                                       ("16x8x4:chunk=two", "unknown flag 'chunk=two'"),
                                       ("8x32x16:mma", "unknown flag 'mma'")])
def test_bad_config_strings_are_named(text, says):
    with pytest.raises(SystemExit, match=says):
        parse_config(text)


def test_gemm_plans():
    assert parse_gemm("64/2/0") == {"bk": 64, "k_groups": 2, "stages": 0}
    assert parse_gemm("32/1/3", "fp16") == {"bk": 32, "k_groups": 1, "stages": 3}


@pytest.mark.parametrize("text,precision,says", [("64-2-0", "fp32", "not BK/GROUPS/STAGES"),
                                                  ("32/4/0", "fp16", "4 k-groups do not divide"),
                                                  ("48/1/0", "fp32", "k-slice 48")])
def test_bad_gemm_plans_are_named(text, precision, says):
    with pytest.raises(SystemExit, match=says):
        parse_gemm(text, precision)
