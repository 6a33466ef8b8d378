"""The benchmark suite behind `persist-rnn bench` and `benchmarks/`.

persist_rnn against cuDNN through torch (eager and CUDA graph; TF32 allowed, strict fp32, and
fp16), ONNX Runtime on the CPU, and TVM without persist_rnn (the unrolled lowering), on GRNN's
grid, a batch sweep, a sequence-length sweep and the real models of `examples/`. Medians of
CUDA-event timings of back-to-back calls, inputs already on the device, warm-up excluded. One JSON
line per measurement; `benchmarks/report.py` turns them into tables and plots.
Missing baselines (no torch, no GPU, an ONNX Runtime that cannot load the model) are skipped
with a message, never faked. Needs torch and a CUDA GPU.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import time

import numpy as np

from tir_templates.spec import CellSpec

from ..compile import compile_onnx as compile_model
from ..schedule.floor import floor_ms
from ..schedule.gpu import gpu_model
from .gpu_timing import compiled_ms, cuda_ms, interleaved_ms, vm_call
from .torch_layers import PRECISIONS, at_precision, cudnn_ms, onnx_from_torch, refusal, strict_fp32_case, torch_layer

PARTS = ("grid", "batch", "seq", "models", "stacks")
#: parts that run only when named: `offgrid` compiles 20 layers twice, the second time measuring
OPT_IN_PARTS = ("offgrid",)


def grid_arguments(ap):
    """Options choosing a part of GRNN's grid (benchmarks/ scripts): cells, hidden sizes, batches,
    and the tuning log to compile with."""
    ap.add_argument("--tuning-log")
    ap.add_argument("--cells", nargs="+", default=["LSTM", "GRU"])
    ap.add_argument("--hidden", nargs="+", type=int, default=[64, 256, 1024])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 10, 20])
    return ap


def grid_layers(args, seq_len=100):
    """(cell, hidden, batch, torch layer, x on the GPU) for each layer `grid_arguments` chose,
    input size = hidden, seeded as `layer_row` seeds them."""
    import torch

    for op in args.cells:
        for hidden in args.hidden:
            for batch in args.batch:
                yield op, hidden, batch, torch_layer(op, hidden, seed=hidden + batch), torch.randn(
                    seq_len, batch, hidden, device="cuda")


def _ort_ms(model, feeds, repeats=5):
    try:
        import onnxruntime as ort
    except ImportError:
        print("skip: onnxruntime not installed", flush=True)
        return None
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as err:  # an ONNX Runtime too old for the model: skip, do not fake
        print(f"skip: ONNX Runtime cannot load the model ({str(err)[:120]})", flush=True)
        return None
    sess.run(None, feeds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def layer_row(op, hidden, batch, seq_len, options, unrolled):
    import torch

    layer = torch_layer(op, hidden, seed=hidden + batch)
    x = torch.randn(seq_len, batch, hidden, device="cuda")
    model = onnx_from_torch(op, layer, seq_len, batch)
    feeds = {"X": x.cpu().numpy()}
    row = {"part": "layer", "cell": op, "hidden": hidden, "batch": batch, "seq_len": seq_len}
    compiled = compile_model(model, "cuda", **options)
    row["ours_ms"] = compiled_ms(compiled, feeds)
    row["config"] = compiled.report()[0].config
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        eager, graph = cudnn_ms(layer, x)
        key = "tf32" if tf32 else "fp32"
        row[f"cudnn_{key}_eager_ms"], row[f"cudnn_{key}_graph_ms"] = eager, graph
    row.update(direct_cudnn_columns(layer, x))
    torch.backends.cudnn.allow_tf32 = True
    row["cudnn_fp16_eager_ms"], row["cudnn_fp16_graph_ms"] = cudnn_ms(layer.half(), x.half())
    row["ort_cpu_ms"] = _ort_ms(model, feeds)
    if unrolled:
        t0 = time.perf_counter()
        row["tvm_unrolled_ms"] = compiled_ms(compile_model(model, "cuda", unroll=True), feeds)
        row["tvm_unrolled_compile_s"] = time.perf_counter() - t0
    return row


def direct_cudnn_columns(layer, x) -> dict:
    """cuDNN's four algorithms called directly with strict fp32 math (`cudnn_direct.py`; its
    persistent ones beat torch's layer at batch 1), each checked against torch's fp32 output:
    `cudnn_direct` per algorithm, and the fastest that matched as `cudnn_persist_best_ms`."""
    import torch

    from .cudnn_direct import algorithm_rows

    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        want = layer(x)[0]
        try:
            rows = algorithm_rows(layer, x, want, cuda_ms)
        except (RuntimeError, OSError) as err:  # no libcudnn beside torch, or its API differs
            return {"cudnn_direct": {"error": str(err)}}
    bound = 1e-4 * max(1.0, float(want.abs().max()))  # the fp32 bound our layers are held to
    matched = {a: r["ms"] for a, r in rows.items() if "ms" in r and r["max_diff"] <= bound}
    out = {"cudnn_direct": rows}
    if matched:
        best = min(matched, key=matched.get)
        out.update(cudnn_persist_best_ms=matched[best], cudnn_persist_best_algo=best)
    return out


#: what `--precision` measures: for each, our build's precision option, the ONNX model's dtype, and
def matched_ms(direct: dict, bound: float) -> dict:
    """{algorithm: ms} of cuDNN's algorithms (`cudnn_direct.algorithm_rows`) that ran within `bound`."""
    return {a: r["ms"] for a, r in direct.items() if isinstance(r, dict) and "ms" in r and r["max_diff"] <= bound}


def precision_row(op, hidden, batch, seq_len, options, precision, flashrnn=True, failed_builds=()) -> dict:
    """One layer at `precision` against cuDNN at the same precision, in one run: torch's layer
    (eager and CUDA graph; TF32 allowed only at "tf32"; 16-bit layer and input at "fp16" and "bf16") and its
    four algorithms called directly, each checked against torch's output at that precision within
    the precision's bound (`BOUNDS`); the fastest of those is `best_cudnn_ms`. fp16 and bf16
    rows add FlashRNN's backends (`flashrnn_columns`) unless `flashrnn` is False, but not those
    whose build failed up front (`failed_builds`: (cell, hidden, batch, dtype, backend) jobs).
    `ours_err`: ours against torch's strict fp32 layer, over the output scale."""
    import torch

    from .cudnn_direct import algorithm_rows
    from .flashrnn_graph import graph_columns

    build_precision, dtype, math = PRECISIONS[precision]
    layer, x, strict, model, feeds = strict_fp32_case(op, hidden, batch, seq_len, dtype)
    strict = strict.cpu().numpy()
    compiled = compile_model(model, "cuda", precision=build_precision, **options)
    row = {"part": "precision", "precision": precision, "cell": op, "hidden": hidden, "batch": batch,
           "seq_len": seq_len, "ours_ms": compiled_ms(compiled, feeds), "config": compiled.report()[0].config,
           "lowering": compiled.report()[0].lowering}
    got = compiled.run(feeds)[0][:, 0].astype("float32")
    row["ours_err"] = float(np.abs(got - strict).max() / max(1.0, float(np.abs(strict).max())))
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    theirs, tx, want, bound = at_precision(layer, x, precision)
    with torch.no_grad():
        row["torch_eager_ms"], row["torch_graph_ms"] = cudnn_ms(theirs, tx)
        try:
            direct = algorithm_rows(theirs, tx, want, cuda_ms, math=math)
        except (RuntimeError, OSError) as err:  # no libcudnn beside torch, or its API differs
            direct = {"error": str(err)}
    timed = {"torch_graph": row["torch_graph_ms"], **matched_ms(direct, bound)}
    best = min(timed, key=timed.get)
    row.update(cudnn_direct=direct, best_cudnn=best, best_cudnn_ms=timed[best],
               best_cudnn_over_ours=timed[best] / row["ours_ms"], torch_graph_over_ours=row["torch_graph_ms"] / row["ours_ms"])
    if dtype != "float32" and flashrnn:  # FlashRNN runs fp16 and bf16, not fp32
        skip = {job[4] for job in failed_builds if tuple(job[:4]) == (op, hidden, batch, dtype)}
        row.update(flashrnn_columns(theirs, tx, want, bound, row["ours_ms"], skip,
                                    lambda backend: graph_columns(op, hidden, batch, precision, backend)))
    spec = CellSpec(op.lower(), hidden, hidden, linear_before_reset=op == "GRU", dtype=dtype)
    row.update(floor_ms(spec, batch, seq_len, gpu_model("sm_90"), precision))  # the physical floor (floor.py)
    row["ours_over_floor"] = row["ours_ms"] / row["floor_ms"]
    torch.backends.cudnn.allow_tf32 = True
    return row


def offgrid_row(cell: str, hidden: int, batch: int, precision: str, seq_len: int = 100, measured: bool = True) -> dict:
    """`--parts offgrid`'s row (`offgrid.py`): `precision_row` for the cost model's pick (no tuning
    log, measure off) against cuDNN at `precision`, plus (`measured`) the default compile on the
    GPU (no tuning log, top 5 timed) timed in the same run."""
    row = precision_row(cell, hidden, batch, seq_len, {"tuning_log": None, "measure": False}, precision, flashrnn=False)
    if not measured:
        return {**row, "part": "offgrid"}
    build_precision, dtype, _ = PRECISIONS[precision]
    _, _, _, model, feeds = strict_fp32_case(cell, hidden, batch, seq_len, dtype)
    measured = compile_model(model, "cuda", precision=build_precision, tuning_log=None, measure=True, top_k=5)
    row.update(part="offgrid", measured_ms=compiled_ms(measured, feeds), measured_config=measured.report()[0].config,
               measured_lowering=measured.report()[0].lowering)
    row["best_cudnn_over_measured"] = row["best_cudnn_ms"] / row["measured_ms"]
    return row


def flashrnn_columns(layer, x, want, bound, ours_ms, skip=(), graph=None) -> dict:
    """FlashRNN's backends on the same layer (`flashrnn_anchor.py`, input projection included),
    each checked against torch's output within `bound` and timed as called from Python (`ms`) and
    replayed from a CUDA graph (`graph(backend)`: `flashrnn_graph.graph_columns` in a process of
    its own, as torch's cuDNN layer is replayed): `flashrnn` per backend ({"ms", "max_diff",
    "graph_ms" or "graph_refused"} or {"refused": why}; a backend in `skip` failed to build), the
    fastest that matched, either way, as `flashrnn_best_ms`."""
    import torch

    from .flashrnn_anchor import BACKENDS, flashrnn_call

    rows = {}
    for backend in BACKENDS:
        if backend in skip:
            rows[backend] = {"refused": "its JIT build failed before the timed run (the flashrnn_builds line)"}
            continue
        try:
            with torch.no_grad():
                call, y = flashrnn_call(layer, x, backend)
                rows[backend] = {"max_diff": float((y.float() - want.float()).abs().max()), "ms": cuda_ms(call)}
        except Exception as err:  # not installed, a JIT build that fails, a shape or dtype it refuses
            rows[backend] = {"refused": refusal(err)}
            continue
        if graph is not None:
            rows[backend].update(graph(backend))
    out = {"flashrnn": rows}
    matched = {b: min(r["ms"], r.get("graph_ms", r["ms"])) for b, r in rows.items() if "ms" in r and r["max_diff"] <= bound}
    if matched:
        best = min(matched, key=matched.get)
        out.update(flashrnn_best=best, flashrnn_best_ms=matched[best], flashrnn_over_ours=matched[best] / ours_ms)
    return out


def inputs_at_batch(compiled, npz: str, batch: int) -> dict:
    """An example's inputs tiled or cut to `batch` along each input's symbolic batch axis (an axis
    whose name holds "batch"; inputs without one stay as they are)."""
    out = {}
    for spec, a in zip(compiled.inputs, np.load(npz).values()):
        axis = next((k for k, d in enumerate(spec.shape or []) if isinstance(d, str) and "batch" in d.lower()), None)
        if axis is not None:
            a = np.take(a, np.arange(batch) % a.shape[axis], axis=axis)
        out[spec.name] = np.ascontiguousarray(a)
    return out


def model_rows(name, batches, options, examples_dir):
    """A shipped example end to end, latency against batch. Side by side, timed in turn
    (`interleaved_ms`): the model as shipped (symbolic batch: one build for every batch) and
    built for each static batch, both through the VM with inputs on the GPU (`ours_ms` is the
    static build, its stacks fused where the default `wavefront="auto"` chooses; `per_layer_ms`
    and `wavefront_ms` the same with wavefront=False and True); the as-shipped build also through
    the whole `run()` path, with numpy and with torch CUDA tensors; ONNX Runtime (CPU)."""
    import onnx
    import torch

    path = os.path.join(examples_dir, f"{name}.onnx")
    model = onnx.load(path)
    shipped = compile_model(path, "cuda", **options)
    rows = []
    for batch in batches:
        feeds = inputs_at_batch(shipped, path.replace(".onnx", "_inputs.npz"), batch)
        on_gpu = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
        shapes = {k: v.shape for k, v in feeds.items()}
        compiled = compile_model(path, "cuda", shapes=shapes, **options)
        fused = compile_model(path, "cuda", shapes=shapes, wavefront=True, **options)
        apart = compile_model(path, "cuda", shapes=shapes, wavefront=False, **options)
        ms = interleaved_ms({"ours_ms": vm_call(compiled, feeds), "wavefront_ms": vm_call(fused, feeds),
                             "per_layer_ms": vm_call(apart, feeds),
                             "shipped_ms": vm_call(shipped, feeds),
                             "shipped_run_numpy_ms": lambda: shipped.run(feeds),
                             "shipped_run_torch_ms": lambda: shipped.run(on_gpu)}, per_timing=50)
        spec = shipped.inputs[0]
        seq_len = next(feeds[spec.name].shape[k] for k, d in enumerate(spec.shape) if d != "batch")  # T leads the rest
        row = {"part": "model", "model": name, "batch": batch, "seq_len": seq_len, **ms,
               "ort_cpu_ms": _ort_ms(model, feeds), "lowerings": [r.lowering for r in compiled.report()]}
        row["shipped_over_static"] = row["shipped_ms"] / row["ours_ms"]
        row["ours_over_wavefront"] = row["ours_ms"] / row["wavefront_ms"]
        row["per_layer_over_ours"] = row["per_layer_ms"] / row["ours_ms"]
        row["run_torch_over_vm"] = row["shipped_run_torch_ms"] / row["shipped_ms"]
        rows.append(row)
    return rows


def flashrnn_builds(precision_jobs, flashrnn_layers, log) -> list[dict]:
    """FlashRNN's JIT builds for the 16-bit rows that will time it, done first and in parallel
    (`flashrnn_prebuild.py`), so that no build lands inside the timed run; [] without flashrnn."""
    import importlib.util

    wanted = {(p, op, h, b) for p, op, h, b in precision_jobs if PRECISIONS[p][1] != "float32"
              and (not flashrnn_layers or (op, h, b) in set(flashrnn_layers))}
    if not wanted or importlib.util.find_spec("flashrnn") is None:
        return []
    from .flashrnn_anchor import BACKENDS, has_backend
    from .flashrnn_prebuild import prebuild

    jobs = [(op, h, b, PRECISIONS[p][1], backend) for p, op, h, b in sorted(wanted) for backend in BACKENDS
            if has_backend(op, backend)]
    return [{"job": list(job), **result} for job, result in prebuild(jobs, log=log).items()]


def run_suite(out: str, parts=PARTS, tuning_log=None, unrolled_hidden=(256,), examples_dir="examples", log=print,
              unverified=False, layers=(), precisions=(), flashrnn_layers=()):
    """Measure `parts` and append JSON lines to `out` (the first one describes the machine and
    whether kernels not yet verified on a GPU were allowed); `layers`, (cell, hidden, batch)
    triples, keeps only those layers of the parts; `precisions` (of PRECISIONS) adds GRNN's grid
    at each, against cuDNN at the same precision (`precision_row`); `flashrnn_layers`, if any, are
    the only layers FlashRNN runs on (each shape is a JIT build of about a minute)."""
    options = {"tuning_log": tuning_log, "unverified": unverified}
    try:
        import torch
    except ImportError:
        log("skip: torch is not installed; the cuDNN baselines need it")
        return
    if not torch.cuda.is_available():
        log("skip: no CUDA GPU; nothing to measure")
        return
    import tvm

    meta = {"part": "meta", "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "tvm": tvm.__version__,
            "python": platform.python_version(), "unverified": unverified,
            "driver": os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip()}
    jobs = []
    if "grid" in parts:
        jobs += [(op, h, b, 100, h in unrolled_hidden and b in (1, 10)) for op in ("LSTM", "GRU")
                 for h in (64, 256, 1024) for b in (1, 10, 20)]
    if "batch" in parts:
        jobs += [("LSTM", 256, b, 100, False) for b in (2, 4, 8, 32, 64)]
    if "seq" in parts:
        jobs += [("LSTM", 256, 10, t, False) for t in (10, 50, 200, 400)]
    if layers:
        jobs = [job for job in jobs if tuple(job[:3]) in set(layers)]
    grid = [(op, h, b) for op in ("LSTM", "GRU") for h in (64, 256, 1024) for b in (1, 10, 20)]
    precision_jobs = [(p, *layer) for p in precisions for layer in grid if not layers or layer in set(layers)]
    with open(out, "a") as f:
        f.write(json.dumps(meta) + "\n")
        builds = flashrnn_builds(precision_jobs, flashrnn_layers, log)
        if builds:
            f.write(json.dumps({"part": "flashrnn_builds", "builds": builds}) + "\n")
        for op, h, b, t, unrolled in jobs:
            row = layer_row(op, h, b, t, options, unrolled)
            f.write(json.dumps(row) + "\n")
            f.flush()
            log(json.dumps(row))
        for precision, op, h, b in precision_jobs:
            row = precision_row(op, h, b, 100, options, precision, not flashrnn_layers or (op, h, b) in set(flashrnn_layers),
                                [x["job"] for x in builds if not x["ok"]])
            f.write(json.dumps(row) + "\n")
            f.flush()
            log(json.dumps({k: v for k, v in row.items() if k != "cudnn_direct"}))
        if "stacks" in parts:
            from .stacks import STACKS, stack_row

            for op, h, n_l, b in STACKS:
                row = stack_row(op, h, n_l, b, 100, options)
                f.write(json.dumps(row) + "\n")
                f.flush()
                log(json.dumps(row))
        if "offgrid" in parts:
            from .offgrid import offgrid_set, offgrid_summary

            rows = []
            for op, h, b, precision in offgrid_set():
                if layers and (op, h, b) not in set(layers):
                    continue
                rows.append(offgrid_row(op, h, b, precision))
                f.write(json.dumps(rows[-1]) + "\n")
                f.flush()
                log(json.dumps({k: v for k, v in rows[-1].items() if k != "cudnn_direct"}))
            f.write(json.dumps(offgrid_summary(rows)) + "\n")
            log(json.dumps(offgrid_summary(rows)))
        if "models" in parts:
            for name, batches in (("char_rnn", (1, 16, 64)), ("speech_gru", (1, 8, 64)), ("text_classifier", (1, 8, 64))):
                for row in model_rows(name, batches, options, examples_dir):
                    f.write(json.dumps(row) + "\n")
                    log(json.dumps(row))
