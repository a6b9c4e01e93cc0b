#!/usr/bin/env bash
# The whole GPU lane (run on the lent GPU, repository root as cwd), in one or two calls:
#   GPU_LANE_PART=tests bash scripts/gpu_lane.sh    # the gpu-marked tests
#   GPU_LANE_PART=bench bash scripts/gpu_lane.sh    # micro-benchmarks, the profile and `streamsafe bench`
#   bash scripts/gpu_lane.sh                        # both
# Logs and JSON go to $OUT/lane.tgz (./gpu-out when OUT is unset). GPU_LANE_TESTS: a pytest -k filter.
set -uo pipefail
OUT=${OUT:-gpu-out}
PART=${GPU_LANE_PART:-all}
LANE="$OUT/lane"
mkdir -p "$LANE"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$LANE/gpu.txt"
rc=0
if [ "$PART" = tests ] || [ "$PART" = all ]; then
  python3 -m streamsafe doctor > "$LANE/doctor.txt" 2>&1
  STREAMSAFE_GPU_OUT=$LANE python3 -m pytest -m gpu -v -s -p no:cacheprovider ${GPU_LANE_TESTS:+-k "$GPU_LANE_TESTS"} tests 2>&1 \
    | tee "$LANE/pytest-gpu.txt" | grep -E "^tests/|PASSED|FAILED|ERROR|passed|failed|soak|corrupted" | tail -40
  rc=${PIPESTATUS[0]}
  python3 -m streamsafe hazards --backend cuda --frames 50 --strategy none > "$LANE/hazards-cli.txt" 2>&1
fi
if [ "$PART" = bench ] || [ "$PART" = all ]; then
  python3 benchmarks/fence_overhead.py --json "$LANE/fence_overhead.json" 2>&1 | tee "$LANE/fence_overhead.txt"
  python3 benchmarks/contract_overhead.py --json "$LANE/contract_overhead.json" 2>&1 | tee "$LANE/contract_overhead.txt"
  python3 benchmarks/profile_effect.py > "$LANE/profile_effect.txt" 2>&1
  grep "===" "$LANE/profile_effect.txt"
  python3 -m streamsafe bench --backend cuda --json "$LANE/bench.json" --png "$LANE/bench.png" > "$LANE/bench.txt" 2> "$LANE/bench.err"
  tail -3 "$LANE/bench.err"; cat "$LANE/bench.txt"
fi
tar czf "$OUT/lane.tgz" -C "$OUT" lane
exit $rc
