#!/usr/bin/env bash
# Everything that needs the GPU box, one part per `device run` call (each fits its 10 minutes).
# Bring TVM there first (../shared/device/README.md), with the CLI's pure-Python dependencies:
#     bash ../shared/device/make-bundle.sh click==8.4.0 tqdm==4.70.1
# then, in the repo root on the box:
#     export PYTHONPATH=/tmp/site:$PWD; bash benchmarks/gpu_session.sh tests       # pytest -m gpu
#       (over 10 minutes? split it: PYTEST_ARGS="-k LSTM" ..., "-k GRU", "-k 'not LSTM and not GRU'")
#     ... calibrate   # persist-rnn calibrate: barrier costs + config sample -> $OUT/calibration/<arch>.json
#     ... bench       # persist-rnn bench -> $OUT/bench.jsonl (then benchmarks/report.py here)
#     ... bench-unverified   # the same with the kernels not yet verified (once `tests` passed)
# Logs and results go to $OUT (the device tool brings them back).
set -o pipefail
OUT=${OUT:-/tmp/persist_rnn_out}
mkdir -p "$OUT"
export TVM_CUDA_COMPILE_MODE=nvcc
for part in "${@:-tests}"; do
  case $part in
    tests) eval python3 -m pytest -m gpu -q -rf tests "${PYTEST_ARGS:-}" 2>&1 | tail -60 | tee "$OUT/gpu_tests.log" ;;
    calibrate) python3 -m persist_rnn.cli calibrate --out "$OUT/calibration" --sweep-out "$OUT/sweep.jsonl" 2>&1 \
                 | tee "$OUT/calibrate.log" ;;
    bench) python3 -m persist_rnn.cli bench --out "$OUT/bench.jsonl" 2>&1 | tee "$OUT/bench.log" ;;
    bench-unverified) python3 -m persist_rnn.cli bench --unverified --parts grid --out "$OUT/bench-unverified.jsonl" 2>&1 \
                        | tee "$OUT/bench-unverified.log" ;;
    *) echo "unknown part $part (tests, calibrate, bench, bench-unverified)"; exit 2 ;;
  esac
done
