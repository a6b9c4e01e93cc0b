#!/usr/bin/env bash
# The performance lane (issue 10) and the two-GPU lane (issue 12) on the nvidia-h200-x2 kind, in two calls:
#   GPU_LANE_PART=tests bash scripts/gpu_lane_perf.sh   # every GPU test (single- and two-GPU), host costs, overhead, profile
#   GPU_LANE_PART=bench bash scripts/gpu_lane_perf.sh   # the bench (every scenario, 200 frames a cell) and the two-GPU bench
#   GPU_LANE_PART=final bash scripts/gpu_lane_perf.sh   # after a plan change: the GPU tests, the overhead and the bench again
#   GPU_LANE_PART=probe bash scripts/gpu_lane_perf.sh   # host costs only: the bindings, the overhead, the emulator, the host-bound bench
#   GPU_LANE_PART=smoke bash scripts/gpu_lane_perf.sh   # after a small change: backend, emulator and contract GPU tests, doctor
#     (GPU_LANE_TESTS: other test files; GPU_LANE_TEST_TIMEOUT: their time limit in seconds, default 240)
#   GPU_LANE_PART=verify bash scripts/gpu_lane_perf.sh  # after a hot-path change: every GPU test, the overhead, g-host's profile
#   GPU_LANE_PART=measure bash scripts/gpu_lane_perf.sh # then: the bench (every scenario), g-host again, the emulator's cost
#   GPU_LANE_PART=lanes bash scripts/gpu_lane_perf.sh   # after a change to the bench's pipelines: two-GPU tests and bench, a few scenarios
#   GPU_LANE_PART=close bash scripts/gpu_lane_perf.sh   # before closing: every GPU test (shorter soaks), c and c-gpu, g-host, server-8, two GPUs
#   GPU_LANE_HOST_COSTS=1 (with close): then the contract's and the emulator's host costs
#   GPU_LANE_PART=after bash scripts/gpu_lane_perf.sh   # a second closing call: the host costs and the independent race check
#   GPU_LANE_PART=emulator bash scripts/gpu_lane_perf.sh  # after a change to the emulated SDK: its GPU tests, its host cost, the scenarios it bounds
#     (GPU_LANE_EMU_TESTS: which GPU test files; the default three take about 200 s, GPU_LANE_TEST_TIMEOUT their limit)
#   GPU_LANE_PART=native bash scripts/gpu_lane_perf.sh    # the C extension: every GPU test with it, host costs with it and without (alternating)
#   GPU_LANE_PART=replay bash scripts/gpu_lane_perf.sh    # the C replay: every GPU test (shorter soaks), the overhead with the Python replay beside it, g-host and server-8
#   GPU_LANE_PART=split bash scripts/gpu_lane_perf.sh     # where g-host's gap goes, part by part; the emulator's steps; GPU tests (CuPy deprecations counted); the C frame's sections
#   GPU_LANE_PART=sections bash scripts/gpu_lane_perf.sh  # the C frame's sections alone (a build with section timers)
#   GPU_LANE_PART=headline bash scripts/gpu_lane_perf.sh  # the docs' figures: the bench (every scenario, chart, raw JSON), g-host split and sections (JSON)
#   GPU_LANE_PART=closing bash scripts/gpu_lane_perf.sh   # with headline, a session's last check: every GPU test (shorter soaks), the
#     host-cost figure's data (JSON), the contract's overhead, then the independent race check (GPU_LANE_CHECK_S)
# GPU_LANE_AB=DIR (any part, first): python_overhead, contract_overhead and effect_host_cost of an older tree's package under DIR beside this one's
# Everything lands in ONE file, $OUT/lane.tgz (folder lane/). Runs on one GPU too (the two-GPU parts then skip).
set -uo pipefail
OUT=${OUT:-gpu-out}
PART=${GPU_LANE_PART:-tests}
L=$(realpath -m "$OUT")/lane; mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,memory.used --format=csv > "$L/gpu-$PART.txt" 2>&1
python3 -c "import torch, cupy, jax; print('torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__, 'gpus', torch.cuda.device_count())" >> "$L/gpu-$PART.txt" 2>&1
# the C extension (streamsafe._native), built in place for this machine's Python (the tree carries no build of it)
{ python3 setup.py build_ext --inplace -q || gcc -O2 -shared -fPIC $(python3-config --includes) streamsafe/_native.c streamsafe/_replay.c \
    -o "streamsafe/_native$(python3-config --extension-suffix)"; } > "$L/build-native-$PART.txt" 2>&1
python3 -c "from streamsafe import _accel; print('C extension (streamsafe._native):', _accel.native_status())" >> "$L/gpu-$PART.txt" 2>&1
cat "$L/gpu-$PART.txt"
rc=0
if [ "$PART" = tests ]; then
  STREAMSAFE_FUZZ_FRAMES=2000 STREAMSAFE_FUZZ_CONTROL_FRAMES=500 STREAMSAFE_SOAK_FRAMES=2000 timeout 330 \
    python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1 || rc=1
  grep -E "PASSED|FAILED|ERROR|passed|failed|soak|fuzz" "$L/pytest-gpu.txt" | tail -40
  timeout 60 python3 benchmarks/effect_host_cost.py --json "$L/effect_host_cost.json" > "$L/effect_host_cost.txt" 2>&1; cat "$L/effect_host_cost.txt" | tail -6
  timeout 60 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1; cat "$L/contract_overhead.txt"
  for s in event auto; do timeout 30 python3 benchmarks/python_overhead.py $s; done > "$L/python_overhead.txt" 2>&1; cat "$L/python_overhead.txt"
  (cd benchmarks && timeout 40 python3 profile_contract.py auto 3000 > "$L/profile_contract_auto.txt" 2>&1); head -40 "$L/profile_contract_auto.txt" | cut -c1-150
  timeout 100 python3 -m streamsafe bench --backend cuda --scenario server-1,server-8 --strategy auto,event,async,device,none \
    --frames 100 --warmup 20 --block 20 --json "$L/bench-server-probe.json" > "$L/bench-server-probe.txt" 2>&1; tail -25 "$L/bench-server-probe.txt"
fi
if [ "$PART" = bench ]; then
  timeout 90 python3 benchmarks/effect_host_cost.py --profile --json "$L/effect_host_cost.json" > "$L/effect_host_cost.txt" 2>&1; head -6 "$L/effect_host_cost.txt"
  timeout 60 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1; cat "$L/contract_overhead.txt"
  for s in event auto; do timeout 30 python3 benchmarks/python_overhead.py $s; done > "$L/python_overhead.txt" 2>&1; cat "$L/python_overhead.txt"
  (cd benchmarks && timeout 40 python3 profile_contract.py event 3000 > "$L/profile_contract_event.txt" 2>&1); head -12 "$L/profile_contract_event.txt" | cut -c1-150
  timeout 330 python3 -m streamsafe bench --backend cuda --frames 200 --warmup 20 --block 20 --json "$L/bench.json" --png "$L/bench.png" \
    > "$L/bench.txt" 2> "$L/bench.err" || rc=1
  cat "$L/bench.txt"; tail -3 "$L/bench.err"
  timeout 150 python3 -m streamsafe.bench.multi_gpu --backend cuda --json "$L/multi-gpu-bench.json" > "$L/multi-gpu-bench.txt" 2> "$L/multi-gpu-bench.err" || rc=1
  cat "$L/multi-gpu-bench.txt"; tail -3 "$L/multi-gpu-bench.err"
fi
if [ "$PART" = final ]; then  # after a plan change: the GPU checks and the bench again, in one call
  STREAMSAFE_FUZZ_FRAMES=2000 STREAMSAFE_FUZZ_CONTROL_FRAMES=500 STREAMSAFE_SOAK_FRAMES=2000 STREAMSAFE_MULTI_GPU_SOAK_FRAMES=5000 \
    timeout 300 python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz" "$L/pytest-gpu.txt" | tail -30
  timeout 60 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1; tail -20 "$L/contract_overhead.txt"
  timeout 200 python3 -m streamsafe bench --backend cuda --frames 200 --warmup 20 --block 20 --json "$L/bench.json" --png "$L/bench.png" \
    > "$L/bench.txt" 2> "$L/bench.err" || rc=1
  cat "$L/bench.txt"; tail -3 "$L/bench.err"
  timeout 60 python3 -m streamsafe bench --backend cuda --scenario g-host --frames 200 --warmup 20 --block 20 \
    --json "$L/bench-g-host-again.json" > "$L/bench-g-host-again.txt" 2>&1 || rc=1  # run-to-run stability of the host-bound rows
  grep -E "^g-host" "$L/bench-g-host-again.txt"
fi
if [ "$PART" = probe ]; then  # where the host time goes, before changing the hot path
  timeout 150 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/gpu/test_cuda_backend.py tests/gpu/test_testing_gpu.py \
    tests/gpu/test_contract_gpu.py > "$L/pytest-quick.txt" 2>&1 || rc=1
  tail -5 "$L/pytest-quick.txt"
  timeout 90 python3 benchmarks/fence_bindings.py > "$L/fence_bindings.txt" 2>&1; cat "$L/fence_bindings.txt"
  timeout 60 python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1; tail -22 "$L/contract_overhead.txt"
  timeout 90 python3 benchmarks/effect_host_cost.py --profile --json "$L/effect_host_cost.json" > "$L/effect_host_cost.txt" 2>&1; head -6 "$L/effect_host_cost.txt"
  timeout 90 python3 benchmarks/profile_bench_step.py g-host hand auto > "$L/profile_bench_step.txt" 2>&1; grep -A14 "^==" "$L/profile_bench_step.txt" | cut -c1-150
  for calls in held bindings; do  # the video server with driver calls that keep the GIL, and with cuda.bindings' own calls
    STREAMSAFE_FENCE_CALLS=$calls timeout 120 python3 -m streamsafe bench --backend cuda --scenario server-8,g-host --strategy auto,event,device \
      --frames 200 --warmup 20 --block 20 --json "$L/bench-$calls.json" > "$L/bench-$calls.txt" 2>&1 || rc=1
    grep -E "^(server|g-host)" "$L/bench-$calls.txt"
  done
fi
if [ "$PART" = smoke ]; then  # GPU_LANE_TESTS: other test files; GPU_LANE_OVERHEAD=1, GPU_LANE_BINDINGS=1: the contract overhead, the fence bindings too
  TESTS=${GPU_LANE_TESTS:-tests/gpu/test_cuda_backend.py tests/gpu/test_testing_gpu.py tests/gpu/test_contract_gpu.py}
  # shellcheck disable=SC2086
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-1000} timeout "${GPU_LANE_TEST_TIMEOUT:-240}" python3 -m pytest -m gpu -v -s -p no:cacheprovider $TESTS \
    > "$L/pytest-smoke.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz|bound program|out.torch" "$L/pytest-smoke.txt" | tail -24
  python3 -m streamsafe doctor > "$L/doctor.txt" 2>&1 || rc=1; tail -4 "$L/doctor.txt"
  if [ -n "${GPU_LANE_BINDINGS:-}" ]; then
    timeout 120 python3 benchmarks/fence_bindings.py > "$L/fence_bindings.txt" 2>&1 || rc=1; cat "$L/fence_bindings.txt"
  fi
  if [ -n "${GPU_LANE_OVERHEAD:-}" ]; then
    timeout 90 python3 benchmarks/contract_overhead.py --blocks 24 --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1
    tail -34 "$L/contract_overhead.txt"
  fi
fi
if [ "$PART" = verify ]; then  # after a hot-path change (first of two calls)
  STREAMSAFE_FUZZ_FRAMES=2000 STREAMSAFE_FUZZ_CONTROL_FRAMES=500 STREAMSAFE_SOAK_FRAMES=2000 STREAMSAFE_MULTI_GPU_SOAK_FRAMES=5000 \
    timeout 300 python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz" "$L/pytest-gpu.txt" | tail -30
  timeout 90 python3 benchmarks/contract_overhead.py --blocks 24 --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1
  tail -34 "$L/contract_overhead.txt"
  for s in event auto; do timeout 30 python3 benchmarks/python_overhead.py $s; done > "$L/python_overhead.txt" 2>&1; cat "$L/python_overhead.txt"
  timeout 90 python3 benchmarks/profile_bench_step.py g-host hand auto > "$L/profile_bench_step.txt" 2>&1; grep -A14 "^==" "$L/profile_bench_step.txt" | cut -c1-150
fi
if [ -n "${GPU_LANE_AB:-}" ]; then  # any part: an older tree's package under GPU_LANE_AB (untracked), side by side with this one
  # its C extension built in place too, so both trees run their own (GPU_LANE_AB_ROUNDS: the emulator's rounds, default 2)
  (cd "$GPU_LANE_AB" && python3 setup.py build_ext --inplace -q) > "$L/build-native-ab.txt" 2>&1 || echo "the older tree's extension did not build" >> "$L/build-native-ab.txt"
  for i in 1 2; do for tree in "$GPU_LANE_AB" .; do for s in event auto; do
    echo "$tree $(PYTHONPATH=$PWD/$tree timeout 30 python3 benchmarks/python_overhead.py $s)"
  done; done; done > "$L/python_overhead-ab.txt" 2>&1; cat "$L/python_overhead-ab.txt"
  for tree in "$GPU_LANE_AB" .; do
    PYTHONPATH=$PWD/$tree timeout 60 python3 benchmarks/contract_overhead.py --blocks 12 > "$L/contract_overhead-$(basename "$(realpath "$tree")").txt" 2>&1
  done
  grep -H -E "^(raw effect|contract|hand)" "$L"/contract_overhead-*.txt | cut -c1-140
  for i in $(seq 1 "${GPU_LANE_AB_ROUNDS:-2}"); do for tree in "$GPU_LANE_AB" .; do
    PYTHONPATH=$PWD/$tree timeout 60 python3 benchmarks/effect_host_cost.py > "$L/effect_host_cost-$i-$(basename "$(realpath "$tree")").txt" 2>&1
  done; done
  grep -H -E "^(Video|True)" "$L"/effect_host_cost-*.txt | cut -c1-140
fi
if [ "$PART" = emulator ]; then  # after a change to the emulated SDK: its GPU tests, its host cost, the scenarios it bounds
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-1000} timeout "${GPU_LANE_TEST_TIMEOUT:-200}" python3 -m pytest -m gpu -v -s -p no:cacheprovider \
    ${GPU_LANE_EMU_TESTS:-tests/gpu/test_cuda_backend.py tests/gpu/test_testing_gpu.py tests/gpu/test_contract_gpu.py} > "$L/pytest-emulator.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|Error" "$L/pytest-emulator.txt" | tail -24
  timeout 120 python3 benchmarks/effect_host_cost.py --in-frame --json "$L/effect_in_frame.json" > "$L/effect_in_frame.txt" 2>&1 || rc=1
  head -64 "$L/effect_in_frame.txt" | cut -c1-150
  timeout 60 python3 benchmarks/effect_host_cost.py --calls > "$L/effect_calls.txt" 2>&1; cat "$L/effect_calls.txt" | cut -c1-150
  timeout 150 python3 -m streamsafe bench --backend cuda --scenario g-host,server-8,c,c-gpu --frames 100 --warmup 20 --block 20 \
    --json "$L/bench-emulator.json" > "$L/bench-emulator.txt" 2>&1 || rc=1
  grep -E "^(c|g-host|server)" "$L/bench-emulator.txt"
fi
if [ "$PART" = lanes ]; then  # after a change to the bench's pipelines: the two-GPU tests and bench, a few single-GPU scenarios
  STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-5000} timeout 200 python3 -m pytest -m gpu -v -s -p no:cacheprovider \
    tests/gpu/test_multi_gpu.py > "$L/pytest-lanes.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak" "$L/pytest-lanes.txt" | tail -12
  timeout 150 python3 -m streamsafe.bench.multi_gpu --backend cuda --json "$L/multi-gpu-bench.json" > "$L/multi-gpu-bench.txt" 2> "$L/multi-gpu-bench.err" || rc=1
  cat "$L/multi-gpu-bench.txt"; tail -3 "$L/multi-gpu-bench.err"
  timeout 100 python3 -m streamsafe bench --backend cuda --scenario a,d-cupy,d-jax,g-host,server-2 --frames 100 --warmup 20 --block 20 \
    --json "$L/bench-lanes.json" > "$L/bench-lanes.txt" 2>&1 || rc=1
  grep -E "^(a |d-|g-host|server)" "$L/bench-lanes.txt"
fi
if [ "$PART" = close ]; then  # the last check of a session: every GPU test, the (c) reference, the host-bound rows, two GPUs
  # (GPU_LANE_TEST_TIMEOUT, STREAMSAFE_*_FRAMES: shorter soaks to fit one call; GPU_LANE_NO_MULTI_BENCH=1: no two-GPU bench)
  STREAMSAFE_FUZZ_FRAMES=${STREAMSAFE_FUZZ_FRAMES:-1000} STREAMSAFE_FUZZ_CONTROL_FRAMES=${STREAMSAFE_FUZZ_CONTROL_FRAMES:-500} \
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-1000} STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-3000} \
    timeout "${GPU_LANE_TEST_TIMEOUT:-330}" python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz|per-thread|per frame|per clip" "$L/pytest-gpu.txt" | cut -c1-400 | tail -40
  echo "ExternalStream deprecation warnings: $(grep -c 'ExternalStream is deprecated' "$L/pytest-gpu.txt")"
  timeout 120 python3 -m streamsafe bench --backend cuda --scenario c,c-gpu,g-host,server-8 --frames 200 --warmup 20 --block 20 \
    --json "$L/bench-close.json" > "$L/bench-close.txt" 2>&1 || rc=1
  grep -E "^(c|g-host|server)" "$L/bench-close.txt"
  if [ -z "${GPU_LANE_NO_MULTI_BENCH:-}" ]; then
    timeout 120 python3 -m streamsafe.bench.multi_gpu --backend cuda --json "$L/multi-gpu-bench.json" > "$L/multi-gpu-bench.txt" 2> "$L/multi-gpu-bench.err" || rc=1
    cat "$L/multi-gpu-bench.txt"; tail -3 "$L/multi-gpu-bench.err"
  fi
fi
if [ "$PART" = native ]; then  # the C extension: every GPU test with it; then each host cost with it and without, alternating
  STREAMSAFE_FUZZ_FRAMES=1000 STREAMSAFE_FUZZ_CONTROL_FRAMES=500 STREAMSAFE_SOAK_FRAMES=1000 STREAMSAFE_MULTI_GPU_SOAK_FRAMES=3000 \
    timeout 300 python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1 || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz" "$L/pytest-gpu.txt" | tail -30
  for i in 1 2; do for n in 0 1; do
    STREAMSAFE_NATIVE=$n timeout 50 python3 benchmarks/contract_overhead.py --blocks 12 --json "$L/contract_overhead-$i-native$n.json" \
      > "$L/contract_overhead-$i-native$n.txt" 2>&1
    STREAMSAFE_NATIVE=$n timeout 50 python3 benchmarks/effect_host_cost.py > "$L/effect_host_cost-$i-native$n.txt" 2>&1
  done; done
  grep -H -E "^(raw effect|contract.run\(\) \+ out|hand, same fences \+ raw capsule import \[)" "$L"/contract_overhead-*.txt | cut -c1-150
  grep -H -E "^(Video|True)" "$L"/effect_host_cost-*.txt | cut -c1-150
fi
if [ "$PART" = replay ]; then  # the steady-state frame in C: every GPU test with it, then its cost beside the Python one's
  STREAMSAFE_FUZZ_FRAMES=${STREAMSAFE_FUZZ_FRAMES:-600} STREAMSAFE_FUZZ_CONTROL_FRAMES=${STREAMSAFE_FUZZ_CONTROL_FRAMES:-300} \
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-600} STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-2000} \
    timeout "${GPU_LANE_TEST_TIMEOUT:-280}" python3 -m pytest -m gpu -v -s -p no:cacheprovider ${GPU_LANE_TESTS:-tests/gpu} \
    > "$L/pytest-gpu.txt" 2>&1; status=$?
  echo "pytest exit status $status" >> "$L/pytest-gpu.txt"; [ $status = 0 ] || rc=1
  grep -E "FAILED|ERROR|passed|failed|soak|fuzz|per-thread|per frame|per clip|exit status" "$L/pytest-gpu.txt" | cut -c1-300 | tail -30
  for i in 1 2; do
    timeout 70 python3 benchmarks/contract_overhead.py --blocks 12 --json "$L/contract_overhead-$i.json" > "$L/contract_overhead-$i.txt" 2>&1
  done
  grep -H -E "^(raw effect|contract.run\(\) \+ out|hand, same fences \+ raw capsule import \[)|torch\(copy=False\)" "$L"/contract_overhead-*.txt | cut -c1-150
  timeout 120 python3 -m streamsafe bench --backend cuda --scenario g-host,server-8 --frames 200 --warmup 20 --block 20 \
    --json "$L/bench-replay.json" > "$L/bench-replay.txt" 2>&1; status=$?
  echo "bench exit status $status" >> "$L/bench-replay.txt"; [ $status = 0 ] || rc=1
  grep -E "^(g-host|server)|exit status" "$L/bench-replay.txt"
  timeout 90 python3 benchmarks/profile_bench_step.py g-host hand auto --diff > "$L/profile_bench_step.txt" 2>&1
  grep -E "^== " "$L/profile_bench_step.txt"; sed -n '/own time per step/,$p' "$L/profile_bench_step.txt" | head -24
fi
if { [ "$PART" = close ] && [ -n "${GPU_LANE_HOST_COSTS:-}" ]; } || [ "$PART" = after ]; then  # the host costs (C extension in use)
  timeout 50 python3 benchmarks/contract_overhead.py --blocks 12 --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1
  grep -E "^(raw effect|contract.run\(\) \+ out|hand, same fences \+ raw capsule import \[)" "$L/contract_overhead.txt"
  for i in 1 2; do timeout 50 python3 benchmarks/effect_host_cost.py > "$L/effect_host_cost-$i.txt" 2>&1; done
  grep -H -E "^(Video|True)" "$L"/effect_host_cost-*.txt | cut -c1-150
fi
if [ "$PART" = closing ]; then  # a session's last check, beside headline: the GPU tests, the host-cost figure's JSON (then the race check, below)
  STREAMSAFE_FUZZ_FRAMES=${STREAMSAFE_FUZZ_FRAMES:-600} STREAMSAFE_FUZZ_CONTROL_FRAMES=${STREAMSAFE_FUZZ_CONTROL_FRAMES:-300} \
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-300} STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-2000} \
    timeout "${GPU_LANE_TEST_TIMEOUT:-280}" python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu > "$L/pytest-gpu.txt" 2>&1; status=$?
  echo "pytest exit status $status" >> "$L/pytest-gpu.txt"; [ $status = 0 ] || rc=1
  grep -E "FAILED|ERROR|passed|failed|exit status" "$L/pytest-gpu.txt" | tail -12
  timeout 60 python3 benchmarks/hot_path_parts.py auto event --json "$L/hot_path_parts.json" > "$L/hot_path_parts.txt" 2>&1 || rc=1
  cat "$L/hot_path_parts.txt" | cut -c1-150
  timeout 60 python3 benchmarks/effect_host_cost.py --calls --json "$L/effect_calls.json" > "$L/effect_calls.txt" 2>&1 || rc=1
  cat "$L/effect_calls.txt" | cut -c1-150
  timeout 60 python3 benchmarks/contract_overhead.py --blocks 12 --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1 || rc=1
  grep -E "^(raw effect|contract.run\(\) \+ out|hand, same fences \+ raw capsule import \[)|torch\(copy=False\)" "$L/contract_overhead.txt" | cut -c1-150
fi
if [ "$PART" = after ] || [ "$PART" = closing ]; then  # the independent race check (GPU_LANE_CHECK_S): after's host costs, closing's checks first
  BUDGET_S=${GPU_LANE_CHECK_S:-90} FRAMES=2700 CONTROL_FRAMES=1350 timeout $(( ${GPU_LANE_CHECK_S:-90} + 60 )) \
    python3 docs/runs/2026-11-30-independent-check/race_check.py > "$L/race_check.txt" 2>&1 || rc=1
  tail -12 "$L/race_check.txt"
fi
if [ "$PART" = measure ]; then  # after a hot-path change (second call); GPU_LANE_TESTS: GPU test files to run first
  if [ -n "${GPU_LANE_TESTS:-}" ]; then
    # shellcheck disable=SC2086
    timeout 150 python3 -m pytest -m gpu -v -s -p no:cacheprovider $GPU_LANE_TESTS > "$L/pytest-measure.txt" 2>&1 || rc=1
    grep -E "FAILED|ERROR|passed|failed|soak" "$L/pytest-measure.txt" | tail -12
  fi
  timeout 200 python3 -m streamsafe bench --backend cuda --frames 200 --warmup 20 --block 20 --json "$L/bench.json" --png "$L/bench.png" \
    > "$L/bench.txt" 2> "$L/bench.err" || rc=1
  cat "$L/bench.txt"; tail -3 "$L/bench.err"
  if [ -z "${GPU_LANE_AB:-}" ]; then  # (skipped when the A/B took the time)
    timeout 60 python3 -m streamsafe bench --backend cuda --scenario g-host --frames 200 --warmup 20 --block 20 \
      --json "$L/bench-g-host-again.json" > "$L/bench-g-host-again.txt" 2>&1 || rc=1
    grep -E "^g-host" "$L/bench-g-host-again.txt"
    timeout 90 python3 benchmarks/effect_host_cost.py --profile --json "$L/effect_host_cost.json" > "$L/effect_host_cost.txt" 2>&1; head -8 "$L/effect_host_cost.txt"
  fi
fi
if [ "$PART" = split ]; then  # g-host's step split by part (hand, auto, the Python frame), and the emulated SDK's steps
  for i in 1 2; do timeout 90 python3 benchmarks/g_host_parts.py --split > "$L/g_host_split-$i.txt" 2>&1 || rc=1; cat "$L/g_host_split-$i.txt"; done
  timeout 120 python3 benchmarks/effect_host_cost.py --in-frame --json "$L/effect_in_frame.json" > "$L/effect_in_frame.txt" 2>&1 || rc=1
  cat "$L/effect_in_frame.txt"
  STREAMSAFE_FUZZ_FRAMES=1000 STREAMSAFE_FUZZ_CONTROL_FRAMES=300 STREAMSAFE_SOAK_FRAMES=1000 STREAMSAFE_MULTI_GPU_SOAK_FRAMES=2000 \
    timeout 280 python3 -m pytest -m gpu -v -s -p no:cacheprovider -W always::DeprecationWarning tests/gpu > "$L/pytest-gpu.txt" 2>&1; status=$?
  echo "pytest exit status $status" >> "$L/pytest-gpu.txt"; [ $status = 0 ] || rc=1
  grep -E "FAILED|ERROR|passed|failed|exit status" "$L/pytest-gpu.txt" | tail -12
  echo "ExternalStream deprecation warnings: $(grep -c 'ExternalStream is deprecated' "$L/pytest-gpu.txt")"
  timeout 60 python3 benchmarks/g_host_parts.py --blocks 5 > "$L/g_host_parts.txt" 2>&1 || rc=1; cat "$L/g_host_parts.txt"
fi
if [ "$PART" = headline ]; then  # the bench for docs/bench/ (table, chart, raw samples) and g-host's split for its figure
  timeout 360 python3 -m streamsafe bench --backend cuda --frames 200 --warmup 20 --block 20 --json "$L/bench.json" --png "$L/bench.png" \
    > "$L/bench.txt" 2> "$L/bench.err"; status=$?
  echo "bench exit status $status" >> "$L/bench.txt"; [ $status = 0 ] || rc=1
  cat "$L/bench.txt"; tail -3 "$L/bench.err"
  timeout 90 python3 benchmarks/g_host_parts.py --split --json "$L/g_host_split.json" > "$L/g_host_split.txt" 2>&1 || rc=1; cat "$L/g_host_split.txt"
fi
if [ "$PART" = split ] || [ "$PART" = sections ] || [ "$PART" = headline ]; then  # the C frame's sections in g-host (a build with timers, then the normal one again)
  so="streamsafe/_native$(python3-config --extension-suffix)"
  gcc -O2 -shared -fPIC -DSTREAMSAFE_FRAME_PROFILE $(python3-config --includes) streamsafe/_native.c streamsafe/_replay.c -o "$so" \
    > "$L/build-sections.txt" 2>&1 || rc=1
  for row in auto event; do
    timeout 60 python3 benchmarks/frame_sections.py g-host --row $row --json "$L/frame_sections-$row.json" > "$L/frame_sections-$row.txt" 2>&1 || rc=1
    cat "$L/frame_sections-$row.txt"
  done
  gcc -O2 -shared -fPIC $(python3-config --includes) streamsafe/_native.c streamsafe/_replay.c -o "$so" >> "$L/build-sections.txt" 2>&1 || rc=1
fi
tar czf "$OUT/lane.tgz" -C "$OUT" lane && rm -rf "$L"
exit $rc
