"""Tuning logs: JSON lines, one record per workload, so later compiles skip the search.

A record is {"workload": {...}, "config": {...}, "time_us": float | null, "source": str,
"created": str}, and "timing": "cold" for a kernel timed with L2 flushed before each launch
(`measure.timing`; absent: back-to-back launches). The workload names everything the best config
depends on, including the GPU arch and the template version; records of another arch or version
are ignored with a warning. A "cost_model" record (the model's pick, nothing timed) also carries
"model_version" (`cost_model.MODEL_VERSION`; absent: 1), and one made by another version of the
model is ignored with a warning too: measured records hold whatever the model becomes. Cold and
warm times do not compare: a workload's best record is the fastest of those timed as its newest
measured record was (a re-tune by a later method wins).
"""
from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import warnings

from tir_templates.config import TEMPLATE_VERSION, Config
from tir_templates.spec import CellSpec

from ..errors import PersistRNNError
from .cost_model import MODEL_VERSION

WORKLOAD_KEYS = ("cell", "input_size", "hidden_size", "batch", "directions", "dtype",
                 "linear_before_reset", "arch", "template_version")
SOURCES = ("measured", "cost_model")
TIMINGS = ("warm", "cold")
#: the workload key of a stack's record (`stack_log.py`), which `read` leaves to that module
STACK_KEY = "stack"


def workload(spec: CellSpec, batch: int | None, arch: str, precision: str = "fp32", open_ended: bool = False) -> dict:
    """The record's key; "precision" only for a build that allows less than fp32, "int8_weights"
    and "int8_rows" only for a quantized layer, "open_ended" only for a symbolic batch's last
    bucket, which takes every batch past `batch` too (the other records are what they were before)."""
    wl = {
        "cell": spec.cell, "input_size": spec.input_size, "hidden_size": spec.hidden_size,
        "batch": batch, "directions": spec.num_directions, "dtype": spec.dtype,
        "linear_before_reset": spec.linear_before_reset, "arch": arch, "template_version": TEMPLATE_VERSION,
    }
    if precision != "fp32":
        wl["precision"] = precision
    if spec.int8_weights:  # a quantized layer's records may hold its weights in fp16: never a float layer's
        wl["int8_weights"] = True
    if spec.int8_rows:  # ... or as int8, where its R is packed: never another layer's
        wl["int8_rows"] = True
    if open_ended:  # a config for `batch` and every larger batch: never a static build's
        wl["open_ended"] = True
    return wl


@dataclasses.dataclass
class Record:
    workload: dict
    config: Config
    time_us: float | None
    source: str
    created: str = ""
    timing: str = "warm"
    #: the cost model's version that made a "cost_model" record (None for a measured one)
    model_version: int | None = None

    def __post_init__(self):
        if self.source == "cost_model" and self.model_version is None:
            self.model_version = MODEL_VERSION

    def to_json(self) -> str:
        d = {"workload": self.workload, "config": self.config.as_dict(), "time_us": self.time_us,
             "source": self.source, "created": self.created}
        if self.timing != "warm":
            d["timing"] = self.timing
        if self.source == "cost_model":
            d["model_version"] = self.model_version
        return json.dumps(d, sort_keys=True)


def _parse(line: str, where: str) -> Record:
    try:
        d = json.loads(line)
    except json.JSONDecodeError as err:
        raise PersistRNNError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(d, dict) or not {"workload", "config", "source"} <= set(d):
        raise PersistRNNError(f"{where}: a record needs the keys workload, config, time_us, source")
    wl, cfg = d["workload"], d["config"]
    missing = [k for k in WORKLOAD_KEYS if not isinstance(wl, dict) or k not in wl]
    if missing:
        raise PersistRNNError(f"{where}: workload lacks {missing}")
    fields = dataclasses.fields(Config)
    cfg_fields = [f.name for f in fields]
    if not isinstance(cfg, dict) or any(k not in cfg for k in cfg_fields[:4]):
        raise PersistRNNError(f"{where}: config needs {cfg_fields}")
    text = {f.name for f in fields if f.type == "str"}  # weight_dtype, mma_precision; the rest are numbers
    try:
        config = Config(**{k: (str(cfg[k]) if k in text else int(cfg[k])) for k in cfg_fields if k in cfg})
    except (TypeError, ValueError) as err:
        raise PersistRNNError(f"{where}: config values must be integers, and {sorted(text)} strings ({err})") from None
    if d["source"] not in SOURCES:
        raise PersistRNNError(f"{where}: source {d['source']!r}, expected one of {SOURCES}")
    t = d.get("time_us")
    if t is not None and not isinstance(t, (int, float)):
        raise PersistRNNError(f"{where}: time_us must be a number or null")
    how = d.get("timing", "warm")
    if how not in TIMINGS:
        raise PersistRNNError(f"{where}: timing {how!r}, expected one of {TIMINGS}")
    version = d.get("model_version", 1) if d["source"] == "cost_model" else None
    if version is not None and not isinstance(version, int):
        raise PersistRNNError(f"{where}: model_version must be an integer")
    return Record(wl, config, None if t is None else float(t), d["source"], str(d.get("created", "")), how, version)


def _lines(path: str) -> list[tuple[str, str]]:
    """(line, "path:number") of every non-blank line of the log (a missing or unreadable file has none)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError as err:  # a directory, no permission: the compile goes on without the log
        warnings.warn(f"{path}: the tuning log cannot be read ({err.strerror or err}); it is not used")
        return []
    return [(line, f"{path}:{i}") for i, line in enumerate(lines, 1) if line.strip()]


def _stack_record(line: str) -> dict | None:
    """The line's record if it is a stack's (`stack_log.py`), else None."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError:
        return None  # _parse says what is wrong with it
    return d if isinstance(d, dict) and isinstance(d.get("workload"), dict) and STACK_KEY in d["workload"] else None


def read(path: str) -> list[Record]:
    """Every layer record of the log at `path` (a missing or unreadable file is an empty log)."""
    return [_parse(line, where) for line, where in layer_lines(path)]


def layer_lines(path: str) -> list[tuple[str, str]]:
    """(line, "path:number") of every line of the log that is not a stack record."""
    return [(line, where) for line, where in _lines(path) if _stack_record(line) is None]


def stack_lines(path: str) -> list[tuple[dict, str]]:
    """(record, "path:number") of every stack record of the log, for `stack_log.py`."""
    return [(d, where) for line, where in _lines(path) if (d := _stack_record(line)) is not None]


def lookup(path: str, wl: dict) -> Record | None:
    """The best (fastest measured, else newest) record for workload `wl`."""
    hits, stale, outdated = [], set(), set()
    for rec in read(path):
        same_shape = all(rec.workload.get(k) == wl[k] for k in WORKLOAD_KEYS if k not in ("arch", "template_version"))
        if not same_shape or rec.workload.get("precision", "fp32") != wl.get("precision", "fp32"):
            continue
        if any(rec.workload.get(k, False) != wl.get(k, False) for k in ("int8_weights", "int8_rows", "open_ended")):
            continue
        if rec.workload["arch"] != wl["arch"] or rec.workload["template_version"] != wl["template_version"]:
            stale.add(f"{rec.workload['arch']}, v{rec.workload['template_version']}")
            continue
        if rec.source == "cost_model" and rec.model_version != MODEL_VERSION:
            outdated.add(rec.model_version)
            continue
        hits.append(rec)
    if stale and not hits:
        warnings.warn(f"{path}: the records for this workload were made for {'; '.join(sorted(stale))} (this build: "
                      f"{wl['arch']}, template v{wl['template_version']}) and are not used")
    if outdated and not hits:
        versions = ", ".join(f"v{v}" for v in sorted(outdated))
        warnings.warn(f"{path}: the record for this workload is a pick of cost model {versions}, nothing measured "
                      f"(this build's model: v{MODEL_VERSION}), and is not used; `persist-rnn tune` measures one")
    return best(hits)


def best(records: list[Record]) -> Record | None:
    """The fastest measured of one workload's `records` among those timed as the newest measured
    one was (else the last record; None for none)."""
    measured = [r for r in records if r.time_us is not None and r.source == "measured"]
    if not measured:
        return records[-1] if records else None
    newest = max(enumerate(measured), key=lambda ir: (ir[1].created, ir[0]))[1].timing  # a tie: the later line
    return min((r for r in measured if r.timing == newest), key=lambda r: r.time_us)


def append(path: str, rec: Record) -> None:
    """Add `rec` as one line, under an exclusive lock on the file, so that processes tuning into
    one log at once lose no record and interleave no line. A log that cannot be written (a
    read-only place) gets a warning, and the compile goes on without recording."""
    rec.created = rec.created or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    append_line(path, rec.to_json())


def append_line(path: str, text: str) -> None:
    """`append`'s locked write of one record's JSON `text`."""
    line = text + "\n"
    try:
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(line)
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    except OSError as err:
        warnings.warn(f"{path}: the tuning log cannot be written ({err.strerror or err}); this compile's choice "
                      "is not recorded")


def merge(paths: list[str], out: str) -> int:
    """Keep the best record per workload from `paths` into `out`; returns the record count."""
    records: dict[str, list[Record]] = {}
    for p in paths:
        for rec in read(p):
            records.setdefault(json.dumps(rec.workload, sort_keys=True), []).append(rec)
    with open(out, "w") as f:
        for recs in records.values():
            f.write(best(recs).to_json() + "\n")
    return len(records)
