"""``streamsafe run``: run a Python program unchanged with every nvvfx effect it creates guarded.

As compute-sanitizer or nsys wrap a binary, :func:`run_program` wraps a script or a module:
it guards the classes of ``nvvfx`` (:func:`streamsafe.guard`), so every effect the program
makes goes through its own contract from its first ``run()``, with the program's own current
stream (torch or CuPy) as the SDK stream at each call; then it runs the program as
``__main__`` and, at exit, reports per effect: runs, fences by hazard, host waits, the
strategy chosen and why, and (with ``sanitize``) the races found.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import threading
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from ..class_guard import ClassGuard, guard
from ..strategy import as_strategy

__all__ = ["EffectReport", "RunReport", "run_program", "format_report"]

RACE_EXIT_STATUS = 3
"""The exit status of ``streamsafe run --sanitize`` when the program exited 0 but races were found."""


@dataclass
class EffectReport:
    """What streamsafe did for one effect the program created."""

    effect: str
    device: int
    runs: int
    fences: int
    fences_by_hazard: dict[str, int]
    host_waits: int
    device_syncs: int
    sdk_waits: int
    requested: str
    strategy: str
    why: str


@dataclass
class RunReport:
    program: list[str]
    exit_status: int
    strategy: str
    sanitize: bool
    fake_nvvfx: bool
    effects: list[EffectReport] = field(default_factory=list)
    races: list[str] = field(default_factory=list)
    """Each race found (``sanitize``), as one line for people."""
    race_details: list[dict[str, Any]] = field(default_factory=list)
    """The same races, structured: ``buffer``, ``kind``, ``first`` and ``second`` (``op``, ``access``, ``where``), ``fix``."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _effect_reports(made: list[Any]) -> list[EffectReport]:
    """One report per effect: every contract the program, the guard or a decorator made on it, counted
    together; the plan is the effect's last run's (its ledger keeps it), the strategy asked for that of
    the contract that ran most."""
    by_effect: dict[int, list[Any]] = {}
    for m in made:
        by_effect.setdefault(id(m.ledger), []).append(m)
    reports = []
    for group in by_effect.values():
        stats: dict[str, int] = {}
        for m in group:
            for k, v in m.stats.items():
                stats[k] = stats.get(k, 0) + v
        lead = max(group, key=lambda m: m.stats["runs"]) if any(m.stats["runs"] for m in group) else group[0]
        plan = lead.ledger.plan
        reports.append(EffectReport(
            effect=lead.effect,
            device=lead.device,
            runs=stats["runs"],
            fences=stats["fences"],
            fences_by_hazard={k: v for k, v in sorted(stats.items()) if k.startswith("H")},
            host_waits=stats["host_waits"],
            device_syncs=stats["device_syncs"],
            sdk_waits=stats["sdk_waits"],
            requested=lead.requested,
            strategy=plan.strategy.value if plan is not None else "-",
            why=plan.reason if plan is not None else "the effect never ran" if not stats["runs"] else "its last run was unguarded",
        ))
    return reports


def run_program(
    target: str,
    args: list[str],
    *,
    module: bool = False,
    strategy: str = "auto",
    sanitize: bool = False,
    fake_nvvfx: bool = False,
    exiting: bool = False,
) -> RunReport:
    """Run ``target`` (a script path, or a module name when ``module``) with ``args`` as its
    ``sys.argv[1:]``, every nvvfx effect guarded. Blocks until the program ends; returns the report.

    ``exiting`` (what ``streamsafe run`` passes: the process ends after the report): when the main
    module returns, the interpreter's shutdown of threads runs here, as it would at exit (threading's
    exit hooks, such as a thread pool's, then every non-daemon thread is waited for), so threads the
    program leaves running stay guarded and counted. Without it, threads still running after the main
    module are not waited for. A program that ends with ``os._exit()`` gets no report.

    Raises ``ImportError`` when ``nvvfx`` cannot be imported and ``fake_nvvfx`` is false."""
    from .. import hooks
    from ..sim import mirror
    from ..contract import collecting_contracts
    from ..sim.backend import collecting_races

    model_scope: Any = contextlib.nullcontext()
    fake_model: Any = None
    if fake_nvvfx:
        from ..backend import cuda_available, process_default
        from ..sim.backend import SimBackend as _Sim
        from ..testing.fake_nvvfx import install_fake_nvvfx

        install_fake_nvvfx(force=True)
        if not cuda_available():  # on the model, run ready work in the order that breaks a missing fence
            fake_model = _Sim(scheduler="adversarial")
            model_scope = process_default(fake_model)  # every thread's default, not only this one's
    import importlib

    nvvfx = importlib.import_module("nvvfx")
    model = None
    if sanitize:
        os.environ.pop("STREAMSAFE_SANITIZE", None)
        model = mirror.Mirror()
        model.sim.on_race = "record"  # report at exit; the program runs to its end
        hooks.register(model)
    cg: ClassGuard = guard(nvvfx, strategy=as_strategy(strategy))
    cg._pinned = True  # the program's own unguard() leaves it
    argv, path0 = sys.argv[:], sys.path[0] if sys.path else None
    threads_before = set(threading.enumerate())
    status = 0
    # every race any model finds while the program runs: the mirror's (real GPU calls), the fake nvvfx
    # model's, and those of models the program makes itself
    races_scope: Any = collecting_races() if sanitize else contextlib.nullcontext([])
    try:
        with races_scope as races, collecting_contracts() as made, model_scope:
            try:
                sys.argv = [target, *args]
                if module:
                    sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory import
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                elif os.path.isdir(target):  # a folder with __main__.py, as `python appdir` runs it
                    runpy.run_path(target, run_name="__main__")
                else:
                    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                    runpy.run_path(target, run_name="__main__")
            finally:
                if exiting:
                    _shut_down_threads(threads_before)  # as the interpreter does before it exits
    except SystemExit as e:
        code = int(e.code) if isinstance(e.code, bool) else e.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except KeyboardInterrupt as e:  # as Python: the traceback, then the status of SIGINT
        _print_program_error(e)
        status = 130
    except BaseException as e:  # the program's own error: shown as Python would, then the report
        _print_program_error(e)
        status = 1
    finally:
        sys.argv = argv
        if path0 is not None and sys.path and sys.path[0] != path0:
            sys.path.pop(0)
        cg.undo()
        if model is not None:
            hooks.unregister(model)
    report = RunReport([target, *args], status, strategy, sanitize, fake_nvvfx)
    report.effects = _effect_reports(made)
    if sanitize:
        report.races = [str(r) for r in races]
        report.race_details = [_race_details(r) for r in races]
    return report


def _shut_down_threads(before: set[threading.Thread]) -> None:
    """What the interpreter does with threads before it exits: threading's exit hooks (a thread pool's
    shutdown), the main thread marked as ended, then a wait for every non-daemon thread (CPython's own
    ``threading._shutdown``, which runs once; elsewhere, a wait for the threads the program started)."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()
        return
    _join_program_threads(before)


def _join_program_threads(before: set[threading.Thread]) -> None:
    """Block until every non-daemon thread the program started has ended (also those they start)."""
    current = threading.current_thread()
    while True:
        alive = [t for t in threading.enumerate() if t is not current and t not in before and not t.daemon and t.is_alive()]
        if not alive:
            return
        for t in alive:
            t.join()


def _print_program_error(error: BaseException) -> None:
    """The program's traceback as Python prints it: from the program's own frames, not the runner's."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb)


def _race_details(race: Any) -> dict[str, Any]:
    """A race as the JSON report gives it: the buffer, the kind, both accesses (operation, read or write,
    stream or host) and the fix."""
    def access(a: Any) -> dict[str, Any]:
        return {"op": a.op, "access": a.kind, "where": a.where}

    return {"buffer": race.buffer, "kind": race.kind, "first": access(race.first), "second": access(race.second), "fix": race.fix}


def format_report(report: RunReport) -> str:
    """The short report ``streamsafe run`` prints to stderr at exit."""
    lines = [
        f"streamsafe run: {len(report.effects)} effect(s) guarded, strategy {report.strategy}"
        + (" (emulated nvvfx)" if report.fake_nvvfx else ""),
    ]
    for i, e in enumerate(report.effects, 1):
        hazards = ", ".join(f"{k} {v}" for k, v in e.fences_by_hazard.items()) or "none needed"
        lines.append(
            f"  {i}. {e.effect} (cuda:{e.device}): {e.runs} run(s); fences {e.fences} ({hazards}); "
            f"host waits {e.host_waits}; device syncs {e.device_syncs}; SDK waits {e.sdk_waits}"
        )
        chosen = e.requested if e.strategy == e.requested else f"{e.requested} -> {e.strategy}"
        lines.append(f"     strategy {chosen}: {e.why}")
    if report.sanitize:
        if report.races:
            lines.append(f"  sanitize: {len(report.races)} race(s) found:")
            lines += [f"    - {r}" for r in report.races[:10]]
            if len(report.races) > 10:
                lines.append(f"    ... and {len(report.races) - 10} more")
        else:
            lines.append("  sanitize: no race found")
    lines.append(f"  program exit status: {report.exit_status}")
    return "\n".join(lines)
