"""A directory of clips -> Ray Data -> decode, VideoSuperRes, encode (PyAV) per clip; one guarded pipeline per worker.

    python examples/ray_upscale.py                                  # 4 short test clips, 2 workers, on whatever is here
    python examples/ray_upscale.py -i clips/ -o out/ --workers 4    # your clips (made there as test clips if it has none)
    python examples/ray_upscale.py --no-ray                         # the same pipeline in this process, clip after clip
    python examples/ray_upscale.py --address auto                   # on a running cluster (`ray start --head` ...)
    python examples/ray_upscale.py --verify                         # every frame against a serial reference; exit 1 if one differs

Each Ray worker makes one ``streamsafe.integrations.ray.UpscalePipeline`` (its streams, VideoSuperRes and its
guard, on the GPU Ray assigned it; the decoder comes with its first clip) and runs it for each clip it is
given: NVIDIA's decoder -> conversion -> VideoSuperRes -> copy out, fenced by streamsafe, then PyAV encodes
the clip in the worker, into ``OUT/<clip>.mp4`` (written as ``.part`` and renamed when complete, so a worker
that dies mid-clip leaves no half clip: Ray runs the clip again on a new worker). Only a small row per clip
comes back to this process (the frames too with ``--verify``). With a GPU: torch with CUDA, NVIDIA's
decoder (``pip install 'streamsafe[pynvvideocodec]'``) and nvvfx (else streamsafe's emulated effect on
CUDA). Without one: both emulations on a CUDA ordering model in each worker. Needs ``pip install
'streamsafe[ray,video]'`` (``--no-ray``: only the ``video`` extra).

Measuring fps: ``--no-encode`` drops the frames after the copy out (the encoder on the CPU is often the
limit), and the report gives the pipelines' fps between the first clip's start and the last clip's end
(without Ray's and the workers' start-up) as well as the wall time. ``--workers 1``, ``--workers 2
--gpus-per-worker 0.5`` (two workers sharing one GPU) and ``--no-ray`` on the same ``-i`` compare them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections import defaultdict
from fractions import Fraction
from typing import Any

import numpy as np

from _video_io import frame_size, positive_count

PROGRAM = "ray_upscale.py"
EXIT_UNAVAILABLE = 2
CLIP_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi", ".webm", ".h264", ".hevc", ".265", ".264")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("-i", "--input", help="a directory of clips (test clips are made there if it has none; "
                        "default: a temporary one)")
    parser.add_argument("-o", "--output", help="where the upscaled clips go (default: a temporary directory)")
    parser.add_argument("--clips", type=positive_count, default=4, help="test clips to make")
    parser.add_argument("--frames", type=positive_count, default=24, help="frames of each test clip")
    parser.add_argument("--size", type=frame_size, default="96x64", help="WIDTHxHEIGHT of the test clips (even, at least 16)")
    parser.add_argument("--scale", type=int, choices=[2, 3, 4], default=2, help="output size / input size")
    parser.add_argument("--batch", type=positive_count, default=8, help="frames per decoder call (one host copy each)")
    parser.add_argument("--strategy", default="auto", choices=["auto", "event", "async", "stream", "device", "none"],
                        help="the contracts' strategy ('none': no fences, to see the races; frames come out wrong)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers, one pipeline each")
    parser.add_argument("--gpus-per-worker", type=float, default=None,
                        help="GPUs each worker asks Ray for (0.5: two share one); default: the cluster's GPUs / workers, "
                        "at most 1, and 0 where the cluster has none")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs each worker asks Ray for")
    parser.add_argument("--address", help="a running Ray cluster ('auto', or HOST:PORT); default: start one here")
    parser.add_argument("--no-ray", action="store_true", help="run the same pipeline in this process, clip after clip")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--gpu", action="store_true", help="run on the GPU (each worker fails without CUDA); default: the GPU "
                       "where the worker has one, else the model")
    where.add_argument("--model", action="store_true", help="run on the CUDA ordering model even where there is a GPU")
    parser.add_argument("--no-encode", action="store_true", help="do not encode: count the frames and drop them")
    parser.add_argument("--verify", action="store_true", help="compare every frame with a serial reference; exit 1 on a wrong one")
    parser.add_argument("--json", metavar="FILE", help="write the report (rows, workers, totals) as JSON")
    parser.add_argument("--kill-once", metavar="CLIP:FRAME",
                        help="TEST ONLY: the worker kills itself (SIGKILL) the first time it has written FRAME frames of "
                        "CLIP (a file name), to show Ray running the clip again")
    return parser


def _unavailable(why: str) -> None:
    print(f"{PROGRAM}: {why}", file=sys.stderr)
    raise SystemExit(EXIT_UNAVAILABLE)


# -- the clips ------------------------------------------------------------------------------------------------


def find_clips(args: argparse.Namespace) -> list[str]:
    """The clips of ``-i`` (made there as test clips when it has none), else test clips in a temporary directory."""
    folder = args.input or tempfile.mkdtemp(prefix="ray-upscale-in-")
    if os.path.isdir(folder):
        found = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.lower().endswith(CLIP_SUFFIXES))
        if found:
            return found
    width, height = args.size
    os.makedirs(folder, exist_ok=True)
    from streamsafe.errors import FrameworkUnavailableError
    from streamsafe.testing import make_test_clip

    try:
        clips = [make_test_clip(os.path.join(folder, f"clip-{i}.mp4"), args.frames, (width, height))
                 for i in range(args.clips)]
    except FrameworkUnavailableError:
        _unavailable("needs PyAV to make test clips and to encode: pip install 'streamsafe[video]'")
    print(f"made {len(clips)} test clips of {args.frames} frames, {width}x{height}, in {folder}")
    return clips


# -- in the worker: an encoder per clip, and the pipeline -------------------------------------------------------


class Attempts:
    """How many times each clip was started (a Ray actor in a cluster: a worker Ray restarted starts its clip again)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)

    def begin(self, clip: str) -> int:
        self.counts[clip] += 1
        return self.counts[clip]

    def all(self) -> dict[str, int]:
        return dict(self.counts)


class ClipWriter:
    """Encodes one clip with PyAV into ``OUT/<clip>.mp4.part``, renamed to ``.mp4`` once complete (``encode=False``:
    counts the frames only)."""

    def __init__(self, target: str, width: int, height: int, fps: float, *, encode: bool, attempt: int,
                 kill_at: int | None) -> None:
        self.target, self.part, self.attempt, self.kill_at = target, target + ".part", attempt, kill_at
        self.frames = 0
        self.container: Any = None
        if not encode:
            return
        import av

        self.av = av
        self.container = av.open(self.part, mode="w", format="mp4")
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        self.stream = self.container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"

    def write(self, frames: np.ndarray) -> None:
        if self.container is not None:
            for rgb in frames:
                for packet in self.stream.encode(self.av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    self.container.mux(packet)
        self.frames += len(frames)
        if self.kill_at is not None and self.frames >= self.kill_at:  # TEST ONLY (--kill-once)
            print(f"[{PROGRAM}] worker {os.getpid()} kills itself at frame {self.frames} of {self.target}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> dict[str, Any]:
        if self.container is None:
            return {"output": "", "attempt": self.attempt}
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()
        os.replace(self.part, self.target)
        return {"output": self.target, "attempt": self.attempt}

    def abort(self) -> None:
        if self.container is not None:
            self.container.close()
            if os.path.exists(self.part):  # (PyAV makes the file at the first packet: an error before it left none)
                os.remove(self.part)


def _pipeline_class() -> type:
    from streamsafe.integrations.ray import UpscalePipeline

    class ClipUpscaler(UpscalePipeline):
        """The pipeline, with an encoder per clip (``open_sink``) and each clip's attempts counted."""

        def __init__(self, *, out_dir: str, encode: bool, attempts: Any, kill_once: str | None, **options: Any) -> None:
            super().__init__(**options)
            self.out_dir, self.encode, self.attempts, self.kill_once = out_dir, encode, attempts, kill_once

        def open_sink(self, path: str, width: int, height: int, fps: float) -> ClipWriter:
            name = os.path.basename(path)
            begin = self.attempts.begin
            attempt = begin.remote(name) if hasattr(begin, "remote") else begin(name)
            if not isinstance(attempt, int):
                import ray

                attempt = ray.get(attempt)
            kill_at = None
            if self.kill_once and attempt == 1:
                clip, _, frame = self.kill_once.rpartition(":")
                kill_at = int(frame) if clip == name else None
            target = os.path.join(self.out_dir, os.path.splitext(name)[0] + ".mp4")
            return ClipWriter(target, width, height, fps, encode=self.encode, attempt=attempt, kill_at=kill_at)

    return ClipUpscaler


def _options(args: argparse.Namespace, out_dir: str, attempts: Any) -> dict[str, Any]:
    return {"out_dir": out_dir, "encode": not args.no_encode, "attempts": attempts, "kill_once": args.kill_once,
            "scale": args.scale, "frames_per_call": args.batch, "strategy": args.strategy,
            "device": "model" if args.model else "gpu" if args.gpu else "auto", "return_frames": args.verify}


# -- the two ways to run it -----------------------------------------------------------------------------------


def _progress(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="clip", desc="clips", file=sys.stderr, disable=None)


def _done(bar: Any, row: dict[str, Any], frames: list[int]) -> None:
    frames.append(int(row["num_frames"]))
    bar.update(1)
    bar.set_postfix(frames=sum(frames))


def run_serial(args: argparse.Namespace, clips: list[str], out_dir: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The same pipeline in this process, one clip after another (no Ray)."""
    from streamsafe.errors import BackendUnavailableError

    attempts = Attempts()
    try:
        pipeline = _pipeline_class()(**_options(args, out_dir, attempts))
    except BackendUnavailableError as e:
        _unavailable(str(e))
    print(f"no Ray: one pipeline in this process on {pipeline.description}")
    rows: list[dict[str, Any]] = []
    frames: list[int] = []
    try:
        with _progress(len(clips)) as bar:
            for path in clips:
                rows.append(pipeline.process(path))
                _done(bar, rows[-1], frames)
    finally:
        pipeline.close()
    return rows, attempts.all()


def run_ray(args: argparse.Namespace, clips: list[str], out_dir: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One pipeline per Ray worker (an actor of Ray Data's pool), a clip per batch."""
    if not args.address and "ray" not in sys.modules:  # a cluster of this machine only: on the loopback address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # (Ray's switch for a local-only node)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data
    except ImportError as e:
        _unavailable(f"needs Ray Data ({e}): pip install 'streamsafe[ray]' (or run with --no-ray)")
    started_here = not ray.is_initialized()
    if started_here:
        if args.address:
            ray.init(address=args.address, logging_level=logging.WARNING)
        else:
            cpus = max(os.cpu_count() or 1, int(np.ceil(args.workers * args.cpus_per_worker)))
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
    try:
        gpus = float(ray.cluster_resources().get("GPU", 0))
        if args.gpu and not gpus:
            _unavailable("--gpu: the Ray cluster has no GPUs (run without --gpu to use the model)")
        per_worker = args.gpus_per_worker
        if per_worker is None:
            per_worker = 0.0 if args.model or not gpus else min(1.0, gpus / args.workers)
        print(f"Ray: {args.workers} workers, {per_worker:g} GPU and {args.cpus_per_worker:g} CPU each "
              f"(the cluster has {gpus:g} GPUs, {ray.cluster_resources().get('CPU', 0):g} CPUs)")
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # (ours counts clips)
        context.wait_for_min_actors_s = 300  # every worker built before the first clip (a fair start; else an error)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        attempts: Any = ray.remote(num_cpus=0)(Attempts).remote()
        items = ray.data.from_items([{"path": p} for p in clips], override_num_blocks=len(clips))
        ds = items.map_batches(_pipeline_class(), fn_constructor_kwargs=_options(args, out_dir, attempts), batch_size=1,
                            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=args.workers),
                            num_gpus=per_worker, num_cpus=args.cpus_per_worker)
        # (Ray Data's workers restart and their tasks retry without limit by default: a dead worker's clip runs again)
        rows: list[dict[str, Any]] = []
        frames: list[int] = []
        with _progress(len(clips)) as bar:
            for row in ds.iter_rows():
                rows.append(dict(row))
                _done(bar, rows[-1], frames)
        counts: dict[str, int] = ray.get(attempts.all.remote())
        return rows, counts
    finally:
        if started_here:
            ray.shutdown()


# -- the report and the check ---------------------------------------------------------------------------------


STATS = ("fences", "host_waits", "sdk_waits", "device_syncs")


def report(rows: list[dict[str, Any]], attempts: dict[str, int], wall: float) -> dict[str, Any]:
    """Print the per-worker table and the totals; returns them (for ``--json``)."""
    workers: dict[str, dict[str, Any]] = {}
    for row in rows:
        w = workers.setdefault(str(row["worker"]), {"gpu": str(row["gpu"]) or "-", "device": str(row["device"]),
                                                    "setup": float(row["setup_seconds"]), "clips": 0, "frames": 0,
                                                    "seconds": 0.0, **dict.fromkeys(STATS, 0)})
        w["clips"] += 1
        w["frames"] += int(row["num_frames"])
        w["seconds"] += float(row["seconds"])
        for k in STATS:
            w[k] += int(row[k])
    print(f"{'worker':<24}{'gpu':>5}{'device':>8}{'setup s':>9}{'clips':>7}{'frames':>8}{'busy s':>9}{'fps':>8}"
          f"{'fences':>8}{'host waits':>12}{'sdk waits':>11}{'device syncs':>14}")
    for name, w in sorted(workers.items()):
        fps = w["frames"] / w["seconds"] if w["seconds"] else 0.0
        print(f"{name:<24}{w['gpu']:>5}{w['device']:>8}{w['setup']:>9.2f}{w['clips']:>7}{w['frames']:>8}{w['seconds']:>9.2f}{fps:>8.1f}"
              f"{w['fences']:>8}{w['host_waits']:>12}{w['sdk_waits']:>11}{w['device_syncs']:>14}")
    frames = sum(int(r["num_frames"]) for r in rows)
    span = (max(float(r["finished"]) for r in rows) - min(float(r["started"]) for r in rows)) if rows else 0.0
    print(f"total: {frames} frames of {len(rows)} clips in {wall:.2f} s wall ({frames / wall:.1f} fps, start-up included); "
          f"pipelines: {span:.2f} s from the first clip's start to the last one's end ({frames / span if span else 0:.1f} fps)")
    retried = {clip: n for clip, n in sorted(attempts.items()) if n > 1}
    if retried:
        print("run again by Ray after a worker died: " + ", ".join(f"{c} ({n} attempts)" for c, n in retried.items()))
    return {"workers": workers, "frames": frames, "clips": len(rows), "wall_seconds": wall, "span_seconds": span,
            "attempts": attempts}


def _reference_model(path: str, scale: int) -> list[np.ndarray]:
    """The clip's frames made with nothing racing: the emulations on an in-order model, one frame at a time."""
    from streamsafe.sim import SimBackend
    from streamsafe.testing import VideoSuperRes
    from streamsafe.testing.fake_pynvvideocodec import decode_reference

    sim = SimBackend()
    sr = VideoSuperRes(backend=sim)
    frames = decode_reference(path)
    h, w = frames[0].shape[1:]
    sr.output_width, sr.output_height = w * scale, h * scale
    sr.load()
    out = []
    for planes in frames:
        image = sr.run(sim.array(planes / np.float32(255), dtype=np.float32)).image
        host = sim.download(sim.from_dlpack(image))
        out.append((np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))
    return out


def _reference_gpu(path: str, scale: int) -> list[np.ndarray]:
    """The clip's frames made with nothing racing on the GPU: the device idle after every stage."""
    import PyNvVideoCodec as nvc
    import torch

    try:
        from nvvfx import VideoSuperRes
    except ImportError:
        from streamsafe.testing import VideoSuperRes
    dec = nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGBP)
    sr = VideoSuperRes()
    out: list[np.ndarray] = []
    while frames := dec.get_batch_frames(8):
        for frame in frames:
            x = torch.from_dlpack(frame).float().div(255)
            if not out:
                sr.output_width, sr.output_height = x.shape[2] * scale, x.shape[1] * scale
                sr.load()
            torch.cuda.synchronize()
            y = torch.from_dlpack(sr.run(x, stream_ptr=torch.cuda.current_stream().cuda_stream).image).clone()
            torch.cuda.synchronize()
            out.append((y.clamp(0, 1) * 255 + 0.5).to(torch.uint8).permute(1, 2, 0).cpu().numpy())
    sr.close()
    return out


def verify(rows: list[dict[str, Any]], scale: int) -> int:
    """Compare every frame of every clip with the serial reference; returns how many differ (by more than 2 codes)."""
    wrong = total = 0
    for row in sorted(rows, key=lambda r: str(r["path"])):
        reference = (_reference_gpu if row["device"] == "gpu" else _reference_model)(str(row["path"]), scale)
        frames = np.asarray(row["frames"])
        if len(frames) != len(reference):
            print(f"verify: {row['path']}: {len(frames)} frames, the reference has {len(reference)}")
            wrong += abs(len(reference) - len(frames))
        for got, want in zip(frames, reference):
            wrong += int(got.shape != want.shape or np.abs(got.astype(int) - want).max() > 2)
        total += len(reference)
    print(f"verify: {wrong} of {total} frames wrong (each against a serial reference)")
    return wrong


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_ray and (args.address or args.kill_once):
        _unavailable("--no-ray runs in this process: --address and --kill-once need Ray workers")
    if args.workers < 1:
        _unavailable(f"--workers {args.workers}: at least 1")
    clips = find_clips(args)
    out_dir = args.output or tempfile.mkdtemp(prefix="ray-upscale-out-")
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()
    rows, attempts = (run_serial if args.no_ray else run_ray)(args, clips, out_dir)
    wall = time.perf_counter() - start
    summary = report(rows, attempts, wall)
    print(f"output: {out_dir}" + (" (not encoded: --no-encode)" if args.no_encode else ""))
    wrong = verify(rows, args.scale) if args.verify else 0
    if args.json:
        plain = [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items() if k != "frames"} for r in rows]
        with open(args.json, "w") as f:
            json.dump({**summary, "rows": plain, "verify_wrong": wrong if args.verify else None}, f, indent=1, default=str)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
