#!/usr/bin/env bash
# The whole GPU lane in one call (run on the lent GPU, repository root as cwd):
#   bash scripts/gpu_lane.sh    -> logs and JSON in $OUT/lane.tgz (and ./gpu-out/lane when OUT is unset)
# Set GPU_LANE_TESTS to a pytest -k expression to run part of it.
set -uo pipefail
OUT=${OUT:-gpu-out}
LANE="$OUT/lane"
mkdir -p "$LANE"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$LANE/gpu.txt"
python3 -m streamsafe doctor > "$LANE/doctor.txt" 2>&1
STREAMSAFE_GPU_OUT=$LANE python3 -m pytest -m gpu -v -s -p no:cacheprovider ${GPU_LANE_TESTS:+-k "$GPU_LANE_TESTS"} tests 2>&1 | tee "$LANE/pytest-gpu.txt" | grep -E "PASSED|FAILED|ERROR|passed|failed|Error|assert" | tail -40
rc=${PIPESTATUS[0]}
python3 -m streamsafe hazards --backend cuda --frames 50 > "$LANE/hazards-cli.txt" 2>&1
python3 benchmarks/fence_overhead.py --json "$LANE/fence_overhead.json" 2>&1 | tee "$LANE/fence_overhead.txt"
python3 benchmarks/contract_overhead.py --json "$LANE/contract_overhead.json" 2>&1 | tee "$LANE/contract_overhead.txt"
for extra in ${GPU_LANE_EXTRA:-}; do bash -c "$extra" 2>&1 | tee -a "$LANE/extra.txt"; done
tar czf "$OUT/lane.tgz" -C "$OUT" lane
exit $rc
