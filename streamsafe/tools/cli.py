"""The ``streamsafe`` command line.

Exit status: 0 on success; 1 when ``streamsafe hazards`` finds a fenced strategy that corrupts
a frame or misses a race; 2 for a usage error (a bad option, a backend that is not available,
a trace file that cannot be written, a ``STREAMSAFE_*`` switch set to a value it does not read),
reported on one line without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._env import check_switches
from .._version import __version__
from ..errors import EnvironmentSettingError
from .run_files import program_from_stdin, write_whole

__all__ = ["main", "build_parser"]


class UsageError(Exception):
    """A problem with the command line or the machine, reported as one line with exit status 2."""


def _choose(value: str, known: Sequence[str], what: str) -> list[str]:
    """The names of a comma-separated option (any case; ``all`` for every one), in order, repeats dropped."""
    chosen: list[str] = []
    for given in value.split(","):
        name = given.strip().lower()
        if name == "all":
            return list(known)
        if not name:
            raise UsageError(f"an empty {what} name in {value!r}; give names separated by commas, e.g. {known[0]},{known[-1]}, or all")
        if name not in known:
            raise UsageError(f"unknown {what} {given.strip()!r}; choose from {', '.join(known)} or all")
        if name not in chosen:
            chosen.append(name)
    return chosen


# -- shared checks ---------------------------------------------------------------------------


def _resolve_backend(requested: str) -> str:
    """``auto`` -> ``cuda`` when the GPU lab can run, else ``sim``; ``cuda`` is checked up front."""
    if requested == "sim":
        return "sim"
    missing = [name for module, name in (("torch", "PyTorch"), ("cupy", "CuPy")) if importlib.util.find_spec(module) is None]
    from ..backend.cuda import CudaBackend

    reason = CudaBackend.probe()
    if requested == "auto":
        return "cuda" if not missing and reason is None else "sim"
    if reason is not None and "driver" in reason:  # no GPU here at all: installing packages would not help
        raise UsageError(f"--backend cuda needs an NVIDIA GPU and driver: {reason}; use --backend sim to run on the model")
    if missing:
        raise UsageError(
            f"--backend cuda needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed "
            "(pip install torch cupy-cuda13x); use --backend sim to run on the model"
        )
    if reason is not None:
        raise UsageError(f"--backend cuda needs an NVIDIA GPU and driver: {reason}; use --backend sim to run on the model")
    return "cuda"


def _check_writable(path: str, option: str) -> None:
    """Fail now, not after minutes of work, when ``path`` cannot be written. Leaves no file behind."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    existed = os.path.exists(path)
    if existed and not os.path.isfile(path):  # (a device or a pipe: opening it may block or end a reader)
        if not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path}: cannot write it (permission denied)")
        return
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write it ({e.strerror or e})") from None
    if not existed:
        os.unlink(os.path.realpath(path))  # (through a link to a new file: the file made, not the link)


def _bar(total: int, desc: str) -> Any:
    """A tqdm bar on stderr, or ``None`` when stderr is not a terminal (never ``\\r`` into a pipe or
    a file) or tqdm is missing (a checkout used through ``PYTHONPATH``)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=False, dynamic_ncols=True)


@contextmanager
def _progress(total: int, desc: str) -> Iterator[Callable[[str], None]]:
    """Yields ``step(label)``: one unit done, ``label`` shown beside the bar (if there is one)."""
    bar = _bar(total, desc)

    def step(label: str) -> None:
        if bar is not None:
            bar.set_postfix_str(label, refresh=False)
            bar.update(1)

    try:
        yield step
    finally:
        if bar is not None:
            bar.close()


# -- doctor ------------------------------------------------------------------------------------


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


# -- hazards -----------------------------------------------------------------------------------

_HAZARDS_EPILOG = """\
Output: a short table per hazard, then a legend and a VERDICT line. Per hazard:
  race?    without streamsafe (strategy none), did the model see the hazard race?
  corrupt  frames whose copy differs from a NumPy reference, of the frames run, without streamsafe
  auto event async stream device
           each fenced strategy: "ok" (no corrupt frame, no race), or "2/4 H3" (2 of 4 frames
           corrupt; H3 = a race the fence missed)
  control  rows whose stream kinds make the hazard impossible; another hazard may still corrupt
           frames there without streamsafe: its name follows the count, e.g. "3/4 (H5)", and a
           note under the row says so (not a failure of the control)
  fence    what strategy auto does for the hazard, in terms of the streams P (input producer),
           S (the SDK's stream_ptr), L (the RGB8 conversion, stream 0) and C (the consumer)
--full adds every row: its stream kinds (P S L C: 0 legacy, t per-thread, b blocking,
n non-blocking, S the SDK stream), nb (run(non_blocking=...)), enc (RGB8 or RGB10A2),
the hazards of every race reported, and corrupt frames.

Exit status: 0 when every fenced strategy keeps every frame intact with no race; 1 when one
does not; 2 for a usage error."""


def _hazards(args: argparse.Namespace) -> int:
    from .hazards import (
        LEGEND,
        LEGEND_FULL,
        SCENARIOS,
        STRATEGIES,
        chrome_trace,
        failures,
        format_summary,
        format_table,
        format_verdict,
        rows_to_json,
        run_matrix,
    )

    known = list(dict.fromkeys(s.hazard for s in SCENARIOS if s.hazard != "-"))
    scenarios = SCENARIOS
    if args.only is not None:
        wanted = [h.strip().upper() for h in args.only.split(",") if h.strip()]
        unknown = [h for h in wanted if h not in known]
        if unknown or not wanted:
            what = f"unknown hazard {', '.join(map(repr, unknown))}" if unknown else "no hazard given"
            raise UsageError(f"--only {args.only!r}: {what}; known: {', '.join(known)}")
        scenarios = tuple(s for s in SCENARIOS if s.hazard in wanted)
    strategies = tuple(_choose(args.strategy, STRATEGIES, "strategy"))
    if args.trace:
        _check_writable(args.trace, "--trace")
    backend = _resolve_backend(args.backend)

    trace: list[dict[str, object]] | None = [] if args.trace else None
    rows = []
    with _progress(len(strategies) * len(scenarios), "hazards") as step:
        for strategy in strategies:  # the order of run_matrix: strategy, then scenario
            for sc in scenarios:
                rows += run_matrix(backend=backend, frames=args.frames, scenarios=[sc], strategies=[strategy], trace=trace)
                step(f"{strategy} {sc.hazard}")
    if args.json:
        print(rows_to_json(rows))
        print(format_verdict(rows), file=sys.stderr)
    else:
        parts = [format_table(rows), ""] if args.full else []
        parts += [format_summary(rows, scenarios), "", LEGEND]
        if args.full:
            parts.append(LEGEND_FULL)
        parts += ["", format_verdict(rows)]
        print("\n".join(parts))
    if args.trace:
        try:
            with open(args.trace, "w") as f:
                json.dump(chrome_trace(trace or []), f)
        except OSError as e:
            raise UsageError(f"--trace {args.trace}: cannot write it ({e.strerror or e})") from None
        print(f"wrote the model's timelines to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    return 1 if failures(rows) else 0


# -- bench -------------------------------------------------------------------------------------


def _bench(args: argparse.Namespace) -> int:
    from ..bench import SCENARIOS, gpu_factory, run_bench, sim_factory
    from .hazards import STRATEGIES

    for path, option in ((args.json, "--json"), (args.png, "--png")):
        if path:
            _check_writable(path, option)
    if args.from_json:
        return _bench_again(args)
    scenarios = _choose(args.scenario, [s.key for s in SCENARIOS], "scenario")
    strategies = _choose(args.strategy, STRATEGIES, "strategy")
    backend = _resolve_backend(args.backend)
    import warnings

    from ..errors import HostWaitWarning

    warnings.filterwarnings("ignore", category=HostWaitWarning)  # (the readme row's: the report's notes say it once)
    _check_png(args.png, timed=backend == "cuda")
    from .doctor import collect

    if backend == "cuda":
        if "jax" not in sys.modules:
            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch and CuPy
        report = collect()
        gpus = report["cuda"].get("gpus") or [{}]
        env = {"gpu": gpus[0].get("name", "?"), "driver": report["cuda"].get("driver"), "packages": report["packages"],
               "python": report["python"]}
        factory: Any = gpu_factory
        frames, warmup, block = args.frames or 100, args.warmup if args.warmup is not None else 20, args.block or 20
    else:
        env = {"gpu": None, "packages": collect()["packages"], "note": "simulated backend"}
        factory = sim_factory
        frames, warmup, block = args.frames or 8, args.warmup if args.warmup is not None else 2, args.block or 4
    if frames % block:
        given = lambda option, n, default: f"{option} {n}" + (" (the default here)" if default else "")  # noqa: E731
        lower, higher = frames // block * block, (frames // block + 1) * block
        raise UsageError(
            f"{given('--frames', frames, args.frames is None)} is not a multiple of {given('--block', block, args.block is None)}: "
            f"every strategy runs whole blocks; pass --frames {higher}" + (f" or {lower}" if lower else "")
        )
    progress = None if args.quiet else _BenchProgress()
    try:
        result = run_bench(
            factory, scenarios, strategies, frames=frames, warmup=warmup, block=block, backend=backend,
            timed=backend == "cuda", progress=progress, environment=env,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        if progress is not None:
            progress.close()
    _bench_outputs(result, args)
    return 0


def _check_png(png: str | None, *, timed: bool, saved: str | None = None) -> None:
    """Refuse ``--png`` before anything runs when no chart could be drawn: a run on the model (no times) or no
    matplotlib."""
    if not png:
        return
    if not timed:
        where = f"the run in {saved} was made on the simulated backend" if saved else "this run is on the simulated backend"
        raise UsageError(f"--png {png}: {where}, which measures no time, so there is no frames/s chart to draw; run on "
                         "a GPU (--backend cuda) for one, or drop --png (the counts are in the table, and in --json)")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"--png {png}: the chart needs matplotlib, which is not installed (pip install "
                         "'streamsafe[bench]'); or drop --png")


def _bench_outputs(result: Any, args: argparse.Namespace) -> None:
    """The table on stdout, then the ``--json`` and ``--png`` files asked for."""
    from ..bench import write_json, write_png
    from ..bench.report import format_table

    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote every raw sample to {args.json}", file=sys.stderr)
    if args.png:
        why = write_png(result, args.png)
        print(f"chart not written: {why}" if why else f"wrote the chart to {args.png}", file=sys.stderr)


def _bench_again(args: argparse.Namespace) -> int:
    """``--from-json``: a saved run's table (and chart, JSON) again, its cells chosen with ``--scenario`` and
    ``--strategy``; nothing runs."""
    from ..bench.report import chosen_cells, read_json

    running = [o for o, v in (("--frames", args.frames), ("--warmup", args.warmup), ("--block", args.block),
                              ("--backend", None if args.backend == "auto" else args.backend)) if v is not None]
    if running:
        raise UsageError(f"{', '.join(running)} set how a run goes, and --from-json runs nothing: drop "
                         f"{'it' if len(running) == 1 else 'them'}, or drop --from-json to run the bench")
    try:
        result = read_json(args.from_json)
    except OSError as e:
        raise UsageError(f"--from-json {args.from_json}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    _check_png(args.png, timed=result.timed, saved=args.from_json)
    scenarios = _choose(args.scenario, result.scenarios, "scenario in that run")
    strategies = _choose(args.strategy, result.strategies, "strategy in that run")
    try:
        result = chosen_cells(result, scenarios, strategies)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _bench_outputs(result, args)
    return 0


class _BenchProgress:
    """The harness's ``progress(done, total, label)`` callback, drawn with :func:`_bar`."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._started = False

    def __call__(self, done: int, total: int, label: str) -> None:
        if not self._started:
            self._bar, self._started = _bar(total, "bench"), True
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# -- parser ------------------------------------------------------------------------------------


def _run(args: argparse.Namespace, shown: str | None = None) -> int:
    """``streamsafe run``; ``shown``: the script's name in the report when it is not the path run (``-``)."""
    from .runner import RunReport, command_status, format_advice, format_report, run_program
    from ..strategy import Strategy

    if args.module is None and not args.program:
        raise UsageError("give a script to run (streamsafe run [options] script.py [args...]) or -m module")
    if args.module is not None and not args.module.strip():
        raise UsageError(f"-m {args.module!r}: the module name is empty; give the module to run as a script, "
                         "e.g. -m mypackage.pipeline (as python -m takes it)")
    chosen = args.strategy.strip().lower()
    offered = [s.value for s in Strategy if s is not Strategy.NONE]
    choose = f"choose {', '.join(offered[:-1])} or {offered[-1]}"
    if chosen == Strategy.NONE.value:
        raise UsageError("strategy 'none' (no fences) is not offered here: streamsafe run guards the program; "
                         f"run it with plain python to see it unguarded, or {choose}")
    if chosen not in offered:
        raise UsageError(f"unknown strategy {args.strategy!r}: {choose}")
    args.strategy = chosen
    target, rest = (args.module, list(args.program)) if args.module is not None else (args.program[0], list(args.program[1:]))
    if args.module is None and target == "-":  # the program on standard input, as `python -` reads it
        with tempfile.TemporaryDirectory(prefix="streamsafe-stdin-") as folder:
            try:
                args.program = [program_from_stdin(folder), *rest]
            except SyntaxError as e:  # (as Python reports it: the traceback's last lines, status 1)
                sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
                return 1
            return _run(args, shown="-")
    if args.module is None and not (os.path.isfile(target) or os.path.isfile(os.path.join(target, "__main__.py"))):
        raise UsageError(f"{target}: no such file" if not os.path.isdir(target) else f"{target}: a folder without __main__.py")
    if args.report:
        _check_writable(args.report, "--report")
        args.report = os.path.abspath(args.report)  # (the program may change the working directory)
    err = sys.stderr  # (the program may close or replace its own)

    def emit(report: RunReport) -> None:
        """The report on the command's stderr, and ``--report``'s JSON (a regular file written whole).
        A report file that cannot be written is said in one line; the exit status stays."""
        with contextlib.suppress(ValueError, OSError):  # (a program that closed its stdout)
            sys.stdout.flush()
        if shown is not None and report.program:
            report.program[0] = shown
        text = format_report(report) + "\n" + (format_advice(report) + "\n" if args.advise else "")
        try:
            err.write(text)
            err.flush()
        except (ValueError, OSError):  # (closed: the process's stderr itself)
            with contextlib.suppress(OSError):
                os.write(2, text.encode())
        if args.report:
            try:
                write_whole(args.report, report.to_json() + "\n")
            except OSError as e:
                with contextlib.suppress(ValueError, OSError):
                    os.write(2, f"streamsafe run: --report {args.report}: cannot write it ({e.strerror or e}); "
                                "the report is above\n".encode())

    try:  # (the report comes from run_program: at the end, or inside the program's os._exit())
        report = run_program(target, rest, module=args.module is not None, strategy=args.strategy,
                             sanitize=args.sanitize, fake_nvvfx=args.fake_nvvfx, exiting=getattr(args, "exiting", False),
                             report_to=emit)
    except ImportError as e:
        if "cannot import any SDK" in str(e) and not args.fake_nvvfx:
            raise UsageError(str(e)) from None
        raise
    return command_status(report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamsafe",
        description="Safe CUDA stream ordering for GPU video effects (nvvfx) and decoders (PyNvVideoCodec) across "
                    "PyTorch, CuPy and JAX.",
        epilog="Without a GPU every command runs on the simulated backend (a CUDA ordering model).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    doctor = sub.add_parser("doctor", help="print Python, packages, driver, GPUs and their stream kinds",
                            description="What this machine offers streamsafe: Python, package versions, the CUDA "
                                        "driver and GPUs, and the kind of each framework's streams. Works with no GPU.")
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object")
    doctor.set_defaults(func=_doctor)
    hazards = sub.add_parser(
        "hazards",
        help="run each hazard (H1-H6, H12) with and without streamsafe; print a verdict per hazard",
        description="Run each hazard scenario (H1-H6, H12, with controls) on the emulated effects, without "
                    "streamsafe (strategy none) and with each fenced strategy, and report races and corrupt frames.",
        epilog=_HAZARDS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hazards.add_argument("--backend", choices=["auto", "sim", "cuda"], default="auto",
                         help="sim: the model (no GPU needed); cuda: real kernels (needs PyTorch, CuPy and a GPU) "
                              "plus the model's race verdict; auto: cuda when available, else sim (default)")
    hazards.add_argument("--frames", type=positive_int, default=None, help="frames per scenario (default: 4 on sim, 100 on cuda)")
    hazards.add_argument("--only", metavar="H1,H3", help="comma-separated hazards to run (H1-H6, H12)")
    hazards.add_argument("--strategy", default="all",
                         help="comma-separated strategies (none, auto, event, async, stream, device) or all (default)")
    hazards.add_argument("--full", action="store_true", help="also print every row of the matrix (streams, nb, enc, races)")
    hazards.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of each scenario on the model")
    hazards.add_argument("--json", action="store_true",
                         help="print every row as one JSON array of objects instead of the tables "
                              "(the verdict line goes to stderr)")
    hazards.set_defaults(func=_hazards)
    bench = sub.add_parser("bench", help="compare sync strategies side by side (GPU, or counts on the model)",
                           description="Run the benchmark scenarios under each strategy and print frames/s, latency, "
                                       "fences and host waits per frame, and corrupt frames. On the simulated backend "
                                       "only counts are real; times are shown as '-'.")
    bench.add_argument("--backend", choices=["auto", "sim", "cuda"], default="auto",
                       help="sim, cuda (needs PyTorch, CuPy and a GPU), or auto (default)")
    bench.add_argument("--scenario", default="all", help="comma-separated scenario keys (a, b, c, c-gpu, d-cupy, d-jax, e-4k, e-rgb10, f-vfg, f-hdr, g-host, server-1, server-2, server-4, server-8) or all")
    bench.add_argument("--strategy", default="all", help="comma-separated strategies or all")
    bench.add_argument("--frames", type=positive_int, help="timed frames per strategy and scenario (default 100 on cuda, 8 on sim)")
    bench.add_argument("--warmup", type=non_negative_int, help="untimed frames first (default 20 on cuda, 2 on sim)")
    bench.add_argument("--block", type=positive_int, help="frames per interleaved block (default 20 on cuda, 4 on sim)")
    bench.add_argument("--json", metavar="PATH", help="write environment, summary and every raw sample")
    bench.add_argument("--png", metavar="PATH", help="write a chart of each strategy's frames/s over the hand-written "
                                                     "rows' (needs matplotlib and a GPU run: the model measures no time)")
    bench.add_argument("--from-json", metavar="PATH", help="run nothing: print the table of a run that --json saved "
                                                           "(and write --png, --json from it; --scenario and --strategy "
                                                           "choose its cells)")
    bench.add_argument("--quiet", action="store_true", help="no progress bar (there is none when stderr is not a terminal)")
    bench.set_defaults(func=_bench)
    run = sub.add_parser(
        "run",
        help="run a Python program unchanged, with every object of every SDK a profile describes guarded (nvvfx "
             "effects, PyNvVideoCodec decoders, PyAV containers)",
        description="Run a Python program unchanged (as compute-sanitizer or nsys wrap a binary): every nvvfx "
                    "effect it creates goes through its own stream contract from its first run(), with the "
                    "program's own current stream (torch or CuPy) as the SDK stream at each call; every "
                    "PyNvVideoCodec decoder (SimpleDecoder, ThreadedDecoder) through its own from its first "
                    "decode, its stream the cuda_stream it was made with; and any object of a class a registered "
                    "profile names. At exit, a report per effect and decoder goes to stderr: calls, fences by "
                    "hazard, host waits, the strategy chosen and why, and races found (with --sanitize).",
        epilog="Exit status: the program's; 3 when --sanitize found a race and the program exited 0; "
               "2 for a usage error.\nExamples:\n  streamsafe run --fake-nvvfx video_super_resolution.py -i in.mp4\n"
               "  streamsafe run --sanitize --report report.json -m mypackage.pipeline --frames 100",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--strategy", default="auto", help="auto (default), event, async, stream or device")
    run.add_argument("--sanitize", action="store_true",
                     help="check every access with the happens-before model; races are reported at exit")
    run.add_argument("--fake-nvvfx", action="store_true",
                     help="make `import nvvfx` load streamsafe's emulation (no SDK needed; no GPU needed)")
    run.add_argument("--advise", action="store_true",
                     help="also print, per guarded object, the input_stream= declaration that would drop the host "
                          "waits auto keeps when nothing is declared, and the time they took in this run")
    run.add_argument("--report", metavar="FILE", help="also write the report as JSON")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module as a script (like python -m)")
    run.add_argument("program", nargs="*", help="the script and its arguments (or the module's arguments); '-' reads the "
                                                "program from standard input, as python - does")
    run.set_defaults(func=_run)
    parser.set_defaults(subparsers=sub.choices)  # (main() reports a command's unknown options with its own usage)
    return parser


def positive_int(text: str) -> int:
    """An option's value that must be 1 or more (``--frames``, ``--block``): argparse's ``type``."""
    return _whole_number(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An option's value that must be 0 or more (``--warmup``): argparse's ``type``."""
    return _whole_number(text, 0, "a non-negative integer")


def _whole_number(text: str, least: int, kind: str) -> int:
    """``text`` as an int of at least ``least``, else argparse's error naming the value, ``kind`` and the fix."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}: give a whole number, {least} or more") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {value}: give {least} or more")
    return value


def _split_run(argv: list[str]) -> tuple[list[str], list[str]]:
    """``run``'s own options end at the script (or after ``-m MODULE``); the rest is the program's."""
    takes_value = {"--strategy", "--report"}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[: i + 2], argv[i + 2:]
        if arg.startswith("-m") and not arg.startswith("--"):  # -mMODULE, as python takes it
            return [*argv[:i], "-m", arg[2:]], argv[i + 1:]
        if arg in takes_value:
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            return argv[:i], argv[i:]
    return argv, []


def entry() -> int:
    """The ``streamsafe`` command (and ``python -m streamsafe``): :func:`main` as the process's entry point,
    so ``streamsafe run`` shuts the program's threads down as the interpreter does at exit. Output piped
    into a reader that stops early (``streamsafe doctor | head``) ends the command quietly, status 1."""
    try:
        status = main(exiting=True)
        with contextlib.suppress(ValueError):  # (a program run by streamsafe run closed it: as Python, no error)
            sys.stdout.flush()
        return status
    except BrokenPipeError:
        if not _stdout_broken():
            raise  # (another pipe: a --report FILE whose reader went, say)
        # the reader of the output went: Python's recipe (no second error at the interpreter's own flush)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _stdout_broken() -> bool:
    """Whether standard output is a pipe whose reader has gone (the poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # (no poll on this platform, or no real stdout)
        return True


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status. ``exiting``:
    the process ends after it (see :func:`entry`)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program: list[str] | None = None
    if argv and argv[0] == "run":
        argv, program = _split_run(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(args, "command", None)
        (args.subparsers.get(command, parser) if command else parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if program is not None:
        args.program = program
    args.exiting = exiting  # (streamsafe run then shuts the program's threads down as the interpreter does)
    try:
        if args.command != "doctor":  # (doctor lists every setting, and says what is wrong with each)
            check_switches()  # a switch set to a value streamsafe would refuse mid-run: said now, in one line
        return int(args.func(args))
    except (UsageError, EnvironmentSettingError) as e:
        print(f"streamsafe {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"streamsafe {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
