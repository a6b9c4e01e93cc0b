"""A randomized pipeline fuzzer: seeded programs that use an effect as users do, run under a strategy.

The command line: ``PYTHONPATH=. python -m tests.fuzzing`` (from the repository root).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from .gpu import GpuRunner
from .model import run_model
from .program import STRATEGIES, programs
from .results import _table, summarize

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.fuzzing``: run seeded programs on the model (or ``--backend cuda``)."""
    from streamsafe.sim.schedule import SCHEDULERS

    def positive(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is not a positive count: pass 1 or more (an empty run proves nothing)")
        return value

    ap = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sim", "cuda"), default="sim")
    ap.add_argument("--programs", type=positive, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=positive, default=None, help="frames per program (default: 8 on sim, 50 on cuda)")
    ap.add_argument("--strategies", default=",".join(("none", *STRATEGIES)))
    ap.add_argument("--scheduler", type=str.lower, choices=SCHEDULERS, default="adversarial", help="sim: adversarial, random or in-order")
    ap.add_argument("--schedule-seeds", type=positive, default=1, help="sim with the random scheduler: seeds per program")
    ap.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failing result")
    args = ap.parse_args(argv)
    known = ("none", *STRATEGIES)
    strategies = list(dict.fromkeys(s.strip().lower() for s in args.strategies.split(",")))
    unknown = [s for s in strategies if s not in known]
    if unknown:
        ap.error(f"--strategies: unknown strategy {unknown[0]!r}; choose from {', '.join(known)}")
    runner = None
    if args.backend == "cuda":
        try:
            runner = GpuRunner()
        except Exception as e:  # no torch or CuPy, or no GPU for them
            ap.error(f"--backend cuda needs torch and CuPy on a machine with an NVIDIA GPU ({e}); use --backend sim here")
    frames = args.frames or (8 if args.backend == "sim" else 50)
    progs = programs(args.programs, seed=args.seed, frames=frames)
    results = []
    for strategy in strategies:
        for prog in progs:
            if runner is not None:
                results.append(runner.run(prog, strategy))
                continue
            seeds = range(1, args.schedule_seeds + 1) if args.scheduler == "random" else [0]
            for s in seeds:
                results.append(run_model(prog, strategy, scheduler=args.scheduler, seed=s))
    if args.verbose:
        for r in results:
            if not r.ok:
                print(r)
    print(_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summarize(results), f, indent=1)
    bad = [r for r in results if r.strategy != "none" and not r.ok]
    return 1 if bad else 0
