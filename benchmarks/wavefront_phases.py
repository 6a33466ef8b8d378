"""How long each phase of a layer-wavefront step takes on the GPU (issue 21): the stack built with
clock64() stamps between the phases of `one_step`, read back per step (needs torch and a GPU).

    python benchmarks/wavefront_phases.py --out phases.jsonl LSTM:128:3:1 GRU:256:2:1

Each stack (CELL:HIDDEN:LAYERS:BATCH, T=100, input = hidden) is built with the wavefront at the
config the build picks, with and without lane updates where its shape allows them. Thread 0 of
the top layer's first CTA stamps the clock at each phase boundary of every step. Where a lane
keeps every batch row's sums at once (`layout.live`, PHASES):

    settle    the layer below's early words reissued and its h(t) into shared memory (stamps checked)
    sync1     the __syncthreads before the dot products (the other warps' settles)
    input     the input part of the dot products (W_l h_{l-1}(t))
    wait      the peers' units of h(t-1) (the cluster's exchange, and the slowest peer)
    recur     the recurrent part and the transposing shuffle-sum
    meet      the sums to gs and the __syncthreads after (lane updates: the gather)
    update    the cell update and its stores (Y, C, the stamped h, the next copy of hs)
    sync3     the __syncthreads before the exchange
    send      the next inputs issued and h(t) sent to the peers

and where a big batch walks its rows one at a time (PHASES_ROW_BY_ROW): wait (early words
reissued, then the peers), settle, sync1, none (two stamps in a row: the probe's own cost), dots
(every batch row's dot products, shuffle and store into gs), sync2, update, sync3, send;
and writes the step's cycles per phase over its own Y (the first 9 units of batch row 0), so that
build's Y is nonsense; the median of each phase over steps 10-89 is reported, with the step's
median and the build's ms per call (timed as `wavefront_budget.py` times, in turn with the plain
build). The stamps are read by one thread: a phase that waits shows what that thread waited.
The probes live in a copy of kernel.py whose `one_step` has them among its lines
(`wavefront_budget.patched_kernel` with `STAMPS`: each line they follow must be there once, so
the probes never drift from the kernel).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import persist_rnn.transform.layer_wavefront as layer_wavefront  # noqa: E402
from persist_rnn.compile import compile_onnx as compile_model  # noqa: E402
from persist_rnn.bench.gpu_timing import interleaved_ms, vm_call  # noqa: E402
from persist_rnn.bench.stacks import onnx_stack_from_torch  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402
from tir_templates.wavefront.layout import StackLayout  # noqa: E402
from tir_templates.wavefront.plan import StackConfig, lanes_fit  # noqa: E402
from wavefront_budget import patched_kernel, with_lanes  # noqa: E402  (this script's folder)

PHASES = ("settle", "sync1", "input", "wait", "recur", "meet", "update", "sync3", "send")
PHASES_ROW_BY_ROW = ("wait", "settle", "sync1", "none", "dots", "sync2", "update", "sync3", "send")

#: the probes' CUDA helpers and macro, put in front of kernel.py's one_step
PROBES = '''PROBE = r"""
#ifndef PRNN_PROBE_STAMPS  // whichever helper the code generator emits first declares them
#define PRNN_PROBE_STAMPS
__shared__ long long prnn_probe_stamps[10];
#endif
__device__ __forceinline__ void prnn_probe(int k) {
  if (threadIdx.x == 0) prnn_probe_stamps[k] = clock64();
}
"""
PROBE_FLUSH = r"""
#ifndef PRNN_PROBE_STAMPS
#define PRNN_PROBE_STAMPS
__shared__ long long prnn_probe_stamps[10];
#endif
__device__ __forceinline__ void prnn_probe_flush(float* y) {
  if (threadIdx.x == 0) {
    for (int k = 0; k < 9; ++k) y[k] = (float)(prnn_probe_stamps[k + 1] - prnn_probe_stamps[k]);
  }
}
"""


@T.macro
def probe(k):
    T.cuda.func_call("prnn_probe", k, source_code=PROBE)


'''
#: (lines of kernel.py's one_step, the same lines with the probes among them): each must occur
#: there once, so the probes follow the kernel as it stands or the script stops
STAMPS = [
    ("    if layer > 0:  # the layer below's early words go out again\n",
     "    probe(0)\n    if layer > 0:  # the layer below's early words go out again\n"),
    ("            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)\n        T.tvm_storage_sync(\"shared\")\n"
     "        zero_sums(S, layer, acc)\n",
     "            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)\n        probe(1)\n"
     "        T.tvm_storage_sync(\"shared\")\n        probe(2)\n        zero_sums(S, layer, acc)\n"),
    ("        input_dots(S, layer, tx, regs.wreg, hs, acc, t)\n",
     "        input_dots(S, layer, tx, regs.wreg, hs, acc, t)\n        probe(3)\n"),
    ("        recurrent_dots(S, layer, tx, regs.wreg, hs, acc, t)\n",
     "        probe(4)\n        recurrent_dots(S, layer, tx, regs.wreg, hs, acc, t)\n"),
    ("        shuffle_sums(S, layer, tx, acc)\n", "        shuffle_sums(S, layer, tx, acc)\n        probe(5)\n"),
    ("        if t > 0:\n            wait_for_peers(S, bar, t)\n        if layer > 0:\n"
     "            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)\n        T.tvm_storage_sync(\"shared\")\n"
     "        dot_row_by_row(S, layer, tx, regs.wreg, hs, gs, acc, t)\n",
     "        if t > 0:\n            wait_for_peers(S, bar, t)\n        probe(1)\n        if layer > 0:\n"
     "            settle_input(S, a, layer, tx, hs, raw, regs, 0, t)\n        probe(2)\n"
     "        T.tvm_storage_sync(\"shared\")\n        probe(3)\n        probe(4)\n"
     "        dot_row_by_row(S, layer, tx, regs.wreg, hs, gs, acc, t)\n        probe(5)\n"),
    ("    update(S, a, layer, c, tx, hs, gs, regs, 0, t)\n",
     "    probe(6)\n    update(S, a, layer, c, tx, hs, gs, regs, 0, t)\n    probe(7)\n"),
    ("    if layer > 0:\n        if t + 2 < a.n_t:\n", "    probe(8)\n    if layer > 0:\n        if t + 2 < a.n_t:\n"),
    ("        exchange(S, layer, c, tx, hs, bar, t)\n",
     "        exchange(S, layer, c, tx, hs, bar, t)\n    probe(9)\n    if layer == S.L - 1:\n        if c == 0:\n"
     "            T.cuda.func_call(\"prnn_probe_flush\", T.address_of(a.y[layer][t, 0, 0, 0]), "
     "source_code=PROBE_FLUSH)\n"),
]


def build(model, probed: bool, lanes: bool | None):
    """The model with its stack fused (probed or not), lane updates forced on or off (None: as
    the build picks)."""
    saved = layer_wavefront.stack_kernel
    with contextlib.ExitStack() as stack:
        kernel = stack.enter_context(patched_kernel("kernel_probed", STAMPS, PROBES)) if probed else saved
        layer_wavefront.stack_kernel = kernel if lanes is None else with_lanes(kernel, lanes)
        try:
            return compile_model(model, "cuda", wavefront=True)
        finally:
            layer_wavefront.stack_kernel = saved


def phase_names(op: str, hidden: int, layers: int, config: dict) -> tuple:
    """The phases the top layer's probes time at `config`: its sums live, or row by row."""
    spec = CellSpec(op.lower(), hidden, hidden, linear_before_reset=op.upper() == "GRU")
    return PHASES if StackLayout([spec] * layers, StackConfig(**config)).live(layers - 1) else PHASES_ROW_BY_ROW


def phase_cycles(y, n_t: int, names) -> tuple[dict, float]:
    """(each phase's median cycles over steps 10-89, the step's median) from a probed build's top
    Y, where each step's row holds its phases' cycles."""
    steps = y.reshape(n_t, -1)[10:90, :len(names)]
    return {p: float(np.median(steps[:, k])) for k, p in enumerate(names)}, float(np.median(steps.sum(axis=1)))


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
        cycles, step = phase_cycles(probed.run(feeds)[0], 100, phase_names(op, hidden, layers, config))
        rows.append({"part": "wavefront_phases", "cell": op, "hidden": hidden, "layers": layers, "batch": batch,
                     "config": config, "ms": ms, "cycles": cycles, "step_cycles": step})
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
