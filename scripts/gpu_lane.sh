#!/usr/bin/env bash
# shellcheck disable=SC2317  # (the parts are called by name: "part_$PART")
# The GPU lane: run on a lent GPU machine with the repository root as cwd.
#
#   bash scripts/gpu_lane.sh PART [PART ...]
#
# Parts (each one is a few minutes at most; a device call has 10, so give one call a few parts):
#   probe           the machine (GPUs, driver, torch/CuPy/JAX), `streamsafe doctor`, the hazard matrix on the GPU
#   tests           every GPU test: pytest -m gpu on tests/gpu (soak and fuzz lengths: STREAMSAFE_*_FRAMES)
#   fuzz            the GPU timing fuzzer and sanitize-against-the-model agreement, longer runs
#   bench           `streamsafe bench --backend cuda`, every scenario: table, chart, raw JSON (the docs' headline)
#   overhead        the host costs: contract_overhead.py (own cost), fence_overhead.py --bindings,
#                   effect_host_cost.py --calls, profile.py stub; the host-cost figure when matplotlib is there
#   profile         where host time goes: profile.py step --diff (g-host, hand against auto), g-host, contract,
#                   effect, paths
#   examples        examples/*.py on the emulated nvvfx, unguarded (racy), under `streamsafe run` and --sanitize
#   nvidia-samples  NVIDIA's nvvfx samples, unmodified, under `streamsafe run --fake-nvvfx` (needs .nvsamples/)
#   race-check      scripts/race_check.py, the independent race check (GPU_LANE_CHECK_S seconds, default 90)
#   multi-gpu       the multi-GPU tests and bench, with its figure (needs 2 GPUs; skipped on one)
#   decoder         NVIDIA's real decoder (needs the pynvvideocodec wheel in .whl/): its GPU tests
#                   (STREAMSAFE_DECODER_FRAMES a strategy, default 10000), examples/decode_upscale.py guarded
#                   and unguarded with --verify, benchmarks/decode_pipeline.py, `streamsafe doctor`; a clip from
#                   STREAMSAFE_TEST_CLIP, else made with PyAV (carried in .whl/ too)
#   pyav            PyAV's NVDEC frames (needs PyAV with CUDA decoding: the wheel PYAV_WHEEL names, else one
#                   carried in .whl/, else an importable PyAV): the release race unguarded (views dropped, random
#                   consumer delays), guarded under each strategy (STREAMSAFE_PYAV_FRAMES a strategy, default 2000;
#                   the clip looped), wrong frames and host waits a frame; examples/pyav_nvdec_upscale.py guarded and
#                   unguarded with --verify; benchmarks/pyav_nvdec.py (streamsafe vs the per-frame consumer sync vs
#                   hand-written events); a clip from STREAMSAFE_PYAV_CLIP, else made with PyAV (240 frames, 320x192)
#   all             every part above, in that order (longer than one device call)
#
# Environment: OUT (results; ./gpu-out when unset), GPU_LANE_TIMEOUT (seconds, overrides each command's
# limit), GPU_LANE_TESTS (a pytest -k filter for `tests`), GPU_LANE_BENCH_ARGS (extra options for the bench,
# e.g. "--scenario g-host,server-8"), EXAMPLES_* and NVS_* (see those parts), STREAMSAFE_*_FRAMES (tests),
# PYAV_WHEEL (a PyAV wheel with CUDA decoding, for the pyav part; a path from the repository root, or absolute).
# Wheels carried in .whl/ (PyAV, PyNvVideoCodec; .nvsamples/wheels/ too) are installed into /tmp/site: the
# machine has no package index.
#
# Every part writes under $OUT/lane/; at the end that folder is packed into $OUT/lane.tgz (the machine hands
# back few files) beside $OUT/summary.txt, the table printed last: each part, ok / FAIL / skipped, its
# seconds and one line. Exit status 0 when no part failed, 1 when one did, 2 on a usage error.
# Helpers it runs: scripts/race_check.py, scripts/nvidia_samples_check.py, the benchmarks/ scripts, docs/make_*.
set -uo pipefail
shopt -s nullglob

ALL_PARTS=(probe tests fuzz bench overhead profile examples nvidia-samples race-check multi-gpu decoder pyav)

usage() {
  sed -n '3,42p' "$0" | sed 's/^# \{0,1\}//'
}

if [ $# -lt 1 ]; then
  usage >&2
  exit 2
fi
parts=()
for p in "$@"; do
  case $p in
    all) parts+=("${ALL_PARTS[@]}") ;;
    -h|--help) usage; exit 0 ;;
    probe|tests|fuzz|bench|overhead|profile|examples|nvidia-samples|race-check|multi-gpu|decoder|pyav) parts+=("$p") ;;
    *) echo "gpu_lane.sh: unknown part '$p' (parts: ${ALL_PARTS[*]} all)" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
L=$OUT/lane
mkdir -p "$L"
REPO=$PWD
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false STREAMSAFE_GPU_OUT=$L

# Carried wheels (no package index on the machine).
wheels=(.whl/*.whl .nvsamples/wheels/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" \
      > "$L/pip.txt" 2>&1; then
    export PYTHONPATH=/tmp/site:$PYTHONPATH
  else
    echo "gpu_lane.sh: installing the carried wheels failed (lane/pip.txt)"
  fi
fi

limit() {  # limit DEFAULT: a command's time limit in seconds
  echo "${GPU_LANE_TIMEOUT:-$1}"
}

have_matplotlib() {
  python3 -c "import matplotlib" > /dev/null 2>&1
}

gpu_count() {
  python3 -c "import torch; print(torch.cuda.device_count())" 2> /dev/null || echo 0
}

NOTE=""  # each part sets one line for the summary

# -- parts: each returns 0 (ok), 77 (skipped) or another status (failed) ---------------------------------

part_probe() {
  local rc=0
  {
    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,memory.used --format=csv
    nvidia-smi topo -m
    python3 -c "import sys, torch, cupy, jax; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__, 'gpus', torch.cuda.device_count())"
  } > "$L/probe.txt" 2>&1 || rc=1
  timeout "$(limit 60)" python3 -m streamsafe doctor > "$L/doctor.txt" 2>&1 || rc=1
  timeout "$(limit 120)" python3 -m streamsafe hazards --backend cuda --frames 50 > "$L/hazards-gpu.txt" 2>&1 || rc=1
  cat "$L/probe.txt"; tail -6 "$L/doctor.txt"; tail -12 "$L/hazards-gpu.txt"
  NOTE="$(head -2 "$L/probe.txt" | tail -1 | cut -c1-60); hazards exit $( [ "$rc" = 0 ] && echo 0 || echo '!=0')"
  return "$rc"
}

pytest_gpu() {  # pytest_gpu LOG TIMEOUT ARGS...: the GPU tests, their status; NOTE gets pytest's last line
  local log=$1 t=$2
  shift 2
  timeout "$(limit "$t")" python3 -m pytest -m gpu -v -s -p no:cacheprovider "$@" > "$log" 2>&1
  local status=$?
  echo "pytest exit status $status" >> "$log"
  grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|soak|fuzz|agree|corrupt" "$log" | cut -c1-300 | tail -40
  NOTE=$(grep -E "[0-9]+ (passed|failed)|no tests ran" "$log" | tail -1 | tr -d '=' | sed 's/^ *//' | cut -c1-70)
  [ -n "$NOTE" ] || NOTE="pytest exit status $status"
  return "$status"
}

part_tests() {
  # shellcheck disable=SC2086
  STREAMSAFE_FUZZ_FRAMES=${STREAMSAFE_FUZZ_FRAMES:-1000} STREAMSAFE_FUZZ_CONTROL_FRAMES=${STREAMSAFE_FUZZ_CONTROL_FRAMES:-500} \
  STREAMSAFE_SOAK_FRAMES=${STREAMSAFE_SOAK_FRAMES:-1000} STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-3000} \
    pytest_gpu "$L/pytest-gpu.txt" 400 ${GPU_LANE_TESTS:+-k "$GPU_LANE_TESTS"} tests/gpu
}

part_fuzz() {
  local targets=(tests/gpu/test_fuzz_gpu.py tests/gpu/test_sanitize_agrees_gpu.py) t
  for t in "${targets[@]}"; do
    [ -f "$t" ] || { targets=(-k "fuzz or sanitize" tests/gpu); break; }  # (test files renamed: by name instead)
  done
  STREAMSAFE_FUZZ_FRAMES=${STREAMSAFE_FUZZ_FRAMES:-3000} STREAMSAFE_FUZZ_CONTROL_FRAMES=${STREAMSAFE_FUZZ_CONTROL_FRAMES:-500} \
    pytest_gpu "$L/pytest-fuzz.txt" 400 "${targets[@]}"
}

part_bench() {
  # shellcheck disable=SC2086
  timeout "$(limit 420)" python3 -m streamsafe bench --backend cuda --frames 200 --warmup 20 --block 20 \
    --json "$L/bench.json" --png "$L/bench.png" ${GPU_LANE_BENCH_ARGS:-} > "$L/bench.txt" 2> "$L/bench.err"
  local status=$?
  echo "bench exit status $status" >> "$L/bench.txt"
  cat "$L/bench.txt"; tail -3 "$L/bench.err"
  # fenced cells with a corrupted frame (the corrupt column is the 9th; "none (unsafe)" rows are left out)
  local bad
  bad=$(awk '$2 ~ /^(auto|event|async|stream|device|hand|hand-sync)$/ && $9 ~ /^[0-9]+\/[0-9]+$/ && ($9 !~ /^0\// || /warm-up/) {n++} END {print n+0}' "$L/bench.txt")
  NOTE="bench exit $status; fenced cells with corrupt frames: $bad"
  [ "$status" = 0 ] && [ "$bad" = 0 ]
}

part_overhead() {
  local rc=0 s
  timeout "$(limit 120)" python3 benchmarks/contract_overhead.py --json "$L/contract_overhead.json" > "$L/contract_overhead.txt" 2>&1 || rc=1
  cat "$L/contract_overhead.txt"
  timeout "$(limit 120)" python3 benchmarks/fence_overhead.py --bindings --json "$L/fence_overhead.json" > "$L/fence_overhead.txt" 2>&1 || rc=1
  cat "$L/fence_overhead.txt"
  timeout "$(limit 120)" python3 benchmarks/effect_host_cost.py --calls --json "$L/effect_host_cost.json" > "$L/effect_host_cost.txt" 2>&1 || rc=1
  cat "$L/effect_host_cost.txt"
  for s in event auto; do timeout "$(limit 60)" python3 benchmarks/profile.py stub "$s" || rc=1; done > "$L/profile-stub.txt" 2>&1
  cat "$L/profile-stub.txt"
  if have_matplotlib && [ -f "$L/contract_overhead.json" ] && [ -f "$L/effect_host_cost.json" ]; then
    python3 docs/make_host_cost_figure.py "$L/contract_overhead.json" "$L/effect_host_cost.json" --png "$L/host-cost.png" \
      > "$L/host-cost-figure.txt" 2>&1 || rc=1
  fi
  local ev au
  ev=$(sed -n 's/^contract + out.torch(copy=False) - hand, same fences + import \[event\] (us) *//p' "$L/contract_overhead.txt")
  au=$(sed -n 's/^contract + out.torch(copy=False) - hand, same fences + import \[auto\] (us) *//p' "$L/contract_overhead.txt")
  NOTE="own cost over hand (out.torch(copy=False)): event ${ev:-?} us, auto ${au:-?} us"
  return "$rc"
}

part_profile() {
  local rc=0
  timeout "$(limit 150)" python3 benchmarks/profile.py step g-host hand auto --diff > "$L/profile-step.txt" 2>&1 || rc=1
  grep -E "^== " "$L/profile-step.txt"; sed -n '/own time per step/,$p' "$L/profile-step.txt" | head -24
  timeout "$(limit 120)" python3 benchmarks/profile.py g-host --json "$L/g_host_split.json" > "$L/profile-g-host.txt" 2>&1 || rc=1
  cat "$L/profile-g-host.txt"
  if have_matplotlib && [ -f "$L/g_host_split.json" ]; then
    python3 docs/make_g_host_figure.py "$L/g_host_split.json" --png "$L/g-host.png" > "$L/g-host-figure.txt" 2>&1 || rc=1
  fi
  timeout "$(limit 60)" python3 benchmarks/profile.py contract auto > "$L/profile-contract.txt" 2>&1 || rc=1
  head -20 "$L/profile-contract.txt" | cut -c1-150
  timeout "$(limit 90)" python3 benchmarks/profile.py effect > "$L/profile-effect.txt" 2>&1 || rc=1
  grep "===" "$L/profile-effect.txt"
  timeout "$(limit 120)" python3 benchmarks/profile.py paths --rounds 1 > "$L/profile-paths.txt" 2>&1 || rc=1
  cat "$L/profile-paths.txt"
  NOTE=$(grep -E "^  (hand|auto) " "$L/profile-g-host.txt" | awk '{printf "%s %s us a step; ", $1, $2}')
  NOTE="g-host: ${NOTE:-no split}"
  return "$rc"
}

# examples: each program on the emulated nvvfx with its current stream a non-blocking stream
# (--side-stream) and the stages delayed: unguarded -> corrupt frames > 0 and exit 1; under
# `streamsafe run --fake-nvvfx` (and --sanitize) -> 0 corrupt, exit 0; controls clean unguarded.
# EXAMPLES_FRAMES (60), EXAMPLES_LATENCY_US (300), EXAMPLES_HDR_LATENCY_US (2000), EXAMPLES_CASES (a regex).
EX_UNGUARDED='import os, runpy, sys
import streamsafe.testing as t
t.install_fake_nvvfx()
path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
runpy.run_path(path, run_name="__main__")'

ex_one() {  # ex_one NAME MODE EXPECT PROGRAM ARGS...   MODE: unguarded | guarded | sanitize;  EXPECT: racy | clean
  local name=$1 mode=$2 expect=$3 program=$4
  shift 4
  grep -Eq "$EX_CASES" <<< "$name" || return 0
  local log="$EX_LOGS/$name-$mode.txt" rc corrupt verdict k
  case $mode in
    unguarded) python3 -c "$EX_UNGUARDED" "examples/$program" "$@" > "$log" 2>&1 ;;
    guarded) python3 -m streamsafe run --fake-nvvfx --report "$EX_LOGS/$name-$mode.json" "examples/$program" "$@" > "$log" 2>&1 ;;
    sanitize) python3 -m streamsafe run --fake-nvvfx --sanitize --report "$EX_LOGS/$name-$mode.json" \
                "examples/$program" "$@" > "$log" 2>&1 ;;
  esac
  rc=$?
  corrupt=$(sed -n 's/^corrupt frames: \([0-9]* of [0-9]*\).*/\1/p' "$log" | tail -1)
  k=${corrupt%% of*}
  if [ -z "$corrupt" ]; then
    verdict=FAIL; corrupt="-"            # the program did not get to its verdict
  elif [ "$expect" = racy ]; then
    if [ "$k" -gt 0 ] && [ "$rc" -eq 1 ]; then verdict=ok; else verdict=FAIL; fi
  else
    if [ "$k" -eq 0 ] && [ "$rc" -eq 0 ]; then verdict=ok; else verdict=FAIL; fi
  fi
  [ "$verdict" = ok ] || EX_FAILURES=$((EX_FAILURES + 1))
  printf '%-22s %-10s %4s %10s  %-14s %s\n' "$name" "$mode" "$rc" "${corrupt/ of /\/}" "$expect" "$verdict" | tee -a "$EX_SUMMARY"
  [ "$verdict" = ok ] || tail -5 "$log" | sed 's/^/    /'
}

ex_racy_case() {  # ex_racy_case NAME PROGRAM ARGS...: unguarded (racy), guarded and sanitize (clean)
  local name=$1 program=$2
  shift 2
  ex_one "$name" unguarded racy "$program" "$@"
  ex_one "$name" guarded clean "$program" "$@"
  ex_one "$name" sanitize clean "$program" "$@"
}

part_examples() {
  local dir=$L/examples frames=${EXAMPLES_FRAMES:-60} lat=${EXAMPLES_LATENCY_US:-300}
  # TrueHDR's inference is ~20 small kernels whose launches take the host about as long as 300 us: the GPU
  # keeps up and the race hides. A longer delay before inference lets run() return while it is still pending.
  local hdr_lat=${EXAMPLES_HDR_LATENCY_US:-2000}
  EX_CASES=${EXAMPLES_CASES:-.}
  EX_LOGS=$dir/logs
  EX_SUMMARY=$dir/summary.txt
  EX_FAILURES=0
  mkdir -p "$EX_LOGS"
  if ! python3 -c "import av" > "$EX_LOGS/av.txt" 2>&1; then
    NOTE="PyAV cannot be imported: carry its wheel in .whl/"
    cat "$EX_LOGS/av.txt"
    return 77
  fi
  {
    echo "example programs on the GPU: $frames frames, emulation latency ${lat} us (TrueHDR ${hdr_lat} us)"
    printf '%-22s %-10s %4s %10s  %-14s %s\n' case mode rc corrupt expected verdict
  } > "$EX_SUMMARY"
  local common=(--side-stream --emulation-latency-us "$lat" --verify --frames "$frames")
  local hdr=(--side-stream --emulation-latency-us "$hdr_lat" --verify --frames "$frames")
  ex_racy_case super_res video_super_resolution.py "${common[@]}" -o "$EX_LOGS/super_res.mp4"
  ex_racy_case frame_gen video_frame_generation.py "${common[@]}" --multiplier 2
  ex_racy_case frame_gen_timestep video_frame_generation.py "${common[@]}" --timestep 0.5
  # TrueHDR has no legacy-stream conversion: it races only when a second stream consumes the output
  # while the host does not wait for the SDK (the raw capsule ignores the consumer's DLPack stream).
  ex_racy_case true_hdr_copy_stream true_hdr.py "${hdr[@]}" --non-blocking --copy-stream -o "$EX_LOGS/true_hdr.mp4"
  # Controls: correct without streamsafe, so --verify must report 0 (no false alarms).
  ex_one super_res_default unguarded clean video_super_resolution.py --emulation-latency-us "$lat" --verify --frames "$frames"
  ex_one true_hdr_one_stream unguarded clean true_hdr.py "${hdr[@]}" --non-blocking
  # A real file in and out (PyAV decoding as well as encoding), guarded, on a side stream.
  if grep -Eq "$EX_CASES" <<< frame_gen_from_file; then
    python3 -c "import sys; sys.path.insert(0, 'examples'); import _video_io as v
v.write_clip(sys.argv[1], v.synthesize_frames(int(sys.argv[2]), 480, 270))" "$EX_LOGS/input.mp4" "$frames"
    ex_one frame_gen_from_file guarded clean video_frame_generation.py -i "$EX_LOGS/input.mp4" -o "$EX_LOGS/frame_gen.mp4" \
      --multiplier 4 --side-stream --emulation-latency-us "$lat" --verify
  fi
  echo "failures: $EX_FAILURES" | tee -a "$EX_SUMMARY"
  tar czf "$dir/logs.tgz" -C "$dir" logs && rm -rf "$EX_LOGS"
  NOTE="$(grep -c ' ok$' "$EX_SUMMARY") cases ok, $EX_FAILURES failed"
  [ "$EX_FAILURES" -eq 0 ]
}

# nvidia-samples: every command line of the samples' README, under `streamsafe run --fake-nvvfx`, frames
# checked, also with the program's current stream a non-blocking stream (+ --sanitize, + an unguarded
# control). .nvsamples/ holds the samples verbatim (git-ignored; SOURCE.txt says from where). Knobs:
# NVS_SAMPLES (.nvsamples), NVS_FRAMES (30), NVS_JOBS (8), NVS_VARIANTS (asis,nonblocking,sanitize,unguarded),
# NVS_SANITIZE_LINES (all|first), NVS_LATENCY_US (JSON per stage), NVS_BUDGET_S (400), NVS_WORK (/tmp/nvs).
part_nvidia_samples() {
  local samples=${NVS_SAMPLES:-.nvsamples} dest=$L/nvidia-samples f
  mkdir -p "$dest"
  for f in README.md video_super_resolution.py video_frame_generation.py true_hdr.py video_io_utils.py; do
    if [ ! -f "$samples/$f" ]; then
      NOTE="no $samples/$f: carry .nvsamples/"
      echo "$NOTE" | tee "$dest/summary.txt"
      return 77
    fi
  done
  python3 - > "$dest/env.txt" 2>&1 <<'EOF'
import sys
print("python", sys.version.split()[0])
for name in ("torch", "cupy", "av", "numpy", "streamsafe"):
    try:
        m = __import__(name)
        print(name, getattr(m, "__version__", "?"), getattr(m, "__file__", ""))
    except Exception as e:
        print(name, "NOT IMPORTABLE:", type(e).__name__, e)
try:
    import av
    print("av codecs: libx265", "libx265" in av.codecs_available, "libx264", "libx264" in av.codecs_available,
          "hevc_nvenc", "hevc_nvenc" in av.codecs_available)
except Exception as e:
    print("probe failed:", e)
EOF
  cat "$dest/env.txt"
  timeout "$(limit 540)" python3 scripts/nvidia_samples_check.py all --samples "$samples" --out "$dest" --work "${NVS_WORK:-/tmp/nvs}" \
    > "$dest/run.txt" 2>&1
  local status=$?
  grep -E "^\[nvs\]" "$dest/run.txt"
  cat "$dest/summary.txt" 2>/dev/null || tail -30 "$dest/run.txt"
  (cd "$dest" && tar czf logs.tgz logs reports info 2>/dev/null && rm -rf logs reports info)
  NOTE="nvidia_samples_check.py exit $status"
  return "$status"
}

part_race_check() {
  local budget=${GPU_LANE_CHECK_S:-90}
  mkdir -p "$L/race-check"
  BUDGET_S=$budget FRAMES=2700 CONTROL_FRAMES=1350 OUT=$L/race-check timeout "$(limit $((budget + 60)))" \
    python3 scripts/race_check.py > "$L/race_check.txt" 2>&1
  local status=$?
  tail -12 "$L/race_check.txt"
  NOTE="race_check.py exit $status: $(tail -1 "$L/race_check.txt" | cut -c1-60)"
  return "$status"
}

part_multi_gpu() {
  if [ "$(gpu_count)" -lt 2 ]; then
    NOTE="needs 2 GPUs, torch sees $(gpu_count)"
    return 77
  fi
  local rc=0
  STREAMSAFE_MULTI_GPU_SOAK_FRAMES=${STREAMSAFE_MULTI_GPU_SOAK_FRAMES:-3000} \
    pytest_gpu "$L/pytest-multi-gpu.txt" 300 tests/gpu/test_multi_gpu.py || rc=1
  local tests_note=$NOTE
  timeout "$(limit 200)" python3 -m streamsafe.bench.multi_gpu --backend cuda --json "$L/multi-gpu.json" \
    > "$L/multi-gpu.txt" 2> "$L/multi-gpu.err" || rc=1
  cat "$L/multi-gpu.txt"; tail -3 "$L/multi-gpu.err"
  if have_matplotlib && [ -f "$L/multi-gpu.json" ]; then
    python3 docs/make_multi_gpu_figure.py "$L/multi-gpu.json" "$L/multi-gpu.png" > "$L/multi-gpu-figure.txt" 2>&1 || rc=1
  fi
  NOTE="tests: $tests_note; auto scaling $(awk '$1 == "auto" {print $4}' "$L/multi-gpu.txt")"
  return "$rc"
}

part_decoder() {
  if ! python3 -c "import PyNvVideoCodec" > /dev/null 2>&1; then
    NOTE="PyNvVideoCodec does not import (carry its wheel in .whl/)"
    return 77
  fi
  local rc=0 clip=${STREAMSAFE_TEST_CLIP:-}
  if [ -z "$clip" ]; then
    clip=$L/decoder-clip.mp4
    python3 -c "import sys; from streamsafe.testing import make_test_clip; make_test_clip(sys.argv[1], 240, (320, 192))" "$clip" \
      > "$L/decoder-clip.txt" 2>&1 || { NOTE="no clip: set STREAMSAFE_TEST_CLIP or carry PyAV"; return 1; }
  fi
  timeout "$(limit 60)" python3 -m streamsafe doctor > "$L/doctor-decoder.txt" 2>&1 || rc=1
  grep PyNvVideoCodec "$L/doctor-decoder.txt"
  STREAMSAFE_TEST_CLIP=$clip STREAMSAFE_DECODER_FRAMES=${STREAMSAFE_DECODER_FRAMES:-10000} \
    pytest_gpu "$L/pytest-decoder.txt" 420 tests/gpu/test_decoder_gpu.py || rc=1
  local tests_note=$NOTE
  cat "$L/decoder.txt" 2>/dev/null
  local ex=""
  if python3 -c "import av" > /dev/null 2>&1; then
    timeout "$(limit 120)" python3 examples/decode_upscale.py -i "$clip" --verify > "$L/decode_upscale.txt" 2>&1 || rc=1
    # (unguarded it may or may not race on the GPU, which no delay widens here: recorded, not required)
    timeout "$(limit 120)" python3 examples/decode_upscale.py -i "$clip" --verify --unguarded > "$L/decode_upscale-unguarded.txt" 2>&1
    cat "$L/decode_upscale.txt" "$L/decode_upscale-unguarded.txt"
    ex="; example: $(grep '^verify' "$L/decode_upscale.txt" | cut -c1-40)"
  fi
  # the bench's own clip (960x544, made with PyAV) unless STREAMSAFE_BENCH_CLIP names one
  timeout "$(limit 240)" python3 benchmarks/decode_pipeline.py ${STREAMSAFE_BENCH_CLIP:+-i "$STREAMSAFE_BENCH_CLIP"} \
    --json "$L/decode_pipeline.json" > "$L/decode_pipeline.txt" 2>&1 || rc=1
  cat "$L/decode_pipeline.txt"
  NOTE="tests: $tests_note$ex; bench streamsafe $(awk '$1 == "streamsafe" {print $3}' "$L/decode_pipeline.txt")x hand"
  return "$rc"
}

PYAV_PROBE='import sys, av
from av.codec.hwaccel import HWAccel
with av.open(sys.argv[1], hwaccel=HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True)) as c:
    f = next(c.decode(video=0))
print("PyAV", av.__version__, "decodes into", f.format.name, "planes", [tuple(p.__dlpack_device__()) for p in f.planes])
sys.exit(0 if f.format.name == "cuda" else 3)'

part_pyav() {
  if [ -n "${PYAV_WHEEL:-}" ]; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-pyav \
        "$PYAV_WHEEL" > "$L/pip-pyav.txt" 2>&1; then
      export PYTHONPATH=/tmp/site-pyav:$PYTHONPATH
    else
      NOTE="installing PYAV_WHEEL=$PYAV_WHEEL failed (lane/pip-pyav.txt)"
      return 1
    fi
  fi
  if ! python3 -c "import av" > "$L/pyav-import.txt" 2>&1; then
    NOTE="PyAV does not import: set PYAV_WHEEL or carry its wheel in .whl/"
    cat "$L/pyav-import.txt"
    return 77
  fi
  local rc=0 clip=${STREAMSAFE_PYAV_CLIP:-}
  if [ -z "$clip" ]; then
    clip=$L/pyav-clip.mp4
    python3 -c "import sys; from streamsafe.testing import make_test_clip; make_test_clip(sys.argv[1], 240, (320, 192))" \
      "$clip" > "$L/pyav-clip.txt" 2>&1 || { NOTE="no clip: set STREAMSAFE_PYAV_CLIP (PyAV could not make one)"; return 1; }
  fi
  if ! timeout "$(limit 60)" python3 -c "$PYAV_PROBE" "$clip" > "$L/pyav-probe.txt" 2>&1; then
    NOTE="PyAV cannot decode on NVDEC here: $(tail -1 "$L/pyav-probe.txt" | cut -c1-80)"
    cat "$L/pyav-probe.txt"
    return 77
  fi
  cat "$L/pyav-probe.txt"
  STREAMSAFE_PYAV_CLIP=$clip STREAMSAFE_PYAV_FRAMES=${STREAMSAFE_PYAV_FRAMES:-2000} \
    pytest_gpu "$L/pytest-pyav.txt" 420 tests/gpu/test_pyav_gpu.py || rc=1
  local tests_note=$NOTE
  cat "$L/pyav.txt" 2>/dev/null
  timeout "$(limit 120)" python3 examples/pyav_nvdec_upscale.py -i "$clip" --verify --frames 240 \
    > "$L/pyav_nvdec_upscale.txt" 2>&1 || rc=1
  # (unguarded with 3 ms on the conversion's stream: it races as measured; recorded, not required)
  timeout "$(limit 120)" python3 examples/pyav_nvdec_upscale.py -i "$clip" --verify --frames 240 --unguarded \
    --consumer-delay-us 3000 > "$L/pyav_nvdec_upscale-unguarded.txt" 2>&1
  cat "$L/pyav_nvdec_upscale.txt" "$L/pyav_nvdec_upscale-unguarded.txt"
  timeout "$(limit 240)" python3 benchmarks/pyav_nvdec.py -i "$clip" --json "$L/pyav_nvdec.json" > "$L/pyav_nvdec.txt" 2>&1 || rc=1
  cat "$L/pyav_nvdec.txt"
  NOTE="tests: $tests_note; $(grep -m1 '^control' "$L/pyav.txt" 2>/dev/null | cut -c1-60); bench streamsafe $(awk '$1 == "streamsafe" {print $3}' "$L/pyav_nvdec.txt")x sync"
  return "$rc"
}

# -- run the parts, then the summary ----------------------------------------------------------------------

rows=()
failed=0
for p in "${parts[@]}"; do
  echo "=== $p"
  start=$(date +%s)
  NOTE=""
  "part_${p//-/_}"
  status=$?
  case $status in
    0) verdict=ok ;;
    77) verdict=skipped ;;
    *) verdict=FAIL; failed=1 ;;
  esac
  rows+=("$(printf '%-15s %-8s %6ss  %s' "$p" "$verdict" "$(( $(date +%s) - start ))" "$NOTE")")
done

{
  echo "GPU lane: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd, -)"
  printf '%-15s %-8s %7s  %s\n' part result time note
  printf '%s\n' "${rows[@]}"
} > "$OUT/summary.txt"
cp "$OUT/summary.txt" "$L/summary.txt"
tar czf "$OUT/lane.tgz" -C "$OUT" lane && rm -rf "$L"
echo
cat "$OUT/summary.txt"
exit $failed
