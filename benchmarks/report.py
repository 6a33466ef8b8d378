"""Benchmark reports from JSON lines (matplotlib for the plots).

    python benchmarks/report.py                          # docs/benchmarks.md and docs/img/results.png
    python benchmarks/report.py results.jsonl --out DIR  # one `persist-rnn bench` run: DIR/benchmarks.md, CSV, plots

The first form regenerates the project's current results from the data files named in `CURRENT`
(docs/data/); where two files hold the same layer, the later in the list wins.
"""
from __future__ import annotations

import argparse
import csv
import json
import os

import numpy as np


def geomean(xs):
    xs = [x for x in xs if x]
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def _finish(fig, ax, title, path, legend_size=8):
    """Title, legend and layout of a figure, saved as a PNG at `path`."""
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def precision_lines(rows) -> list[str]:
    """`persist-rnn bench --precision`'s rows as one table per precision, each layer against cuDNN
    at that precision, and per precision: the geomean over torch's CUDA graph and over the best
    cuDNN variant, and the layers slower than that best (issue 20's floors)."""
    out = []
    for precision in dict.fromkeys(r["precision"] for r in rows):
        sel = [r for r in rows if r["precision"] == precision]
        out += ["", f"## {precision}: each layer against cuDNN at {precision} (T=100, input = hidden)", "",
                "| layer | ours ms | error | torch graph ms | best cuDNN ms | best | best ÷ ours | graph ÷ ours "
                "| floor ms | ours ÷ floor |", "|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['cell']} H={r['hidden']} B={r['batch']} | {r['ours_ms']:.4f} | {r['ours_err']:.1e} | "
                f"{r['torch_graph_ms']:.4f} | {r['best_cudnn_ms']:.4f} | {r['best_cudnn']} | "
                f"{r['best_cudnn_over_ours']:.2f}x | {r['torch_graph_over_ours']:.2f}x | {r['floor_ms']:.4f} | "
                f"{r['ours_over_floor']:.2f}x |" for r in sel]
        slower = [f"{r['cell']} H={r['hidden']} B={r['batch']} ({r['best_cudnn_over_ours']:.2f}x)"
                  for r in sel if r["best_cudnn_over_ours"] < 1]
        far = [f"{r['cell']} H={r['hidden']} B={r['batch']} ({r['ours_over_floor']:.1f}x)"
               for r in sel if r["ours_over_floor"] > 3]
        flash = [r for r in sel if r.get("flashrnn_best_ms")]
        if flash:
            out += ["", f"FlashRNN ({precision}), fastest backend that matched torch: "
                    + ", ".join(f"{r['cell']} H={r['hidden']} B={r['batch']} {r['flashrnn_best_ms']:.4f} ms "
                                f"({r['flashrnn_best']}, {r['flashrnn_over_ours']:.2f}x)" for r in flash)
                    + f"; geomean over these {len(flash)} layers {geomean([r['flashrnn_over_ours'] for r in flash]):.2f}x."]
        out += ["", f"Geomean over {len(sel)} layers: {geomean([r['torch_graph_over_ours'] for r in sel]):.2f}x against "
                f"torch's CUDA graph, {geomean([r['best_cudnn_over_ours'] for r in sel]):.2f}x against the best cuDNN "
                f"variant; slower than it: {', '.join(slower) or 'none'}; more than 3x the floor: "
                f"{', '.join(far) or 'none'}."]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", help="a `persist-rnn bench` run; without it, the current results")
    ap.add_argument("--out", default="bench-report", help="where a run's report goes")
    args = ap.parse_args()
    if args.results is None:
        from current_results import current_report

        current_report(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
        return
    run_report(args.results, args.out)


def run_report(results: str, out: str):
    """One bench run's tables and plots, written under `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in open(results) if line.strip()]
    meta = next(r for r in rows if r["part"] == "meta")
    layers = [r for r in rows if r["part"] == "layer"]
    models = [r for r in rows if r["part"] == "model"]
    label = f"{meta['gpu']}, {meta['date']}" + (", kernels not yet verified allowed" if meta.get("unverified") else "")
    os.makedirs(os.path.join(out, "img"), exist_ok=True)
    cols = ["cell", "hidden", "batch", "seq_len", "ours_ms", "cudnn_tf32_graph_ms", "cudnn_fp32_graph_ms",
            "cudnn_tf32_eager_ms", "cudnn_fp32_eager_ms", "cudnn_fp16_graph_ms", "cudnn_fp16_eager_ms", "ort_cpu_ms",
            "tvm_unrolled_ms"]
    with open(os.path.join(out, "benchmarks.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in layers:
            w.writerow([r.get(c, "") for c in cols])

    grid = [r for r in layers if r["seq_len"] == 100 and r["hidden"] in (64, 256, 1024) and r["batch"] in (1, 10, 20)
            and r["cell"] in ("LSTM", "GRU")]
    seen, grid_unique = set(), []
    for r in grid:
        k = (r["cell"], r["hidden"], r["batch"])
        if k not in seen:
            seen.add(k)
            grid_unique.append(r)
    grid = grid_unique
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "—"
    mark = lambda r: " †" if r.get("carried_from") else ""  # measured in an earlier run, kept
    lines = ["# Benchmarks", "", f"Measured on {label}; torch {meta['torch']}, cuDNN {meta['cudnn']}, TVM {meta['tvm']}, "
             f"driver {meta['driver']}. Medians of CUDA-event timings of back-to-back calls, inputs on the device, "
             "warm-up excluded. *Ours* is the whole compiled layer through TVM's VM (input-projection GEMM, "
             "persistent kernel, launches). cuDNN *tf32* is torch's default (TF32 tensor-core GEMMs inside "
             "the RNN); *fp32* sets `torch.backends.cudnn.allow_tf32 = False`, the same arithmetic as ours; "
             "*fp16* runs the layer in half precision (tensor cores), shown for reference against our fp32 layer. "
             "Ratios are baseline / ours (>1: persist_rnn is faster). Produced by `benchmarks/bench_suite.py` "
             "and `benchmarks/report.py`."
             + (" *Ours* was compiled with `unverified=True` (kernel variants not yet verified on a GPU allowed)."
                if meta.get("unverified") else ""), "",
             "## GRNN's grid (one layer, T=100, input = hidden)", "",
             ("| layer | ours ms | cuDNN graph tf32 | cuDNN graph fp32 | cuDNN eager tf32 | cuDNN eager fp32 | "
              "cuDNN graph fp16 | ORT CPU | TVM unrolled | vs graph tf32 | vs graph fp32 |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in grid:
        lines.append(f"| {r['cell']} H={r['hidden']} B={r['batch']}{mark(r)} | {fmt(r['ours_ms'])} | {fmt(r['cudnn_tf32_graph_ms'])} | "
                     f"{fmt(r['cudnn_fp32_graph_ms'])} | {fmt(r['cudnn_tf32_eager_ms'])} | {fmt(r.get('cudnn_fp32_eager_ms'))} | "
                     f"{fmt(r.get('cudnn_fp16_graph_ms'))} | {fmt(r.get('ort_cpu_ms'))} | "
                     f"{fmt(r.get('tvm_unrolled_ms'))} | {r['cudnn_tf32_graph_ms'] / r['ours_ms']:.2f}x | "
                     f"{r['cudnn_fp32_graph_ms'] / r['ours_ms']:.2f}x |")
    carried = sorted({r["carried_from"] for r in layers + models if r.get("carried_from")})
    if carried:
        lines += ["", "† measured in an earlier run of this suite, kept here: " + "; ".join(carried)
                  + (f". {meta['note']}." if meta.get("note") else "")]
    summary = {}
    for key in ("cudnn_tf32_graph_ms", "cudnn_fp32_graph_ms", "cudnn_persist_best_ms", "cudnn_fp16_graph_ms",
                "cudnn_tf32_eager_ms", "ort_cpu_ms", "tvm_unrolled_ms"):
        ratios = [(r[key] / r["ours_ms"], r) for r in grid if r.get(key)]
        if ratios:
            best, worst = max(ratios, key=lambda x: x[0]), min(ratios, key=lambda x: x[0])
            summary[key] = (geomean([x for x, _ in ratios]), best, worst, len(ratios))
    lines += ["", "Geometric-mean speed-up of persist_rnn over each baseline on this grid:", ""]
    for key, (g, best, worst, n) in summary.items():
        lines.append(f"- {key.replace('_ms', '')}: {g:.2f}x over {n} configs; best {best[0]:.2f}x "
                     f"({best[1]['cell']} H={best[1]['hidden']} B={best[1]['batch']}), worst {worst[0]:.2f}x "
                     f"({worst[1]['cell']} H={worst[1]['hidden']} B={worst[1]['batch']})")

    fig, ax = plt.subplots(figsize=(9, 4))
    names = [f"{r['cell'][0]}{r['hidden']}/{r['batch']}" for r in grid]
    xs = np.arange(len(grid))
    for i, (key, lab) in enumerate((("ours_ms", "persist_rnn"), ("cudnn_tf32_graph_ms", "cuDNN graph (tf32)"),
                                    ("cudnn_fp32_graph_ms", "cuDNN graph (fp32)"))):
        ax.bar(xs + (i - 1) * 0.27, [r[key] for r in grid], 0.27, label=lab)
    ax.set_xticks(xs, names, rotation=60, fontsize=7)
    ax.set_ylabel("ms per layer (T=100)")
    ax.set_yscale("log")
    _finish(fig, ax, f"GRNN grid: LSTM (L) / GRU (G) hidden/batch — {label}", os.path.join(out, "img", "grid.png"))
    lines += ["", "![grid](img/grid.png)"]

    for part, xkey, title, fname in (("batch", "batch", "LSTM H=256, T=100: latency against batch", "batch.png"),
                                     ("seq", "seq_len", "LSTM H=256, B=10: latency against sequence length", "seq.png")):
        if part == "batch":
            sel = [r for r in layers if r["cell"] == "LSTM" and r["hidden"] == 256 and r["seq_len"] == 100]
        else:
            sel = [r for r in layers if r["cell"] == "LSTM" and r["hidden"] == 256 and r["batch"] == 10]
        sel = sorted({r[xkey]: r for r in sel}.values(), key=lambda r: r[xkey])
        if len(sel) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for key, lab in (("ours_ms", "persist_rnn"), ("cudnn_tf32_graph_ms", "cuDNN graph (tf32)"),
                         ("cudnn_fp32_graph_ms", "cuDNN graph (fp32)")):
            ax.plot([r[xkey] for r in sel], [r[key] for r in sel], "o-", label=lab)
        ax.set_xlabel(xkey)
        ax.set_ylabel("ms")
        _finish(fig, ax, f"{title}\n{label}", os.path.join(out, "img", fname))
        lines += ["", f"## {title}", "", "| " + xkey + " | ours ms | cuDNN graph tf32 | cuDNN graph fp32 |", "|---|---|---|---|"]
        lines += [f"| {r[xkey]}{mark(r)} | {r['ours_ms']:.3f} | {r['cudnn_tf32_graph_ms']:.3f} | {r['cudnn_fp32_graph_ms']:.3f} |" for r in sel]
        lines += ["", f"![{part}](img/{fname})"]

    if models:
        lines += ["", "## Real models end to end (examples/), latency against batch", "",
                  "| model | batch | T | static build ms | as shipped ms (x static) | run(), numpy ms | run(), torch CUDA ms "
                  "| ORT CPU ms | lowerings |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']}{mark(r)} | {r['batch']} | {r['seq_len']} | {r['ours_ms']:.3f} | "
                  f"{fmt(r.get('shipped_ms'))} ({fmt(r.get('shipped_over_static'))}) | {fmt(r.get('shipped_run_numpy_ms'))} | "
                  f"{fmt(r.get('shipped_run_torch_ms'))} | {fmt(r.get('ort_cpu_ms'))} | {', '.join(r['lowerings'])} |"
                  for r in models]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name in sorted({r["model"] for r in models}):
            sel = [r for r in models if r["model"] == name]
            ax.plot([r["batch"] for r in sel], [r["ours_ms"] for r in sel], "o-", label=f"{name} (persist_rnn)")
            ax.plot([r["batch"] for r in sel], [r["ort_cpu_ms"] for r in sel], "x--", label=f"{name} (ORT CPU)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("ms")
        _finish(fig, ax, f"Real models — {label}", os.path.join(out, "img", "models.png"), legend_size=7)
        lines += ["", "![models](img/models.png)"]
    lines += precision_lines([r for r in rows if r["part"] == "precision"])
    lines += stack_lines([r for r in rows if r["part"] == "stack"])
    with open(os.path.join(out, "benchmarks.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def stack_lines(stacks: list) -> list:
    """The `stacks` part: the layer wavefront against a kernel a layer and torch's multi-layer module."""
    if not stacks:
        return []
    lines = ["", "## Layer wavefront: stacked layers in one kernel", "",
             "| stack | wavefront | a kernel a layer | torch cuDNN graph | per layer ÷ wavefront | torch ÷ wavefront |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['cell']} H={r['hidden']} x{r['layers']} B={r['batch']} | {r['ours_ms']:.3f} | {r['per_layer_ms']:.3f} | "
              f"{r['torch_graph_ms']:.3f} | {r['per_layer_over_ours']:.2f}x | {r['torch_graph_over_ours']:.2f}x |" for r in stacks]
    return lines


if __name__ == "__main__":
    main()
