"""Sync strategies side by side on the emulated effects: `streamsafe bench` from a script.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/strategies.py [--scenario b,c] [--frames 200]
Without a GPU it runs on the simulated backend (counts only, so no chart). It runs ``python3 -m streamsafe
bench`` with these options (see ``docs/benchmarks.md`` for how to read it); writes bench.json (and on a GPU
bench.png) in the current directory unless told otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all")
    parser.add_argument("--strategy", default="all")
    parser.add_argument("--frames", default=None)
    parser.add_argument("--json", default="bench.json")
    parser.add_argument("--png", default=None, help="the chart (a GPU run only; default there: bench.png)")
    args = parser.parse_args()
    from streamsafe.backend import cuda_available

    png = args.png if args.png is not None else ("bench.png" if cuda_available() else None)
    argv = [sys.executable, "-m", "streamsafe", "bench", "--scenario", args.scenario, "--strategy", args.strategy, "--json", args.json]
    if png is not None:
        argv += ["--png", png]
    if args.frames:
        argv += ["--frames", args.frames]
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
