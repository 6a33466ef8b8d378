"""Models from TVM's PyTorch frontend: PersistentRNN finds the cells it (or torch's decomposition)
writes out step by step, and the result matches torch.

The CPU tests read the stored imports (tests/fixtures/tvm_torch, made by
make_tvm_torch_fixtures.py), so they need no torch. Where torch is installed, the live test
exports and imports afresh; on a GPU it also runs the persistent kernels.
"""
from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest
import tvm
from tvm import relax

from persist_rnn.report import layer_report
from persist_rnn.bench.layer_models import max_rel_error
from persist_rnn.transform import PersistentRNN

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
STORED = sorted(os.path.basename(p)[:-len(".tvmscript")] for p in glob.glob(os.path.join(FIXTURES, "tvm_torch", "*.tvmscript")))
CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
#: recurrent layers (one per direction) each stored case holds
LAYERS = {"lstm": 1, "lstm_2layer_bidir": 4, "gru": 1, "gru_bidir_i_eq_h": 2, "gru_2layer": 2, "rnn_tanh": 1,
          "lstmcell_loop": 1, "grucell_loop": 1}


def _stored(name):
    """(module with the weights bound as constants, x, torch's y)."""
    stem = os.path.join(FIXTURES, "tvm_torch", name)
    with open(stem + ".tvmscript") as f:
        mod = tvm.script.from_source(f.read())
    data = np.load(stem + ".npz")
    params = {k[len("param:"):]: data[k] for k in data.files if k.startswith("param:")}
    return relax.transform.BindParams("main", params)(mod), data["x"], data["y"]


def _run(mod, target, dev, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target), dev)
    out = vm["main"](tvm.runtime.tensor(x, dev))
    return (out[0] if not hasattr(out, "numpy") else out).numpy()


def test_every_case_is_stored():
    assert len(STORED) >= 12 and {s.split(".")[0] for s in STORED} == set(LAYERS)


@pytest.mark.parametrize("name", STORED)
def test_cells_become_scans_and_match_torch_on_llvm(name):
    mod, x, want = _stored(name)
    lowered = PersistentRNN("llvm")(mod)
    layers = layer_report(lowered)
    assert len(layers) == LAYERS[name.split(".")[0]], [r.line() for r in layers]
    assert all(r.lowering == "reference" and r.node.startswith("matched_") for r in layers)
    assert max_rel_error([_run(lowered, "llvm", tvm.cpu(), x)], [want]) <= 1e-4


@pytest.mark.parametrize("name", STORED)
def test_cells_become_persistent_kernels_for_cuda(name):
    mod, _, _ = _stored(name)
    lowered = PersistentRNN(CUDA, measure=False)(mod)
    layers = layer_report(lowered)
    assert len(layers) == LAYERS[name.split(".")[0]] and all(r.lowering == "persistent" for r in layers)
    tvm.compile(lowered, CUDA)  # the module, kernels and the frontend's other ops, builds for CUDA


def _live_cases():
    try:
        sys.path.insert(0, FIXTURES)
        from tvm_torch_cases import CASES
    except ImportError:  # no torch here
        return [pytest.param("lstm", "decomposed", marks=pytest.mark.skip(reason="torch is not installed"))]
    return [(name, form) for name, (_, _, forms) in CASES.items() for form in forms]


@pytest.mark.parametrize("name,form", _live_cases())
def test_live_torch_export(name, form):
    """The installed torch and TVM, end to end: a longer sequence than the fixtures, and on a GPU
    the persistent kernels themselves."""
    from tvm_torch_cases import import_case

    mod, params, x, want = import_case(name, form, seq_len=20, batch=4)
    mod = relax.transform.BindParams("main", params)(mod)
    on_gpu = tvm.cuda(0).exist
    target, dev = (CUDA, tvm.cuda(0)) if on_gpu else (tvm.target.Target({"kind": "llvm"}), tvm.cpu())
    lowered = PersistentRNN(target, measure=False)(mod)
    layers = layer_report(lowered)
    assert len(layers) == LAYERS[name] and all(r.lowering == ("persistent" if on_gpu else "reference") for r in layers)
    assert max_rel_error([_run(lowered, target, dev, x)], [want]) <= 1e-4
