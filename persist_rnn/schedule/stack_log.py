"""Stack records in a tuning log: whether a stack of layers ran faster as one wavefront kernel or
a kernel a layer, so that later compiles take that lowering without predicting it again.

A stack record shares the layer records' file (`tuning_log.py` skips it) and is keyed by its
layers: {"workload": {"stack": [each layer's `tuning_log.workload`, lowest first]}, "lowering":
"wavefront" | "per_layer", "wavefront_us", "per_layer_us", "source": "measured" | "cost_model",
"created", "config"}; "config" is the wavefront kernel's config that `wavefront_us` timed
(`StackConfig.as_dict`; absent in records older than the config space, which timed the rule's
config), and later compiles of the stack build that config. A measured record (both builds timed
in turn, `persist-rnn bench --parts stacks` or `persist-rnn tune`) wins over the cost model's;
among records of one source the newest wins.
"""
from __future__ import annotations

import dataclasses
import datetime
import json

from tir_templates.spec import CellSpec

from ..errors import PersistRNNError
from . import tuning_log

LOWERINGS = ("wavefront", "per_layer")
#: the fields of a record's wavefront config (tir_templates.wavefront.plan.StackConfig)
CONFIG_KEYS = {"threads", "cluster", "rows_per_group", "batch_chunk"}
#: ... and those it names only when set (`StackConfig.as_dict`): a flag, true, and a count above 1
CONFIG_FLAGS = {"lane_updates"}
CONFIG_COUNTS = {"batch_tiles"}


def stack_workload(specs: list[CellSpec], batch: int | None, arch: str, precision: str = "fp32") -> dict:
    """The key of a stack's record: its layers' own workloads, lowest first."""
    return {tuning_log.STACK_KEY: [tuning_log.workload(spec, batch, arch, precision) for spec in specs]}


@dataclasses.dataclass
class StackRecord:
    workload: dict
    lowering: str  # LOWERINGS
    wavefront_us: float | None
    per_layer_us: float | None
    source: str  # tuning_log.SOURCES
    created: str = ""
    config: dict | None = None  # the wavefront config timed (StackConfig.as_dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _parse(d: dict, where: str) -> StackRecord:
    layers = d["workload"].get(tuning_log.STACK_KEY)
    if not isinstance(layers, list) or not layers or not all(isinstance(w, dict) for w in layers):
        raise PersistRNNError(f"{where}: a stack record's workload.stack is a list of layer workloads")
    if d.get("lowering") not in LOWERINGS:
        raise PersistRNNError(f"{where}: lowering {d.get('lowering')!r}, expected one of {LOWERINGS}")
    if d.get("source") not in tuning_log.SOURCES:
        raise PersistRNNError(f"{where}: source {d.get('source')!r}, expected one of {tuning_log.SOURCES}")
    times = [d.get(k) for k in ("wavefront_us", "per_layer_us")]
    if any(t is not None and not isinstance(t, (int, float)) for t in times):
        raise PersistRNNError(f"{where}: wavefront_us and per_layer_us must be numbers or null")
    config = d.get("config")
    if config is not None and not (isinstance(config, dict)
                                   and CONFIG_KEYS <= set(config) <= CONFIG_KEYS | CONFIG_FLAGS | CONFIG_COUNTS
                                   and all(isinstance(config[k], int) for k in CONFIG_KEYS)
                                   and all(config[k] is True for k in CONFIG_FLAGS & set(config))
                                   and all(isinstance(config[k], int) and not isinstance(config[k], bool)
                                           and config[k] > 1 for k in CONFIG_COUNTS & set(config))):
        raise PersistRNNError(f"{where}: a stack record's config is {{{', '.join(sorted(CONFIG_KEYS))}}} (integers), "
                              f"with lane_updates: true and batch_tiles (an integer above 1) or without them, or null, "
                              f"not {config!r}")
    return StackRecord(d["workload"], d["lowering"], *times, d["source"], str(d.get("created", "")), config)


def read(path: str) -> list[StackRecord]:
    """Every stack record of the log at `path` (a missing file has none)."""
    return [_parse(d, where) for d, where in tuning_log.stack_lines(path)]


def best(records: list[StackRecord]) -> StackRecord | None:
    """The newest measured of one stack's `records`, else the newest (a tie: the later line)."""
    pick = [r for r in records if r.source == "measured"] or records
    return max(enumerate(pick), key=lambda ir: (ir[1].created, ir[0]))[1] if pick else None


def lookup(path: str, wl: dict) -> StackRecord | None:
    """`best` of the records of stack workload `wl`, or None."""
    return best([r for r in read(path) if r.workload == wl])


def append(path: str, rec: StackRecord) -> None:
    """Add `rec` as one line (as `tuning_log.append`: locked, a log that cannot be written warned of)."""
    rec.created = rec.created or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    tuning_log.append_line(path, rec.to_json())


def merge_into(paths: list[str], out: str) -> int:
    """Append to `out` the record `lookup` would take of every stack in `paths`; returns how many."""
    by_stack: dict[str, list[StackRecord]] = {}
    for p in paths:
        for rec in read(p):
            by_stack.setdefault(json.dumps(rec.workload, sort_keys=True), []).append(rec)
    for recs in by_stack.values():
        tuning_log.append_line(out, best(recs).to_json())
    return len(by_stack)


def describe(rec: StackRecord) -> str:
    """One line for `persist-rnn log list`."""
    layers = rec.workload[tuning_log.STACK_KEY]
    w = layers[0]
    us = ", ".join(f"{name} {t:.1f} us" for name, t in (("wavefront", rec.wavefront_us), ("a kernel a layer", rec.per_layer_us))
                   if t is not None)
    config = f", {config_name(rec.config)}" if rec.config and rec.lowering == "wavefront" else ""
    return (f"stack of {len(layers)} {w['cell']} H={w['hidden_size']} B={w['batch']} {w['dtype']} {w['arch']} "
            f"v{w['template_version']}: {rec.lowering}{config} ({us}) [{rec.source}]")


def config_name(config: dict) -> str:
    """A wavefront config in a few words: "8 warps x 16 CTAs a layer" (", lane updates", ", the
    batch in 2 tiles of 5 rows")."""
    lanes = ", lane updates" if config.get("lane_updates") else ""
    rows = f"{config['batch_chunk']} row{'s' if config['batch_chunk'] > 1 else ''}"
    tiles = f", the batch in {config['batch_tiles']} tiles of {rows}" if config.get("batch_tiles", 1) > 1 else ""
    return f"{config['threads'] // 32} warps x {config['cluster']} CTAs a layer{lanes}{tiles}"
