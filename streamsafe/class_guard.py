"""Class-level guards: every instance of an effect class goes through its own contract.

:func:`guard` (``ss.guard(nvvfx)``, ``ss.guard(VideoSuperRes)``) is what ``streamsafe run`` is
built on. It puts :mod:`streamsafe.guarding`'s dispatchers on the classes and registers a
:class:`ClassGuard`; the dispatchers then route each instance's plain calls to a contract made
for that instance at its first call. Nothing here blocks the host.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .contract import StreamContract
from .errors import ArgumentError, FrameworkUnavailableError, NotAnEffectError, StreamsafeError
from .guarding import install, register_class_guard, withdraw_class_guard
from .ledger import ledger_of
from .pool_contract import PoolContract, default_pool_contract
from .profile import profile_of, profiles
from .strategy import Strategy, StrategyName, as_strategy

__all__ = ["ClassGuard", "guard", "unguard", "guarded_classes", "effect_class_names"]


def effect_class_names() -> tuple[str, ...]:
    """The class names the registered SDK profiles describe (what :func:`guard` looks for in a module)."""
    return tuple(dict.fromkeys(name for profile in profiles() for name in profile.classes))


@dataclass
class ClassGuard:
    """Every instance of ``classes`` goes through its own contract (``strategy``, ``options``)
    from its first call. Undo with :meth:`undo` or by leaving the ``with`` block."""

    classes: tuple[type, ...]
    strategy: Strategy | StrategyName = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    contracts: list[StreamContract] = field(default_factory=list)
    """Every effect contract this guard made, in order (for reports)."""
    pool_contracts: list[PoolContract] = field(default_factory=list)
    """Every decoder contract this guard made, in order (for reports)."""
    active: bool = True
    _pinned: bool = field(default=False, repr=False)
    """Left by :func:`unguard` (the guard ``streamsafe run`` puts around a program); only :meth:`undo` ends it."""

    _record: bool = field(default=True, repr=False)
    """Keep each contract in :attr:`contracts` (``streamsafe run``'s guard does not: it counts them elsewhere,
    without keeping every effect's ledger alive)."""

    def contract_for(self, effect: Any) -> Any:
        """The contract this guard made for ``effect`` (made at its first call, and again after a close). Does not block."""
        if profile_of(effect).pool:  # a decoder: its pool keeps the contract
            pooled = default_pool_contract(effect, self.strategy, _pool_options(self.options), self)
            if self._record and pooled not in self.pool_contracts:
                self.pool_contracts.append(pooled)
            return pooled
        ledger = ledger_of(effect, create=False)
        contract = ledger.default_contract if ledger is not None else None
        if contract is None or contract.closed or contract.guard_owner is not self:
            contract = StreamContract(effect, None, strategy=self.strategy, **self.options)
            contract._hold_effect_weakly()  # the ledger keeps the contract; the program owns the effect
            contract.guard_owner = self
            contract.ledger.default_contract = contract
            if self._record:
                self.contracts.append(contract)
        return contract

    def undo(self) -> None:
        """Stop guarding the classes (instances already running keep their ledgers); a guard this one
        covered (an outer ``with ss.guard(...)``) guards them again. Idempotent. Does not block and
        orders nothing: each instance's ledger keeps ordering its next run after its earlier ones."""
        with _guards_lock:
            if not self.active:
                return
            self.active = False
            for cls in self.classes:
                _withdraw(cls, self)

    def __enter__(self) -> ClassGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def _classes_of(target: Any) -> list[type]:
    if isinstance(target, type):
        return [target]
    if isinstance(target, types.ModuleType):
        names = effect_class_names()
        found = [getattr(target, n) for n in names if isinstance(getattr(target, n, None), type)]
        if not found:
            raise StreamsafeError(
                f"module {target.__name__!r} has none of {', '.join(names)}: nothing to guard. "
                "Pass the nvvfx module (or streamsafe.testing), or an effect class."
            )
        return found
    if isinstance(target, str):
        module = sys.modules.get(target)
        if module is None:
            import importlib

            try:
                module = importlib.import_module(target)
            except ImportError as e:
                fakes = {"nvvfx": "install_fake_nvvfx()", "PyNvVideoCodec": "install_fake_pynvvideocodec()"}
                fake = fakes.get(target)
                raise FrameworkUnavailableError(
                    target, f"guard({target!r})", str(e), "pynvvideocodec" if target == "PyNvVideoCodec" else None,
                    f"or, on a machine without it, call streamsafe.testing.{fake} first (the emulation)" if fake
                    else "or pass the module or class itself",
                ) from e
        return _classes_of(module)
    if isinstance(target, Iterable):
        return [cls for item in target for cls in _classes_of(item)]
    raise NotAnEffectError(
        f"cannot guard {target!r} (type {type(target).__name__}): pass an effect class, a module such as nvvfx, "
        "its name, or a list of those"
    )


def _pool_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options of a class guard that a decoder's contract takes (an effect's input and conversion streams
    are not a decoder's)."""
    return {k: v for k, v in options.items() if k not in ("input_stream", "conversion_stream")}


GUARD_OPTIONS = ("input_stream", "consumer_stream", "conversion_stream", "backend", "allow_none")
"""The :class:`~streamsafe.StreamContract` options a class guard passes on to each instance's contract."""


def guard(target: Any, *, strategy: Strategy | StrategyName = "auto", **options: Any) -> ClassGuard:
    """Guard every instance of the effect classes in ``target`` (a class, a module such as
    ``nvvfx``, its name, or a list), from their first ``run()``: each instance gets its own
    :class:`~streamsafe.StreamContract` (``strategy``; ``options`` as for the contract), whose
    SDK stream is the program's current stream at each call. Plain ``sr.run(...)`` then returns a
    :class:`~streamsafe.SafeOutput`. Returns a :class:`ClassGuard`; undo it with ``.undo()``,
    :func:`unguard`, or use it as a context manager. Does not block."""
    as_strategy(strategy, allow_none=bool(options.get("allow_none")))
    unknown = sorted(set(options) - set(GUARD_OPTIONS))
    if unknown:
        raise ArgumentError(
            f"guard() got an unexpected option {unknown[0]!r}: a class guard takes strategy= and the contract "
            f"options {', '.join(GUARD_OPTIONS)} (the SDK stream is the current stream at each call)"
        )
    classes = _classes_of(target)
    if not classes:
        raise NotAnEffectError(
            f"guard({target!r}) found no effect class to guard: pass an effect class (nvvfx.VideoSuperRes), "
            "a module such as nvvfx, its name, or a list of those"
        )
    for cls in classes:
        if not install(cls):
            raise StreamsafeError(
                f"cannot guard {cls.__qualname__}: the class does not accept new attributes. "
                "Make a StreamContract per effect and call c.run(...) instead."
            )
    cg = ClassGuard(tuple(classes), strategy, dict(options))
    with _guards_lock:
        for cls in classes:
            _guard_stacks.setdefault(cls, []).append(cg)
            register_class_guard(cls, cg)  # the newest guards the class until it ends; then the one it covered again
    return cg


def unguard(target: Any = None) -> None:
    """Undo :func:`guard` for the classes in ``target`` (every class guard when ``None``): each guard of
    those classes ends, except the one ``streamsafe run`` keeps around the program. Does not block
    and orders nothing (see :meth:`ClassGuard.undo`)."""
    classes = list(_guard_stacks) if target is None else _classes_of(target)
    with _guards_lock:
        for cls in classes:
            for cg in list(_guard_stacks.get(cls, ())):
                if cg._pinned:
                    continue
                _withdraw(cls, cg)
                if not any(cg in stack for stack in list(_guard_stacks.values())):
                    cg.active = False


_guard_stacks: dict[type, list[ClassGuard]] = {}
"""Per class, its guards from the oldest to the newest; the newest is the one in force (``_class_guards``)."""
_guards_lock = threading.RLock()
"""Held while guards are added or taken off (threads may end their ``with ss.guard(...)`` blocks at once)."""


def _withdraw(cls: type, cg: ClassGuard) -> None:
    """Take ``cg`` off ``cls``'s guards (the caller holds ``_guards_lock``); the newest one left (if any)
    guards ``cls`` again."""
    stack = _guard_stacks.get(cls)
    if stack is None:
        return
    try:
        stack.remove(cg)
    except ValueError:  # (already off: a signal handler ending guards re-entered this)
        return
    if stack:
        register_class_guard(cls, stack[-1])
    else:
        _guard_stacks.pop(cls, None)
        withdraw_class_guard(cls)


@contextmanager
def guarded_classes(target: Any, **kwargs: Any) -> Iterator[ClassGuard]:
    cg = guard(target, **kwargs)
    try:
        yield cg
    finally:
        cg.undo()
