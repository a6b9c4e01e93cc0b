"""Where one bench step's host time goes, for one scenario and row (explains a gap between rows).

GPU machine:  PYTHONPATH=. python3 benchmarks/profile_bench_step.py [SCENARIO] [ROW ...]

For each row (default ``hand auto``) of SCENARIO (default ``g-host``): the host microseconds per
step over 1,000 steps (after 100 untimed), then a cProfile of 1,000 more, top functions by own time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time


def main() -> None:
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.pipelines import GpuPipeline, scenario_by_key

    scenario = sys.argv[1] if len(sys.argv) > 1 else "g-host"
    rows = sys.argv[2:] or ["hand", "auto"]
    sc = scenario_by_key(scenario)
    for name in rows:
        pipe = GpuPipeline(sc, as_row(name))
        try:
            for i in range(100):
                pipe.step(i)
            pipe.drain()
            pipe.check()
            t0 = time.perf_counter()
            for i in range(100, 1100):
                pipe.step(i)
            per_step = (time.perf_counter() - t0) / 1000 * 1e6
            pipe.drain()
            pipe.check()
            profile = cProfile.Profile()
            profile.enable()
            for i in range(1100, 2100):
                pipe.step(i)
            profile.disable()
            pipe.drain()
            checked, corrupt = pipe.check()
            print(f"\n== {scenario} / {name}: {per_step:.1f} us per step on the host (corrupt {corrupt}/{checked})")
            pstats.Stats(profile).sort_stats("tottime").print_stats(22)
        finally:
            pipe.close()


if __name__ == "__main__":
    main()
