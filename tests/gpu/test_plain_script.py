"""A user's plain script (no `if __name__ == "__main__":`) that compiles a static-shape model for
CUDA, so that the cost model's top-K candidates are measured, runs as `python3 script.py`."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = '''
import persist_rnn
from persist_rnn.bench.layer_models import LayerCase, make_model, max_rel_error, ort_run
model, feeds = make_model(LayerCase(op="LSTM", hidden_size=64, input_size=32, batch=4, seq_len=20))
compiled = persist_rnn.compile(model, "cuda", top_k=3)
[layer] = compiled.report()
print(layer.lowering, layer.source)
print("error", max_rel_error(compiled.run(feeds), ort_run(model, feeds)))
'''


def test_plain_script_compiles_with_measurement(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "persistent measured", lines
    assert float(lines[1].split()[1]) <= 1e-4
