"""One declared guarded frame's host time, for comparing trees side by side in one GPU call.

    PYTHONPATH=TREE python3 benchmarks/frame_time.py TREE [--profile]

With TREE a checkout (``git archive REV``) on ``PYTHONPATH``: the null effect of ``contract_overhead.py`` (no GPU
work) through ``StreamContract(..., input_stream=S)`` and ``torch.from_dlpack(out.image)``, under ``event`` and
``auto``; prints the median of 20 blocks of 500 frames after 2,000 warm-up frames, and with ``--profile`` a
cProfile of 5,000 ``auto`` frames. Run each tree in turn, twice, in one device call: the lent host's speed moves
from call to call.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time


def main() -> None:
    tree = sys.argv[1]
    sys.path.insert(0, tree + "/benchmarks")
    import torch
    from contract_overhead import NullSuperRes

    import streamsafe as ss

    print("streamsafe from", ss.__file__)
    side = torch.cuda.Stream()
    buf = torch.zeros(3, 32, 32, device="cuda")
    x = torch.zeros(3, 16, 16, device="cuda")
    for strategy in ("event", "auto"):
        with torch.cuda.stream(side):
            c = ss.StreamContract(NullSuperRes(buf), side, strategy=strategy, input_stream=side)

            def frame(c: ss.StreamContract = c) -> None:
                torch.from_dlpack(c.run(x).image)

            for _ in range(2000):
                frame()
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                t = time.perf_counter()
                for _ in range(500):
                    frame()
                times.append((time.perf_counter() - t) / 500 * 1e6)
            torch.cuda.synchronize()
            print(f"{strategy}: median {statistics.median(times):.2f} us per frame")
            if strategy == "auto" and "--profile" in sys.argv:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(5000):
                    frame()
                profile.disable()
                torch.cuda.synchronize()
                pstats.Stats(profile).sort_stats("tottime").print_stats(28)


if __name__ == "__main__":
    main()
