"""Where a guarded frame's host time goes: cProfile of contract.run() + a torch import of out.image,
with a null effect (no GPU work) on a torch side stream. GPU machine:

    PYTHONPATH=. python3 benchmarks/profile_contract.py [event|auto] [frames]

Prints the functions with the most time of their own, then the same frame loop's wall time per frame.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from contract_overhead import NullSuperRes


def main() -> None:
    import torch

    import streamsafe as ss

    strategy = sys.argv[1] if len(sys.argv) > 1 else "event"
    frames = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    side = torch.cuda.Stream()
    out_buffer = torch.zeros(3, 32, 32, device="cuda")
    x = torch.zeros(3, 16, 16, device="cuda")
    c = ss.StreamContract(NullSuperRes(out_buffer), side, strategy=strategy)

    def frame() -> None:
        torch.from_dlpack(c.run(x).image)

    for _ in range(500):
        frame()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(frames):
        frame()
    per = (time.perf_counter() - t) / frames * 1e6
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(frames):
        frame()
    profile.disable()
    torch.cuda.synchronize()
    print(f"strategy {strategy}: {per:.1f} us per frame (run + torch import of out.image), {frames} frames")
    pstats.Stats(profile).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
