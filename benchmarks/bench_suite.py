"""The benchmark suite (see persist_rnn/bench/suite.py); the same as `persist-rnn bench`.

    python benchmarks/bench_suite.py --out results.jsonl [--parts grid batch seq models] [--tuning-log LOG]
then `python benchmarks/report.py results.jsonl --out DIR` for its tables and plots.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from persist_rnn.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]])
