"""Where one bench step's host time goes, for one scenario and row (explains a gap between rows).

GPU machine:  PYTHONPATH=. python3 benchmarks/profile_bench_step.py [SCENARIO] [ROW ...]

For each row (default ``hand auto``) of SCENARIO (default ``g-host``), every row's pipeline made first
(as in the bench): the host microseconds per step, the median of 5 blocks of 200 steps with the rows
interleaved (after 100 untimed), then a cProfile of 1,000 more, top functions by own time.
With ``--diff``: then, for the first two rows, each function's own time per step in the second less
the first (profiled microseconds: inflated by cProfile, but where the gap is), the largest first.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time


def main() -> None:
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.pipelines import GpuPipeline, scenario_by_key

    args = [a for a in sys.argv[1:] if a != "--diff"]
    scenario = args[0] if args else "g-host"
    rows = args[1:] or ["hand", "auto"]
    sc = scenario_by_key(scenario)
    stats: list[pstats.Stats] = []
    pipes = [GpuPipeline(sc, as_row(name)) for name in rows]  # (every row's effect made first, as in the bench)
    try:
        for pipe in pipes:
            for i in range(100):
                pipe.step(i)
            pipe.drain()
            pipe.check()
        # host time per step, the rows interleaved in blocks of 200 steps (a host's phase hits every row alike)
        per_step: dict[str, list[float]] = {name: [] for name in rows}
        frame = 100
        for _ in range(5):
            for name, pipe in zip(rows, pipes):
                t0 = time.perf_counter()
                for i in range(frame, frame + 200):
                    pipe.step(i)
                per_step[name].append((time.perf_counter() - t0) / 200 * 1e6)
                pipe.drain()
                pipe.check()
            frame += 200
        for name, pipe in zip(rows, pipes):
            profile = cProfile.Profile()
            profile.enable()
            for i in range(frame, frame + 1000):
                pipe.step(i)
            profile.disable()
            pipe.drain()
            checked, corrupt = pipe.check()
            median = sorted(per_step[name])[2]
            print(f"\n== {scenario} / {name}: {median:.1f} us per step on the host, median of 5 interleaved blocks "
                  f"{[round(x, 1) for x in per_step[name]]} (corrupt {corrupt}/{checked})")
            pstats.Stats(profile).sort_stats("tottime").print_stats(22)
            stats.append(pstats.Stats(profile))
    finally:
        for pipe in pipes:
            pipe.close()
    if "--diff" in sys.argv and len(stats) >= 2:
        _print_diff(rows[0], rows[1], stats[0], stats[1])


def _own_us(st: pstats.Stats) -> dict[str, tuple[float, int]]:
    """Own time per step (us, over the 1,000 profiled steps) and calls per step, by function."""
    out: dict[str, tuple[float, int]] = {}
    for (file, _line, fn), (_, ncalls, tottime, _, _) in st.stats.items():  # type: ignore[attr-defined]
        key = f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{fn}"
        us, n = out.get(key, (0.0, 0))
        out[key] = (us + tottime * 1e6 / 1000, n + ncalls)
    return out


def _print_diff(first: str, second: str, a: pstats.Stats, b: pstats.Stats) -> None:
    one, two = _own_us(a), _own_us(b)
    rows = [(two.get(k, (0.0, 0))[0] - one.get(k, (0.0, 0))[0], k, one.get(k, (0.0, 0))[1], two.get(k, (0.0, 0))[1])
            for k in set(one) | set(two)]
    rows.sort(reverse=True)
    total = sum(d for d, *_ in rows)
    print(f"\n== own time per step, {second} less {first} (profiled us; total {total:.1f})")
    print(f"{'us':>7}  {'calls ' + first:>12}  {'calls ' + second:>12}  function")
    for d, k, n1, n2 in rows[:30]:
        print(f"{d:7.2f}  {n1 / 1000:12.1f}  {n2 / 1000:12.1f}  {k}")


if __name__ == "__main__":
    main()
