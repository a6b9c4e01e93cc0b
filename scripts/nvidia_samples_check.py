#!/usr/bin/env python3
"""NVIDIA's nvvfx sample programs, unmodified, under ``streamsafe run --fake-nvvfx`` (issue 9).

Driven by ``scripts/gpu_lane.sh nvidia-samples`` on the GPU machine; the pieces also run alone:

  all      --samples DIR --out DIR   the whole check: clips, every README line x every variant,
                                     frames verified, summary.txt / summary.json
  clips    DIR                       synthesize the input clips (PyAV)
  lines    README                    print the sample command lines found in the README
  launch   [options] -- ARGV         run one program (the variants' wrapper; see below)
  verify   --line L --cwd D [--output F]   check one output video against the emulation's math
  selftest DIR                       CPU only: encode outputs the way the samples do (NumPy stands in
                                     for the GPU) and check that verify passes them and fails stale frames
  dryrun   --samples DIR             CPU only: every README line's argument parsing, with a stub torch

Variants (each README line runs once per variant; each (variant, sample) pair runs its lines in order
in its own byte-identical copy of the samples, because a sample's lines share its default output path,
and the pairs run side by side):

  asis         python -m streamsafe run --fake-nvvfx --report R <script> <args>   (the program's
               current stream is torch's default: the legacy stream)
  nonblocking  the same, with the program's current stream set to a new non-blocking torch stream
               before the program starts (torch.cuda.set_stream), and the emulated stages delayed
               (latency_us, default conversion 2000 us) to widen race windows
  sanitize     nonblocking + --sanitize
  unguarded    control, not guarded: the emulation installed, the same stream and delays, no
               streamsafe; RGB8 lines are expected to corrupt frames here (the SDK converts the
               output on the legacy stream, which a non-blocking stream does not wait for)

"Frames correct": every frame of the output video is decoded with PyAV and compared with a reference
computed from the decoded input clip with the emulation's own arithmetic
(streamsafe.testing._kernels: bilinear resize, blend, PQ tone map), as PSNR (8-bit RGB, or 10-bit
codes). The clips are smooth and move fast, so codec error stays small (PSNR well above the
threshold) while a stale frame (the previous output, what a race returns) falls far below it; each
run also reports the best PSNR any frame reaches against the *previous* frame's reference, to show
the margin.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = ("video_super_resolution.py", "video_frame_generation.py", "true_hdr.py")
SAMPLE_FILES = (*SCRIPTS, "video_io_utils.py")
DEFAULT_ASSET = Path("assets") / "Drift_RUN_Master_Custom.mp4"
DEFAULT_OUTPUT = {
    "video_super_resolution.py": "output/sample_sr.mp4",
    "video_frame_generation.py": "output/sample_vfg.mp4",
    "true_hdr.py": "output/sample_truehdr.mp4",
}
# Input clips: name -> (bit depth, seed). The README's path/to/... inputs and the default asset.
CLIPS = {
    "default.mp4": (8, 0),
    "input.mp4": (8, 1),
    "sdr_input.mp4": (8, 2),
    "10bit_input.mp4": (10, 3),
}
PLACEHOLDER_INPUTS = {"input.mp4", "sdr_input.mp4", "10bit_input.mp4"}
VARIANTS = ("asis", "nonblocking", "sanitize", "unguarded")
GUARDED = ("asis", "nonblocking", "sanitize")
THRESHOLD_DB = 34.0
DEFAULT_LATENCY = {"transfer": 100.0, "inference": 100.0, "conversion": 2000.0}


# -- clips ---------------------------------------------------------------------------------------


def synth_frame(k: int, w: int, h: int, seed: int) -> np.ndarray:
    """Frame ``k`` of a smooth, fast-moving colour field: (H, W, 3) float64 in [0.15, 0.85]."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    x /= w
    y /= h
    ph = 0.37 * seed
    r = 0.5 + 0.35 * np.sin(2 * np.pi * (1.2 * x + 0.3 * y) + 0.55 * k + ph)
    g = 0.5 + 0.35 * np.sin(2 * np.pi * (0.4 * x - 1.0 * y) - 0.45 * k + 2 * ph)
    b = 0.5 + 0.35 * np.sin(2 * np.pi * (0.8 * x + 0.8 * y) + 0.65 * k + 3 * ph)
    return np.stack([r, g, b], axis=-1)


def make_clip(path: Path, bit_depth: int, seed: int, frames: int, w: int, h: int, fps: int = 30) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as out:
        if bit_depth == 10:
            stream = out.add_stream("libx265", rate=fps)
            stream.pix_fmt = "yuv420p10le"
            stream.options = {"x265-params": "log-level=error:crf=4"}
        else:
            stream = out.add_stream("libx264", rate=fps)
            stream.pix_fmt = "yuv420p"
            stream.options = {"crf": "4"}
        stream.width, stream.height = w, h
        for k in range(frames):
            rgb = synth_frame(k, w, h, seed)
            if bit_depth == 10:
                arr = np.round(rgb * 1023.0).astype(np.uint16) << 6  # rgb48le: 10-bit codes, MSB-aligned
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr), format="rgb48le")
            else:
                frame = av.VideoFrame.from_ndarray(np.round(rgb * 255.0).astype(np.uint8), format="rgb24")
            frame.pts = k
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def make_clips(dest: Path, frames: int, w: int, h: int) -> dict[str, Path]:
    made = {}
    dest = dest / f"{frames}f_{w}x{h}"
    for name, (depth, seed) in CLIPS.items():
        p = dest / name
        if not p.exists():
            make_clip(p, depth, seed, frames, w, h)
        made[name] = p
    return made


# -- README lines ----------------------------------------------------------------------------------


def readme_lines(readme: Path) -> list[str]:
    """The sample command lines of the README, in order: ``python <sample>.py ...`` in bash blocks."""
    lines, fence = [], None
    for raw in readme.read_text(encoding="utf-8").splitlines():
        s = raw.strip()
        if s.startswith("```"):
            fence = None if fence is not None else (s[3:].strip() or "text")
            continue
        if fence != "bash" or not s.startswith("python "):
            continue
        toks = shlex.split(s, comments=True)
        if len(toks) >= 2 and toks[1] in SCRIPTS:
            lines.append(s)
    return lines


def line_argv(line: str) -> tuple[str, list[str]]:
    toks = shlex.split(line, comments=True)
    return toks[1], toks[2:]


# -- what a line asks for (the samples' own options and defaults) ------------------------------------


def parse_line(line: str) -> tuple[str, argparse.Namespace]:
    script, args = line_argv(line)
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-i", "--input", default=str(DEFAULT_ASSET))
    p.add_argument("-o", "--output", default=DEFAULT_OUTPUT[script])
    if script == "video_super_resolution.py":
        p.add_argument("--scale", type=int, default=2)
        p.add_argument("--quality", default="HIGH")
        p.add_argument("--strength", type=float, default=1.0)
    elif script == "video_frame_generation.py":
        p.add_argument("--multiplier", type=int, default=2)
        p.add_argument("--timesteps", type=lambda v: [float(t) for t in v.split(",")], default=None)
        p.add_argument("--target-fps", type=float, default=0.0)
        p.add_argument("--mode", default="MEDIUM")
        p.add_argument("--automatic-shot-change-detection", action=argparse.BooleanOptionalAction, default=True)
    else:
        p.add_argument("--contrast", type=int, default=100)
        p.add_argument("--saturation", type=int, default=100)
        p.add_argument("--middle-gray", type=int, default=50)
        p.add_argument("--luminance", type=int, default=650)
        p.add_argument("--debanding-off", action="store_true")
    return script, p.parse_args(args)


# -- decoding and references ---------------------------------------------------------------------------


def _words(frame: Any) -> np.ndarray:
    """A frame as packed x2bgr10le words (H, W) uint32 (R in bits 0-9), as the samples pack it."""
    packed = frame.reformat(format="x2bgr10le")
    plane = packed.planes[0]
    row = plane.line_size // 4
    words = np.frombuffer(plane, dtype="<u4", count=packed.height * row).reshape(packed.height, row)
    return np.ascontiguousarray(words[:, : packed.width]) | np.uint32(3 << 30)


def _codes(words: np.ndarray) -> np.ndarray:
    return np.stack([(words >> s) & 0x3FF for s in (0, 10, 20)]).astype(np.uint16)


_decode_cache: dict[tuple[str, float, int], tuple[int, list[np.ndarray]]] = {}
_decode_lock = threading.Lock()


def decode_input(path: Path, packed10: bool) -> tuple[int, list[np.ndarray]]:
    """(bit depth, frames) as the sample feeds the effect: float32 (3, H, W) / 255, or packed words."""
    import av

    key = (str(path.resolve()), path.stat().st_mtime, int(packed10))
    with _decode_lock:
        if key in _decode_cache:
            return _decode_cache[key]
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        fmt = s.codec_context.pix_fmt or ""
        depth = 10 if ("10" in fmt.lower() or fmt.lower().startswith("p010")) else 8
        frames = []
        for f in c.decode(s):
            if depth == 10 and packed10:
                frames.append(_words(f))
            else:
                frames.append(f.to_ndarray(format="rgb24").transpose(2, 0, 1).astype(np.float32) / np.float32(255.0))
    with _decode_lock:
        _decode_cache[key] = (depth, frames)
    return depth, frames


def decode_output(path: Path, depth: int) -> list[np.ndarray]:
    """Decoded output frames: uint8 (3, H, W) RGB, or uint16 (3, H, W) 10-bit codes."""
    import av

    out = []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            out.append(_codes(_words(f)) if depth == 10 else f.to_ndarray(format="rgb24").transpose(2, 0, 1).copy())
    return out


def references(script: str, a: argparse.Namespace, cwd: Path) -> tuple[int, list[np.ndarray]]:
    """(bit depth of the output, expected frames) from the emulation's arithmetic."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from streamsafe.testing import _kernels as K

    inp = Path(a.input) if Path(a.input).is_absolute() else cwd / a.input
    u8 = lambda rgb: K.to_rgb8(np, rgb)  # noqa: E731  (the SDK's internal 8-bit result)
    if script == "true_hdr.py":
        _, frames = decode_input(inp, packed10=False)
        kw = dict(contrast=a.contrast, saturation=a.saturation, middle_gray=a.middle_gray, luminance=a.luminance)
        return 10, [_codes(K.tone_map_hdr(np, x, **kw)) for x in frames]
    depth, frames = decode_input(inp, packed10=True)
    if script == "video_super_resolution.py":
        refs = []
        for x in frames:
            if depth == 10:
                src = K.unpack_rgb10a2(np, x)
                refs.append(_codes(K.pack_rgb10a2(np, K.resize_bilinear(np, src, src.shape[1] * a.scale, src.shape[2] * a.scale))))
            else:
                refs.append(u8(K.resize_bilinear(np, x, x.shape[1] * a.scale, x.shape[2] * a.scale)))
        return depth, refs
    # frame generation: the first frame, then per pair the generated frames and the current frame
    ts = a.timesteps if a.timesteps else [i / a.multiplier for i in range(1, a.multiplier)]
    detect = a.automatic_shot_change_detection
    as_ref = (lambda w: _codes(w)) if depth == 10 else (lambda x: u8(x))
    refs = [as_ref(frames[0])]
    for prev, cur in zip(frames, frames[1:]):
        for t in ts:
            if depth == 10:
                mixed = K.blend(np, K.unpack_rgb10a2(np, prev), K.unpack_rgb10a2(np, cur), t, detect)
                refs.append(_codes(K.pack_rgb10a2(np, mixed)))
            else:
                refs.append(u8(K.blend(np, prev, cur, t, detect)))
        refs.append(as_ref(cur))
    return depth, refs


def psnr(a: np.ndarray, b: np.ndarray, peak: float) -> float:
    if a.shape != b.shape:
        return 0.0
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else float(10 * np.log10(peak * peak / mse))


def verify(line: str, cwd: Path, output: Path | None = None, threshold: float = THRESHOLD_DB) -> dict[str, Any]:
    script, a = parse_line(line)
    out = output if output is not None else (Path(a.output) if Path(a.output).is_absolute() else cwd / a.output)
    res: dict[str, Any] = {"output": str(out), "expected": None, "frames": 0, "bad": None, "min_psnr": None,
                           "mean_psnr": None, "stale_psnr_max": None, "error": None}
    try:
        depth, refs = references(script, a, cwd)
        res["expected"] = len(refs)
        if not out.exists():
            res["error"] = "no output file"
            return res
        got = decode_output(out, depth)
        res["frames"] = len(got)
        peak = 1023.0 if depth == 10 else 255.0
        ps = [psnr(g, r, peak) for g, r in zip(got, refs)]
        stale = [psnr(g, refs[i - 1], peak) for i, g in enumerate(got[: len(refs)]) if i > 0]
        bad = [i for i, p in enumerate(ps) if p < threshold]
        res.update(
            bad=len(bad) + abs(len(refs) - len(got)),
            bad_frames=bad[:20],
            min_psnr=round(min(ps), 2) if ps else None,
            mean_psnr=round(float(np.mean(ps)), 2) if ps else None,
            stale_psnr_max=round(max(stale), 2) if stale else None,
            depth=depth,
        )
    except Exception as e:  # a broken output file is a result, not a crash of the check
        res["error"] = f"{type(e).__name__}: {e}"
    return res


# -- launching one program -----------------------------------------------------------------------


def _apply_latency(latency: dict[str, float]) -> None:
    """Every emulated effect created from now on gets ``latency_us`` (unless the program passes one)."""
    from streamsafe.testing import effects as E

    for cls in (E.VideoSuperRes, E.VideoFrameGeneration, E.TrueHDR):
        orig = cls.__init__
        if getattr(orig, "__nvs_latency__", False):
            continue

        def init(self: Any, *args: Any, __orig: Any = orig, **kwargs: Any) -> None:
            kwargs.setdefault("latency_us", dict(latency))
            __orig(self, *args, **kwargs)

        init.__nvs_latency__ = True  # type: ignore[attr-defined]
        init.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.__init__ = init  # type: ignore[method-assign]


def _stream_flags(ptr: int) -> dict[str, Any]:
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        flags = ctypes.c_uint(0)
        rc = lib.cuStreamGetFlags(ctypes.c_void_p(ptr), ctypes.byref(flags))
        return {"cuStreamGetFlags_rc": rc, "flags": flags.value, "non_blocking": bool(flags.value & 1) if rc == 0 else None}
    except OSError as e:
        return {"error": str(e)}


def launch(ns: argparse.Namespace) -> int:
    argv = list(ns.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    sys.path.insert(0, str(REPO))
    info: dict[str, Any] = {"argv": argv, "guarded": not ns.unguarded, "nonblocking": ns.nonblocking}
    latency = json.loads(ns.latency) if ns.latency else None
    if latency:
        _apply_latency(latency)
        info["latency_us"] = latency
    if ns.nonblocking:
        import torch

        stream = torch.cuda.Stream()  # torch's pool streams are created cudaStreamNonBlocking
        torch.cuda.set_stream(stream)
        ptr = int(stream.cuda_stream)
        info["stream_ptr"] = ptr
        info["current_stream_ptr"] = int(torch.cuda.current_stream().cuda_stream)
        info.update(_stream_flags(ptr))
    if ns.info:
        Path(ns.info).write_text(json.dumps(info, indent=2) + "\n")
    if not ns.unguarded:
        from streamsafe.tools.cli import main

        return int(main(argv, exiting=True))  # (this process ends with it: as the streamsafe command does)
    # control: the emulation, no guard
    import runpy

    from streamsafe.testing.fake_nvvfx import install_fake_nvvfx

    install_fake_nvvfx(force=True)
    script, args = argv[0], argv[1:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


# -- the whole check -------------------------------------------------------------------------------


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def prepare_copy(samples: Path, dest: Path, clips: dict[str, Path]) -> None:
    """A byte-identical copy of the samples, with the default asset and the README's path/to/ inputs."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in (*SAMPLE_FILES, "README.md"):
        shutil.copy2(samples / name, dest / name)
        assert _sha(samples / name) == _sha(dest / name)
    (dest / "assets").mkdir()
    os.symlink(clips["default.mp4"], dest / DEFAULT_ASSET)
    (dest / "path" / "to").mkdir(parents=True)
    for name in PLACEHOLDER_INPUTS:
        os.symlink(clips[name], dest / "path" / "to" / name)


def command_for(variant: str, line: str, report: Path, info: Path, latency: dict[str, float]) -> list[str]:
    script, args = line_argv(line)
    py = sys.executable
    if variant == "asis":  # exactly what a user types
        return [py, "-m", "streamsafe", "run", "--fake-nvvfx", "--report", str(report), script, *args]
    wrap = [py, str(Path(__file__).resolve()), "launch", "--nonblocking", "--latency", json.dumps(latency),
            "--info", str(info)]
    if variant == "unguarded":
        return [*wrap, "--unguarded", "--", script, *args]
    ss = ["run", "--fake-nvvfx", "--report", str(report)] + (["--sanitize"] if variant == "sanitize" else [])
    return [*wrap, "--", *ss, script, *args]


def _report_summary(path: Path) -> dict[str, Any]:
    try:
        r = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    effects = r.get("effects", [])
    return {
        "effects": len(effects),
        "runs": sum(e.get("runs", 0) for e in effects),
        "fences": sum(e.get("fences", 0) for e in effects),
        "host_waits": sum(e.get("host_waits", 0) for e in effects),
        "strategy": ",".join(sorted({e.get("strategy", "-") for e in effects})) or "-",
        "races": len(r.get("races", [])),
    }


def run_all(ns: argparse.Namespace) -> int:
    t0 = time.monotonic()
    samples = Path(ns.samples).resolve()
    out = Path(ns.out).resolve()
    work = Path(ns.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    latency = json.loads(ns.latency) if ns.latency else dict(DEFAULT_LATENCY)
    lines = readme_lines(samples / "README.md")
    (out / "lines.txt").write_text("".join(f"{i:02d}  {ln}\n" for i, ln in enumerate(lines, 1)))
    print(f"[nvs] {len(lines)} sample command lines in the README", flush=True)
    clips = make_clips(work / "clips", ns.frames, ns.width, ns.height)
    print(f"[nvs] clips ready ({ns.frames} frames, {ns.width}x{ns.height}) in {time.monotonic() - t0:.1f}s", flush=True)
    variants = [v for v in ns.variants.split(",") if v]
    sanitize_lines = set(range(1, len(lines) + 1))
    if ns.sanitize_lines == "first":
        firsts: dict[str, int] = {}
        for i, ln in enumerate(lines, 1):
            firsts.setdefault(line_argv(ln)[0], i)
        sanitize_lines = set(firsts.values())
    deadline = t0 + ns.budget_s
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")

    def lane(variant: str, script_name: str) -> None:
        cwd = work / f"{variant}-{Path(script_name).stem}"
        prepare_copy(samples, cwd, clips)
        for d in ("logs", "reports", "info"):
            (out / d / variant).mkdir(parents=True, exist_ok=True)
        for i, line in enumerate(lines, 1):
            if line_argv(line)[0] != script_name:
                continue
            row: dict[str, Any] = {"n": i, "line": line, "variant": variant}
            if variant == "sanitize" and i not in sanitize_lines:
                continue
            if time.monotonic() > deadline:
                row.update(status="skipped (time budget)")
                with lock:
                    results.append(row)
                continue
            report = out / "reports" / variant / f"{i:02d}.json"
            info = out / "info" / variant / f"{i:02d}.json"
            log = out / "logs" / variant / f"{i:02d}.log"
            script, a = parse_line(line)
            target = Path(a.output) if Path(a.output).is_absolute() else cwd / a.output
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            cmd = command_for(variant, line, report, info, latency)
            t = time.monotonic()
            with open(log, "w") as f:
                f.write("$ cd " + str(cwd) + " && " + shlex.join(cmd) + "\n")
                f.flush()
                try:
                    rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=ns.timeout_s).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            row.update(exit=rc, wall_s=round(time.monotonic() - t, 1), log=str(log.relative_to(out)),
                       report=str(report.relative_to(out)) if report.exists() else "-")
            row.update(verify(line, cwd, target, ns.threshold))
            row.update(_report_summary(report))
            if info.exists():
                with contextlib.suppress(ValueError):
                    row["stream_non_blocking"] = json.loads(info.read_text()).get("non_blocking")
            with lock:
                results.append(row)
            print(f"[nvs] {variant:11s} {i:02d} exit={rc} frames={row['frames']}/{row['expected']} bad={row['bad']} "
                  f"minPSNR={row['min_psnr']} ({row['wall_s']}s) {line}", flush=True)

    from concurrent.futures import ThreadPoolExecutor

    # one lane per (variant, sample): the lines of a sample share its default output path, so they run in
    # order in their own copy; lanes run side by side (ns.jobs at a time)
    with ThreadPoolExecutor(max_workers=ns.jobs) as pool:
        futures = [pool.submit(lane, v, sc) for sc in SCRIPTS for v in variants]
        for fu in futures:
            fu.result()
    results.sort(key=lambda r: (r["n"], VARIANTS.index(r["variant"])))
    ok = write_summary(out, lines, results, variants, time.monotonic() - t0, latency, ns)
    return 0 if ok else 1


def _passed(r: dict[str, Any]) -> bool:
    return (r.get("exit") == 0 and r.get("error") is None and r.get("bad") == 0
            and r.get("frames") == r.get("expected") and not r.get("races"))


def write_summary(out: Path, lines: list[str], results: list[dict[str, Any]], variants: list[str], wall: float,
                  latency: dict[str, float], ns: argparse.Namespace) -> bool:
    head = (f"{'#':>2} {'variant':11s} {'exit':>4} {'frames':>9} {'bad':>4} {'minPSNR':>7} {'stalePSNR':>9} "
            f"{'fences':>6} {'races':>5} {'nb':>3}  report / note")
    rows = [head, "-" * len(head)]
    last = None
    for r in results:
        if r["n"] != last:
            rows.append(f"{r['n']:02d} {r['line']}")
            last = r["n"]
        if r.get("status"):
            rows.append(f"   {r['variant']:11s} {r['status']}")
            continue
        nb = {True: "yes", False: "NO", None: "-"}.get(r.get("stream_non_blocking"), "?")
        verdict = "" if r["variant"] == "unguarded" else ("PASS" if _passed(r) else "FAIL")
        note = r.get("error") or ""
        rows.append(
            f"   {r['variant']:11s} {str(r.get('exit')):>4} {str(r.get('frames')) + '/' + str(r.get('expected')):>9} "
            f"{str(r.get('bad')):>4} {str(r.get('min_psnr')):>7} {str(r.get('stale_psnr_max')):>9} "
            f"{str(r.get('fences', '-')):>6} {str(r.get('races', '-')):>5} {nb:>3}  {verdict} {r.get('report', '-')} {note}"
        )
    guarded = [r for r in results if r["variant"] in GUARDED and not r.get("status")]
    failed = [r for r in guarded if not _passed(r)]
    skipped = [r for r in results if r.get("status")]
    control = [r for r in results if r["variant"] == "unguarded" and not r.get("status")]
    corrupt = [r for r in control if (r.get("bad") or 0) > 0 or r.get("exit") != 0]
    rgb8_lines = [r for r in control if "true_hdr" not in r["line"] and "10bit" not in r["line"]]
    rgb8_corrupt = [r for r in rgb8_lines if (r.get("bad") or 0) > 0]
    verdict = [
        "",
        f"README command lines: {len(lines)}; variants: {', '.join(variants)}; wall {wall:.0f}s; "
        f"frame threshold {ns.threshold} dB; emulated latency (nonblocking/sanitize/unguarded) {latency} us",
        f"guarded runs: {len(guarded) - len(failed)} of {len(guarded)} passed (exit 0, every frame >= threshold, "
        f"frame count as expected, no race)" + (f"; {len(skipped)} skipped for time" if skipped else ""),
        f"control (unguarded, non-blocking stream, delayed stages): {len(corrupt)} of {len(control)} runs corrupt; "
        f"RGB8 lines corrupt: {len(rgb8_corrupt)} of {len(rgb8_lines)} (expected: all; RGB10A2 lines have no "
        "conversion on the legacy stream, so they may stay clean unguarded)",
        "stalePSNR: best PSNR of any frame against the previous frame's reference (what a race returns); "
        "it must stay below the threshold for the check to discriminate; nb: the program's current stream was "
        "non-blocking (cuStreamGetFlags); log/report paths are inside logs.tgz",
        "VERDICT: " + ("PASS" if guarded and not failed and not skipped else "FAIL"),
    ]
    text = "\n".join(rows + verdict) + "\n"
    (out / "summary.txt").write_text(text)
    (out / "summary.json").write_text(json.dumps({"lines": lines, "results": results, "latency_us": latency,
                                                  "threshold_db": ns.threshold, "wall_s": round(wall, 1)}, indent=2) + "\n")
    print(text, flush=True)
    return bool(guarded) and not failed and not skipped


# -- CPU-only checks ---------------------------------------------------------------------------------


def _stub_torch(where: Path) -> None:
    """A module named torch that lets the samples import and parse arguments (no GPU, no tensors)."""
    pkg = where / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        "class Tensor: pass\nuint32 = 'uint32'\n"
        "class _Cuda:\n    def is_available(self): return False\n"
        "    def current_stream(self): raise RuntimeError('stub torch: no CUDA here')\n"
        "cuda = _Cuda()\n"
    )


def dryrun(ns: argparse.Namespace) -> int:
    """Each README line through ``python -m streamsafe run --fake-nvvfx`` up to the first CUDA call."""
    samples = Path(ns.samples).resolve()
    work = Path(ns.work).resolve()
    stub = work / "stubtorch"
    _stub_torch(stub)
    clips = make_clips(work / "clips", 4, ns.width, ns.height)
    cwd = work / "dry"
    prepare_copy(samples, cwd, clips)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), str(REPO), os.environ.get("PYTHONPATH", "")]))
    bad = 0
    for i, line in enumerate(readme_lines(samples / "README.md"), 1):
        script, args = line_argv(line)
        cmd = [sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", script, *args]
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        text = p.stdout + p.stderr
        parsed = "usage:" not in text and "invalid choice" not in text
        reached = "stub torch: no CUDA here" in text or "CUDA is not available" in text
        bad += not (parsed and reached)
        print(f"{i:02d} exit={p.returncode} args-accepted={parsed} reached-CUDA={reached}  {line}")
        if not (parsed and reached):
            print("   " + "\n   ".join(text.strip().splitlines()[-6:]))
    for script in SCRIPTS:
        p = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", script, "--help"], cwd=cwd,
                           env=env, capture_output=True, text=True, timeout=120)
        ok = p.returncode == 0 and "usage:" in p.stdout
        bad += not ok
        print(f"--help {script}: exit={p.returncode} {'ok' if ok else p.stderr[-400:]}")
    return 1 if bad else 0


def _encode_like_sample(path: Path, frames: list[np.ndarray], depth: int, fps: float, src_ctx: Any, hdr: bool,
                        x265_quiet: bool) -> str:
    """Write ``frames`` (uint8 (3,H,W) RGB or packed words) the way the samples' encode loops do."""
    import av

    hdr10 = {"color_range": 1, "colorspace": 9, "color_trc": 16, "color_primaries": 9}

    def copy_md(src: Any, dst: Any) -> None:  # video_io_utils.copy_color_metadata
        for field in ("color_range", "colorspace", "color_trc", "color_primaries"):
            v = getattr(src, field, None)
            if v is not None:
                setattr(dst, field, v)

    def apply_hdr(dst: Any) -> None:
        for k, v in hdr10.items():
            setattr(dst, k, v)

    h, w = frames[0].shape[-2:]
    cands = (("hevc_nvenc", "p010le"), ("libx265", "yuv420p10le")) if depth == 10 else (("hevc_nvenc", "yuv420p"), ("libx265", "yuv420p"))
    for name, pix in cands:
        c = av.open(str(path), mode="w")
        try:
            s = c.add_stream(name, rate=Fraction(fps).limit_denominator(10000))
            s.width, s.height, s.pix_fmt, s.bit_rate = w, h, pix, 16_000_000
            apply_hdr(s.codec_context) if hdr else copy_md(src_ctx, s.codec_context)
            if x265_quiet and name == "libx265":
                s.options = {"x265-params": "log-level=error"}
            s.codec_context.open()
        except Exception:
            c.close()
            continue
        break
    else:
        raise RuntimeError("no encoder")
    for fr in frames:
        if depth == 10:
            f = av.VideoFrame(width=w, height=h, format="x2bgr10le")
            row = f.planes[0].line_size // 4
            st = np.zeros((h, row), dtype="<u4")
            st[:, :w] = fr | np.uint32(3 << 30)
            f.planes[0].update(st.tobytes())
        else:
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(fr.transpose(1, 2, 0)), format="rgb24")
        apply_hdr(f) if hdr else copy_md(src_ctx, f)
        for pkt in s.encode(f):
            c.mux(pkt)
    for pkt in s.encode(None):
        c.mux(pkt)
    c.close()
    return name


def selftest(ns: argparse.Namespace) -> int:
    """CPU: for each README line, make the output the sample would write (emulation's math in NumPy, the
    samples' encode loop), once right and once with every frame replaced by the previous output (a race),
    and check that verify passes the first and fails the second."""
    import av

    samples = Path(ns.samples).resolve()
    work = Path(ns.work).resolve()
    clips = make_clips(work / "clips", ns.frames, ns.width, ns.height)
    cwd = work / "self"
    prepare_copy(samples, cwd, clips)
    bad = 0
    for i, line in enumerate(readme_lines(samples / "README.md"), 1):
        script, a = parse_line(line)
        depth, refs = references(script, a, cwd)
        inp = cwd / a.input
        with av.open(str(inp)) as c:
            ctx = c.streams.video[0].codec_context
            fps = float(c.streams.video[0].average_rate or 30)
            # frames as the sample hands them to the encoder
            if depth == 10:
                frames = [(r[0].astype(np.uint32) | (r[1].astype(np.uint32) << 10) | (r[2].astype(np.uint32) << 20)) for r in refs]
            else:
                frames = list(refs)
            if script == "video_frame_generation.py":
                fps = a.target_fps or fps * (len(a.timesteps) + 1 if a.timesteps else a.multiplier)
            good, stale = work / f"self_{i:02d}_good.mp4", work / f"self_{i:02d}_stale.mp4"
            codec = _encode_like_sample(good, frames, depth, fps, ctx, script == "true_hdr.py", script == "video_super_resolution.py")
            _encode_like_sample(stale, [frames[0], *frames[:-1]], depth, fps, ctx, script == "true_hdr.py", False)
        g = verify(line, cwd, good, ns.threshold)
        s = verify(line, cwd, stale, ns.threshold)
        ok = g["bad"] == 0 and g["frames"] == g["expected"] and s["bad"] and s["bad"] >= len(refs) - 2
        bad += not ok
        print(f"{i:02d} {'ok ' if ok else 'BAD'} {codec:8s} depth={depth} frames={g['frames']}/{g['expected']} "
              f"good: bad={g['bad']} minPSNR={g['min_psnr']} stalePSNRmax={g['stale_psnr_max']} | "
              f"stale output: bad={s['bad']} minPSNR={s['min_psnr']} meanPSNR={s['mean_psnr']}  {line}"
              + (f"  ERR {g['error'] or s['error']}" if g["error"] or s["error"] else ""))
    return 1 if bad else 0


# -- command line ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--frames", type=int, default=int(os.environ.get("NVS_FRAMES", 30)))
        q.add_argument("--width", type=int, default=320)
        q.add_argument("--height", type=int, default=180)
        q.add_argument("--threshold", type=float, default=THRESHOLD_DB)
        q.add_argument("--work", default=os.environ.get("NVS_WORK", "/tmp/nvs"))

    q = sub.add_parser("all")
    q.add_argument("--samples", default=".nvsamples")
    q.add_argument("--out", required=True)
    q.add_argument("--variants", default=os.environ.get("NVS_VARIANTS", ",".join(VARIANTS)))
    q.add_argument("--sanitize-lines", choices=("all", "first"), default=os.environ.get("NVS_SANITIZE_LINES", "all"))
    q.add_argument("--latency", default=os.environ.get("NVS_LATENCY_US"), help='JSON, e.g. {"conversion": 2000}')
    q.add_argument("--timeout-s", type=float, default=120)
    q.add_argument("--budget-s", type=float, default=float(os.environ.get("NVS_BUDGET_S", 400)),
                   help="launch no new run after this many seconds (the rest are reported as skipped)")
    q.add_argument("--jobs", type=int, default=int(os.environ.get("NVS_JOBS", 8)), help="lanes side by side")
    common(q)
    q = sub.add_parser("clips")
    q.add_argument("dest")
    common(q)
    q = sub.add_parser("lines")
    q.add_argument("readme")
    q = sub.add_parser("launch")
    q.add_argument("--nonblocking", action="store_true")
    q.add_argument("--unguarded", action="store_true")
    q.add_argument("--latency")
    q.add_argument("--info")
    q.add_argument("argv", nargs=argparse.REMAINDER)
    q = sub.add_parser("verify")
    q.add_argument("--line", required=True)
    q.add_argument("--cwd", default=".")
    q.add_argument("--output")
    q.add_argument("--threshold", type=float, default=THRESHOLD_DB)
    for name in ("selftest", "dryrun"):
        q = sub.add_parser(name)
        q.add_argument("--samples", default=str(REPO / ".nvsamples"))
        common(q)
    ns = p.parse_args(argv)
    if ns.cmd == "all":
        return run_all(ns)
    if ns.cmd == "clips":
        for name, path in make_clips(Path(ns.dest), ns.frames, ns.width, ns.height).items():
            print(name, path)
        return 0
    if ns.cmd == "lines":
        print("\n".join(readme_lines(Path(ns.readme))))
        return 0
    if ns.cmd == "launch":
        return launch(ns)
    if ns.cmd == "verify":
        print(json.dumps(verify(ns.line, Path(ns.cwd), Path(ns.output) if ns.output else None, ns.threshold), indent=2))
        return 0
    return selftest(ns) if ns.cmd == "selftest" else dryrun(ns)


if __name__ == "__main__":
    sys.exit(main())
