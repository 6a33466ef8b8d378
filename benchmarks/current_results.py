"""docs/benchmarks.md and docs/img/results.png from the data files that hold the current results.

Run through `python benchmarks/report.py` (no arguments). Every number in the page is read from
the files in `CURRENT`; the page names, for each table, the file and the command that measured it.
"""
from __future__ import annotations

import json
import os

import numpy as np

from persist_rnn.bench.offgrid import offgrid_summary

#: the layers of GRNN's grid at each precision against cuDNN at that precision (`persist-rnn bench
#: --precision ...` rows); a later file's row replaces an earlier one's for the same layer
GRID_FILES = ["b1-fp32-h100.jsonl", "grid-fp32-b10-b20-h100.jsonl", "grid-tf32-h100.jsonl",
              "fp16-flashrnn-eager-h100.jsonl", "fp16-flashrnn-graph-h100.jsonl", "fp16-flashrnn-lstm1024-h100.jsonl",
              "b1-bf16-16bit-io-h100.jsonl", "bf16-b10-b20-16bit-io-h100.jsonl",
              "bf16-gru1024-b10-b20-16bit-io-h100.jsonl", "h64-dtypes-h100.jsonl"]
STACKS_FILE = "wavefront-stacks-h100.jsonl"  # `persist-rnn bench --parts stacks`
CORPUS_FILE = "corpus-latency-h100.jsonl"  # `python benchmarks/corpus_latency.py`
OFFGRID_FILE = "offgrid-picks-h100.jsonl"  # `python benchmarks/offgrid_picks.py`
OFFGRID_PART_FILE = "offgrid-h200.jsonl"  # `persist-rnn bench --parts offgrid` (runs A-Z)
CURRENT = GRID_FILES + [STACKS_FILE, CORPUS_FILE, OFFGRID_FILE, OFFGRID_PART_FILE]
#: sections of docs/benchmarks.md written by hand (each names its data file and command), which a
#: regeneration keeps as they stand, in this order after the generated ones
KEPT_SECTIONS = ("## Off-grid layers outside the set", "## The 16-bit exchange of h(t-1)", "## A fragments in shared memory", "## Batch tiles of a grid",
                 "## The GEMM scan, kernels alone", "## Streamed fragments: 16-bit layers past the chip, kernels alone",
                 "## The register cap ptxas gives", "## The input projection's 16-bit GEMM", "## Real models as shipped",
                 "## Layers too large for the chip", "## Quantized layers", "## PyTorch modules")
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16")


def _rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def geomean(xs):
    xs = [x for x in xs if x]
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def grid_rows(data: str) -> dict:
    """{(precision, cell, hidden, batch): row} over GRID_FILES, later files winning."""
    latest = {}
    for name in GRID_FILES:
        for r in _rows(os.path.join(data, name)):
            if r.get("part") == "precision":
                latest[(r["precision"], r["cell"], r["hidden"], r["batch"])] = {**r, "file": name}
    return latest


def _layer(r) -> str:
    return f"{r['cell']} H={r['hidden']} B={r['batch']}"


def grid_lines(grid: dict) -> list[str]:
    """A summary over precisions, then a table a precision, each layer against the best cuDNN
    algorithm at that precision that matched torch's output (torch's graph counts among them)."""
    out = ["## GRNN's grid at four precisions", "",
           "One layer, T=100, input size = hidden, inputs on the GPU; ours is the compiled layer through "
           "TVM's VM (input-projection GEMM and persistent kernel), compiled with the shipped tuning log "
           "(`docs/data/tune-h100.jsonl`). *Best cuDNN* is the fastest of torch's layer replayed from a "
           "CUDA graph and cuDNN's four algorithms (STANDARD, PERSIST_STATIC, PERSIST_DYNAMIC, "
           "PERSIST_STATIC_SMALL_H) called directly, each run at the same precision and counted only if it "
           "matched torch's output within that precision's bound. Ratios are their time over ours (above "
           "1: persist_rnn is faster). Command: `persist-rnn bench --precision fp32,tf32,fp16,bf16 "
           "--tuning-log docs/data/tune-h100.jsonl`.", "",
           "| precision | layers | geomean over best cuDNN | least | geomean over torch's CUDA graph |",
           "|---|---|---|---|---|"]
    for precision in PRECISION_ORDER:
        sel = [r for k, r in grid.items() if k[0] == precision]
        if not sel:
            continue
        least = min(sel, key=lambda r: r["best_cudnn_over_ours"])
        out.append(f"| {precision} | {len(sel)} | {geomean([r['best_cudnn_over_ours'] for r in sel]):.2f}x | "
                   f"{least['best_cudnn_over_ours']:.2f}x ({_layer(least)}) | "
                   f"{geomean([r['torch_graph_over_ours'] for r in sel]):.2f}x |")
    for precision in PRECISION_ORDER:
        sel = sorted((r for k, r in grid.items() if k[0] == precision), key=lambda r: (r["cell"], r["hidden"], r["batch"]))
        if not sel:
            continue
        out += ["", f"### {precision}", "", "| layer | ours ms | best cuDNN ms | best | best ÷ ours | torch graph ÷ ours | "
                "data |", "|---|---|---|---|---|---|---|"]
        out += [f"| {_layer(r)} | {r['ours_ms']:.4f} | {r['best_cudnn_ms']:.4f} | {r['best_cudnn']} | "
                f"{r['best_cudnn_over_ours']:.2f}x | {r['torch_graph_over_ours']:.2f}x | `{r['file']}` |" for r in sel]
        flash = [r for r in sel if r.get("flashrnn_best_ms")]
        if flash:
            out += ["", f"FlashRNN at {precision}, its fastest backend that matched torch, over ours: "
                    + ", ".join(f"{_layer(r)} {r['flashrnn_over_ours']:.2f}x" for r in flash) + "."]
    return out


def stack_lines(stacks: list) -> list[str]:
    """The layer wavefront against a kernel a layer and torch's multi-layer module; `default` is
    what compile builds (`wavefront="auto"`)."""
    out = ["", "## Stacks of layers: the layer wavefront", "",
           "A static-batch stack (T=100) as one wavefront kernel, as a kernel a layer, and as torch's multi-layer "
           "module (cuDNN, CUDA graph), fp32. *Default* is what `compile` builds (`wavefront=\"auto\"`): fused "
           "where the tuning log or the stack cost model finds it faster. Command: `persist-rnn bench --parts "
           f"stacks --tuning-log docs/data/tune-h100.jsonl` (`docs/data/{STACKS_FILE}`).", "",
           "| stack | fused ms | a kernel a layer ms | torch graph ms | default | a kernel a layer ÷ default | "
           "torch ÷ default |", "|---|---|---|---|---|---|---|"]
    for r in stacks:
        fused = r["auto"]["lowering"] == "wavefront"
        default_ms = r["ours_ms"] if fused else r["per_layer_ms"]
        out.append(f"| {r['layers']} x {r['cell']} H={r['hidden']} B={r['batch']} | {r['ours_ms']:.4f} | "
                   f"{r['per_layer_ms']:.4f} | {r['torch_graph_ms']:.4f} | {'fused' if fused else 'a kernel a layer'} | "
                   f"{r['per_layer_ms'] / default_ms:.2f}x | {r['torch_graph_ms'] / default_ms:.2f}x |")
    return out


def offgrid_lines(rows: list) -> list[str]:
    """Layers off GRNN's grid as a user compiles them: no tuning log, nothing measured."""
    out = ["", "## Layers off GRNN's grid, untuned", "",
           "One layer (T=100, input = hidden) compiled as a user compiles it without a GPU: no tuning log, "
           "nothing measured, the cost model's own pick. Against cuDNN's best algorithm at the same precision "
           "and against the model's pick among FMA-unit configs only (what the planner picks where a "
           "calibration does not price tensor cores), timed in turn. Command: `python benchmarks/offgrid_picks.py` "
           f"(`docs/data/{OFFGRID_FILE}`).", "",
           "| layer | precision | ours ms | pick | best cuDNN ms | best | best ÷ ours | FMA-only pick ÷ ours | error |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kind = "tensor cores" if r["config"].get("mma_k_split") else "FMA units"
        out.append(f"| {_layer(r)} | {r['precision']} | {r['ours_ms']:.4f} | {kind} | {r['best_cudnn_ms']:.4f} | "
                   f"{r['best_cudnn']} | {r['best_cudnn_over_ours']:.2f}x | {r['fma_only_over_ours']:.2f}x | "
                   f"{r['ours_err']:.1e} |")
    return out


def offgrid_part_lines(rows: list) -> list[str]:
    """`bench --parts offgrid` on the H200: each layer's latest run (A: the set as it was; B, C:
    after planner changes, only the layers they move; E: after a kernel change, the layers below
    or nearest 1.0x; F: the layers the tensor-core batch tiles move, and LSTM H=1280 B=128 fp32;
    G: the layers the 16-bit exchange moves most; H: the 16-bit tensor-core layers after the
    16-bit GEMM's copies of pairs; I: the layer in two batch chunks after inputs a chunk ahead;
    J: the layers below 1.0x after the 16-bit GEMM's 64 x 64 warp tiles, LSTM H=1280 B=128 fp32
    measure off only; K, L: the shared-fragments variant; M: the layers grid batch tiles move; N: the
    layer the GEMM scan takes; O, P: the same after its step GEMM's wider tiles, and after its
    kernels' early launch; Q: the layer whose projection moved to the 16-bit pairs GEMM; X: the layers
    whose step fetches its inputs after the mma; D: a kernel variant measured and not kept),
    with run A's ratio beside it, and the floors' numbers over the latest rows."""
    kept = [r for r in rows if r.get("part") == "offgrid" and r.get("run") != "D"]
    latest, top5 = {}, {}
    for r in kept:
        key = (r["cell"], r["hidden"], r["batch"])
        if "best_cudnn_over_measured" in r:
            top5[key] = r
        latest[key] = dict(r)
    for key, r in latest.items():  # a measure-off-only row keeps its layer's latest top-5 compile
        if "best_cudnn_over_measured" not in r:
            r["best_cudnn_over_measured"], r["measured_ms"] = (top5[key][k] for k in ("best_cudnn_over_measured", "measured_ms"))
            r["run"] = f"{r['run']} (top-5: {top5[key]['run']})"
    first = {(r["cell"], r["hidden"], r["batch"]): r for r in kept if r["run"] == "A"}
    floors = offgrid_summary(list(latest.values()))
    out = ["", "## The off-grid set (`bench --parts offgrid`), H200", "",
           "The part's 20 layers (T=100, input = hidden; both cells, every hidden size of 96-2048, every batch of 1-128 "
           "and every precision appear), compiled as users compile them: no tuning log, measure off (the cost model "
           "alone), and the default compile on the GPU (its top 5 and its best tensor-core configs timed), each against "
           "cuDNN's best algorithm at the same precision in the same run (torch's layer in a CUDA graph and the four "
           "algorithms called directly, each checked against torch). Run A measured the whole set; runs B and C "
           "re-measured the layers that two planner changes move (B: batch tiles of clusters only where every cluster "
           "runs at once; C: tensor-core configs held to their A and C fragments in registers), and run E the five "
           "layers below or nearest 1.0x after a kernel change (the 16-bit mma's shared rows of h(t-1) padded to 8 mod "
           "16 floats: no bank conflicts in its B fragments' loads), run F the two layers whose pick the tensor-core "
           "batch tiles move (a cluster per tile of batch rows) and LSTM H=1280 B=128 fp32 (on a GPU of its own: its "
           "builds outlast a shared job); run D, a kernel variant (h(t-1) copied by "
           "cp.async) that was slower on each of its three layers and not kept, is in the file but not in the table. "
           "Run G re-measured the two layers the 16-bit exchange of h(t-1) changes most (`h16_exchange.py`: the "
           "16-bit mma step's CTAs exchange h in the layer's 16 bits; picks unchanged); the other 16-bit "
           "tensor-core rows (E, F) ran before it, and their kernels alone are 1.33-1.68x faster with it "
           "(`docs/data/exchange-ab-h200.jsonl`, below). Run H re-measured the five 16-bit tensor-core layers "
           "after the input projection's 16-bit GEMM began copying x and the packed w_t as they lie (below: "
           "1.3-1.8x the GEMM alone; picks unchanged). Run I re-measured LSTM H=896 B=64 bf16, whose step spans two "
           "batch chunks, after the chunked step began fetching each next chunk's input projections while a chunk "
           "computes (`kernel.chunked_steps`; its step budget before: `docs/data/step-budget-16bit-h200.jsonl`). "
           "Run J re-measured the four layers below 1.0x after the 16-bit GEMM's 128 x 128 tiles took 4 warps of "
           "64 x 64 (5-10% the GEMM alone, below): the three 16-bit layers whole, and LSTM H=1280 B=128 fp32 with "
           "measure off only, its pick since the space left out configs past 96 accumulators a thread "
           "(`space.MAX_ACCUMULATORS`, docs/cost-model.md; the pick before ran 0.52x in run F). Its top-5 compile "
           "outlasts the device's 10 minutes a call, so its 'best ÷ top-5 compile' is run F's, which chose the "
           "same config (`python -c \"from persist_rnn.bench.suite import precision_row; ...\"` with "
           "`{'tuning_log': None, 'measure': False}`). Run K re-measured the two layers of the set whose measure-off "
           "pick takes its shared-fragments variant (`space.unmeasured_variant`: the pick would spill, and its 16-bit "
           "A fragments' last k-tiles move to shared memory; kernels alone, \"A fragments in shared memory\" below), "
           "and run L the same two after that variant began taking every load of h in one turn where its registers "
           "allow (GRU H=640 B=128 fp16 with 15 of 20 k-tiles there: 0.74x -> 0.88x). Run M re-measured the five "
           "layers whose pick moves to batch tiles of a grid (`space.grid_batch_tiles`: each tile's tensor-core CTAs "
           "meet at a barrier counter of their own and read only their tile's rows of h(t-1); kernels alone, \"Batch "
           "tiles of a grid\" below): the three 16-bit layers whole, GRU H=384 B=64 and LSTM H=640 B=16 TF32 "
           "measure off only (their 'best ÷ top-5 compile' is from an earlier run, before the space had such tiles). "
           "Run N re-measured LSTM H=1280 B=128 fp32, which the planner gives the GEMM scan (`gemm_scan.py`: a "
           "tensor-core GEMM and an update a step, where no config holds the weights on chip; \"The GEMM scan\" "
           "below), measure off and the default compile on the GPU, which builds the same scan (the planner decides "
           "it before measuring). Run O re-measured it after the scan's step GEMM took 64 x 80 tiles, one wave "
           "where 64 x 64 tiles took two (`gemm_scan_cost.step_plan`; \"The GEMM scan\" below), and run P after "
           "the scan's kernels began launching early, each placed while the one before finishes "
           "(`gemm_scan_cost.step_launched_early`). Run Q re-measured LSTM H=320 B=4 bf16, whose input "
           "projection (K = 320) went from the FMA units to the 16-bit pairs GEMM (`projection_gemms.pairs_pay`), "
           "and run R GRU H=384 B=64 TF32, whose input projection (K = 384) went from the FMA units to the TF32 "
           "tensor cores (`projection_mma.TF32_MIN_K`). Run S re-measured LSTM H=768 B=32 fp16 built for sm_90a, the "
           "default on a Hopper GPU, whose input projection went to the wgmma GEMM (`projection_wgmma.wgmma_pays`; "
           "(3200, 768) x (768, 3072) 70.9 -> 64.8 us kernel alone). Run T re-measured GRU H=384 B=64 TF32 after the "
           "compile on the GPU began timing, besides those configs, the model's best tensor-core config of each way "
           "the CTAs meet (`planner.meeting_kinds`: here a cluster batch tile, timed and not taken; runs before T timed "
           "the top 5 and two tensor-core configs only). Run U re-measured LSTM H=768 B=32 fp16 and GRU H=2048 B=16 bf16 "
           "after their input projections' wgmma GEMMs took tiles 160 columns wide, two waves where 128 columns took "
           "three (`projection_wgmma.wgmma_plan`; (3200, 768) x (768, 3072) 64.8 -> 59.6 us and (1600, 2048) x "
           "(2048, 6144) 119.4 -> 101.1 kernel alone; in the same process as its row, LSTM H=768 B=32 with tiles 128 "
           "wide ran 0.949x measure off: `docs/data/projection-wgmma-h200.jsonl`, run F). Run V re-measured GRU H=384 "
           "B=64 TF32 after the cost model began pricing a chained mma (`cost_model.features`' mma_chain, its latency "
           "hidden by the other warps of its scheduler; docs/cost-model.md): its measure-off pick went from 2 to 4 "
           "column splits, the config its top-5 compile takes. Run W re-measured the four layers of the set whose "
           "measure-off pick moves when the cost model prices an FMA-unit warp of at most 16 sums at the scheduler "
           "holding the most warps (`cost_model.SCHEDULER_MAX_SUMS`; docs/cost-model.md, *Warps a scheduler holds*; "
           "kernels alone: LSTM H=320 B=4 bf16 1.08x, GRU H=192 B=16 bf16 1.01x, GRU H=896 B=2 fp32 1.04x, "
           "GRU H=96 B=8 fp16 0.93x, `docs/data/scheduler-warps-h200.jsonl`). Run X re-measured the two layers of the "
           "set whose pick is a tensor-core config in batch tiles of a grid of one n-tile (8 batch rows a CTA), after "
           "such a step began fetching step s+1's input projections after its mma, not at its top (`Layout."
           "FETCH_AFTER_DOT`; kernels alone LSTM H=768 B=32 fp16 2.60 -> 2.22 us a step and LSTM H=640 B=16 TF32 "
           "2.79 -> 2.34; in one job LSTM H=768 B=32 fp16 ran 0.955x with the fetch at the top, measure off: "
           "`docs/data/fetch-after-dot-h200.jsonl`). Run Y re-measured the two layers whose measure-off pick became "
           "a 16-bit tensor-core step reading h(t-1) as stamped halves (`persistent/stamped_exchange.py`, no barrier a "
           "step; `docs/data/stamped-halves-h200.jsonl`). Run Z re-measured LSTM H=2048 B=2 fp16, whose pick went from "
           "the FMA units to the tensor cores with 26 of each warp's 64 k-tiles of A fragments in shared memory, "
           "offered where registers alone hold no tensor-core config (`space._shared_fragments`; kernel alone 5.32 -> "
           "3.52 us a step, `docs/data/lstm2048-shared-fragments-h200.jsonl`). "
           "Error: against torch's strict fp32 layer, over the output scale. Command: "
           "`persist-rnn bench --parts offgrid [--layer ...]` "
           f"(`docs/data/{OFFGRID_PART_FILE}`).", "",
           "| layer | precision | run | ours ms (measure off) | pick | best cuDNN ms | best | best ÷ ours | best ÷ top-5 compile | run A: best ÷ ours | error |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in latest.items():
        kind = ("tensor cores" if r["config"].get("mma_k_split") else "FMA units" if r["config"]
                else "GEMM scan" if r.get("lowering") == "gemm_scan" else "streamed")
        out.append(f"| {_layer(r)} | {r['precision']} | {r['run']} | {r['ours_ms']:.4f} | {kind} | {r['best_cudnn_ms']:.4f} | "
                   f"{r['best_cudnn']} | {r['best_cudnn_over_ours']:.2f}x | {r['best_cudnn_over_measured']:.2f}x | "
                   f"{first[key]['best_cudnn_over_ours']:.2f}x | {r['ours_err']:.1e} |")
    out += ["", f"Over the latest rows (`offgrid_summary`): measure off, least {floors['measure_off_least']:.2f}x and "
                f"geomean {floors['measure_off_geomean']:.2f}x ({floors['measure_off_at_1x']} of {floors['layers']} at 1.0x "
                f"or more); the top-5 compile, least {floors['top5_least']:.2f}x and geomean {floors['top5_geomean']:.2f}x. "
                "The cost model's pick against the compile that timed its top 5 and two tensor-core configs: "
                f"{floors['pick_within_1_15']} of {floors['layers']} within 1.15x, the worst {floors['pick_regret_worst']:.3f}x "
                "(over those configs only; against 40 configs of each layer's space, the model's best ten and thirty "
                "drawn from the rest: docs/cost-model.md, *The pick against a sample of each space*)."]
    return out


def kept_sections(path: str) -> list[str]:
    """The hand-written sections of the page at `path` (KEPT_SECTIONS), each up to the next '## '."""
    if not os.path.exists(path):
        return []
    text = open(path).read().split("\n")
    starts = [i for i, line in enumerate(text) if line.startswith("## ")]
    out = []
    for head in KEPT_SECTIONS:
        i = next((i for i in starts if text[i].startswith(head)), None)
        if i is None:
            continue
        end = next((j for j in starts if j > i), len(text))
        section = text[i:end]
        while section and not section[-1].strip():
            section.pop()
        out += [""] + section
    return out


def results_plot(grid: dict, stacks: list, path: str, label: str):
    """README's picture: each grid layer's speed-up over the best cuDNN algorithm at its precision,
    and each stack's default build over torch's cuDNN graph."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({k[1:] for k in grid}, key=lambda k: (k[0], k[1], k[2]))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3.2, 1]})
    xs = np.arange(len(layers))
    for i, precision in enumerate(PRECISION_ORDER):
        ys = [grid[(precision, *k)]["best_cudnn_over_ours"] if (precision, *k) in grid else np.nan for k in layers]
        ax.bar(xs + (i - 1.5) * 0.2, ys, 0.2, label=precision)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(xs, [f"{c[0]}{h}/{b}" for c, h, b in layers], rotation=60, fontsize=7)
    ax.set_ylabel("best cuDNN time ÷ ours")
    ax.set_title(f"GRNN's grid, one layer, T=100: L/G hidden/batch ({label})", fontsize=9)
    ax.legend(fontsize=8, ncol=4)
    names = [f"{r['layers']}x{r['cell'][0]}{r['hidden']}/{r['batch']}" for r in stacks]
    ys = [r["torch_graph_ms"] / (r["ours_ms"] if r["auto"]["lowering"] == "wavefront" else r["per_layer_ms"]) for r in stacks]
    bx.bar(np.arange(len(stacks)), ys, 0.6, color="tab:purple")
    bx.axhline(1.0, color="black", lw=0.8)
    bx.set_xticks(np.arange(len(stacks)), names, rotation=60, fontsize=7)
    bx.set_ylabel("torch cuDNN graph ÷ ours")
    bx.set_title("stacks, fp32 (default build)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def current_report(docs: str):
    data = os.path.join(docs, "data")
    grid = grid_rows(data)
    stack_rows = _rows(os.path.join(data, STACKS_FILE))
    meta = next(r for r in stack_rows if r.get("part") == "meta")
    stacks = [r for r in stack_rows if r.get("part") == "stack"]
    label = f"{meta['gpu']}"
    lines = ["# Benchmarks", "",
             f"Current results, generated by `python benchmarks/report.py` from the data files it names "
             f"(`benchmarks/current_results.py`), but for the sections it keeps as written ({', '.join(h[3:] for h in KEPT_SECTIONS)}), "
             f"each of which names its own data and command. GPU: {meta['gpu']} unless a section says otherwise, driver {meta['driver']}, torch {meta['torch']}, "
             f"cuDNN {meta['cudnn']}, TVM {meta['tvm']}. Medians of CUDA-event timings of back-to-back calls, "
             "warm-up excluded; every row of ours was checked against its peer's output in the same run. "
             "A speed-up is only ever stated against a peer at the same precision.", "",
             "![results](img/results.png)", ""]
    offgrid = _rows(os.path.join(data, OFFGRID_FILE))
    offgrid_part = _rows(os.path.join(data, OFFGRID_PART_FILE))
    page = os.path.join(docs, "benchmarks.md")
    lines += (grid_lines(grid) + offgrid_lines(offgrid) + offgrid_part_lines(offgrid_part) + stack_lines(stacks)
              + kept_sections(page))
    with open(page, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.makedirs(os.path.join(docs, "img"), exist_ok=True)
    results_plot(grid, stacks, os.path.join(docs, "img", "results.png"), label)
