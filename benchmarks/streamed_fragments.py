"""16-bit layers whose weights outgrow registers and shared memory: the persistent tensor-core
step that reads its last k-tiles' A fragments each step (`space.streamed_fragments_variant`)
against what the layer runs without it, kernels alone, timed in turn (needs a GPU).

    python benchmarks/streamed_fragments.py LSTM:2560:16:fp16 GRU:3072:8:fp16 ... [--top 3]
    python benchmarks/lowering_dump.py > before.txt     # with the code before a change to the model
    python benchmarks/streamed_fragments.py --before before.txt --top 1 --no-fma LSTM:2048:32:fp16:bi ...

For each layer (":bi": bidirectional): the GEMM scan as a build for sm_90a makes it (its wgmma step
where it takes one), the planner's measure-off pick there ("pick"; each row says its lowering), the
cost model's pick without streamed fragments (FMA units, global runs: "verified_pick", those that
had run on a GPU; not with `--no-fma`), the model's TOP best streamed-fragments configs, and with
`--before` the persistent pick that file holds ("before_pick"), each with its price now; each
persistent config's Y against the scan's (largest difference over Y's scale). One JSON line a config.
Data: docs/data/streamed-fragments-h200.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import tvm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.bench.torch_layers import PRECISIONS  # noqa: E402
from persist_rnn.schedule.gemm_scan_cost import gemm_scan_us, step_launched_early, step_plan, wgmma_step  # noqa: E402
from persist_rnn.schedule.gpu import gpu_model, present_device  # noqa: E402
from persist_rnn.schedule.measure import (MEASURE_STEPS, as_params, build_kernel, builds, built_as_completed,  # noqa: E402
                                          kernel_arrays, time_kernel, timing)
from persist_rnn.schedule.planner import _ranked, choose, model_pick  # noqa: E402
from persist_rnn.targets import as_target  # noqa: E402
from tir_templates.config import Config  # noqa: E402
from tir_templates.gemm_scan import gemm_scan, gemm_scan_slots  # noqa: E402
from tir_templates.signature import WORKSPACE_WORDS  # noqa: E402
from tir_templates.spec import CellSpec  # noqa: E402


def layer(text: str) -> tuple[CellSpec, int, str, str]:
    """(spec, batch, build precision, precision) of CELL:HIDDEN:BATCH:PRECISION[:bi]."""
    cell, hidden, batch, precision, *bi = text.split(":")
    build_precision, dtype, _ = PRECISIONS[precision]
    spec = CellSpec(cell.lower(), int(hidden), int(hidden), linear_before_reset=cell.upper() == "GRU", dtype=dtype,
                    direction="bidirectional" if bi == ["bi"] else "forward")
    return spec, int(batch), build_precision, precision


def before_picks(path: str) -> dict:
    """(cell, hidden, batch, precision, direction) -> (lowering, Config or None), as
    `lowering_dump.py` wrote them."""
    out = {}
    for line in open(path):
        cell, hidden, batch, precision, direction, lowering, config = line.split(" ", 6)
        cfg = None if config.strip() == "null" else Config.from_dict(json.loads(config))
        out[(cell, int(hidden), int(batch), precision, direction)] = (lowering, cfg)
    return out


def y_of(lib, dev, func, arrays) -> np.ndarray:
    tensors = [tvm.runtime.tensor(a, dev) for a in as_params(func, arrays)]
    getattr(lib, "mod", lib)["main"](*tensors)
    return tensors[7].numpy().astype("float32")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="CELL:HIDDEN:BATCH:PRECISION[:bi]")
    ap.add_argument("--top", type=int, default=3, help="streamed-fragments configs a layer, the model's best first")
    ap.add_argument("--steps", type=int, default=MEASURE_STEPS)
    ap.add_argument("--before", help="lowering_dump.py's output with the code before a change: its persistent "
                    "pick is timed too (\"before_pick\"), and each row says the lowering it had")
    ap.add_argument("--no-fma", action="store_true", help="leave out the pick without streamed fragments")
    args = ap.parse_args()
    before_of = before_picks(args.before) if args.before else {}
    target, dev, gpu = as_target("cuda"), present_device(), gpu_model("sm_90")
    sm90a = tvm.target.Target({**json.loads(str(target)), "arch": "sm_90a"})
    jobs = []
    for text in args.layers:  # every persistent build in flight at once
        spec, batch, build_precision, precision = layer(text)
        _, ranked = _ranked(spec, gpu, batch, False, build_precision)
        streamed = [(t, c) for t, c in ranked if c.tensor_cores() and c.global_runs]
        before = [(t, c) for t, c in ranked if not (c.tensor_cores() and c.global_runs)]
        configs = [("streamed_fragments", c, t) for t, c in streamed[:args.top]]
        now = choose(spec, sm90a, batch, measure=False, precision=build_precision)
        if now.config is not None and now.config not in [c for _, c, _ in configs]:
            configs.insert(0, ("pick", now.config, next((t for t, c in ranked if c == now.config), float("nan"))))
        key = (spec.cell.upper(), spec.hidden_size, batch, precision, spec.direction)
        lowering_before, cfg_before = before_of.get(key, (None, None))
        if cfg_before is not None and cfg_before not in [c for _, c, _ in configs]:
            configs.insert(0, ("before_pick", cfg_before, next((t for t, c in ranked if c == cfg_before), float("nan"))))
        if before and not args.no_fma:  # the pick the layer had without them ("verified_pick" in the data: they had not run on a GPU)
            pick = model_pick(spec, before, gpu, batch)
            configs.insert(0, ("verified_pick", pick, next(t for t, c in before if c == pick)))
        builds().submit(spec, [c for _, c, _ in configs], target)
        head = {"cell": spec.cell.upper(), "hidden": spec.hidden_size, "batch": batch, "precision": precision,
                **({"direction": spec.direction} if spec.num_directions == 2 else {}),
                "lowering_now": now.lowering or "persistent", "pick_now": now.config.as_dict() if now.config else None,
                **({"lowering_before": lowering_before} if lowering_before else {})}
        jobs.append((head, spec, batch, build_precision, precision, configs))
    for head, spec, batch, build_precision, precision, configs in jobs:
        cold = timing(spec, dev) == "cold"
        wgmma = wgmma_step(spec, batch, gpu.num_sms, True)
        plan = step_plan(spec, batch, gpu.num_sms)
        scan = gemm_scan(spec, batch, build_precision, plan=plan, early_launch=wgmma is not None or step_launched_early(plan),
                         wgmma=wgmma)
        words = max([c.workspace_words(spec) for _, c, _ in configs], default=WORKSPACE_WORDS)
        slots = max([gemm_scan_slots(spec, batch, wgmma)] + [c.exchange_slots(spec) for _, c, _ in configs])
        arrays = kernel_arrays(spec, batch, args.steps, slots=slots, words=words)
        arrays[1] = arrays[1] / (0.3 * spec.hidden_size ** 0.5)  # R of N(0, 1/H): a layer that is not chaotic
        scan_lib = build_kernel(scan.with_attr("global_symbol", "main"), sm90a if wgmma else target)
        want = y_of(scan_lib, dev, scan, arrays)
        print(json.dumps({**head, "part": "gemm_scan", "wgmma": wgmma,
                          "us": time_kernel(scan_lib, dev, as_params(scan, arrays), cold=cold) / args.steps,
                          "predicted_us": round(gemm_scan_us(spec, batch, gpu.num_sms, build_precision, wgmma is not None), 2)}),
              flush=True)
        libs = {json.dumps(c.as_dict()): lib for c, lib, _ in built_as_completed(spec, [c for _, c, _ in configs], target)}
        for part, cfg, price in configs:
            lib = libs.get(json.dumps(cfg.as_dict()))
            row = {**head, "part": part, "config": cfg.as_dict(), "predicted_us": round(price, 2)}
            if isinstance(lib, Exception) or lib is None:
                row["error"] = str(lib).strip().splitlines()[0] if lib is not None else "not built"
            else:
                from tir_templates.persistent import persistent_kernel

                func = persistent_kernel(spec, cfg)
                row["us"] = time_kernel(lib, dev, arrays, cold=cold) / args.steps
                got = y_of(lib, dev, func, arrays)
                row["diff_from_scan"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
