"""Decode -> convert -> VideoSuperRes -> consumer: streamsafe's decoder fences against an expert's and the recipe.

    PYTHONPATH=. python3 benchmarks/decode_pipeline.py [-i CLIP] [--rounds 5] [--json PATH]   # on the GPU
    PYTHONPATH=. python3 benchmarks/decode_pipeline.py --model                               # counts on the model

Every row is the same program: NVIDIA's decoder (``PyNvVideoCodec.SimpleDecoder``, batches of 8, on its own
stream D) hands out frames; on the user's stream U each is converted to float32 and upscaled with the
emulated ``VideoSuperRes`` (stage costs from its latency knob), guarded by streamsafe in every row
(``stream_contract(sr, U, input_stream=U)``, the same in all, so only the decoder's ordering differs); a
consumer copies each result on C. The rows differ in what keeps the decoder's next batch from overwriting a
frame U still converts (D5):

* ``recipe``: the host waits for U before each decode (the vendor-style recipe: synchronise, then decode);
* ``hand``: an expert's fences: an event recorded on U right after each frame's conversion, and D waiting
  on the last one before the next decode (no host wait);
* ``streamsafe``: ``stream_contract(decoder, D)``, frames copied with ``frame.torch()`` (the event right
  after the copy: the expert's fence);
* ``streamsafe-view``: the same guard, frames read in place (``torch.from_dlpack(frame)``): D waits for U's
  work up to the next decode, the effect's included;
* ``none``: nothing (unsafe: the corrupted frames are counted).

Rows run interleaved (A B C ... A B C ...), each round decoding the whole clip; frames/s is the median
round. Host waits are streamsafe's own (the decoder's wait inside ``get_batch_frames`` is not counted:
every row has it). Every frame is checked against a reference made with nothing racing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

import streamsafe as ss

ROWS = ("recipe", "hand", "streamsafe", "streamsafe-view", "none")


def _clip(path: str | None, frames: int) -> str:
    if path:
        return path
    from streamsafe.testing import make_test_clip

    return make_test_clip(os.path.join(tempfile.mkdtemp(), "bench.mp4"), frames, (960, 544))


class Gpu:
    def __init__(self, clip: str, inference_us: float, conversion_us: float) -> None:
        import PyNvVideoCodec as nvc
        import torch

        from streamsafe.testing import VideoSuperRes

        self.torch, self.nvc, self.clip = torch, nvc, clip
        self.D, self.U, self.C = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
        probe = self._decoder()
        meta = probe.get_stream_metadata()
        self.w, self.h, self.n = meta.width, meta.height, len(probe)
        self.sr = VideoSuperRes(latency_us={"inference": inference_us, "conversion": conversion_us})
        self.sr.output_width, self.sr.output_height = 2 * self.w, 2 * self.h
        self.sr.load()
        self.effect = ss.stream_contract(self.sr, self.U, input_stream=self.U)
        self.reference = self._reference()

    def _decoder(self) -> Any:
        return self.nvc.SimpleDecoder(self.clip, gpu_id=0, cuda_stream=self.D.cuda_stream, use_device_memory=True,
                                      output_color_type=self.nvc.OutputColorType.RGBP)

    def _reference(self) -> list[Any]:
        torch = self.torch
        dec, out = self._decoder(), []
        while batch := dec.get_batch_frames(8):
            for f in batch:
                x = torch.from_dlpack(f).float().div(255)
                torch.cuda.synchronize()
                with torch.cuda.stream(self.U):
                    out.append(self.effect.run(x).torch())
                torch.cuda.synchronize()
        return out

    def run(self, row: str) -> tuple[float, int, int, dict[str, int]]:
        """One round of ``row``: (seconds, frames, corrupt frames, the decoder guard's counters)."""
        torch, U, C = self.torch, self.U, self.C
        dec = self._decoder()
        guard = ss.stream_contract(dec, self.D) if row.startswith("streamsafe") else None
        events = [torch.cuda.Event() for _ in range(2)]
        copies: list[Any] = []
        torch.cuda.synchronize()
        start = time.perf_counter()
        with guard if guard is not None else contextlib.nullcontext():
            while True:
                if row == "recipe":
                    U.synchronize()
                elif row == "hand" and copies:
                    self.D.wait_event(events[0])
                batch = dec.get_batch_frames(8)
                if not batch:
                    break
                for frame in batch:
                    with torch.cuda.stream(U):
                        planes = frame.torch() if row == "streamsafe" else torch.from_dlpack(frame)
                        x = planes.float().div_(255)
                        if row == "hand":
                            events[0].record(U)  # right after the conversion read the frame
                        out = self.effect.run(x)
                    with torch.cuda.stream(C):
                        copies.append(out.torch())
            stats = dict(guard.stats) if guard is not None else {}
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        wrong = sum(not torch.allclose(got, want, atol=1.5 / 255) for got, want in zip(copies, self.reference))
        return seconds, len(copies), wrong, stats


def on_model(frames: int) -> dict[str, Any]:
    """The rows on the CUDA ordering model (small frames): host waits and corrupted frames are real, times are not."""
    from streamsafe.sim import SimBackend
    from streamsafe.testing import install_fake_pynvvideocodec, make_test_clip
    from streamsafe.testing.fake_pynvvideocodec import decode_reference

    clip = make_test_clip(os.path.join(tempfile.mkdtemp(), "model.mp4"), frames, (64, 48))
    install_fake_pynvvideocodec(force=True)
    import PyNvVideoCodec as nvc

    reference = decode_reference(clip)
    results: dict[str, Any] = {}
    for row in ROWS:
        sim = SimBackend(scheduler="adversarial")
        with ss.use_backend(sim):
            D, U, C = (sim.create_stream(non_blocking=True) for _ in range(3))
            dec = nvc.SimpleDecoder(clip, cuda_stream=D.handle, output_color_type=nvc.OutputColorType.RGBP)
            guard = ss.stream_contract(dec, D) if row.startswith("streamsafe") else None
            event = sim.create_event()
            copies, waits = [], 0
            with guard if guard is not None else contextlib.nullcontext():
                while True:
                    if row == "recipe":
                        sim.synchronize_stream(U)
                        waits += 1
                    elif row == "hand" and copies:
                        sim.wait(D, event)
                    batch = dec.get_batch_frames(8)
                    if not batch:
                        break
                    for frame in batch:
                        planes = frame.copy(U) if row == "streamsafe" else sim.from_dlpack(frame, stream=U)
                        copy = sim.copy(planes, U)
                        if row == "hand":
                            sim.record(event, U)
                        copies.append((copy, (frame.raw if guard else frame).index))
                stats = dict(guard.stats) if guard is not None else {}
            sim.synchronize_device()
            wrong = sum(not np.array_equal(sim.download(c), reference[i]) for c, i in copies)
        results[row] = {"frames": len(copies), "corrupt": wrong, "host_waits": stats.get("host_waits", waits),
                        "device_fences": stats.get("D5", int(row == "hand") * (len(copies) // 8)), "races": len(sim.races)}
        print(f"{row:16} frames {len(copies):4}  corrupt {wrong:4}  host waits {results[row]['host_waits']:3}  "
              f"device fences {results[row]['device_fences']:3}  races {len(sim.races)}")

    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--input", help="an H.264 clip (default: 240 frames of 960x544 made with PyAV)")
    parser.add_argument("--frames", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inference-us", type=float, default=800.0)
    parser.add_argument("--conversion-us", type=float, default=100.0)
    parser.add_argument("--model", action="store_true", help="on the CUDA ordering model: counts only, no times")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args(argv)
    if args.model:
        results = on_model(min(args.frames, 48))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"model": results}, f, indent=2)
        return 0 if all(results[r]["corrupt"] == 0 for r in ROWS if r != "none") else 1
    bench = Gpu(_clip(args.input, args.frames), args.inference_us, args.conversion_us)
    print(f"clip {bench.w}x{bench.h}, {bench.n} frames -> {2 * bench.w}x{2 * bench.h}; VideoSuperRes inference "
          f"{args.inference_us:g} us, conversion {args.conversion_us:g} us; {args.rounds} rounds")
    for row in ROWS:
        bench.run(row)  # warm-up
    samples: dict[str, list[dict[str, Any]]] = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        for row in ROWS:
            seconds, n, wrong, stats = bench.run(row)
            samples[row].append({"seconds": seconds, "frames": n, "corrupt": wrong, "stats": stats})
    fps = {row: statistics.median(s["frames"] / s["seconds"] for s in samples[row]) for row in ROWS}
    print(f"{'row':16} {'frames/s':>9} {'x hand':>7} {'x recipe':>9} {'host waits/frame':>17} {'corrupt':>8}")
    for row in ROWS:
        frames = sum(s["frames"] for s in samples[row])
        waits = sum(s["stats"].get("host_waits", 0) for s in samples[row]) + (frames // 8 if row == "recipe" else 0)
        corrupt = sum(s["corrupt"] for s in samples[row])
        print(f"{row:16} {fps[row]:9.1f} {fps[row] / fps['hand']:7.3f} {fps[row] / fps['recipe']:9.3f} "
              f"{waits / frames:17.3f} {corrupt:8}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fps": fps, "samples": samples, "args": vars(args)}, f, indent=2)
    return 0 if all(sum(s["corrupt"] for s in samples[r]) == 0 for r in ROWS if r != "none") else 1


if __name__ == "__main__":
    sys.exit(main())
