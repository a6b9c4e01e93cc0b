"""The ``streamsafe`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamsafe", description="Safe CUDA stream ordering for GPU video effects.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    doctor = sub.add_parser("doctor", help="print Python, packages, driver, GPUs and their stream kinds")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
