#!/usr/bin/env bash
# Issue 9's "Done when", on the lent GPU: NVIDIA's three nvvfx sample programs, unmodified, under
# `streamsafe run --fake-nvvfx`, every command line of their README, frames checked, also with the
# program's current stream set to a non-blocking stream (+ --sanitize, + an unguarded control).
#
# Run with the repository root as cwd and the samples carried (git-ignored, never committed):
#   run(command="bash scripts/gpu_nvidia_samples.sh", carry=[".nvsamples"], timeout_s=600)
# .nvsamples/ holds the samples verbatim (SOURCE.txt says from where) and wheels/ (PyAV for CPython 3.12);
# .whl/ is searched too when present. Results: $OUT/nvidia-samples/summary.txt (+ summary.json,
# lines.txt, env.txt, logs.tgz with every run's log, streamsafe --report JSON and stream info).
# Knobs: NVS_FRAMES (30), NVS_JOBS (8 lanes), NVS_VARIANTS (asis,nonblocking,sanitize,unguarded),
# NVS_SANITIZE_LINES (all|first), NVS_LATENCY_US (JSON per stage), NVS_BUDGET_S (400).
set -uo pipefail
OUT=${OUT:-gpu-out}
DEST="$OUT/nvidia-samples"
SAMPLES=${NVS_SAMPLES:-.nvsamples}
PY=${PYTHON:-python3}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
start=$(date +%s)

for f in README.md video_super_resolution.py video_frame_generation.py true_hdr.py video_io_utils.py; do
  [ -f "$SAMPLES/$f" ] || { echo "missing $SAMPLES/$f: carry .nvsamples (see SOURCE.txt there)" | tee "$DEST/summary.txt"; exit 2; }
done

# PyAV: no package index on the GPU machine; install the carried wheel into a private folder.
PYAV=${NVS_PYAV_DIR:-/tmp/pyav}
links=()
for d in "$SAMPLES/wheels" .whl; do [ -d "$d" ] && links+=(--find-links "$d"); done
$PY -m pip install -q --no-index --no-deps "${links[@]}" --target "$PYAV" av > "$DEST/pip.txt" 2>&1 \
  || { echo "PyAV install failed:"; cat "$DEST/pip.txt"; }
export PYTHONPATH="$PYAV:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  ldd --version 2>&1 | head -1
  $PY - <<'EOF'
import sys
print("python", sys.version.split()[0])
for name in ("torch", "cupy", "av", "numpy", "streamsafe"):
    try:
        m = __import__(name)
        print(name, getattr(m, "__version__", "?"), getattr(m, "__file__", ""))
    except Exception as e:
        print(name, "NOT IMPORTABLE:", type(e).__name__, e)
try:
    import torch
    print("torch.cuda.set_stream:", hasattr(torch.cuda, "set_stream"), "cuda available:", torch.cuda.is_available())
    import av
    print("av codecs: libx265", "libx265" in av.codecs_available, "libx264", "libx264" in av.codecs_available,
          "hevc_nvenc", "hevc_nvenc" in av.codecs_available)
    print("av VideoFrame has color_trc (the samples set it):", hasattr(av.VideoFrame, "color_trc"))
except Exception as e:
    print("probe failed:", e)
EOF
} 2>&1 | tee "$DEST/env.txt"

$PY scripts/nvidia_samples_check.py all --samples "$SAMPLES" --out "$DEST" --work "${NVS_WORK:-/tmp/nvs}" 2>&1 \
  | tee "$DEST/run.txt" | grep -E "^\[nvs\]" 
rc=${PIPESTATUS[0]}
echo
cat "$DEST/summary.txt" 2>/dev/null || echo "no summary (exit $rc): see $DEST/run.txt" 
tail -20 "$DEST/run.txt" | grep -E "Traceback|Error" && tail -30 "$DEST/run.txt"
(cd "$DEST" && tar czf logs.tgz logs reports info 2>/dev/null && rm -rf logs reports info)
echo "gpu_nvidia_samples.sh: exit $rc after $(( $(date +%s) - start ))s"
exit $rc
