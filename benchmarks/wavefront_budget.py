"""Where a layer-wavefront step goes (issue 21): the stack as built, and with parts of its step
taken out, timed in turn with the per-layer build and torch's stacked layer (needs torch and a GPU).

    python benchmarks/wavefront_budget.py --out budget.jsonl LSTM:128:3:1 LSTM:256:3:1

Each stack (CELL:HIDDEN:LAYERS:BATCH, T=100, input = hidden) is built with the wavefront at the
config the cost model picks, as shipped (`full`) and with parts of its step taken out:
- `no_input_wait`: a layer above the first takes the layer below's h as its first load returned
  it (no stamp check, no reload). Its time against `full` is what waiting for the layer below costs;
- `no_dot`: no dot products (the gate sums left as they were). Against `full`, that is the FMA work;
- `neither`: both taken out. What is left is the step's fixed part;
- `no_exchange`: `neither` with no h sent to the cluster's peers and none waited for. What is
  left is the syncs, the update, its stores and the next inputs. (The syncs cannot be taken out
  so: TVM's sync planner puts back the ones the step needs, and fails inside its conditions.)
- `lanes`, `no_lanes`: the whole step at the build's config with lane updates
  (`wavefront/lanes.py`; where the config's shape allows them) and without.
The ablated kernels compute nonsense; only their times are read (`err` shows how far off they are).
The stamp wait is rebound in `tir_templates.wavefront.stamped`, whose macros steps.py looks up as
module attributes. The step's other parts are left out of a copy of kernel.py written beside it
(TVMScript macros keep the globals they were defined with, and parse their source from a file).
layer_wavefront then builds with that copy's `stack_kernel`; the copy is deleted afterwards.
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

from tvm.script import tirx as T  # noqa: E402

import persist_rnn.transform.layer_wavefront as layer_wavefront  # noqa: E402
import tir_templates.wavefront.kernel as wavefront_kernel  # noqa: E402
import tir_templates.wavefront.stamped as stamped  # noqa: E402
from persist_rnn.compile import compile_onnx as compile_model  # noqa: E402
from persist_rnn.bench.gpu_timing import graph_replay, interleaved_ms, vm_call  # noqa: E402
from persist_rnn.bench.stacks import onnx_stack_from_torch  # noqa: E402
from tir_templates.wavefront.plan import lanes_fit  # noqa: E402

#: what each part's removal replaces in kernel.py's `one_step` (the lines as they stand there, in
#: either branch: every batch row's sums live, or row by row)
STEP_PARTS = {
    "dot": ["        input_dots(S, layer, tx, regs.wreg, hs, acc, t)\n",
            "        recurrent_dots(S, layer, tx, regs.wreg, hs, acc, t)\n",
            "        shuffle_sums(S, layer, tx, acc)\n",
            "            gather_sums(S, layer, tx, acc)\n",
            "            sums_to_gs(S, layer, tx, gs, acc, t, 0)\n",
            "        dot_row_by_row(S, layer, tx, regs.wreg, hs, gs, acc, t)\n"],
    "exchange": ["            wait_for_peers(S, bar, t)\n", "        exchange(S, layer, c, tx, hs, bar, t)\n"],
}
#: variant -> (no input wait, the parts of the step taken out, lane updates: None as the config
#: says, else forced on (where the config's shape allows them) or off)
VARIANTS = {"full": (False, (), None), "no_input_wait": (True, (), None), "no_dot": (False, ("dot",), None),
            "neither": (True, ("dot",), None), "no_exchange": (True, ("dot", "exchange"), None),
            "no_lanes": (False, (), False), "lanes": (False, (), True)}


@T.macro
def reload_never(S, a, layer, t, b, j, raw, e):
    T.evaluate(0)


def as_first_loaded(S, a, layer, t, b, j, raw, e):
    """The value half of the word as its first load returned it, whatever its stamp."""
    if S.emulate:
        return a.hb[layer][t, 0, b, 2 * j]
    return T.reinterpret("float32", T.Cast("uint32", raw[e]))


@contextlib.contextmanager
def patched_kernel(name: str, replacements, prelude: str = "", every: bool = False):
    """`stack_kernel` of a copy of kernel.py, `name`.py beside it, whose `one_step` has each
    (line, replacement) of `replacements` replaced (each line must be there once; `every`: at
    least once, every occurrence replaced) and `prelude` in front of it; the copy is deleted
    afterwards."""
    source = pathlib.Path(wavefront_kernel.__file__).read_text()
    start = source.index("@T.macro\ndef one_step(")
    end = source.index("\n\n\n", start) + 1  # one_step up to its last line's newline
    step = source[start:end]
    for line, replacement in replacements:
        assert step.count(line) == 1 or every and step.count(line) > 1, \
            f"kernel.py's one_step no longer has {line.strip()!r} {'at all' if every else 'once'}"
        step = step.replace(line, replacement)
    path = pathlib.Path(wavefront_kernel.__file__).with_name(name + ".py")
    path.write_text(source[:start] + prelude + step + source[end:])
    try:
        yield importlib.import_module(f"tir_templates.wavefront.{name}").stack_kernel
    finally:
        path.unlink()
        sys.modules.pop(f"tir_templates.wavefront.{name}", None)


def kernel_without(parts):
    """`patched_kernel` whose `one_step` leaves out `parts` (STEP_PARTS)."""
    return patched_kernel("kernel_without_" + "_".join(parts), [
        (line, line[:len(line) - len(line.lstrip())] + f"T.evaluate(0)  # ablated: {part}\n")
        for part in parts for line in STEP_PARTS[part]], every=True)


def with_lanes(kernel, lanes: bool):
    """`kernel` (a `stack_kernel`) building each config with lane updates on (where its shape
    allows them) or off."""
    return lambda specs, cfg: kernel(specs, dataclasses.replace(cfg, lane_updates=lanes and lanes_fit(specs[0], cfg)))


@contextlib.contextmanager
def ablated(no_input_wait: bool, parts=(), lanes: bool | None = None):
    """The wavefront builds within are ablated so (`lanes` True or False: the config the build
    picks, with lane updates forced on where its shape allows them, or off)."""
    saved = stamped.reissue, stamped.settled, layer_wavefront.stack_kernel
    with contextlib.ExitStack() as stack:
        if no_input_wait:
            stamped.reissue, stamped.settled = reload_never, as_first_loaded
        if parts:
            layer_wavefront.stack_kernel = stack.enter_context(kernel_without(parts))
        if lanes is not None:
            layer_wavefront.stack_kernel = with_lanes(layer_wavefront.stack_kernel, lanes)
        wavefront_kernel.stack_kernel.cache_clear()
        try:
            yield
        finally:
            stamped.reissue, stamped.settled, layer_wavefront.stack_kernel = saved
            wavefront_kernel.stack_kernel.cache_clear()


def stack_row(op: str, hidden: int, layers: int, batch: int, variants=tuple(VARIANTS)) -> dict:
    import torch

    torch.manual_seed(hidden + layers + batch)
    module = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[op](hidden, hidden, num_layers=layers).cuda().eval()
    x = torch.randn(100, batch, hidden, device="cuda")
    model = onnx_stack_from_torch(op, module, 100, batch)
    feeds = {"X": x.cpu().numpy()}
    builds = {"per_layer": compile_model(model, "cuda", wavefront=False)}
    for name in variants:
        with ablated(*VARIANTS[name]):
            builds[name] = compile_model(model, "cuda", wavefront=True)
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        want = module(x)[0].cpu().numpy()
        calls = {name: vm_call(build, feeds) for name, build in builds.items()}
        calls["torch_graph"] = graph_replay(lambda: module(x))
        ms = interleaved_ms(calls)
    scale = max(1.0, float(np.abs(want).max()))
    err = {name: float(np.abs(build.run(feeds)[0] - want).max() / scale) for name, build in builds.items()}
    return {"part": "wavefront_ablation", "cell": op, "hidden": hidden, "layers": layers, "batch": batch, "ms": ms,
            "err": err, "config": str(builds["per_layer" if "full" not in builds else "full"].report()[0].config)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("stacks", nargs="+", help="CELL:HIDDEN:LAYERS:BATCH")
    args = ap.parse_args()
    for key in args.stacks:
        op, hidden, layers, batch = key.split(":")
        row = stack_row(op, int(hidden), int(layers), int(batch), args.variants.split(","))
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
