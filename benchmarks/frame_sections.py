"""Where the C steady-state frame's time goes, section by section, inside a bench scenario's real frames.

Needs the extension built with its section timers (never in a normal build):

    gcc -O2 -shared -fPIC -DSTREAMSAFE_FRAME_PROFILE $(python3-config --includes) streamsafe/_native.c \
        streamsafe/_replay.c -o streamsafe/_native$(python3-config --extension-suffix)
    PYTHONPATH=. python3 benchmarks/frame_sections.py [SCENARIO] [--row auto] [--blocks 7] [--json PATH]

and the normal build again after it (the same line without ``-DSTREAMSAFE_FRAME_PROFILE``).

On a GPU machine it runs the bench's pipeline (``GpuPipeline``) for SCENARIO (default ``g-host``); with
``--sim`` the same pipeline on the model (``SimPipeline``: a check that the timers work, not a cost). It
prints each section of ``replay`` (``StreamContract.run``'s C frame) and of ``import_output`` (``out.torch()``'s
C import): host microseconds per call, the median over blocks of 200 steps. The sections are consecutive, so
they add up to the C calls' whole time; a clock read costs about 20-30 ns and lands in each section once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="g-host")
    parser.add_argument("--row", default="auto")
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--sim", action="store_true", help="on the model (checks the timers; its costs mean nothing)")
    parser.add_argument("--json", help="every block's sections, host us a call, and their medians, to this file")
    args = parser.parse_args()
    from streamsafe import _native  # type: ignore[attr-defined]

    profile = getattr(_native, "frame_profile", None)
    if profile is None:
        sys.exit("streamsafe._native has no section timers: build it with -DSTREAMSAFE_FRAME_PROFILE (see this script's docstring)")
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.pipelines import GpuPipeline, SimPipeline, scenario_by_key

    sc = scenario_by_key(args.scenario)
    pipe = SimPipeline(sc, as_row(args.row)) if args.sim else GpuPipeline(sc, as_row(args.row))
    per_call: dict[str, list[float]] = {}
    calls: dict[str, float] = {}
    try:
        for i in range(100):
            pipe.step(i)
        pipe.drain()
        pipe.check()
        profile()
        frame = 100
        for _ in range(args.blocks):
            for i in range(frame, frame + 200):
                pipe.step(i)
            frame += 200
            for name, (ns, n) in profile().items():
                if n:
                    per_call.setdefault(name, []).append(ns / n / 1000)
                    calls[name] = n / 200
            pipe.drain()
            pipe.check()
    finally:
        pipe.close()
    print(f"{args.scenario} / {args.row}{' (model)' if args.sim else ''}: the C frame's sections, host us a call, "
          f"median of {args.blocks} blocks of 200 steps")
    total = {"replay": 0.0, "import": 0.0}
    for name, xs in per_call.items():
        m = statistics.median(xs)
        total[name.split(":")[0]] += m * calls[name]
        print(f"  {name:<62} {m:7.2f}  ({calls[name]:.1f} a step)")
    for part, us in total.items():
        print(f"  {part + ', every section, a step':<62} {us:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": args.scenario, "row": args.row, "model": args.sim, "unit": "host us a call",
                       "blocks_us": per_call, "calls_a_step": calls,
                       "medians_us": {name: statistics.median(xs) for name, xs in per_call.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
