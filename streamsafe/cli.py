"""The ``streamsafe`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _hazards(args: argparse.Namespace) -> int:
    from .hazards import SCENARIOS, STRATEGIES, chrome_trace, format_table, rows_to_json, run_matrix

    backend = args.backend
    if backend == "auto":
        backend = "cuda" if _gpu_lab_available() else "sim"
    scenarios = SCENARIOS
    if args.only:
        wanted = {h.strip().upper() for h in args.only.split(",")}
        scenarios = tuple(s for s in SCENARIOS if s.hazard in wanted)
        if not scenarios:
            known = sorted({s.hazard for s in SCENARIOS if s.hazard != "-"})
            print(f"streamsafe hazards: --only {args.only!r} matches no hazard; known: {', '.join(known)}", file=sys.stderr)
            return 2
    strategies = STRATEGIES if args.strategy == "all" else tuple(x.strip() for x in args.strategy.split(","))
    unknown = [x for x in strategies if x not in STRATEGIES]
    if unknown:
        print(f"streamsafe hazards: unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGIES)} or all", file=sys.stderr)
        return 2
    trace: list[dict[str, object]] | None = [] if args.trace else None
    rows = run_matrix(backend=backend, frames=args.frames, scenarios=scenarios, strategies=strategies, trace=trace)
    print(rows_to_json(rows) if args.json else format_table(rows))
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(chrome_trace(trace or []), f)
        print(f"wrote the model's timelines to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import SCENARIOS, gpu_factory, progress_bar, run_bench, sim_factory, write_json, write_png
    from .bench.report import format_table
    from .hazards import STRATEGIES

    backend = args.backend
    if backend == "auto":
        backend = "cuda" if _gpu_lab_available() else "sim"
    keys = [s.key for s in SCENARIOS]
    scenarios = keys if args.scenario == "all" else [x.strip() for x in args.scenario.split(",")]
    bad = [x for x in scenarios if x not in keys]
    if bad:
        print(f"streamsafe bench: unknown scenario {bad[0]!r}; choose from {', '.join(keys)} or all", file=sys.stderr)
        return 2
    strategies = list(STRATEGIES) if args.strategy == "all" else [x.strip() for x in args.strategy.split(",")]
    bad = [x for x in strategies if x not in STRATEGIES]
    if bad:
        print(f"streamsafe bench: unknown strategy {bad[0]!r}; choose from {', '.join(STRATEGIES)} or all", file=sys.stderr)
        return 2
    if backend == "cuda":
        if "jax" not in sys.modules:
            import os

            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch and CuPy
        from .doctor import collect

        report = collect()
        gpus = report["cuda"].get("gpus") or [{}]
        env = {"gpu": gpus[0].get("name", "?"), "driver": report["cuda"].get("driver"), "packages": report["packages"],
               "python": report["python"]}
        factory: Any = gpu_factory
        frames, warmup, block = args.frames or 100, args.warmup if args.warmup is not None else 20, args.block or 20
    else:
        from .doctor import collect

        env = {"gpu": None, "packages": collect()["packages"], "note": "simulated backend"}
        factory = sim_factory
        frames, warmup, block = args.frames or 8, args.warmup if args.warmup is not None else 2, args.block or 4
    try:
        result = run_bench(
            factory, scenarios, strategies, frames=frames, warmup=warmup, block=block, backend=backend,
            timed=backend == "cuda", progress=None if args.quiet else progress_bar(sys.stderr), environment=env,
        )
    except ValueError as e:
        print(f"streamsafe bench: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote every raw sample to {args.json}", file=sys.stderr)
    if args.png:
        why = write_png(result, args.png)
        print(f"chart not written: {why}" if why else f"wrote the chart to {args.png}", file=sys.stderr)
    return 0


def _gpu_lab_available() -> bool:
    import importlib.util

    from .backend import cuda_available

    return all(importlib.util.find_spec(m) for m in ("torch", "cupy")) and cuda_available()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamsafe", description="Safe CUDA stream ordering for GPU video effects.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    doctor = sub.add_parser("doctor", help="print Python, packages, driver, GPUs and their stream kinds")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_doctor)
    hazards = sub.add_parser(
        "hazards",
        help="run each hazard (H1-H6, H12) on the emulated effects and report races and corrupted frames",
    )
    hazards.add_argument("--backend", choices=["auto", "sim", "cuda"], default="auto",
                         help="sim: the model (no GPU needed); cuda: real kernels plus the model's verdict (default: auto)")
    hazards.add_argument("--frames", type=_positive, default=None, help="frames per scenario (default: 4 on sim, 100 on cuda)")
    hazards.add_argument("--only", help="comma-separated hazards to run, e.g. H1,H3")
    hazards.add_argument("--strategy", default="all",
                         help="comma-separated strategies (none, auto, event, async, stream, device) or all (default)")
    hazards.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of each scenario on the model")
    hazards.add_argument("--json", action="store_true", help="print one JSON object per row")
    hazards.set_defaults(func=_hazards)
    bench = sub.add_parser("bench", help="compare sync strategies side by side (GPU, or counts on the model)")
    bench.add_argument("--backend", choices=["auto", "sim", "cuda"], default="auto")
    bench.add_argument("--scenario", default="all", help="comma-separated scenario keys (a, b, c, d-cupy, d-jax, e-4k, e-rgb10, f-vfg, f-hdr) or all")
    bench.add_argument("--strategy", default="all", help="comma-separated strategies or all")
    bench.add_argument("--frames", type=_positive, help="timed frames per strategy and scenario (default 100 on cuda, 8 on sim)")
    bench.add_argument("--warmup", type=int, help="untimed frames first (default 20 on cuda, 2 on sim)")
    bench.add_argument("--block", type=_positive, help="frames per interleaved block (default 20 on cuda, 4 on sim)")
    bench.add_argument("--json", metavar="PATH", help="write environment, summary and every raw sample")
    bench.add_argument("--png", metavar="PATH", help="write a frames/s chart (needs matplotlib)")
    bench.add_argument("--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=_bench)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
