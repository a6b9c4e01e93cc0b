"""Sync strategies side by side on the emulated effects: `streamsafe bench` from a script.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/strategies.py [--scenario b,c] [--frames 200]
Without a GPU it runs on the simulated backend (counts only). It runs ``python3 -m streamsafe bench``
with these options (see ``docs/benchmarks.md`` for how to read it); writes bench.json and bench.png in
the current directory unless told otherwise.
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
    parser.add_argument("--png", default="bench.png")
    args = parser.parse_args()
    argv = [sys.executable, "-m", "streamsafe", "bench", "--scenario", args.scenario, "--strategy", args.strategy, "--json", args.json, "--png", args.png]
    if args.frames:
        argv += ["--frames", args.frames]
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
