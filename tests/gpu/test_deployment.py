"""An exported model loads and runs on a machine without a CUDA compiler (marked gpu; issue 18).

TVM compiles the kernels for the target's arch at build time (NVRTC: a cubin; nvcc: a fatbin)
and `export_library` embeds that binary, so loading needs TVM's runtime and the CUDA driver.
Checked here: the library holds machine code (cubin sections or a fatbin), and a fresh process
with nvcc off PATH, CUDA_HOME unset and TVM's compile callback made to fail loads it with
`persist_rnn.load` and gives the answer of the process that built it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error

pytestmark = pytest.mark.gpu

_LOADER = r"""
import sys
import numpy as np
import tvm  # registers TVM's compile callback, which is then replaced by one that refuses
import tvm_ffi

@tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
def _no_compiler(*args):
    raise RuntimeError("the deployment test forbids compiling CUDA")

import persist_rnn
data = np.load(sys.argv[2])
compiled = persist_rnn.load(sys.argv[1])
outs = compiled.run({k[3:]: data[k] for k in data.files if k.startswith("in_")})
np.savez(sys.argv[3], *outs)
"""


def _without_cuda_compiler(env):
    """`env` with every PATH entry that holds nvcc removed and the CUDA toolkit variables unset."""
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if p and not os.path.exists(os.path.join(p, "nvcc"))]
    out = {k: v for k, v in env.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "TVM_CUDA_COMPILE_MODE")}
    out["PATH"] = os.pathsep.join(paths)
    return out


def test_exported_library_runs_without_a_cuda_compiler(tmp_path):
    model, feeds = make_model(LayerCase(op="GRU", hidden_size=64, input_size=32, batch=3, seq_len=9,
                                        linear_before_reset=1))
    compiled = persist_rnn.compile(model, "cuda", measure=False)
    assert [r.lowering for r in compiled.report()] == ["persistent"]
    want = compiled.run(feeds)
    lib = str(tmp_path / "gru.so")
    compiled.export_library(lib)
    blob = open(lib, "rb").read()
    assert b".nv.info" in blob or b"\x50\xed\x55\xba" in blob, "no cubin or fatbin in the exported library"
    np.savez(tmp_path / "in.npz", **{f"in_{k}": v for k, v in feeds.items()})
    (tmp_path / "load.py").write_text(_LOADER)
    env = _without_cuda_compiler(dict(os.environ))
    assert shutil.which("nvcc", path=env["PATH"]) is None
    proc = subprocess.run([sys.executable, str(tmp_path / "load.py"), lib, str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    assert max_rel_error([got[f"arr_{k}"] for k in range(len(want))], want) == 0.0
