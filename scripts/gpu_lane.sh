#!/usr/bin/env bash
# The whole GPU lane in one call (run on the lent GPU, repository root as cwd):
#   bash scripts/gpu_lane.sh    -> logs and JSON under $OUT (or ./gpu-out)
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -m streamsafe doctor 2>&1 | tee "$OUT/doctor.txt"
python3 -m pytest -m gpu -v -s -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.txt"
rc=${PIPESTATUS[0]}
python3 benchmarks/fence_overhead.py --json "$OUT/fence_overhead.json" 2>&1 | tee "$OUT/fence_overhead.txt"
for extra in ${GPU_LANE_EXTRA:-}; do bash -c "$extra" 2>&1 | tee -a "$OUT/extra.txt"; done
exit $rc
