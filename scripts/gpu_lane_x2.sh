#!/usr/bin/env bash
# The two-GPU lane (issue 12; the nvidia-h200-x2 kind), repository root as cwd, in one call or two:
#   bash scripts/gpu_lane_x2.sh                       # everything (about 5-8 minutes)
#   GPU_LANE_PART=tests bash scripts/gpu_lane_x2.sh   # the multi-GPU tests: matrix on device 1, fences, soak
#   GPU_LANE_PART=bench bash scripts/gpu_lane_x2.sh   # the multi-GPU bench (scaling, sync0 ratio)
# Everything lands in ONE file, $OUT/lane.tgz (folder lane-x2/; ./gpu-out when OUT is unset).
# STREAMSAFE_MULTI_GPU_SOAK_FRAMES (default 10000 per lane and strategy) shortens the soak;
# MULTI_GPU_BENCH_ARGS adds options to `python3 -m streamsafe.bench.multi_gpu` (e.g. "--frames 100").
set -uo pipefail
OUT=${OUT:-gpu-out}
PART=${GPU_LANE_PART:-all}
L="$OUT/lane-x2"
mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,memory.used --format=csv | tee "$L/gpu.txt"
nvidia-smi topo -m > "$L/topo.txt" 2>&1
rc=0
if ! python3 -c "import sys, torch; n = torch.cuda.device_count(); print('torch sees', n, 'GPUs'); sys.exit(n < 2)" 2>&1 | tee -a "$L/gpu.txt"; then
  echo "needs 2 GPUs: nothing run" | tee -a "$L/gpu.txt"
  tar czf "$OUT/lane.tgz" -C "$OUT" lane-x2
  exit 2
fi
if [ "$PART" = tests ] || [ "$PART" = all ]; then
  python3 -m streamsafe doctor > "$L/doctor.txt" 2>&1
  timeout 400 python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_multi_gpu.py > "$L/pytest-multi-gpu.txt" 2>&1 || rc=1
  grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|soak|Error" "$L/pytest-multi-gpu.txt" | tail -30
fi
if [ "$PART" = bench ] || [ "$PART" = all ]; then
  # shellcheck disable=SC2086
  timeout 150 python3 -m streamsafe.bench.multi_gpu --backend cuda --json "$L/multi-gpu-bench.json" ${MULTI_GPU_BENCH_ARGS:-} \
    > "$L/multi-gpu-bench.txt" 2> "$L/multi-gpu-bench.err" || rc=1
  cat "$L/multi-gpu-bench.txt"; tail -5 "$L/multi-gpu-bench.err"
fi
tar czf "$OUT/lane.tgz" -C "$OUT" lane-x2 && rm -rf "$L"
exit $rc
