#!/usr/bin/env bash
# Second GPU call of the session: sanitize agreement, the other GPU tests (short soak), contract
# overhead and the bench. Everything lands in $OUT/lane.tgz (one file: the device returns few files).
set -uo pipefail
OUT=${OUT:-gpu-out}
L=$OUT/lane; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L
rc=0
timeout 60 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/gpu/test_sanitize_agrees_gpu.py > "$L/pytest-sanitize.txt" 2>&1 || rc=1
tail -2 "$L/pytest-sanitize.txt"; grep "agree" "$L/pytest-sanitize.txt"
STREAMSAFE_SOAK_FRAMES=2000 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu \
  --deselect tests/gpu/test_fuzz_gpu.py::test_gpu_timing_fuzzer --deselect tests/gpu/test_sanitize_agrees_gpu.py::test_sanitize_on_the_gpu_agrees_with_the_model \
  > "$L/pytest-gpu.txt" 2>&1 || rc=1
tail -4 "$L/pytest-gpu.txt"
timeout 60 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1; cat "$L/contract_overhead.txt" | tail -12
timeout 150 python3 -m streamsafe bench --backend cuda --frames 60 --warmup 10 --block 20 --json "$L/bench.json" --png "$L/bench.png" > "$L/bench.txt" 2> "$L/bench.err"
cat "$L/bench.txt" | head -60; tail -3 "$L/bench.err"
tar czf "$OUT/lane.tgz" -C "$OUT" lane && rm -rf "$L"
exit $rc
