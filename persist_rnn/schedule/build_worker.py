"""Compile one candidate kernel in a process of its own and export it:

    python -m persist_rnn.schedule.build_worker SPEC_JSON CONFIG_JSON TARGET_JSON OUT.so

`measure.build_many` starts these as plain subprocesses, not a multiprocessing pool: a pool's
spawned workers re-import the user's `__main__`, which, in a script without an
`if __name__ == "__main__":` guard, compiles the model again and crashes the pool.
"""
from __future__ import annotations

import json
import sys

import tvm

from tir_templates.config import Config
from tir_templates.persistent import persistent_kernel
from tir_templates.spec import CellSpec


def main(argv: list[str]) -> None:
    spec_json, cfg_json, target_json, path = argv
    kernel = persistent_kernel(CellSpec.from_json(spec_json), Config.from_dict(json.loads(cfg_json)))
    mod = tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")})
    tvm.compile(mod, target=tvm.target.Target(json.loads(target_json))).export_library(path)


if __name__ == "__main__":
    main(sys.argv[1:])
