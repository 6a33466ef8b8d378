"""`persist-rnn tune`'s last step: a model's stacks of layers timed fused and apart, the faster recorded.

The per-layer planner can time a kernel alone, but a stack's two lowerings differ in launches, input
GEMMs and early launches too, which only the whole model shows. So the model is built with every
stack the wavefront takes fused, once for each of the cost model's `top_k` wavefront configs
(`schedule/stack_choice.ranked_configs`), and with none, all from the layer records just tuned, and
the builds are timed in turn through TVM's VM (its own timer; no torch). Each fused stack gets a
measured stack record (`schedule/stack_log.py`) of the fastest fused build's config and time and
the apart build's time, which later compiles with the log follow (`wavefront="auto"`). A model with
several stacks times them together (the k-th build has every stack at its k-th config): each record
carries the whole model's times.

A fused build at a given config is made the way a later compile makes it: from a copy of the log
that holds one record of each stack naming that config.
"""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from tir_templates.spec import CellSpec
from tir_templates.wavefront import STACK_KERNEL_ATTR
from tir_templates.wavefront.plan import StackConfig, stack_configs

from .schedule import stack_log, tuning_log
from .schedule.gpu import gpu_model
from .schedule.stack_choice import ranked_configs

#: rounds of (wavefront build, per-layer build) timings, alternating, and calls a timing
ROUNDS, CALLS = 5, 20


def fusable_stacks(mod) -> list[tuple[list[CellSpec], int]]:
    """(the layers, the static batch) of each stack that the wavefront fused in `mod` (after
    PersistentRNN with wavefront=True) for a static batch: a runtime-batch stack's buckets are
    each judged as a static stack of the bucket's bound would be, by its records."""
    out = []
    for func in mod.functions.values():
        if func.attrs is not None and STACK_KERNEL_ATTR in func.attrs:
            info = json.loads(str(func.attrs[STACK_KERNEL_ATTR]))
            if info["batch"] is not None:
                out.append(([CellSpec.from_json(t) for t in info["layers"]], info["batch"]))
    return out


def random_feeds(inputs) -> dict | None:
    """Inputs of the model's static shapes (None if any extent is symbolic or unknown): lengths
    and other integer inputs at their largest valid value where one can be guessed."""
    rng, feeds = np.random.default_rng(0), {}
    for spec in inputs:
        if spec.shape is None or not all(isinstance(d, int) and d > 0 for d in spec.shape):
            return None
        if np.issubdtype(np.dtype(spec.dtype), np.integer):
            return None  # sequence lengths and ids: no value known to be valid
        feeds[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return feeds


def vm_us(compiled, feeds, dev) -> callable:
    """A timer of one call of `compiled` through TVM's VM with `feeds` on `dev`: median
    microseconds of CALLS back-to-back calls."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(compiled.executable, dev)
    args = [tvm.runtime.tensor(feeds[i.name], dev) for i in compiled.inputs]
    timer = vm.time_evaluator("main", dev, number=CALLS, repeat=1)
    return lambda: float(timer(*args).median * 1e6)


def time_in_turn(timers: dict, rounds: int = ROUNDS) -> dict:
    """Median microseconds of each timer, the timers called in turn for `rounds` rounds (a
    host-bound call drifts over seconds: one timed after the other would compare moments)."""
    times = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            times[name].append(timer())
    return {name: float(np.median(t)) for name, t in times.items()}


def _log_naming(log_path: str, stacks, configs: list[StackConfig], arch: str, precision: str, where: str) -> str:
    """A copy of the log at `log_path` (in directory `where`) with its layer records and, instead of
    its stack records, one record a stack of `stacks` that names its config of `configs` (a compile
    with wavefront=True builds the config a record names)."""
    path = os.path.join(where, f"stacks-{configs[0].threads}-{configs[0].cluster}.jsonl")
    with open(path, "w") as f:
        f.writelines(line + "\n" for line, _ in tuning_log.layer_lines(log_path))
    for (specs, batch), cfg in zip(stacks, configs):
        stack_log.append(path, stack_log.StackRecord(stack_log.stack_workload(specs, batch, arch, precision),
                                                     "wavefront", None, None, "cost_model", config=cfg.as_dict()))
    return path


def tune_stacks(model, mod, target, log_path: str, arch: str, precision: str = "fp32", unverified: bool = False,
                dev=None, compile_model=None, top_k: int = 2) -> list[dict]:
    """Time `model` (an ONNX path or ModelProto) with its stacks fused at each of the cost model's
    `top_k` configs and apart, and append one measured stack record per stack fused in `mod` (the
    imported module after PersistentRNN with wavefront=True); returns one {"layers", "batch",
    "lowering", "config", "wavefront_us", "per_layer_us", "configs_timed"} a stack, or a
    {"skipped": why} row when the model cannot be timed so."""
    stacks = fusable_stacks(mod)
    if not stacks:
        return []
    if compile_model is None:
        from .compile import compile_onnx as compile_model
    options = dict(measure=False, precision=precision, unverified=unverified)
    num_sms = gpu_model(arch).num_sms
    ranked = [ranked_configs(specs, stack_configs(specs, batch, num_sms), arch) for specs, batch in stacks]
    apart = compile_model(model, target, wavefront=False, tuning_log=log_path, **options)
    feeds = random_feeds(apart.inputs)
    if feeds is None:
        return [{"skipped": "an input has an integer dtype or an extent known only at run time: no inputs to time "
                            "the model with (compile keeps the cost model's choice)"}]
    if dev is None:
        import tvm

        dev = tvm.cuda(0)
    timers, picks = {"per_layer": vm_us(apart, feeds, dev)}, {}
    with tempfile.TemporaryDirectory() as where:
        for k in range(max(1, min(top_k, max(len(r) for r in ranked)))):
            picks[k] = [r[min(k, len(r) - 1)] for r in ranked]
            fused = compile_model(model, target, wavefront=True,
                                  tuning_log=_log_naming(log_path, stacks, picks[k], arch, precision, where), **options)
            timers[k] = vm_us(fused, feeds, dev)
        us = time_in_turn(timers)
    best = min(picks, key=lambda k: us[k])
    lowering = "wavefront" if us[best] < us["per_layer"] else "per_layer"
    rows = []
    for i, (specs, batch) in enumerate(stacks):
        cfg = picks[best][i]
        stack_log.append(log_path, stack_log.StackRecord(stack_log.stack_workload(specs, batch, arch, precision),
                                                         lowering, us[best], us["per_layer"], "measured",
                                                         config=cfg.as_dict()))
        rows.append({"layers": [s.node for s in specs], "batch": batch, "lowering": lowering, "config": cfg.as_dict(),
                     "wavefront_us": us[best], "per_layer_us": us["per_layer"],
                     "configs_timed": {stack_log.config_name(picks[k][i].as_dict()): us[k] for k in picks}})
    return rows
