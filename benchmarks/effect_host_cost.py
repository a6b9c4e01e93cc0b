"""Host time of one emulated run(): eager stages vs CUDA-graph stages (the bench's), per effect.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/effect_host_cost.py [--json PATH]

Each row is the median over blocks of the host microseconds per raw ``run()`` (no contract),
``non_blocking=True``, no added latency, the effect's own streams; the GPU is drained between
blocks. Issue 10's target: the bench's emulated SDK at most 30 us per ``run()``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def measure(blocks: int = 20, per_block: int = 200) -> dict[str, dict[str, list[float]]]:
    import torch

    import streamsafe as ss
    from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes

    be = ss.CudaBackend()
    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    x10 = torch.randint(0, 2**30, (540, 960), device="cuda", dtype=torch.int32).view(torch.uint32)
    results: dict[str, dict[str, list[float]]] = {}
    for kind in ("VideoSuperRes RGB8 540p->1080p", "VideoSuperRes RGB10A2 540p->1080p", "VideoFrameGeneration 540p",
                 "TrueHDR 540p"):
        for mode in ("eager", "graph"):
            if kind.startswith("TrueHDR"):
                fx: Any = TrueHDR(backend=be, launch_mode=mode)
                args: tuple[Any, ...] = (x,)
                kw: dict[str, Any] = {}
            elif kind.startswith("VideoFrame"):
                fx = VideoFrameGeneration(backend=be, launch_mode=mode)
                fx.input_width, fx.input_height = 960, 540
                args, kw = (x, x), {"frame_index": 1}
            else:
                enc = ImageEncoding.RGB10A2 if "RGB10A2" in kind else ImageEncoding.RGB8
                fx = VideoSuperRes(backend=be, launch_mode=mode, image_encoding=enc)
                fx.output_width, fx.output_height = 1920, 1080
                args, kw = (x10 if "RGB10A2" in kind else x,), {}
            fx.load()
            samples = []
            for b in range(blocks + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(per_block):
                    fx.run(*args, stream_ptr=side.cuda_stream, non_blocking=True, **kw)
                dt = (time.perf_counter() - t0) / per_block * 1e6
                if b:
                    samples.append(dt)
            torch.cuda.synchronize()
            fx.close()
            results.setdefault(kind, {})[mode] = samples
    return results


def profile(runs: int = 2000) -> None:
    """cProfile of graph-mode VideoSuperRes RGB8 runs: where the emulated SDK's host time goes."""
    import cProfile
    import pstats

    import torch

    import streamsafe as ss
    from streamsafe.testing import VideoSuperRes

    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    fx = VideoSuperRes(backend=ss.CudaBackend(), launch_mode="graph")
    fx.output_width, fx.output_height = 1920, 1080
    fx.load()
    for _ in range(20):
        fx.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        fx.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--profile", action="store_true", help="also a cProfile of graph-mode VideoSuperRes runs")
    args = parser.parse_args()
    results = measure()
    print(f"{'effect':<36} {'eager us/run':>13} {'graph us/run':>13} {'eager/graph':>12}")
    for kind, modes in results.items():
        e, g = statistics.median(modes["eager"]), statistics.median(modes["graph"])
        print(f"{kind:<36} {e:>13.1f} {g:>13.1f} {e / g:>12.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.profile:
        profile()


if __name__ == "__main__":
    main()
