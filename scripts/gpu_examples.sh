#!/usr/bin/env bash
# GPU lane for the example programs (examples/*.py), run on the lent GPU with the repository root as cwd:
#   bash scripts/gpu_examples.sh
# Each program runs on streamsafe's emulated nvvfx with the program's current stream set to a
# non-blocking stream (--side-stream) and the emulated stages delayed (--emulation-latency-us):
#   unguarded                     (fake nvvfx installed, program run as is)  -> expect corrupt frames > 0
#   streamsafe run --fake-nvvfx                                              -> expect 0 corrupt, exit 0
#   streamsafe run --fake-nvvfx --sanitize                                   -> expect 0 corrupt, exit 0
# plus controls that must be clean unguarded (the default stream; TrueHDR on one stream).
# PyAV comes from the wheel carried in .whl/ (no package index there), installed into a temp dir.
# Logs, reports and $OUT/examples/summary.txt go to $OUT (./gpu-out when OUT is unset).
# Env: EXAMPLES_FRAMES (60), EXAMPLES_LATENCY_US (300; TrueHDR uses EXAMPLES_HDR_LATENCY_US, 2000),
# EXAMPLES_CASES (an extended regex over case names, default all). Exit status 0 when every expectation holds.
# $OUT/examples holds summary.txt and logs.tgz (each run's output, --report JSON and the encoded videos).
set -uo pipefail
OUT=${OUT:-gpu-out}
DIR="$OUT/examples"
mkdir -p "$DIR"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
FRAMES=${EXAMPLES_FRAMES:-60}
LAT=${EXAMPLES_LATENCY_US:-300}
# TrueHDR's inference is ~20 small kernels whose launches take the host about as long as 300 us: the GPU
# keeps up and the race hides. A longer delay before inference lets run() return while it is still pending.
HDR_LAT=${EXAMPLES_HDR_LATENCY_US:-2000}
CASES=${EXAMPLES_CASES:-.}
LOGS="$DIR/logs"
mkdir -p "$LOGS"
SUMMARY="$DIR/summary.txt"

if ! python3 -c "import av" 2>/dev/null; then
  AVDIR=$(mktemp -d)
  if ! python3 -m pip install --quiet --no-index --find-links .whl --find-links .nvsamples/wheels --target "$AVDIR" av > "$LOGS/pip.txt" 2>&1; then
    echo "cannot install PyAV from .whl/ (see $LOGS/pip.txt)" | tee "$SUMMARY"
    exit 2
  fi
  export PYTHONPATH=$PYTHONPATH:$AVDIR
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$LOGS/gpu.txt" 2>&1
python3 -c "import av, torch, cupy; print('av', av.__version__, 'torch', torch.__version__, 'cupy', cupy.__version__)" \
  >> "$LOGS/gpu.txt" 2>&1

HAVE_RUN=1
python3 -m streamsafe run --help > /dev/null 2>&1 || HAVE_RUN=0

# The program as a user runs it, unguarded, after `import nvvfx` is pointed at the emulation.
UNGUARDED='import os, runpy, sys
import streamsafe.testing as t
t.install_fake_nvvfx()
path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
runpy.run_path(path, run_name="__main__")'

{
  echo "example programs on the GPU: $FRAMES frames, emulation latency ${LAT} us (TrueHDR ${HDR_LAT} us)"
  cat "$LOGS/gpu.txt"
  printf '%-22s %-10s %4s %10s  %-14s %s\n' case mode rc corrupt expected verdict
} > "$SUMMARY"
failures=0

# one NAME MODE EXPECT PROGRAM ARGS...   MODE: unguarded | guarded | sanitize;  EXPECT: racy | clean
one() {
  local name=$1 mode=$2 expect=$3 program=$4
  shift 4
  grep -Eq "$CASES" <<< "$name" || return 0
  local log="$LOGS/$name-$mode.txt" rc corrupt verdict
  case $mode in
    unguarded) python3 -c "$UNGUARDED" "examples/$program" "$@" > "$log" 2>&1 ;;
    guarded) python3 -m streamsafe run --fake-nvvfx --report "$LOGS/$name-$mode.json" "examples/$program" "$@" > "$log" 2>&1 ;;
    sanitize) python3 -m streamsafe run --fake-nvvfx --sanitize --report "$LOGS/$name-$mode.json" \
                "examples/$program" "$@" > "$log" 2>&1 ;;
  esac
  rc=$?
  corrupt=$(sed -n 's/^corrupt frames: \([0-9]* of [0-9]*\).*/\1/p' "$log" | tail -1)
  local k=${corrupt%% of*}
  if [ -z "$corrupt" ]; then
    verdict=FAIL; corrupt="-"            # the program did not get to its verdict
  elif [ "$expect" = racy ]; then
    if [ "$k" -gt 0 ] && [ "$rc" -eq 1 ]; then verdict=ok; else verdict=FAIL; fi
  else
    if [ "$k" -eq 0 ] && [ "$rc" -eq 0 ]; then verdict=ok; else verdict=FAIL; fi
  fi
  [ "$verdict" = ok ] || failures=$((failures + 1))
  printf '%-22s %-10s %4s %10s  %-14s %s\n' "$name" "$mode" "$rc" "${corrupt/ of /\/}" "$expect" "$verdict" | tee -a "$SUMMARY"
  [ "$verdict" = ok ] || tail -5 "$log" | sed 's/^/    /'
}

# case NAME PROGRAM ARGS...: unguarded (racy), guarded and sanitize (clean)
racy_case() {
  local name=$1 program=$2
  shift 2
  one "$name" unguarded racy "$program" "$@"
  grep -Eq "$CASES" <<< "$name" || return 0
  if [ "$HAVE_RUN" = 1 ]; then
    one "$name" guarded clean "$program" "$@"
    one "$name" sanitize clean "$program" "$@"
  else
    printf '%-22s %-10s %s\n' "$name" "guarded" "SKIPPED: python3 -m streamsafe run is not available" | tee -a "$SUMMARY"
  fi
}

COMMON=(--side-stream --emulation-latency-us "$LAT" --verify --frames "$FRAMES")
HDR=(--side-stream --emulation-latency-us "$HDR_LAT" --verify --frames "$FRAMES")
racy_case super_res video_super_resolution.py "${COMMON[@]}" -o "$LOGS/super_res.mp4"
racy_case frame_gen video_frame_generation.py "${COMMON[@]}" --multiplier 2
racy_case frame_gen_timestep video_frame_generation.py "${COMMON[@]}" --timestep 0.5
# TrueHDR has no legacy-stream conversion: it races only when a second stream consumes the output
# while the host does not wait for the SDK (the raw capsule ignores the consumer's DLPack stream).
racy_case true_hdr_copy_stream true_hdr.py "${HDR[@]}" --non-blocking --copy-stream -o "$LOGS/true_hdr.mp4"

# Controls: correct without streamsafe, so --verify must report 0 (no false alarms).
one super_res_default unguarded clean video_super_resolution.py --emulation-latency-us "$LAT" --verify --frames "$FRAMES"
one true_hdr_one_stream unguarded clean true_hdr.py "${HDR[@]}" --non-blocking
# A real file in and out (PyAV decoding as well as encoding), guarded, on a side stream.
if grep -Eq "$CASES" <<< from_file; then
  python3 -c "import sys; sys.path.insert(0, 'examples'); import _video_io as v
v.write_clip(sys.argv[1], v.synthesize_frames(int(sys.argv[2]), 480, 270))" "$LOGS/input.mp4" "$FRAMES"
fi
if [ "$HAVE_RUN" = 1 ]; then
  one frame_gen_from_file guarded clean video_frame_generation.py -i "$LOGS/input.mp4" -o "$LOGS/frame_gen.mp4" \
    --multiplier 4 --side-stream --emulation-latency-us "$LAT" --verify
fi

echo "failures: $failures" | tee -a "$SUMMARY"
tar czf "$DIR/logs.tgz" -C "$DIR" logs && rm -rf "$LOGS"
[ "$failures" -eq 0 ]
