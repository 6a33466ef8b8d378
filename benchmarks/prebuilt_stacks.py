"""Wavefront experiments built on this machine and only timed on the GPU box (issue 21). The box
compiles a wavefront build in about 40 s of scarce device time; this machine (nvcc, no GPU)
builds the same library in about 15 s, and the box then loads and times it in seconds.

    python benchmarks/prebuilt_stacks.py build OUT LSTM:256:3:1 per_layer w8c16r8 w8c16r8L probed-w8c16r8
    python benchmarks/prebuilt_stacks.py build-example OUT char_rnn:8 [w8c16r4Lt2 ...]
    python benchmarks/prebuilt_stacks.py time results.jsonl OUT/LSTM_256_3_1 [...]    # on the GPU box

`build`: the stack (CELL:HIDDEN:LAYERS:BATCH, T=100, input = hidden; `testing.stacked_layers_model`'s
seeded weights) as OUT/<stack>/model.onnx, and each named build exported there
(`CompiledModel.export_library`, sm_90, the H100's 132 SMs):
    per_layer               a kernel a layer
    w<warps>c<cluster>r<rows>[L][t<tiles>]
                            the wavefront at that config (L: lane updates; t: the batch in
                            that many tiles, each on clusters of its own)
    probed-<config>         the same with `wavefront_phases.py`'s clocks (its Y holds cycles;
                            <name>.phases.json names the phases they time)
    <package>/<config>      built with tir_templates/<package>, a copy of the wavefront package
                            (an earlier kernel, say), for an A/B in one run
`build-example`: a shipped example at a static batch, as compile's default builds it (`default`),
a kernel a layer (`per_layer`) and fused (`fused`), with its inputs (feeds.npz); and fused at each
config named after it (as `build` names them).
`time`: every build of each directory timed in turn (`gpu_timing.interleaved_ms`), each checked
against ONNX Runtime (CPU), and the probed builds' cycles per phase (median of steps 10-89); a
build that fails to load or run is named in the row's "failed" with its error.

A call to the box carries at most 64 MiB with the working tree (about 29 MiB): a 3 x LSTM
H=256 build is 7 MB, so give each call a directory of a few builds. Run one `build` at a time:
the probes' copy of kernel.py is written beside it and deleted after each probed build.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import pathlib
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

#: a wavefront build's name: [probed-][package/]w<warps>c<cluster>r<rows>[L][t<tiles>]
BUILD_NAME = re.compile(r"(probed-)?(?:(\w+)/)?w(\d+)c(\d+)r(\d+)(L?)(?:t(\d+))?")


def stack_dir(out: str, key: str) -> pathlib.Path:
    return pathlib.Path(out) / key.replace(":", "_")


@contextlib.contextmanager
def wavefront_kernel(package: str | None, probed: bool):
    """layer_wavefront builds with `package`'s stack_kernel (None: the working tree's), probed or not."""
    import persist_rnn.transform.layer_wavefront as layer_wavefront
    saved = layer_wavefront.stack_kernel
    with contextlib.ExitStack() as stack:
        if probed:
            from wavefront_phases import PROBES, STAMPS, patched_kernel  # this script's folder
            kernel = stack.enter_context(patched_kernel("kernel_probed", STAMPS, PROBES))
        elif package:
            kernel = importlib.import_module(f"tir_templates.{package}.kernel").stack_kernel
        else:
            kernel = saved
        layer_wavefront.stack_kernel = kernel
        try:
            yield
        finally:
            layer_wavefront.stack_kernel = saved


@contextlib.contextmanager
def forced_config(cfg):
    """layer_wavefront builds every stack at `cfg` (its config space that one config)."""
    import persist_rnn.transform.layer_wavefront as layer_wavefront
    saved = layer_wavefront.stack_configs
    layer_wavefront.stack_configs = lambda specs, b, n: [cfg]
    try:
        yield
    finally:
        layer_wavefront.stack_configs = saved


def build(out: str, key: str, names: list[str]) -> None:
    import onnx

    from persist_rnn.compile import compile_onnx as compile_model
    from persist_rnn.bench.layer_models import stacked_layers_model

    op, hidden, layers, batch = key.split(":")
    hidden, layers, batch = int(hidden), int(layers), int(batch)
    model, _ = stacked_layers_model(op, hidden, layers, 100, batch)
    d = stack_dir(out, key)
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(model, d / "model.onnx")
    for name in names:
        if name == "per_layer":
            built = compile_model(model, "cuda", wavefront=False)
        else:
            named = named_build(name, batch)
            if named is None:
                raise SystemExit(f"{name}: expected per_layer or [probed-][package/]w<warps>c<cluster>r<rows>[L][t<tiles>]")
            probed, package, cfg = named
            if probed and package:
                raise SystemExit(f"{name}: the probes go into the working tree's kernel only")
            if probed and cfg.batch_tiles > 1:
                raise SystemExit(f"{name}: the probes time one tile (every tile's top layer would write its clocks "
                                 "into the same row of Y)")
            with forced_config(cfg), wavefront_kernel(package, probed):
                built = compile_model(model, "cuda", wavefront=True)
            if built.report()[0].lowering != "wavefront":
                raise SystemExit(f"{key} {name}: not fused ({built.report()[0].line()})")
        built.export_library(str(d / (name.replace("/", "-") + ".so")))
        if name.startswith("probed-"):  # which phases its clocks time (its sums live or row by row)
            from wavefront_phases import phase_names
            (d / (name.replace("/", "-") + ".phases.json")).write_text(
                json.dumps(phase_names(op, hidden, layers, dataclasses.asdict(cfg))))
        print(key, name, "built", flush=True)


def named_build(name: str, batch: int):
    """(probed, package or None, StackConfig at `batch`) of a wavefront build's name (BUILD_NAME),
    or None if it is not one."""
    from tir_templates.wavefront.plan import StackConfig

    match = BUILD_NAME.fullmatch(name)
    if not match:
        return None
    probed, package, warps, cluster, rows, lanes, tiles = match.groups()
    tiles = int(tiles or 1)
    return bool(probed), package, StackConfig(32 * int(warps), int(cluster), int(rows), -(-batch // tiles),
                                              bool(lanes), tiles)


def example_config(name: str, batch: int):
    """The StackConfig a build-example config name (w<warps>c<cluster>r<rows>[L][t<tiles>]) names."""
    named = named_build(name, batch)
    if named is None or named[0] or named[1]:
        raise SystemExit(f"{name}: expected w<warps>c<cluster>r<rows>[L][t<tiles>]")
    return named[2]


def build_example(out: str, key: str, configs: list[str] = ()) -> None:
    """A shipped example (NAME:BATCH) built for a static batch as compile's default chooses
    (`default`, its stacks fused where `wavefront="auto"` says), a kernel a layer (`per_layer`)
    and every stack fused (`fused`), with its inputs at that batch (feeds.npz), the shipped
    tuning log read; and fused at each of `configs` (w<warps>c<cluster>r<rows>[L][t<tiles>])."""
    import shutil

    from persist_rnn.bench.suite import inputs_at_batch
    from persist_rnn.compile import compile_onnx as compile_model

    name, batch = key.split(":")
    forced = [(config, example_config(config, int(batch))) for config in configs]  # a bad name before any build
    path = f"examples/{name}.onnx"
    feeds = inputs_at_batch(compile_model(path, "llvm"), f"examples/{name}_inputs.npz", int(batch))
    d = stack_dir(out, key)
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, d / "model.onnx")
    np.savez(d / "feeds.npz", **feeds)
    shapes = {k: v.shape for k, v in feeds.items()}
    for build, wavefront in (("default", "auto"), ("per_layer", False), ("fused", True)):
        built = compile_model(path, "cuda", shapes=shapes, wavefront=wavefront, measure=False,
                              tuning_log="docs/data/tune-h100.jsonl")
        built.export_library(str(d / f"{build}.so"))
        print(key, build, [r.line() for r in built.report()][:1], flush=True)
    for name, cfg in forced:
        with forced_config(cfg):
            built = compile_model(path, "cuda", shapes=shapes, wavefront=True, measure=False)
        if "wavefront" not in [r.lowering for r in built.report()]:
            raise SystemExit(f"{key} {name}: not fused ({built.report()[0].line()})")
        built.export_library(str(d / f"{name}.so"))
        print(key, name, "built", flush=True)


def time(out: str, dirs: list[str]) -> None:
    import onnx
    import onnxruntime as ort

    from persist_rnn.bench.gpu_timing import interleaved_ms, vm_call
    from persist_rnn.runtime import load
    from wavefront_phases import phase_cycles  # this script's folder

    for d in map(pathlib.Path, dirs):
        model = onnx.load(d / "model.onnx")
        shape = [x.dim_value for x in model.graph.input[0].type.tensor_type.shape.dim]
        if (d / "feeds.npz").exists():  # a shipped example's inputs (`build-example`)
            feeds = dict(np.load(d / "feeds.npz"))
        else:
            feeds = {"X": np.random.default_rng(0).standard_normal(shape).astype("float32")}
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        builds, first_y, failed = {}, {}, {}
        for p in sorted(d.glob("*.so")):
            try:  # one build that cannot load or run must not cost the others' timings
                built = load(str(p))
                first_y[p.name[:-3]] = built.run(feeds)[0]  # checked below
                builds[p.name[:-3]] = built
            except Exception as e:  # noqa: BLE001 -- reported in the row, by build
                lines = str(e).splitlines() or [type(e).__name__]  # TVM appends the CUDA source
                failed[p.name[:-3]] = next((x for x in lines if "rror" in x), lines[0])[:300]
        ms = interleaved_ms({n: vm_call(b, feeds) for n, b in builds.items()}) if builds else {}
        scale = max(1.0, float(np.abs(want).max()))
        row = {"stack": d.name, "ms": ms, "per_layer_over": {n: ms["per_layer"] / v for n, v in ms.items()} if "per_layer" in ms else {},
               "err": {}, "cycles": {}, "failed": failed}
        for n in builds:
            y = first_y[n]
            if n.startswith("probed-"):  # Y holds each step's cycles per phase, not h
                cycles, step = phase_cycles(y, shape[0], json.loads((d / (n + ".phases.json")).read_text()))
                row["cycles"][n] = {**cycles, "step": step}
            else:
                row["err"][n] = float(np.abs(y - want).max() / scale)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build and export (this machine)")
    b.add_argument("out")
    b.add_argument("stack", help="CELL:HIDDEN:LAYERS:BATCH")
    b.add_argument("names", nargs="+")
    e = sub.add_parser("build-example", help="a shipped example at a static batch: default, per_layer and fused (this machine)")
    e.add_argument("out")
    e.add_argument("example", help="NAME:BATCH, e.g. char_rnn:8")
    e.add_argument("configs", nargs="*", help="more fused builds, each at a config: w<warps>c<cluster>r<rows>[L][t<tiles>]")
    t = sub.add_parser("time", help="time what build exported (the GPU box)")
    t.add_argument("results")
    t.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    if args.cmd == "build":
        build(args.out, args.stack, args.names)
    elif args.cmd == "build-example":
        build_example(args.out, args.example, args.configs)
    else:
        time(args.results, args.dirs)


if __name__ == "__main__":
    main()
