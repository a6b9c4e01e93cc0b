#!/usr/bin/env bash
# A short GPU smoke test of the latest tree (about a minute): backend tests, sanitize agreement, a short fuzz.
set -uo pipefail
OUT=${OUT:-gpu-out}
L=$(realpath -m "$OUT")/lane; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L
STREAMSAFE_FUZZ_FRAMES=1000 STREAMSAFE_FUZZ_CONTROL_FRAMES=300 STREAMSAFE_FUZZ_STRATEGIES=auto,event,async timeout 90 \
  python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/gpu/test_cuda_backend.py tests/gpu/test_sanitize_agrees_gpu.py \
  tests/gpu/test_fuzz_gpu.py > "$L/pytest-smoke.txt" 2>&1
rc=$?
grep -E "fuzz|agree|passed|failed|Error" "$L/pytest-smoke.txt" | tail -12
tar czf "$OUT/lane.tgz" -C "$OUT" lane && rm -rf "$L"
exit $rc
