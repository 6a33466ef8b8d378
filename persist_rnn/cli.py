"""`persist-rnn`: compile, run, inspect and tune ONNX recurrent models from the shell."""
from __future__ import annotations

import json
import os
import sys
import time
import warnings

import click
import numpy as np

from .errors import PersistRNNError
from .schedule.precision import PRECISIONS, TOLERANCE

UNVERIFIED_HELP = ("also use kernel variants not yet run on a GPU (today none: every variant has; "
                   "tir_templates/persistent/checks.py)")
_ORT_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64",
               "tensor(int32)": "int32", "tensor(float16)": "float16", "tensor(bool)": "bool"}
#: compile, run and tune: what an fp32 layer's recurrent step may run at (schedule/precision.py)
_precision_option = click.option(
    "--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
    help="what an fp32 layer's recurrent step may run at: fp32 (fp32 accuracy) or tf32 (tensor cores at TF32, "
         "as torch.backends.cudnn.allow_tf32 allows cuDNN)")
#: compile and run: stacks of layers as one kernel (transform/layer_wavefront.py)
_wavefront_option = click.option(
    "--wavefront", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
    is_flag=False, flag_value="on",
    help="stacks of layers as one kernel: auto (those a measured stack record of the tuning log, else the cost "
         "model, finds faster so), on (--wavefront alone: every stack the wavefront takes), off (a kernel a layer)")
TARGET_HELP = 'a name ("llvm", "cuda") or a JSON target, e.g. \'{"kind": "cuda", "arch": "sm_80"}\''


def _pins(shape_opts, const_opts) -> dict:
    """--shape NAME=1,512 and --const NAME=16000 (or NAME=1,2,3) as compile()'s shapes/constants."""
    def split(opt, flag):
        name, eq, value = opt.partition("=")
        if not eq or not name or not value:
            raise click.BadParameter(f"{opt!r}: expected NAME=VALUES, e.g. input=1,512", param_hint=flag)
        return name, value.split(",")
    shapes, constants = {}, {}
    for opt in shape_opts:
        name, values = split(opt, "--shape")
        if not all(v.isdigit() or v.isidentifier() for v in values):
            raise click.BadParameter(f"{opt!r}: extents must be whole numbers or names (B,1,T keeps B and T "
                                     "symbolic)", param_hint="--shape")
        shapes[name] = tuple(int(v) if v.isdigit() else v for v in values)
    for opt in const_opts:
        name, values = split(opt, "--const")
        try:
            numbers = [float(v) if any(c in v for c in ".eE") else int(v) for v in values]
        except ValueError:
            raise click.BadParameter(f"{opt!r}: values must be numbers", param_hint="--const") from None
        constants[name] = numbers[0] if len(numbers) == 1 else numbers
    return {"shapes": shapes, "constants": constants}


def _pin_options(command):
    command = click.option("--const", "const_opts", multiple=True, metavar="NAME=V[,V...]",
                           help="make graph input NAME a constant (e.g. sr=16000); it leaves the inputs")(command)
    return click.option("--shape", "shape_opts", multiple=True, metavar="NAME=D[,D...]",
                        help="fix the extents of graph input NAME (e.g. input=1,512; a name keeps that axis "
                             "symbolic: input=B,1,T)")(command)


def _fail(err: Exception):
    click.echo(f"error: {err}", err=True)
    sys.exit(2)


@click.group()
@click.option("--verbose", is_flag=True, help="show TVM's and ONNX's warnings")
def main(verbose):
    """ONNX LSTM / GRU / RNN models into TVM, each recurrence one persistent CUDA kernel."""
    if not verbose:  # persist_rnn's own warnings (a tuning log not used, a candidate left out) stay
        warnings.filterwarnings("ignore")
        warnings.filterwarnings("default", module=r"persist_rnn\.")
    click.get_current_context().obj = {"verbose": verbose}


def _verbose() -> bool:
    return bool((click.get_current_context().find_root().obj or {}).get("verbose"))


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="the .so to write")
@click.option("--target", default="cuda", show_default=True, help=TARGET_HELP + '; "auto": cuda if a GPU is here, else llvm')
@click.option("--tuning-log", type=click.Path(dir_okay=False), help="reuse (and extend) this tuning log")
@click.option("--unroll", is_flag=True, help="unroll recurrences into primitive ops (static shapes only)")
@click.option("--unverified", is_flag=True, help=UNVERIFIED_HELP)
@_precision_option
@_wavefront_option
@_pin_options
def compile(model, output, target, tuning_log, unroll, unverified, precision, wavefront, shape_opts, const_opts):
    """Compile MODEL into a shared library (plus OUTPUT.json describing it)."""
    from . import compile as compile_model

    try:
        cm = compile_model(model, _here(target, "compiling for"), tuning_log=tuning_log, unroll=unroll, unverified=unverified,
                           verbose=_verbose(), precision=precision, wavefront=wavefront, **_pins(shape_opts, const_opts))
        cm.export_library(output)
    except PersistRNNError as err:
        _fail(err)
    for note in cm.notes:
        click.echo(f"note: {note}")
    for layer in cm.report():
        click.echo(layer.line())
    click.echo(f"wrote {output}")


#: run's options that choose how MODEL is compiled, refused with a compiled library
_COMPILE_OPTIONS = ("target", "tuning_log", "unverified", "precision", "wavefront", "shape_opts", "const_opts")


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--inputs", "inputs_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help=".npz with one array per graph input")
@click.option("--target", default="auto", show_default=True, help=TARGET_HELP + '; "auto": cuda if a GPU is here, else llvm')
@click.option("--tuning-log", type=click.Path(dir_okay=False))
@click.option("--check", is_flag=True, help="compare with ONNX Runtime and print the max error")
@click.option("--reference", type=click.Path(exists=True, dir_okay=False),
              help="with a compiled MODEL: the ONNX file --check runs in ONNX Runtime (default: the one it was "
                   "compiled from, if it is still there unchanged)")
@click.option("--save", type=click.Path(dir_okay=False), help="write the outputs to this .npz")
@click.option("--unverified", is_flag=True, help=UNVERIFIED_HELP)
@_precision_option
@_wavefront_option
@_pin_options
def run(model, inputs_path, target, tuning_log, check, reference, save, unverified, precision, wavefront,
        shape_opts, const_opts):
    """Run MODEL on INPUTS and print the outputs' shapes. MODEL is a library from `compile` (loaded,
    not compiled again) or an ONNX file (compiled first). Pinned inputs may be left out of INPUTS;
    --check feeds ONNX Runtime their pinned values."""
    ctx = click.get_current_context()
    compiled = not model.endswith(".onnx") and os.path.exists(model + ".json")
    if compiled:
        given = [f"--{name.replace('_opts', '').replace('_', '-')}" for name in _COMPILE_OPTIONS
                 if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
        if given:
            _fail(PersistRNNError(f"{', '.join(given)}: {'these choose' if len(given) > 1 else 'this chooses'} how an "
                                  f"ONNX model is compiled, and {model} is compiled already"))
    elif reference:
        _fail(PersistRNNError("--reference goes with a compiled MODEL; an ONNX MODEL is its own reference"))
    try:
        if compiled:
            cm = _loaded(model)
        else:
            cm = _compiled_for_here(model, target, tuning_log=tuning_log, unverified=unverified, precision=precision,
                                    wavefront=wavefront, **_pins(shape_opts, const_opts))
        constants = cm.origin.get("constants", {})
        feeds = {k: v for k, v in np.load(inputs_path).items() if k not in constants}
        outs = cm.run(feeds)
    except PersistRNNError as err:
        _fail(err)
    for note in cm.notes:
        click.echo(f"note: {note}")
    for name, out in zip(cm.output_names, outs):
        click.echo(f"{name}: {out.dtype} {tuple(out.shape)}")
    if save:
        np.savez(save, **dict(zip(cm.output_names, outs)))
    if check:
        _check(reference or _reference_of(cm, model), feeds, outs, constants, cm.origin.get("precision", "fp32"))


def _compiled_for_here(model, target, **options):
    """MODEL compiled for `target` (`_here`), to run it now."""
    from . import compile as compile_model

    return compile_model(model, _here(target, "running on"), verbose=_verbose(), **options)


def _here(target, doing: str):
    """`target`, where "auto" is cuda if a GPU is here, else llvm (said after `doing`)."""
    if target != "auto":
        return target
    from .schedule.gpu import present_device

    target = "cuda" if present_device() is not None else "llvm"
    click.echo(f"{doing} {'the GPU (cuda)' if target == 'cuda' else 'the CPU (llvm): no CUDA GPU here'}")
    return target


def _loaded(library):
    """A library from `compile` (`runtime.load` refuses one this machine cannot run)."""
    from .runtime import load

    cm = load(library)
    click.echo(f"running {library} ({cm.target.kind.name})")
    return cm


def _reference_of(cm, library) -> str:
    """The ONNX file a loaded library was compiled from, if it is still there with the same bytes."""
    from .compile import file_sha256

    path = cm.origin.get("model")
    if not path or not os.path.exists(path):
        _fail(PersistRNNError(f"--check needs the ONNX model {library} was compiled from "
                              f"({path or 'a ModelProto, not a file'}), and it is not there: pass --reference MODEL.onnx"))
    if file_sha256(path) != cm.origin.get("sha256"):
        _fail(PersistRNNError(f"--check: {path} has changed since {library} was compiled from it; pass "
                              "--reference MODEL.onnx, or compile again"))
    return path


def _check(reference, feeds, outs, constants, precision):
    """ONNX Runtime (CPU) on `reference` with the same feeds (and the pinned constants): print the
    largest error over the output scale and exit 1 past the precision's bound."""
    try:
        import onnxruntime as ort
    except ImportError:
        _fail(PersistRNNError("--check compares with ONNX Runtime, which is not installed: pip install onnxruntime"))

    session = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
    types = {i.name: i.type for i in session.get_inputs()}
    pinned = {k: np.asarray(v, _ORT_DTYPES.get(types.get(k), None)) for k, v in constants.items()}
    ref = session.run(None, {**feeds, **pinned})
    err = max(float(np.abs(np.asarray(a, "float64") - b).max(initial=0.0)) / max(1.0, float(np.abs(b).max(initial=0.0)))
              for a, b in zip(outs, ref))
    bound = TOLERANCE[precision]
    click.echo(f"max error vs ONNX Runtime (relative to output scale): {err:.3e} (bound at {precision}: {bound:g})")
    if not err <= bound:
        sys.exit(1)


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", default="cuda", show_default=True, help=TARGET_HELP)
@click.option("--tuning-log", type=click.Path(dir_okay=False))
@_wavefront_option
@_pin_options
def inspect(model, target, tuning_log, wavefront, shape_opts, const_opts):
    """One line per recurrent layer: cell, sizes, directions, how it will be lowered and why."""
    from .frontend import from_onnx, load_model
    from .frontend.front_door import prepare
    from .report import layer_report
    from .targets import as_target
    from .transform import PersistentRNN

    try:
        tgt = as_target(target)
        onnx_model, notes = prepare(load_model(model), **_pins(shape_opts, const_opts))
        mod = PersistentRNN(tgt, tuning_log=tuning_log, measure=False, wavefront=wavefront)(
            from_onnx(onnx_model, target_kind=tgt.kind.name, verbose=_verbose()))
    except PersistRNNError as err:
        _fail(err)
    for note in notes:
        click.echo(f"note: {note}")
    layers = layer_report(mod)
    if not layers:
        click.echo("no LSTM / GRU / RNN layers")
    for layer in layers:
        cfg = f" {layer.config}" if layer.config and not layer.buckets else ""
        click.echo(layer.line() + cfg + (f" [{layer.source}]" if layer.source and not layer.buckets else ""))
        for line in layer.bucket_lines():
            click.echo(line)


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", default="cuda", show_default=True, help=TARGET_HELP)
@click.option("--top-k", default=5, show_default=True, help="candidates of the cost model to measure")
@click.option("--log", "log_path", required=True, type=click.Path(dir_okay=False), help="tuning log to append to")
@click.option("--batches", help="batch buckets to tune a layer whose batch is symbolic for, comma-separated "
                                 "bounds (default: the compiler's, 1,2,4,8,16,32,64)")
@_precision_option
@click.option("--unverified", is_flag=True, help=UNVERIFIED_HELP)
def tune(model, target, top_k, log_path, batches, precision, unverified):
    """Measure the cost model's top-K configs of every recurrent layer and log the fastest (for a
    symbolic batch, of every batch bucket); then time the model with its stacks of layers fused
    and apart, and log the faster for each stack (persist_rnn/stack_tuning.py)."""
    from tqdm import tqdm

    from .targets import as_target
    from .frontend import from_onnx, load_model
    from .schedule.gpu import present_device
    from .schedule.planner import BATCH_BUCKETS, plan_layer, prefetch_builds
    from .transform.call_sites import call_site_batches
    from .transform.persistent_rnn import recurrences

    if present_device() is None:
        _fail(PersistRNNError("tune needs a CUDA GPU; without one, compile uses the cost model's choice"))
    tgt = as_target(target)
    mod = from_onnx(load_model(model), target_kind=tgt.kind.name)
    static_batches = call_site_batches(mod, {gv.name_hint for gv, _, _ in recurrences(mod)})
    try:
        buckets = BATCH_BUCKETS if batches is None else tuple(sorted({int(b) for b in batches.split(",") if b.strip()}))
    except ValueError:
        _fail(PersistRNNError(f"--batches: comma-separated whole numbers, got {batches!r}"))
    if not buckets or buckets[0] < 1:
        _fail(PersistRNNError(f"--batches: batch sizes of at least 1, got {batches!r}"))
    layers = [(spec, static_batches.get(gv.name_hint)) for gv, _, spec in recurrences(mod)]
    start = time.perf_counter()
    submitted = sum(prefetch_builds(spec, tgt, [batch] if batch else buckets, tuning_log_path=log_path, top_k=top_k,
                                    unverified=unverified, precision=precision, bucket=not batch)
                    for spec, batch in layers)
    with tqdm(total=submitted, unit="candidate", desc="tuning") as bar:
        for spec, batch in layers:
            plan = plan_layer(spec, tgt, batch=batch, tuning_log_path=log_path, top_k=top_k, measure=True,
                              progress=lambda timed, node=spec.node: _candidate_line(bar, node, timed),
                              buckets=buckets, precision=precision, unverified=unverified)
            for line in _plan_lines(spec, batch, plan):
                bar.write(line)
    click.echo(f"layers tuned in {time.perf_counter() - start:.1f} s ({submitted} candidates built)")
    _tune_stacks(model, mod, tgt, log_path, precision, unverified, top_k)


def _plan_lines(spec, batch, plan) -> list[str]:
    """What `tune` chose for a layer: a line a batch bucket (one for a static batch)."""
    if plan.kernel is None:
        return [f"{spec.node}: reference ({plan.reason})"]
    lines = []
    for row in plan.buckets or [dict(max_batch=batch, config=plan.config.as_dict(), time_us=plan.time_us,
                                     source=plan.source)]:
        took = f"{row['time_us']:.2f} us/step " if row["time_us"] else ""
        at = "" if not plan.buckets else f" B<={row['max_batch']}" if row["max_batch"] else " B rest"
        lines.append(f"{spec.node}{at}: {row['source']} {took}{row['config']}")
    return lines


def _candidate_line(bar, node: str, timed) -> None:
    """`tune`'s progress: one line a candidate (its config, build time and step time), as it is timed."""
    how = f"{timed.us_per_step:.3f} us/step" if timed.us_per_step is not None else f"left out: {timed.error}"
    bar.write(f"  {node}: {json.dumps(timed.config.as_dict(), separators=(',', ':'))} built in {timed.build_s:.1f} s, {how}")
    bar.update(1)


def _tune_stacks(model, mod, tgt, log_path, precision, unverified, top_k):
    """`tune`'s stacks: the model timed with them fused (the top_k wavefront configs) and apart
    (stack_tuning.py)."""
    from .schedule.planner import target_arch
    from .stack_tuning import tune_stacks
    from .transform.persistent_rnn import PersistentRNN

    try:
        fused = PersistentRNN(tgt, tuning_log=log_path, measure=False, precision=precision, unverified=unverified,
                              wavefront=True)(mod)
        rows = tune_stacks(model, fused, tgt, log_path, target_arch(tgt), precision, unverified, top_k=top_k)
    except PersistRNNError as err:
        _fail(err)
    for row in rows:
        if "skipped" in row:
            click.echo(f"stacks: not timed ({row['skipped']})")
            continue
        timed = ", ".join(f"{name} {us:.1f} us" for name, us in row["configs_timed"].items())
        click.echo(f"stack {' > '.join(row['layers'])} B={row['batch']}: {row['lowering']} (wavefront "
                   f"{row['wavefront_us']:.1f} us, a kernel a layer {row['per_layer_us']:.1f} us, the whole model; "
                   f"wavefront configs: {timed}) [measured]")


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="directory to write <arch>.json to (default: the user calibration directory, read by compile)")
@click.argument("sweeps", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--arch", default="sm_90", show_default=True, help="with SWEEPS: the architecture they were measured on")
@click.option("--configs", default=40, show_default=True, help="configs timed per workload when measuring")
@click.option("--sweep-out", type=click.Path(dir_okay=False), help="also append the measured rows here")
def calibrate(out_dir, sweeps, arch, configs, sweep_out):
    """Measure this GPU (barrier cost, a sample of the config space) and fit the cost model to it;
    or, given recorded SWEEPS (JSON lines, e.g. docs/data/sweep-h100-*.jsonl), fit those (no GPU)."""
    import dataclasses

    from .schedule import calibrate as cal
    from .schedule.gpu import gpu_model, user_calibration_dir

    out_dir = out_dir or user_calibration_dir()
    try:
        if sweeps:
            gpu, rows = gpu_model(arch), cal.read_sweeps(sweeps)
            gpu = dataclasses.replace(gpu, arch=arch)
            provenance = gpu.provenance.split("; weights")[0] + "; sweeps: " + ", ".join(os.path.basename(p) for p in sweeps)
        else:
            gpu, rows = cal.measure_device(configs, log=click.echo, sweep_out=sweep_out)
            provenance = "measured by persist-rnn calibrate"
        path, quality = cal.fit_and_write(gpu, rows, out_dir, provenance)
    except PersistRNNError as err:
        _fail(err)
    click.echo(f"cost model on these {len(rows)} configs: {quality}")
    click.echo(f"wrote {path}")


@main.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSON lines to append to")
@click.option("--parts", multiple=True, type=click.Choice(["grid", "batch", "seq", "models", "stacks", "offgrid"]),
              help="what to measure (repeatable; default: all but offgrid, which runs only when named)")
@click.option("--tuning-log", type=click.Path(dir_okay=False))
@click.option("--unrolled", "unrolled_hidden", multiple=True, type=int, default=(256,), show_default=True,
              help="hidden sizes of the grid that also get the (slow to build) unrolled TVM baseline")
@click.option("--examples", "examples_dir", default="examples", show_default=True, type=click.Path(file_okay=False),
              help="where char_rnn.onnx and text_classifier.onnx are")
@click.option("--unverified", is_flag=True, help=UNVERIFIED_HELP)
@click.option("--layer", "layers", multiple=True, callback=lambda ctx, param, v: tuple(_layer_key(s) for s in v),
              help="only this layer of the parts, as CELL:HIDDEN:BATCH, e.g. GRU:1024:20 (repeatable)")
@click.option("--precision", "precisions", callback=lambda ctx, param, v: _precisions(v),
              help="also GRNN's grid at each of these precisions, against cuDNN at the same precision, "
                   "comma-separated: fp32, tf32, fp16, bf16 (e.g. --precision fp32,tf32,fp16)")
@click.option("--flashrnn", "flashrnn_layers", multiple=True, callback=lambda ctx, param, v: tuple(_layer_key(s) for s in v),
              help="FlashRNN in the fp16 and bf16 rows only for this layer, CELL:HIDDEN:BATCH (repeatable; "
                   "default: every layer). Its JIT builds a CUDA extension per shape and backend (about a "
                   "minute each); the bench runs them first, eight at a time")
def bench(out, parts, tuning_log, unrolled_hidden, examples_dir, unverified, layers, precisions, flashrnn_layers):
    """Benchmark against cuDNN, ONNX Runtime and unrolled TVM (needs torch and a CUDA GPU);
    `python benchmarks/report.py OUT` makes the tables and plots. With --precision alone, only
    the precision grid is measured."""
    from .bench.suite import PARTS, run_suite

    run_suite(out, parts or (() if precisions else PARTS), tuning_log, unrolled_hidden, examples_dir, log=click.echo,
              unverified=unverified, layers=layers, precisions=precisions, flashrnn_layers=flashrnn_layers)


def _precisions(text) -> tuple[str, ...]:
    """--precision fp32,tf32,fp16 as a tuple, each one the suite measures."""
    from .bench.torch_layers import PRECISIONS

    if not text:
        return ()
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in names if p not in PRECISIONS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: choose from {', '.join(PRECISIONS)}", param_hint="--precision")
    return names


def _layer_key(text: str) -> tuple[str, int, int]:
    """CELL:HIDDEN:BATCH as the suite's (cell, hidden, batch) key."""
    try:
        cell, hidden, batch = text.split(":")
        if cell.upper() not in ("LSTM", "GRU"):
            raise ValueError
        return cell.upper(), int(hidden), int(batch)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected CELL:HIDDEN:BATCH with CELL LSTM or GRU, e.g. GRU:1024:20")


@main.group()
def log():
    """List and merge tuning logs."""


@log.command("list")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
def log_list(path):
    """One line per record."""
    from .schedule import stack_log, tuning_log

    try:
        records = tuning_log.read(path)
        stacks = stack_log.read(path)
    except PersistRNNError as err:
        _fail(err)
    from .schedule.cost_model import MODEL_VERSION

    def source(rec):  # an unmeasured pick names its cost model's version, and whether this build takes it
        if rec.source != "cost_model":
            return rec.source
        return f"cost_model v{rec.model_version}" + ("" if rec.model_version == MODEL_VERSION else ": not used by this build")

    for rec in records:
        w = rec.workload
        t = f"{rec.time_us:.2f} us/step" if rec.time_us is not None else "not measured"
        t += " (cold: L2 flushed before each launch)" if rec.timing == "cold" else ""
        allowed = f" precision={w['precision']}" if "precision" in w else ""  # a build that allowed less than fp32
        batch = f"{w['batch']} (last bucket: every larger batch too)" if w.get("open_ended") else w["batch"]
        click.echo(f"{w['cell']} I={w['input_size']} H={w['hidden_size']} B={batch} D={w['directions']} "
                   f"{w['dtype']}{allowed} {w['arch']} v{w['template_version']}: {rec.config.as_dict()} {t} [{source(rec)}]")
    for rec in stacks:
        click.echo(stack_log.describe(rec))


@log.command("merge")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def log_merge(paths, output):
    """Keep the best record per workload (and per stack of layers) of PATHS in OUTPUT."""
    from .schedule import stack_log, tuning_log

    try:
        n = tuning_log.merge(list(paths), output)
        n += stack_log.merge_into(list(paths), output)
    except PersistRNNError as err:
        _fail(err)
    click.echo(f"{n} workloads -> {output}")


if __name__ == "__main__":
    main()
