#!/usr/bin/env bash
# Everything that needs the GPU box, one part per `device run` call (each fits its 10 minutes).
# Bring TVM there first (../shared/device/README.md), with the CLI's pure-Python dependencies:
#     bash ../shared/device/make-bundle.sh click==8.5.1 tqdm==4.70.1 onnxslim==0.1.98 colorama==0.4.6 \
#         flashrnn==1.0.8 einops==0.8.2 ninja==1.13.2      # FlashRNN: the fp16 anchor of `precision`
# then, in the repo root on the box:
#     export PYTHONPATH=/tmp/site:$PWD; bash benchmarks/gpu_box.sh tests       # pytest -m gpu
#       (over 10 minutes? split it: PYTEST_ARGS="-k LSTM" ..., "-k GRU", "-k 'not LSTM and not GRU'")
#     ... calibrate   # persist-rnn calibrate: barrier costs + config sample -> $OUT/calibration/<arch>.json
#     ... bench       # persist-rnn bench -> $OUT/bench.jsonl (then benchmarks/report.py here)
#     ... bench-unverified   # the same with the kernels not yet verified (once `tests` passed)
#     ... new         # the GPU tests of what has not yet run there: the layer wavefront (its stack tests passed on
#                     # the H100; the shipped examples fused failed to build there before the kernel's name was made a C identifier)
#     ... stacks      # persist-rnn bench --parts stacks (wavefront vs a kernel a layer vs torch) -> $OUT/stacks.jsonl
#     ... precision   # persist-rnn bench --unverified --precision fp32,tf32,fp16,bf16 (bf16 mma unverified) -> $OUT/precision.jsonl
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
    new) python3 -m pytest -q -rf tests/gpu/test_wavefront_gpu.py 2>&1 | tail -40 | tee "$OUT/gpu_new.log" ;;
    stacks) python3 -m persist_rnn.cli bench --parts stacks --out "$OUT/stacks.jsonl" 2>&1 | tee "$OUT/stacks.log" ;;
    precision) python3 -m persist_rnn.cli bench --unverified --precision fp32,tf32,fp16,bf16 --flashrnn LSTM:256:10 --flashrnn GRU:256:10 --out "$OUT/precision.jsonl" 2>&1 \
                 | tee "$OUT/precision.log" ;;
    *) echo "unknown part $part (tests, calibrate, bench, bench-unverified, new, stacks, precision)"; exit 2 ;;
  esac
done
