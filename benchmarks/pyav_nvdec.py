"""PyAV's NVDEC frames read on a consumer stream: streamsafe's event-ordered release against the per-frame
consumer-sync recipe and hand-written events, frames/s side by side in one process.

    PYTHONPATH=. python3 benchmarks/pyav_nvdec.py [-i CLIP] [--rounds 5] [--work-us 200] [--json PATH]   # on the GPU

Every row is the same program: PyAV decodes the clip on NVDEC (``av.open(path, hwaccel=HWAccel("cuda", ...,
is_hw_owned=True))``); for each frame, on the consumer's stream C, the two NV12 planes are imported zero-copy,
converted to RGB (float32) with ``--work-us`` more of GPU work, the Y plane copied for the check, and the views
dropped at once, the program decoding on. The rows differ in what keeps FFmpeg from decoding a later frame into
the surface while C still reads it (D7: the surface goes back when the last reference to the frame goes):

* ``streamsafe``: ``stream_contract(container)``; the planes imported with ``torch.from_dlpack(plane)``; a dropped
  frame is kept until an event recorded on C completes (no host wait);
* ``hand``: an expert's version of the same: PyAV's capsules (``plane.__dlpack__()``), an event recorded on C after
  each frame's reads, the frame kept in a queue until its event completes (queried, at most 64 pending);
* ``sync``: PyAV's only documented fix: ``C.synchronize()`` after each frame's reads;
* ``none``: nothing (unsafe: the wrong frames are counted).

Rows run interleaved (A B C D A B C D ...), each round decoding the whole clip from a new container; frames/s is
the median round. Host waits are the row's own (streamsafe's counters, the recipe's syncs, the hand queue's
waits); every frame's Y plane is checked against a reference decoded with nothing racing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import streamsafe as ss

ROWS = ("streamsafe", "hand", "sync", "none")
US = 1980  # GPU cycles a microsecond (an H200 under load)
HAND_LIMIT = 64


def _hwaccel() -> Any:
    from av.codec.hwaccel import HWAccel

    return HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True)


def _convert(torch: Any, y: Any, uv: Any) -> Any:
    """NV12 to RGB float32 (BT.601, limited range), on the current stream."""
    c = (y.float() - 16) * 1.164
    full = uv.float().repeat_interleave(2, dim=0).repeat_interleave(2, dim=1) - 128
    u, v = full[..., 0], full[..., 1]
    return torch.stack([c + 1.596 * v, c - 0.392 * u - 0.813 * v, c + 2.017 * u]).div_(255).clamp_(0, 1)


class Bench:
    def __init__(self, clip: str, work_us: float) -> None:
        import av
        import torch

        self.av, self.torch, self.clip, self.work = av, torch, clip, int(work_us * US)
        self.reference = self._reference()  # (first: FFmpeg makes its CUDA device before torch's first CUDA call)
        self.C = torch.cuda.Stream()

    def _reference(self) -> list[Any]:
        torch, out = self.torch, []
        with self.av.open(self.clip, hwaccel=_hwaccel()) as container:
            for frame in container.decode(video=0):
                if frame.format.name != "cuda":
                    raise SystemExit(f"pyav_nvdec.py: PyAV decoded into {frame.format.name}, not CUDA surfaces (no NVDEC)")
                out.append(torch.utils.dlpack.from_dlpack(frame.planes[0].__dlpack__()).clone())
                torch.cuda.synchronize()
        return out

    def _read(self, y: Any, uv: Any, copies: list[Any]) -> None:
        """The consumer's work on C (the caller made C current): convert, more work, copy Y for the check."""
        torch = self.torch
        _convert(torch, y, uv)
        if self.work:
            torch.cuda._sleep(self.work)
        copies.append(y.clone())

    def round(self, row: str) -> tuple[float, int, int, int]:
        """One decode of the clip under ``row``: (seconds, frames, wrong frames, host waits of the row's own)."""
        torch, C = self.torch, self.C
        torch.cuda.synchronize()
        copies: list[Any] = []
        waits = 0
        start = time.perf_counter()
        container = self.av.open(self.clip, hwaccel=_hwaccel())
        guard: Any = ss.stream_contract(container) if row == "streamsafe" else contextlib.nullcontext()
        pending: collections.deque[tuple[Any, Any]] = collections.deque()
        with guard as g:
            for frame in container.decode(video=0):
                with torch.cuda.stream(C):
                    if row == "streamsafe":
                        y, uv = (torch.from_dlpack(p) for p in frame.planes)
                    else:
                        y, uv = (torch.utils.dlpack.from_dlpack(p.__dlpack__()) for p in frame.planes)
                    self._read(y, uv, copies)
                    del y, uv
                if row == "sync":
                    C.synchronize()
                    waits += 1
                elif row == "hand":
                    event = torch.cuda.Event()
                    event.record(C)
                    pending.append((frame, event))
                    while pending and pending[0][1].query():
                        pending.popleft()
                    while len(pending) > HAND_LIMIT:
                        pending.popleft()[1].synchronize()
                        waits += 1
            if row == "streamsafe":
                waits = g.stats["host_waits"]  # (inside the block; leaving it waits once, as the others' end does)
        torch.cuda.synchronize()
        pending.clear()
        container.close()
        seconds = time.perf_counter() - start
        n = len(self.reference)
        wrong = sum(not torch.equal(got, self.reference[i % n]) for i, got in enumerate(copies))
        return seconds, len(copies), wrong, waits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--input", help="the clip (default: 240 frames of 320x192 made with PyAV)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work-us", type=float, default=200.0, help="the consumer's GPU work a frame, besides the conversion")
    parser.add_argument("--json", help="write every round's samples here")
    args = parser.parse_args(argv)
    try:
        import av  # noqa: F401
        import torch
    except ImportError as e:
        print(f"pyav_nvdec.py: needs PyAV and torch ({e})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("pyav_nvdec.py: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    clip = args.input
    if not clip:
        from streamsafe.testing import make_test_clip

        clip = make_test_clip(os.path.join(tempfile.mkdtemp(), "pyav-bench.mp4"), 240, (320, 192))
    bench = Bench(clip, args.work_us)
    for row in ROWS:  # warm-up
        bench.round(row)
    samples: dict[str, list[tuple[float, int, int, int]]] = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        for row in ROWS:
            samples[row].append(bench.round(row))
    fps = {row: statistics.median(n / s for s, n, _, _ in samples[row]) for row in ROWS}
    print(f"PyAV NVDEC, {len(bench.reference)} frames a round, {args.rounds} rounds, consumer work {args.work_us:g} us a frame")
    print(f"{'row':<12} {'frames/s':>9} {'x sync':>7} {'host waits/frame':>17} {'wrong':>9}")
    for row in ROWS:
        frames = sum(n for _, n, _, _ in samples[row])
        wrong = sum(w for _, _, w, _ in samples[row])
        waits = sum(h for _, _, _, h in samples[row])
        print(f"{row:<12} {fps[row]:>9.0f} {fps[row] / fps['sync']:>7.2f} {waits / frames:>17.3f} {wrong:>4}/{frames}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"clip": clip, "work_us": args.work_us, "rows": {row: [
                {"seconds": s, "frames": n, "wrong": w, "host_waits": h} for s, n, w, h in samples[row]] for row in ROWS}},
                f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
