#!/usr/bin/env bash
# A last, short GPU check after the review fixes: the fuzzer (3,000 frames per strategy), sanitize vs
# the model on every hazard scenario and strategy, and the contract overhead. One file back: $OUT/lane.tgz.
set -uo pipefail
OUT=${OUT:-gpu-out}
L=$(realpath -m "$OUT")/lane; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L
rc=0
STREAMSAFE_FUZZ_FRAMES=3000 STREAMSAFE_FUZZ_CONTROL_FRAMES=500 timeout 150 python3 -m pytest -m gpu -v -s -p no:cacheprovider \
  tests/gpu/test_fuzz_gpu.py tests/gpu/test_sanitize_agrees_gpu.py > "$L/pytest-final.txt" 2>&1 || rc=1
grep -E "fuzz|agree|passed|failed" "$L/pytest-final.txt" | tail -12
timeout 50 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1
head -12 "$L/contract_overhead.txt"
(cd benchmarks && timeout 40 python3 profile_contract.py event 3000 > "$L/profile_contract_event.txt" 2>&1)
head -45 "$L/profile_contract_event.txt" | cut -c1-150
tar czf "$OUT/lane.tgz" -C "$OUT" lane && rm -rf "$L"
exit $rc
