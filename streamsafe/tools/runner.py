"""``streamsafe run``: run a Python program unchanged with every SDK object it creates guarded.

As compute-sanitizer or nsys wrap a binary, :func:`run_program` wraps a script or a module: it guards the
classes of every SDK a registered profile describes that imports here (:func:`streamsafe.guard`: nvvfx's
effects, PyNvVideoCodec's decoders, and any SDK a program registered a profile for), so every object the
program makes goes through its own contract from its first call, with the program's own current stream (torch
or CuPy) as the SDK stream at each call; then it runs the program as ``__main__`` and, at exit, reports per
object: calls, fences by hazard, host waits, the strategy chosen and why, and (with ``sanitize``) the races found.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import marshal
import operator
import os
import pkgutil
import runpy
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NoReturn

from ..class_guard import ClassGuard, guard
from ..profile import profiles
from ..strategy import as_strategy

__all__ = ["EffectReport", "RunReport", "run_program", "command_status", "format_report", "format_advice"]

RACE_EXIT_STATUS = 3
"""The exit status of ``streamsafe run --sanitize`` when the program exited 0 but races were found."""


@dataclass
class EffectReport:
    """What streamsafe did for one effect the program created."""

    effect: str
    device: int
    runs: int
    fences: int
    """Device-side fences (a stream waiting on an event)."""
    fences_by_hazard: dict[str, int]
    """Every fence streamsafe made, of any kind, by hazard: they add up to ``fences + host_waits + device_syncs``."""
    host_waits: int
    device_syncs: int
    sdk_waits: int
    """Runs in which the SDK itself made the host wait (``non_blocking=False``; a decoder's every call): not streamsafe's."""
    requested: str
    strategy: str
    why: str
    kind: str = "effect"
    """``"effect"``, or ``"decoder"`` for an object its profile says is a pooled SDK."""
    input_copies: int = 0
    """Inputs ``auto`` copied, with no ``input_stream`` declared (the host waited for the copies)."""
    copy_wait_ms: float = 0.0
    """Milliseconds the host waited for those copies, measured in this run: at most what declaring saves."""
    input_streams: list[str] = field(default_factory=list)
    """With no ``input_stream`` declared: the streams the inputs came from (their framework's current stream at
    the calls)."""
    advice: str = ""
    """The declaration that would drop a host wait kept every call, and what it saves; empty when none would."""


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
    forked_children: int = 0
    """Processes the program made with ``fork()`` (``multiprocessing``'s fork start method among them)
    while ``streamsafe run`` (``run_program`` with ``report_to``) ran it: they make no report, so their
    runs are in none. 0 without ``report_to``, which counts nothing."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _state_of(contract: Any) -> Any:
    """The ordering state a contract's counts belong to: the guarded object's ledger."""
    return contract.ledger


def _is_hazard(counter: str) -> bool:
    """Whether a counter is a hazard's (``H5``, ``D5``), not a total (``fences``, ``runs``)."""
    return len(counter) > 1 and counter[0] in "HD" and counter[1:].isdigit()


class _EffectTally:
    """One effect's counts over every contract made on it. A contract that is gone has its counts added
    into the totals at the next look (unless its counters are still the effect's current output's, which
    later imports count into): memory grows with effects, not with the contracts a block per frame makes.
    Its owner's lock is held around every call."""

    def __init__(self, contract: Any) -> None:
        self.effect, self.device = contract.effect_name, contract.device
        self.ledger = weakref.ref(_state_of(contract))
        self.plan: Any = _state_of(contract).plan
        self.kind = "decoder" if contract.profile.pool else "effect"
        self.totals: dict[str, int] = {}
        self.runs_by_strategy: dict[str, int] = {}
        self.live: list[tuple[Any, dict[str, int], str]] = []
        self.undeclared: list[Any] = []
        """Each contract's record of inputs with no ``input_stream`` (it outlives the contract, as its counters do)."""

    def add(self, contract: Any) -> None:
        self._fold_gone()
        if self.plan is None and contract.profile.pool:
            self.plan = contract.plan  # (a decoder's contract has its plan from the start)
        if contract.undeclared is not None and all(u is not contract.undeclared for u in self.undeclared):
            self.undeclared.append(contract.undeclared)
        self.live.append((weakref.ref(contract), contract.stats, contract.strategy.value))

    def _fold_gone(self) -> None:
        ledger = self.ledger()
        current = ledger.import_counters() if ledger is not None else []
        if ledger is not None:
            self.plan = ledger.plan
        kept = []
        for entry in self.live:
            if entry[0]() is None and not any(entry[1] is stats for stats in current):
                self._count(entry[1], entry[2], self.totals, self.runs_by_strategy)
            else:
                kept.append(entry)
        self.live = kept

    @staticmethod
    def _count(stats: dict[str, int], strategy: str, totals: dict[str, int], runs: dict[str, int]) -> None:
        for k, v in list(stats.items()):
            totals[k] = totals.get(k, 0) + v
        runs[strategy] = runs.get(strategy, 0) + stats.get("runs", 0)

    def report(self, first: str) -> EffectReport:
        self._fold_gone()
        totals, runs = dict(self.totals), dict(self.runs_by_strategy)
        for _, stats, strategy in self.live:
            self._count(stats, strategy, totals, runs)
        plan = self.plan
        requested = max(runs, key=runs.__getitem__) if any(runs.values()) else first
        verb = "decoded" if self.kind == "decoder" else "ran"
        why = (plan.reason if plan is not None else f"the {self.kind} never {verb}" if not totals.get("runs")
               else f"not known: the {self.kind} went before the report, with its last plan")
        streams = list(dict.fromkeys(str(st) for u in self.undeclared for st in u.streams))
        waited_ms = sum(u.wait_s for u in self.undeclared) * 1e3
        copies = totals.get("input_copies", 0)
        report = EffectReport(
            effect=self.effect, device=self.device, runs=totals.get("runs", 0), fences=totals.get("fences", 0),
            fences_by_hazard={k: v for k, v in sorted(totals.items()) if _is_hazard(k)},
            host_waits=totals.get("host_waits", 0), device_syncs=totals.get("device_syncs", 0),
            sdk_waits=totals.get("sdk_waits", 0), requested=requested,
            strategy=plan.strategy.value if plan is not None else "-", why=why, kind=self.kind,
            input_copies=copies, copy_wait_ms=round(waited_ms, 3), input_streams=streams,
        )
        report.advice = _advice(report, plan)
        return report


def _advice(e: EffectReport, plan: Any) -> str:
    """The declaration that drops the host wait ``auto`` kept for undeclared inputs, with what it saves."""
    kept_sdk_wait = plan is not None and plan.undeclared_wait == "sdk"
    if not e.input_copies and not (kept_sdk_wait and e.sdk_waits):
        return ""
    if e.input_copies:
        cost = (f"auto copied {e.input_copies} input(s) and the host waited {e.copy_wait_ms:.1f} ms for the copies "
                "(what the declaration saves, at most)")
    else:
        cost = f"the SDK made the host wait for its work in {e.sdk_waits} call(s) (inputs streamsafe cannot copy)"
    if len(e.input_streams) == 1:
        where = (f"every input came from {e.input_streams[0]}, the current stream at the calls: if nothing else writes "
                 "the inputs, declare it, input_stream=<that stream> where you make the guard "
                 "(e.g. ss.stream_contract(sr, S, input_stream=S) when the frames are made on S)")
    elif e.input_streams:
        where = (f"the inputs came from {len(e.input_streams)} streams ({'; '.join(e.input_streams)}): one input_stream "
                 "covers one; make the inputs on one stream, then declare it")
    else:
        where = "the inputs' streams were not known (JAX, or a producer with no stream): declare the stream that writes them"
    return f"{cost}; {where}"


class ContractTally:
    """Inside the ``with`` block, every contract made (by the program, a guard or a decorator) is counted
    per effect (:meth:`reports`), without keeping contracts, effects or ledgers alive."""

    def __init__(self) -> None:
        self._effects: dict[int, tuple[Any, _EffectTally, str]] = {}
        self._gone: list[tuple[Any, _EffectTally, str]] = []
        """Tallies of effects whose ledger went and whose ``id`` a new ledger got."""
        self._lock = threading.Lock()
        """Contracts are made on any thread."""

    def add(self, contract: Any) -> None:
        ledger = _state_of(contract)
        key = id(ledger)
        with self._lock:
            entry = self._effects.get(key)
            if entry is None or entry[0]() is not ledger:
                if entry is not None:
                    self._gone.append(entry)
                entry = self._effects[key] = (weakref.ref(ledger), _EffectTally(contract), contract.strategy.value)
            entry[1].add(contract)

    def reports(self, wait: float | None = None) -> list[EffectReport]:
        """One report per effect. Blocks while another thread counts a contract: at most ``wait`` seconds,
        if given, then reads without the lock (a signal handler on the thread that holds it)."""
        held = self._lock.acquire(timeout=-1 if wait is None else wait)
        try:
            return [tally.report(first) for _, tally, first in [*self._gone, *self._effects.values()]]
        finally:
            if held:
                self._lock.release()

    def __enter__(self) -> ContractTally:
        from .. import contract

        contract.contract_sinks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from .. import contract

        contract.contract_sinks.remove(self)


@contextlib.contextmanager
def _sanitize_scope(model: Any) -> Any:
    """What ``streamsafe run --sanitize`` observes around the program besides what goes through streamsafe: the
    program's own host waits and event calls (they order its streams too), and torch's own ops."""
    from ..sim import sync_hooks
    from ..sim.torch_observer import observing_torch

    with sync_hooks.observing(), observing_torch(model):
        yield


def run_program(
    target: str,
    args: list[str],
    *,
    module: bool = False,
    strategy: str = "auto",
    sanitize: bool = False,
    fake_nvvfx: bool = False,
    exiting: bool = False,
    report_to: Callable[[RunReport], None] | None = None,
) -> RunReport:
    """Run ``target`` (a script path, or a module name when ``module``) with ``args`` as its
    ``sys.argv[1:]``, every SDK object guarded. Blocks until the program ends; returns the report.

    ``exiting`` (what ``streamsafe run`` passes: the process ends after the report): when the main
    module returns, the interpreter's shutdown of threads runs here, as it would at exit (threading's
    exit hooks, such as a thread pool's, then every non-daemon thread is waited for), so threads the
    program leaves running stay guarded and counted. Without it, threads still running after the main
    module are not waited for.

    ``report_to`` (what ``streamsafe run`` passes): the run's one report is handed to it, by the
    process the run started in: after the run's clean-up, or, when the program ends the process with
    ``os._exit(n)`` from any thread, inside that call (exit status ``n``; the process then ends with
    :func:`command_status` of the report). A child made by ``fork()`` hands over none, however it
    ends; the report counts those children (``forked_children``), whose runs it does not hold.

    ``fake_nvvfx``: the emulation of each SDK not installed here is loaded (on a CPU, on an adversarial model).
    Raises ``ImportError`` when no SDK a profile describes can be imported."""
    from .. import hooks
    from ..sim import mirror
    from ..sim.backend import collecting_races

    model_scope: Any = contextlib.nullcontext()
    fake_model: Any = None
    emulated: list[Any] = []  # (the emulations this run installed: taken out again at its end)
    if fake_nvvfx:
        from ..backend import cuda_available, process_default
        from ..sim.backend import SimBackend as _Sim

        emulated = _install_emulations()
        if not cuda_available():  # on the model, run ready work in the order that breaks a missing fence
            fake_model = _Sim(scheduler="adversarial")
            model_scope = process_default(fake_model)  # every thread's default, not only this one's
    targets = _sdk_modules()
    model = None
    sync_scope: Any = contextlib.nullcontext()
    if sanitize:
        os.environ.pop("STREAMSAFE_SANITIZE", None)
        model = mirror.Mirror()
        model.sim.on_race = "record"  # report at exit; the program runs to its end
        hooks.register(model)
        sync_scope = _sanitize_scope(model)
    cg: ClassGuard = guard(targets, strategy=as_strategy(strategy))
    cg.pinned = True  # the program's own unguard() leaves it
    cg.record = False  # (the tally counts its contracts; a list of them would keep every effect's ledger)
    cg.warn_host_wait = False  # (the report and --advise say it; a program's -W error is not streamsafe's to trip)
    main = _MainModule()
    argv, path0 = sys.argv[:], sys.path[0] if sys.path else None
    threads_before = set(threading.enumerate())
    status = 0
    # every race any model finds while the program runs: the mirror's (real GPU calls), the fake nvvfx
    # model's, and those of models the program makes itself
    races_scope: Any = collecting_races() if sanitize else contextlib.nullcontext([])
    found: list[Any] = []  # (the races scope's list, once it is open)

    hard_exit = _HardExit(report_to, keep=exiting) if report_to is not None else None

    def report_of(status: int, made: ContractTally, wait: float | None = None) -> RunReport:
        report = RunReport([target, *args], status, strategy, sanitize, fake_nvvfx)
        report.effects = made.reports(wait)
        if sanitize:
            races = list(found[0]) if found else []
            report.races = [str(r) for r in races]
            report.race_details = [_race_details(r) for r in races]
        report.forked_children = hard_exit.forks if hard_exit is not None else 0
        return report

    with hard_exit if hard_exit is not None else contextlib.nullcontext():
        try:
            with races_scope as races, ContractTally() as made, model_scope, sync_scope:
                found.append(races)
                if hard_exit is not None:
                    hard_exit.start(lambda status, wait: report_of(status, made, wait))
                try:
                    sys.argv = [target, *args]
                    main.run(target, module)
                except BaseException as e:  # the program's end: its error shown at once, as Python shows it
                    status = _status_of(e)
                if exiting:
                    try:
                        _shut_down_threads(threads_before)  # as the interpreter does before it exits
                    except BaseException:  # (Ctrl-C there, a hook's error): Python reports it, keeps the status
                        print("Exception ignored in: <module 'threading'>", file=sys.stderr)
                        traceback.print_exc()
        finally:
            if not exiting:  # (at the process's end the program's atexit handlers and threads still see its own)
                main.restore()
                sys.argv = argv
                if path0 is not None and sys.path and sys.path[0] != path0:
                    sys.path.pop(0)
            cg.undo()
            if model is not None:
                hooks.unregister(model)
            if not exiting:  # main() called in-process leaves sys.modules as it found it (at the process's end, the
                # program's atexit handlers still run after this and may import an SDK)
                for emulation in reversed(emulated):
                    emulation.uninstall()
        # (a fork's child makes no report: no wait for a lock another thread held at the fork)
        report = report_of(status, made, None if hard_exit is None or os.getpid() == hard_exit.pid else 0.0)
        if hard_exit is not None:
            hard_exit.report_once(report)  # (an os._exit meanwhile waits for it, then ends the process)
    return report


_KEPT_MAINS: list[types.ModuleType] = []
"""The ``__main__`` modules a program's replaced (``streamsafe``'s own, under ``python -m streamsafe``): kept, their code
may still be running (its frame's globals are theirs)."""


class _MainModule:
    """The program's ``__main__``: a real module, as ``python`` makes it (``__builtins__`` the ``builtins`` module, a
    loader, an absolute ``__file__``), put in ``sys.modules['__main__']`` for the program's whole life: its threads
    and ``atexit`` handlers pickle the classes it defines. :meth:`restore` puts the one it replaced back."""

    def __init__(self) -> None:
        self.module: types.ModuleType | None = None
        self.replaced: Any = None

    def run(self, target: str, module: bool) -> None:
        """Run ``target``: a module's name (``module``, as ``python -m`` runs it), a folder or zip file with a
        ``__main__.py`` (as ``python appdir`` does), or a script (source or compiled). Raises what the program raises."""
        if module:
            sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory import
            spec, code = _module_details(target)
            sys.argv[0] = spec.origin  # (as python -m sets it: the module's file)
        elif pkgutil.get_importer(target) is not None:  # a folder or zip file with __main__.py, as `python appdir`
            sys.path.insert(0, os.path.abspath(target))  # (as python sets it: absolute, the path as given)
            spec, code = _main_details(sys.path[0])
        else:
            path = os.path.abspath(target)  # (python 3.9+'s __file__: absolute, the path as given)
            sys.path.insert(0, os.path.dirname(os.path.realpath(target)))  # (python's: the script's own folder)
            spec, (code, compiled) = None, _script_code(path)
        g: dict[str, Any] = {"__name__": "__main__", "__doc__": None, "__builtins__": builtins, "__spec__": spec,
                             "__package__": spec.parent if spec is not None else None, "__cached__": None}
        if spec is not None:
            g.update(__file__=spec.origin, __loader__=spec.loader, __cached__=spec.cached)
        else:
            loader: Any = importlib.machinery.SourcelessFileLoader if compiled else importlib.machinery.SourceFileLoader
            g.update(__file__=path, __loader__=loader("__main__", path))
        self.module = types.ModuleType("__main__")
        self.module.__dict__.update(g)
        self.replaced = sys.modules.get("__main__")
        if self.replaced is not None:
            _KEPT_MAINS.append(self.replaced)
        sys.modules["__main__"] = self.module
        exec(code, self.module.__dict__)  # noqa: S102  (the program: what python runs)

    def restore(self) -> None:
        """The ``__main__`` the program's replaced, back (when it is still the program's)."""
        if self.module is not None and sys.modules.get("__main__") is self.module:
            if self.replaced is not None:
                sys.modules["__main__"] = self.replaced
            else:
                del sys.modules["__main__"]
        if self.replaced is not None and any(m is self.replaced for m in _KEPT_MAINS):
            _KEPT_MAINS.remove(self.replaced)
        self.module = None


def _script_code(path: str) -> tuple[Any, bool]:
    """The code of the script ``path``, and whether it was given compiled: compiled as python compiles it (named by
    its absolute path), or read from a compiled file (a ``.pyc``: ``streamsafe run -`` hands the program over as one).
    Raises ``OSError``, ``SyntaxError``."""
    with io.open_code(path) as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        return marshal.loads(data[16:]), True
    return compile(data, path, "exec", dont_inherit=True), False


def _module_details(name: str) -> tuple[Any, Any]:
    """``python -m name``'s spec and code: a package's ``__main__`` submodule for a package. Raises ``ImportError``
    (as runpy words it) and what importing the parent packages raises."""
    if name.startswith("."):
        raise ImportError("Relative module names not supported")
    parent = name.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)  # (as python -m does: the packages above it are imported first)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, AttributeError, TypeError, ValueError) as e:
        raise ImportError(f"Error while finding module specification for {name!r} ({type(e).__name__}: {e})") from e
    if spec is None:
        raise ImportError(f"No module named {name}")
    if spec.submodule_search_locations is not None:
        if name == "__main__" or name.endswith(".__main__"):
            raise ImportError("Cannot use package as __main__ module")
        try:
            return _module_details(name + ".__main__")
        except ImportError as e:
            if name + ".__main__" not in str(e):
                raise
            raise ImportError(f"{e}; {name!r} is a package and cannot be directly executed") from None
    return spec, _code_of(spec, name)


def _main_details(folder: str) -> tuple[Any, Any]:
    """The spec and code of the ``__main__`` module in ``folder`` (a folder or a zip file), as python finds it."""
    importer = pkgutil.get_importer(folder)
    spec = importer.find_spec("__main__") if importer is not None else None  # type: ignore[call-arg]
    if spec is None:
        raise ImportError(f"can't find '__main__' module in {folder!r}")
    return spec, _code_of(spec, "__main__")


def _code_of(spec: Any, name: str) -> Any:
    """The code of the module ``spec`` finds (named ``name``). Raises ``ImportError``."""
    if spec.loader is None:
        raise ImportError(f"{name!r} is a namespace package and cannot be executed")
    try:
        code = spec.loader.get_code(name)
    except ImportError as e:
        raise ImportError(format(e)) from e
    if code is None:
        raise ImportError(f"No code object available for {name}")
    return code


def _sdk_modules() -> list[Any]:
    """The modules of the SDKs the registered profiles describe that import here (each an SDK ``guard`` takes).
    Raises ``ImportError`` when none does, naming them."""
    names = list(dict.fromkeys(p.module for p in profiles() if p.module))
    modules: list[Any] = []
    failures: list[str] = []
    for name in names:
        if name not in sys.modules and not _importable(name):
            failures.append(f"{name} (not installed)")
            continue
        if _stood_in(name):
            failures.append(f"{name} (its emulation stands in for it here: --fake-nvvfx)")
            continue
        try:
            modules.append(importlib.import_module(name))
        except Exception as e:  # noqa: BLE001  (installed but broken, e.g. no driver: the program's own import says why)
            failures.append(f"{name} ({type(e).__name__}: {e})")
    if not modules:
        raise ImportError(f"cannot import any SDK streamsafe guards: {', '.join(failures)}; install one, or pass "
                          "--fake-nvvfx to run on streamsafe's emulations")
    return modules


def _stood_in(name: str) -> bool:
    """Whether the SDK ``name`` imports but cannot work here, its emulation not installed (PyAV's NVDEC without a CUDA
    device: the emulation's ``stands_in()`` says)."""
    for profile in profiles():
        if profile.module == name and profile.emulation:
            module_name, _, attr = profile.emulation.partition(":")
            emulation = getattr(importlib.import_module(module_name), attr)
            stands_in = getattr(emulation, "stands_in", None)
            return stands_in is not None and stands_in() and not emulation.is_fake(sys.modules.get(name))
    return False


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):  # (a module in sys.modules without a spec; a parent package that fails)
        return name in sys.modules


def _install_emulations() -> list[Any]:
    """The emulation of each SDK that has one (the profile's :attr:`~streamsafe.profile.Profile.emulation`) and is
    not installed here, put in place; returns those installed (an emulation already in place stays, and is not
    returned)."""
    installed = []
    seen: set[str] = set()
    for profile in profiles():
        name, where = profile.module, profile.emulation
        if not name or not where or name in seen:
            continue
        seen.add(name)
        module_name, _, attr = where.partition(":")
        emulation = getattr(importlib.import_module(module_name), attr)
        stands_in = getattr(emulation, "stands_in", None)  # (an emulation of part of a module: PyAV's NVDEC)
        if emulation.is_fake(sys.modules.get(name)) or (
                (name in sys.modules or _importable(name)) and not (stands_in is not None and stands_in())):
            continue  # (already emulated, or the real SDK is here: it is guarded as it is)
        emulation.install()
        installed.append(emulation)
    return installed


def command_status(report: RunReport) -> int:
    """The exit status of ``streamsafe run``: the program's, or :data:`RACE_EXIT_STATUS` when sanitize
    found a race and the program's status reads as success (0, or a multiple of 256, which the
    system keeps as 0)."""
    if report.races and report.exit_status % 256 == 0:
        return RACE_EXIT_STATUS
    return report.exit_status


_C_INT = range(-(2**31), 2**31)


def _count_fork(ref: weakref.ref[_HardExit]) -> None:
    """A ``fork()`` while a run went on: its parent counts it."""
    me = ref()
    if me is not None and me.active:
        me.forks += 1


class _HardExit:
    """While open, ``os._exit(n)`` in this process hands the run's report (status ``n``) to ``report_to``
    first, then ends the process with :func:`command_status` of it. One report per run: the first of
    an ``os._exit`` and the run's own end makes it; the other waits for it, and an ``os._exit`` after
    the report ends the process with :func:`command_status` of its own status against that report
    (an ``atexit`` handler's ``os._exit(0)`` after a race: 3). Goes straight to the real ``os._exit``
    for: a fork's child, a call on a thread that is reporting or waiting to (a signal handler there:
    the report is cut short, the process never hangs), an argument the real one refuses (it raises as
    it does), and, when ``keep`` is false (the process goes on after the run), any call once the run is
    over. With ``keep`` (the process ends after the report) the wrapper stays until the process ends."""

    def __init__(self, report_to: Callable[[RunReport], None], keep: bool) -> None:
        self.report_to = report_to
        self.keep = keep
        self.report_of: Callable[[int, float | None], RunReport] | None = None
        self.pid = os.getpid()
        self.forks = 0
        """Children ``fork()`` made in this process while the run went on."""
        self.real_exit = os._exit
        self.active = False
        self.reported: RunReport | None = None
        """The report handed over (then every later ``os._exit`` waits for nothing)."""
        self.inside: set[int] = set()
        """Threads reporting, or waiting to: a second ``os._exit`` on one of them goes straight out."""
        self.one_report = threading.Lock()

    def __enter__(self) -> _HardExit:
        self.active = True
        ref = weakref.ref(self)
        os.register_at_fork(after_in_parent=lambda: _count_fork(ref))  # (never unregistered: weak)
        os._exit = self._exit  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.keep and self.reported is not None and os.getpid() == self.pid:
            return  # (the process ends after the report: an atexit handler's os._exit still gets its status)
        self.active = False
        if os._exit == self._exit:  # (a program that put its own there keeps it)
            os._exit = self.real_exit

    def __reduce__(self) -> tuple[Any, ...]:
        # ``os._exit`` pickled (a spawned process's target, say): the child's own os module's
        return (importlib.import_module, ("os",))

    def start(self, report_of: Callable[[int, float | None], RunReport]) -> None:
        """The program starts: from now on ``os._exit`` reports with ``report_of(status, wait)``."""
        self.report_of = report_of

    def report_once(self, report: RunReport) -> None:
        """The run's own end: hand ``report`` over unless an ``os._exit`` did, or this is a fork's child.
        Blocks while an ``os._exit`` is reporting (which then ends the process)."""
        if os.getpid() != self.pid:
            return
        me = threading.get_ident()
        self.inside.add(me)
        try:
            with self.one_report:
                if self.reported is None:
                    self.reported = report
                    self.report_to(report)
        finally:
            self.inside.discard(me)

    def _exit(self, *args: Any, **kwargs: Any) -> NoReturn:
        real = self.real_exit
        if not args and list(kwargs) == ["status"]:
            args, kwargs = (kwargs["status"],), {}
        if len(args) != 1 or kwargs:
            real(*args, **kwargs)  # (raises the real one's TypeError)
        try:
            code = operator.index(args[0])
        except TypeError:
            real(args[0])  # (raises TypeError, as the real one does)
        if code not in _C_INT:
            real(args[0])  # (raises OverflowError, as the real one does: the program may go on)
        me = threading.get_ident()
        if not self.active or self.report_of is None or os.getpid() != self.pid or me in self.inside:
            real(code)
        self.inside.add(me)
        try:
            with self.one_report:  # (a report under way, another thread's or the run's end, finishes first)
                if self.reported is not None:
                    real(command_status(replace(self.reported, exit_status=code)))
                final = code
                try:
                    report = self.report_of(code, 1.0)  # (a lock held by a thread this call interrupted: 1 s)
                    final = command_status(report)
                    self.reported = report
                    self.report_to(report)
                except BaseException:  # the report failed: say so, still end as the program asked
                    with contextlib.suppress(BaseException):
                        traceback.print_exc()
                finally:
                    for stream in (sys.stdout, sys.stderr):
                        with contextlib.suppress(BaseException):
                            stream.flush()
                    real(final)
        finally:  # (only when the real os._exit raised: a stand-in a test put there)
            self.inside.discard(me)


def _status_of(error: BaseException) -> int:
    """The exit status a program ending with ``error`` gets from Python, with its message or traceback
    printed as Python prints them (without the runner's frames)."""
    if isinstance(error, SystemExit):
        code = int(error.code) if isinstance(error.code, bool) else error.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
        return code if isinstance(code, int) else (0 if code is None else 1)
    _print_program_error(error)
    return 130 if isinstance(error, KeyboardInterrupt) else 1


def _shut_down_threads(before: set[threading.Thread]) -> None:
    """What the interpreter does with threads before it exits: threading's exit hooks (a thread pool's
    shutdown), the main thread marked as ended, then a wait for every non-daemon thread (CPython's own
    ``threading._shutdown``, which runs once; elsewhere, a wait for the threads the program started)."""
    shutdown = getattr(threading, "_shutdown", None)
    main = threading.main_thread()
    if shutdown is not None and threading.current_thread() is main and main.is_alive():  # (it runs once)
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


def format_advice(report: RunReport) -> str:
    """``streamsafe run --advise``: per guarded object, the declaration that drops the host waits ``auto`` kept
    because nothing was declared, and what it saves (measured in the run); or that none is needed."""
    lines = ["streamsafe run --advise:"]
    for i, e in enumerate(report.effects, 1):
        if e.advice:
            lines.append(f"  {i}. {e.effect} (cuda:{e.device}): {e.advice}")
        else:
            lines.append(f"  {i}. {e.effect} (cuda:{e.device}): nothing to declare (no host wait was kept for want of a "
                         "declaration)")
    if not report.effects:
        lines.append("  no SDK object was guarded")
    lines.append("  (the streams are each input's framework's current stream at the call, as DLPack's convention has it: "
                 "declare one only if nothing else writes the inputs once run() returns)")
    return "\n".join(lines)


def format_report(report: RunReport) -> str:
    """The short report ``streamsafe run`` prints to stderr at exit."""
    kinds = {kind: sum(e.kind == kind for e in report.effects) for kind in ("effect", "decoder")}
    guarded = " and ".join(f"{n} {kind}(s)" for kind, n in kinds.items() if n) or "0 effect(s)"
    lines = [
        f"streamsafe run: {guarded} guarded, strategy {report.strategy}" + (" (emulated nvvfx)" if report.fake_nvvfx else ""),
    ]
    for i, e in enumerate(report.effects, 1):
        hazards = ", ".join(f"{k} {v}" for k, v in sorted(e.fences_by_hazard.items(), key=lambda kv: (kv[0][0], int(kv[0][1:]))))
        calls = "call(s)" if e.kind == "decoder" else "run(s)"
        lines.append(
            f"  {i}. {e.effect} (cuda:{e.device}): {e.runs} {calls}; {e.fences} device fences, {e.host_waits} host waits, "
            f"{e.device_syncs} device syncs" + (f" (by hazard: {hazards})" if hazards else " (none needed)")
            + f"; the SDK's own host waits {e.sdk_waits}"
        )
        chosen = e.requested if e.strategy == e.requested else f"{e.requested} -> {e.strategy}"
        lines.append(f"     strategy {chosen} (its last {'call' if e.kind == 'decoder' else 'run'}'s plan): {e.why}")
        if e.advice:
            lines.append(f"     a declaration would drop a host wait kept every call: {e.advice}")
        if e.requested == "auto" and 0 < e.sdk_waits < e.runs:  # (plans that let the SDK wait on the host, and others)
            lines.append(f"     auto's plan changed between runs: in {e.sdk_waits} of {e.runs} the SDK waited on the host "
                         "(event's plan: other threads drove effects on the device, or the streams changed)")
    if report.sanitize:
        if report.races:
            lines.append(f"  sanitize: {len(report.races)} race(s) found:")
            lines += [f"    - {r}" for r in report.races[:10]]
            if len(report.races) > 10:
                lines.append(f"    ... and {len(report.races) - 10} more")
        else:
            lines.append("  sanitize: no race found")
    if report.forked_children:
        lines.append(f"  the program forked {report.forked_children} process(es): their runs are not counted here")
    lines.append(f"  program exit status: {report.exit_status}")
    return "\n".join(lines)
