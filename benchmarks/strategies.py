"""Sync strategies side by side on the emulated effects: `streamsafe bench` from a script.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/strategies.py [--scenario b,c] [--frames 200]
Without a GPU it runs on the simulated backend (counts only). Built on streamsafe.bench's harness;
writes bench.json and bench.png next to the current directory unless told otherwise.
"""

from __future__ import annotations

import argparse
import sys

from streamsafe.cli import main as cli_main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all")
    parser.add_argument("--strategy", default="all")
    parser.add_argument("--frames", default=None)
    parser.add_argument("--json", default="bench.json")
    parser.add_argument("--png", default="bench.png")
    args = parser.parse_args()
    argv = ["bench", "--scenario", args.scenario, "--strategy", args.strategy, "--json", args.json, "--png", args.png]
    if args.frames:
        argv += ["--frames", args.frames]
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
