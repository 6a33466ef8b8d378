"""How long each phase of a layer-wavefront step takes on the GPU (issue 21): the stack built with
clock64() stamps between the phases of `one_step`, read back per step (needs torch and a GPU).

    python benchmarks/wavefront_phases.py --out phases.jsonl LSTM:128:3:1 GRU:256:2:1

Each stack (CELL:HIDDEN:LAYERS:BATCH, T=100, input = hidden) is built with the wavefront at the
config the build picks, with and without lane updates where its shape allows them. Thread 0 of
the top layer's first CTA stamps the clock at each phase boundary of every step:

    wait      the layer below's early words reissued, and the peers' units of h(t-1) (the
              cluster's exchange, and the slowest peer)
    settle    the layer below's h(t) into shared memory (its stamp checked)
    sync1     the __syncthreads before the dot products (the other warps' settles)
    dot       the dot products and the shuffle-sums (lane updates: and the gather)
    sync2     the __syncthreads before the update (none with lane updates: 0)
    update    the cell update and its stores (Y, C, the stamped h, the next copy of hs)
    sync3     the __syncthreads before the exchange
    send      the next inputs issued and h(t) sent to the peers

and writes the step's cycles per phase over its own Y (the first 8 units of batch row 0), so that
build's Y is nonsense; the median of each phase over steps 10-89 is reported, with the step's
median and the build's ms per call (timed as `wavefront_budget.py` times, in turn with the plain
build). The stamps are read by one thread: a phase that waits shows what that thread waited.
The probes live in a copy of kernel.py whose `one_step` is replaced by `PROBED_STEP`, checked
against `PLAIN_STEP` (kernel.py's as it stands), so the probes never drift from the kernel.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn.transform.layer_wavefront as layer_wavefront  # noqa: E402
import tir_templates.wavefront.kernel as wavefront_kernel  # noqa: E402
from persist_rnn.compile import compile as compile_model  # noqa: E402
from persist_rnn.gpu_timing import interleaved_ms, vm_call  # noqa: E402
from persist_rnn.stack_bench import onnx_stack_from_torch  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402
from tir_templates.wavefront.plan import StackConfig, lanes_fit  # noqa: E402

PHASES = ("wait", "settle", "sync1", "dot", "sync2", "update", "sync3", "send")

#: kernel.py's one_step as it stands (the probed copy below must follow it)
PLAIN_STEP = '''@T.macro
def one_step(S, a, layer, c, tx, hs, gs, bar, regs, acc, raw, t):
    """Step t. `raw` holds the layer below's words for the steps of t's parity: t's (issued two
    steps before, so the layer below has usually written them), then t + 2's."""
    if layer > 0:  # the layer below's early words go out again, their trip overlapping the wait
        reissue_inputs(S, a, layer, tx, raw, t)
    if t > 0:
        wait_for_peers(S, bar, t)
    if layer > 0:
        settle_input(S, a, layer, tx, hs, raw, regs, 0, t)
    T.tvm_storage_sync("shared")
    if S.LANE:  # the lanes update from their own sums (`lanes.py`): no meeting in gs
        lane_sums(S, layer, tx, regs.wreg, hs, acc, t)
    else:
        dot_and_reduce(S, layer, tx, regs.wreg, hs, gs, acc, t)
        T.tvm_storage_sync("shared")
    update(S, a, layer, c, tx, hs, gs, regs, 0, t)
    T.tvm_storage_sync("shared")
    if layer > 0:
        if t + 2 < a.n_t:
            issue_inputs(S, a, layer, tx, raw, t + 2)
    if t + 1 < a.n_t:  # the last step sends nothing
        if layer == 0:  # the next step's projection row in flight during the exchange
            load_projection(S, a, c, tx, regs, 0, t + 1)
        exchange(S, layer, c, tx, hs, bar, t)
'''

PROBED_STEP = '''PROBE = r"""
__shared__ long long prnn_probe_stamps[9];
__device__ __forceinline__ void prnn_probe(int k) {
  if (threadIdx.x == 0) prnn_probe_stamps[k] = clock64();
}
"""
PROBE_FLUSH = r"""
__device__ __forceinline__ void prnn_probe_flush(float* y) {
  if (threadIdx.x == 0) {
    for (int k = 0; k < 8; ++k) y[k] = (float)(prnn_probe_stamps[k + 1] - prnn_probe_stamps[k]);
  }
}
"""


@T.macro
def probe(k):
    T.cuda.func_call("prnn_probe", k, source_code=PROBE)


@T.macro
def one_step(S, a, layer, c, tx, hs, gs, bar, regs, acc, raw, t):
    probe(0)
    if layer > 0:
        reissue_inputs(S, a, layer, tx, raw, t)
    if t > 0:
        wait_for_peers(S, bar, t)
    probe(1)
    if layer > 0:
        settle_input(S, a, layer, tx, hs, raw, regs, 0, t)
    probe(2)
    T.tvm_storage_sync("shared")
    probe(3)
    if S.LANE:
        lane_sums(S, layer, tx, regs.wreg, hs, acc, t)
        probe(4)
    else:
        dot_and_reduce(S, layer, tx, regs.wreg, hs, gs, acc, t)
        probe(4)
        T.tvm_storage_sync("shared")
    probe(5)
    update(S, a, layer, c, tx, hs, gs, regs, 0, t)
    probe(6)
    T.tvm_storage_sync("shared")
    probe(7)
    if layer > 0:
        if t + 2 < a.n_t:
            issue_inputs(S, a, layer, tx, raw, t + 2)
    if t + 1 < a.n_t:
        if layer == 0:
            load_projection(S, a, c, tx, regs, 0, t + 1)
        exchange(S, layer, c, tx, hs, bar, t)
    probe(8)
    if layer == S.L - 1:
        if c == 0:
            T.cuda.func_call("prnn_probe_flush", T.address_of(a.y[layer][t, 0, 0, 0]), source_code=PROBE_FLUSH)
'''


@contextlib.contextmanager
def probed_kernel():
    """`stack_kernel` of a copy of kernel.py whose `one_step` is PROBED_STEP."""
    source = pathlib.Path(wavefront_kernel.__file__).read_text()
    assert PLAIN_STEP in source, "kernel.py's one_step changed: update PLAIN_STEP and PROBED_STEP"
    path = pathlib.Path(wavefront_kernel.__file__).with_name("kernel_probed.py")
    path.write_text(source.replace(PLAIN_STEP, PROBED_STEP))
    try:
        yield importlib.import_module("tir_templates.wavefront.kernel_probed").stack_kernel
    finally:
        path.unlink()
        sys.modules.pop("tir_templates.wavefront.kernel_probed", None)


def build(model, probed: bool, lanes: bool | None):
    """The model with its stack fused (probed or not), lane updates forced on or off (None: as
    the build picks)."""
    saved = layer_wavefront.stack_kernel
    with contextlib.ExitStack() as stack:
        kernel = stack.enter_context(probed_kernel()) if probed else saved
        if lanes is not None:
            layer_wavefront.stack_kernel = lambda specs, cfg: kernel(specs, dataclasses.replace(
                cfg, lane_updates=lanes and lanes_fit(specs[0], cfg)))
        else:
            layer_wavefront.stack_kernel = kernel
        try:
            return compile_model(model, "cuda", wavefront=True)
        finally:
            layer_wavefront.stack_kernel = saved


def stack_rows(op: str, hidden: int, layers: int, batch: int) -> list[dict]:
    import torch

    torch.manual_seed(hidden + layers + batch)
    module = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[op](hidden, hidden, num_layers=layers).cuda().eval()
    model = onnx_stack_from_torch(op, module, 100, batch)
    feeds = {"X": torch.randn(100, batch, hidden).numpy()}
    rows = []
    for lanes in (False, True):
        plain, probed = build(model, False, lanes), build(model, True, lanes)
        config = plain.report()[0].config  # the build's choice; `lanes` overrides its lane updates
        if lanes and not lanes_fit(CellSpec(op.lower(), hidden, hidden, linear_before_reset=op == "GRU"),
                                   StackConfig(**config)):
            continue  # the shape has no lane updates
        config = {**config, "lane_updates": lanes}
        ms = interleaved_ms({"plain": vm_call(plain, feeds), "probed": vm_call(probed, feeds)})
        y = probed.run(feeds)[0].reshape(100, -1)[:, :8]  # (T, phases): cycles, the top layer's Y
        steps = y[10:90]
        rows.append({"part": "wavefront_phases", "cell": op, "hidden": hidden, "layers": layers, "batch": batch,
                     "config": config, "ms": ms, "cycles": {p: float(np.median(steps[:, k])) for k, p in enumerate(PHASES)},
                     "step_cycles": float(np.median(steps.sum(axis=1)))})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("stacks", nargs="+", help="CELL:HIDDEN:LAYERS:BATCH")
    args = ap.parse_args()
    for key in args.stacks:
        op, hidden, layers, batch = key.split(":")
        for row in stack_rows(op, int(hidden), int(layers), int(batch)):
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
