"""Where the host time of one emulated run() goes (for explaining benchmark results).

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/profile_effect.py
Profiles 300 runs of the emulated VideoSuperRes (540p -> 1080p, non_blocking=True, no spin)
raw and through a contract (event and async), and prints the top functions by own time.
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import streamsafe as ss
from streamsafe.testing import VideoSuperRes


def main() -> None:
    be = ss.CudaBackend()
    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    torch.cuda.synchronize()
    for label in ("raw", "event", "async"):
        sr = VideoSuperRes(backend=be)
        sr.output_width, sr.output_height = 1920, 1080
        sr.load()
        if label == "raw":
            def run(sr: VideoSuperRes = sr) -> None:
                sr.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
        else:
            c = ss.StreamContract(sr, side, strategy=label)

            def run(c: ss.StreamContract = c) -> None:
                with torch.cuda.stream(side):
                    c.run(x).torch()
        for _ in range(50):
            run()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(300):
            run()
        host = (time.perf_counter() - t0) / 300 * 1e6
        torch.cuda.synchronize()
        print(f"\n=== {label}: {host:.0f} us of host time per run() ===")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            run()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
