#!/usr/bin/env bash
# The GPU lane for ordering (issue 8) and unmodified programs (issue 9), in one device call:
#   bash scripts/gpu_lane_ordering.sh      (carry: .nvsamples, which holds NVIDIA's samples and a PyAV wheel)
# 1. the timing fuzzer (>= 10,000 frames per strategy) and sanitize-vs-model agreement (pytest -m gpu);
# 2. NVIDIA's samples, unmodified, under `streamsafe run --fake-nvvfx`; 3. our examples/.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/lane"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export STREAMSAFE_GPU_OUT=$OUT/lane
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/lane/gpu.txt"
rc=0
timeout 330 python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_fuzz_gpu.py tests/gpu/test_sanitize_agrees_gpu.py \
  > "$OUT/lane/pytest-ordering.txt" 2>&1 || rc=1
grep -E "PASSED|FAILED|ERROR|passed|failed|agree|corrupt" "$OUT/lane/pytest-ordering.txt" | tail -25
NVS_SANITIZE_LINES=first timeout 170 bash scripts/gpu_nvidia_samples.sh > "$OUT/lane/nvidia-samples.log" 2>&1 || rc=1
tail -30 "$OUT/nvidia-samples/summary.txt" 2>/dev/null || tail -20 "$OUT/lane/nvidia-samples.log"
EXAMPLES_FRAMES=40 timeout 70 bash scripts/gpu_examples.sh > "$OUT/lane/examples.log" 2>&1 || rc=1
tail -15 "$OUT/examples/summary.txt" 2>/dev/null || tail -10 "$OUT/lane/examples.log"
exit $rc
