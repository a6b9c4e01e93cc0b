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
import traceback
from collections.abc import Iterator
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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _effect_report(contract: Any) -> EffectReport:
    stats = contract.stats
    plan = contract._last_plan
    by_hazard = {k: v for k, v in sorted(stats.items()) if k.startswith("H")}
    return EffectReport(
        effect=contract.effect_name,
        device=contract.device,
        runs=stats["runs"],
        fences=stats["fences"],
        fences_by_hazard=by_hazard,
        host_waits=stats["host_waits"],
        device_syncs=stats["device_syncs"],
        sdk_waits=stats["sdk_waits"],
        requested=contract.strategy.value,
        strategy=plan.strategy.value if plan is not None else "-",
        why=plan.reason if plan is not None else "the effect never ran",
    )


def run_program(
    target: str,
    args: list[str],
    *,
    module: bool = False,
    strategy: str = "auto",
    sanitize: bool = False,
    fake_nvvfx: bool = False,
) -> RunReport:
    """Run ``target`` (a script path, or a module name when ``module``) with ``args`` as its
    ``sys.argv[1:]``, every nvvfx effect guarded. Blocks until the program ends; returns the report.

    Raises ``ImportError`` when ``nvvfx`` cannot be imported and ``fake_nvvfx`` is false."""
    from .. import hooks
    from ..sim import mirror
    from ..backend import SimBackend, current_backend

    model_scope: Any = contextlib.nullcontext()
    fake_model: Any = None
    if fake_nvvfx:
        from ..backend import cuda_available
        from ..sim.backend import SimBackend as _Sim
        from ..testing.fake_nvvfx import install_fake_nvvfx

        install_fake_nvvfx(force=True)
        if not cuda_available():  # on the model, run ready work in the order that breaks a missing fence
            fake_model = _Sim(scheduler="adversarial")
            model_scope = _default_backend(fake_model)  # every thread's default, not only this one's
    import importlib

    nvvfx = importlib.import_module("nvvfx")
    model = None
    if sanitize:
        os.environ.pop("STREAMSAFE_SANITIZE", None)
        model = mirror.Mirror()
        model.sim.on_race = "record"  # report at exit; the program runs to its end
        hooks.register(model)
    cg: ClassGuard = guard(nvvfx, strategy=as_strategy(strategy))
    argv, path0 = sys.argv[:], sys.path[0] if sys.path else None
    status = 0
    try:
        with model_scope:
            if module:
                sys.argv = [target, *args]
                sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory import
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target, *args]
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException:  # the program's own error: shown as Python would, then the report
        traceback.print_exc()
        status = 1
    finally:
        sys.argv = argv
        if path0 is not None and sys.path and sys.path[0] != path0:
            sys.path.pop(0)
        cg.undo()
        if model is not None:
            hooks.unregister(model)
    report = RunReport([target, *args], status, strategy, sanitize, fake_nvvfx)
    report.effects = [_effect_report(c) for c in cg.contracts]
    if sanitize:
        races: list[Any] = list(model.races) if model is not None else []
        models = {id(c.backend): c.backend for c in cg.contracts if isinstance(c.backend, SimBackend)}
        for be in (current_backend(), fake_model):
            if isinstance(be, SimBackend):
                models.setdefault(id(be), be)
        for sim in models.values():  # on the model every access is seen: its own report is the sanitizer's
            races += sim.races
        report.races = [str(r) for r in races]
    return report


@contextlib.contextmanager
def _default_backend(backend: Any) -> Iterator[Any]:
    """Make ``backend`` the process-wide default (every thread's) for the block."""
    from .. import backend as backends

    with backends._default_lock:
        saved, backends._default = backends._default, backend
    try:
        yield backend
    finally:
        with backends._default_lock:
            backends._default = saved


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
