"""Recorded md5s of generated kernels (fixtures/*_md5.json): a case's check, and the script that
records them. Re-recording is for a deliberate kernel change only, and its commit says so with the
GPU tests that ran since: all cases (`--force`), only those whose kernels it changed (`--replace
NAME ...`), or a new variant's own (`--add NAME ...`)."""
from __future__ import annotations

import json
import pathlib
import sys


def check(record: pathlib.Path, name: str, digests) -> None:
    """Case `name`'s digests now equal the recorded ones."""
    recorded = json.loads(record.read_text())
    assert name in recorded, f"no md5 recorded for {name}: run its test file as a script to record it"
    assert digests(name) == recorded[name]


def record_main(record: pathlib.Path, cases, digests, argv=None) -> None:
    """The test file run as a script: record `cases` (names) into `record` as argv asks."""
    argv = sys.argv[1:] if argv is None else argv
    for flag in ("--add", "--replace"):
        if flag in argv:
            recorded = json.loads(record.read_text())
            names = argv[argv.index(flag) + 1:]
            if flag == "--add":
                assert not set(names) & set(recorded), "already recorded: re-recording one needs --replace"
            else:
                assert set(names) <= set(recorded), "not recorded yet: record a new case with --add"
            record.write_text(json.dumps({**recorded, **{n: digests(n) for n in names}}, indent=1, sort_keys=True) + "\n")
            sys.exit(f"recorded {names} in {record}")
    if record.exists() and "--force" not in argv:
        sys.exit(f"{record} exists; pass --force to re-record it (only for a deliberate kernel change)")
    record.write_text(json.dumps({n: digests(n) for n in sorted(cases)}, indent=1) + "\n")
    print(f"recorded {len(cases)} cases in {record}")
