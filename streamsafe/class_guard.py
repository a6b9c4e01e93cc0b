"""Class-level guards: every instance of an SDK's classes goes through its own contract.

:func:`guard` (``ss.guard(nvvfx)``, ``ss.guard(VideoSuperRes)``, ``ss.guard("PyNvVideoCodec")``) is what
``streamsafe run`` is built on. It puts :mod:`streamsafe.guarding`'s dispatchers on the classes the registered
profiles name and registers a :class:`ClassGuard`; the dispatchers then route each instance's plain calls to a
contract made for that instance at its first call. A guard holds its contracts by their objects, weakly: an
object a program drops goes, with its contract. Nothing here blocks the host.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .backend import require_backend
from .backend.naming import as_stream
from .contract import OPTIONS, PoolContract, StreamContract, made_for_plain_calls, new_contract
from .errors import ArgumentError, CudaDriverError, FrameworkUnavailableError, NotAnEffectError, StreamsafeError
from .guarding import install, register_class_guard, withdraw_class_guard
from .identity import WeakIdentityMap
from .profile import check_class, profile_of, profiles
from .strategy import Strategy, StrategyName, as_strategy

__all__ = ["ClassGuard", "guard", "unguard", "guarded_classes", "effect_class_names", "GUARD_OPTIONS"]

GUARD_OPTIONS = OPTIONS
"""The contract options a class guard passes on to each instance's contract."""


def effect_class_names() -> tuple[str, ...]:
    """The class names the registered SDK profiles describe (what :func:`guard` looks for in a module)."""
    names = []
    for profile in profiles():
        for c in profile.classes:
            names.append(c.__name__ if isinstance(c, type) else c.rpartition(".")[2])
    return tuple(dict.fromkeys(names))


@dataclass(eq=False)
class ClassGuard:
    """Every instance of ``classes`` goes through its own contract (``strategy``, ``options``) from its first call.
    Undo with :meth:`undo` or by leaving the ``with`` block. ``with`` blocks of one guard nest: it ends as the
    outermost one is left. An ended guard guards nothing and cannot be entered again: call :func:`guard` again."""

    classes: tuple[type, ...]
    strategy: Strategy | StrategyName = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    contracts: list[StreamContract] = field(default_factory=list)
    """Every effect contract this guard made, in order (for reports; not when :attr:`record` is false)."""
    pool_contracts: list[PoolContract] = field(default_factory=list)
    """Every decoder contract this guard made, in order (for reports; not when :attr:`record` is false)."""
    active: bool = True
    pinned: bool = False
    """Left by :func:`unguard` (the guard ``streamsafe run`` puts around a program); only :meth:`undo` ends it."""
    record: bool = True
    """Keep each contract in :attr:`contracts` (``streamsafe run``'s guard does not: it counts them elsewhere, and
    a list of them would keep a contract per object the program made)."""
    warn_host_wait: bool = True
    """Whether the effect contracts this guard makes warn of an ``auto`` host wait a declaration would drop
    (:attr:`StreamContract.warn_host_wait`; ``streamsafe run``'s guard does not: its report and ``--advise`` say it)."""

    def __post_init__(self) -> None:
        self._made: WeakIdentityMap[Any] = WeakIdentityMap()  # (by identity: objects that compare equal are two)
        self._made_pinned: dict[int, tuple[Any, Any]] = {}  # (objects that cannot be weakly referenced)
        self._lock = threading.RLock()  # (re-entrant: an object the collector finalizes meanwhile may call through this guard)
        self._depth = 0  # (the `with` blocks of this guard open now: it ends as the outermost is left)

    def contract_for(self, obj: Any) -> Any:
        """The contract this guard made for ``obj`` (made at its first call, and again after a close); ``None`` when no
        registered profile describes ``obj`` now (unregistered since: its calls are the SDK's own). Does not block."""
        contract = self._made_for(obj)
        if contract is not None and not contract.closed:
            return contract
        with self._lock:
            contract = self._made_for(obj)
            if contract is not None and not contract.closed:
                return contract
            try:
                pool = profile_of(obj).pool
            except NotAnEffectError:  # (no profile describes it now, unregistered since: the call is the SDK's own)
                return None
            options = {k: v for k, v in self.options.items() if not pool or k not in ("input_stream", "conversion_stream")}
            with made_for_plain_calls():
                contract = new_contract(obj, None, strategy=self.strategy, **options)
            contract.hold_effect_weakly()  # this guard keeps the contract; the program owns the object
            contract.guard_owner = self
            if not pool and not self.warn_host_wait:
                contract.warn_host_wait = False
            try:
                self._made[obj] = contract
            except TypeError:  # (held until its contract closes: the object cannot be weakly referenced)
                for key in [k for k, (_, made) in self._made_pinned.items() if made.closed]:
                    del self._made_pinned[key]
                self._made_pinned[id(obj)] = (obj, contract)
            if self.record:
                (self.pool_contracts if pool else self.contracts).append(contract)
        return contract

    def _made_for(self, obj: Any) -> Any:
        made = self._made.get(obj)
        if made is None:  # (one that cannot be weakly referenced is pinned)
            pinned = self._made_pinned.get(id(obj))
            return pinned[1] if pinned is not None and pinned[0] is obj else None
        return made

    def undo(self) -> None:
        """Stop guarding the classes (instances already running keep their ledgers); a guard this one covered (an
        outer ``with ss.guard(...)``) guards them again. Idempotent. Does not block and orders nothing: each
        instance's ledger keeps ordering its next call after its earlier ones."""
        with _guards_lock:
            if not self.active:
                return
            self.active = False
            for cls in self.classes:
                _withdraw(cls, self)

    def __enter__(self) -> ClassGuard:
        """The guard itself, guarding already (:func:`guard` started it); a ``with`` block of it inside another one
        nests. An ended guard raises :class:`~streamsafe.errors.StreamsafeError`. Does not block."""
        with _guards_lock:
            if not self.active:
                names = ", ".join(cls.__qualname__ for cls in self.classes)
                again = names if len(self.classes) == 1 else f"[{names}]"
                raise StreamsafeError(
                    f"the class guard of {names} has ended (its `with` block was left, or it was undone or unguarded): "
                    "an ended guard guards nothing, so it is not entered again; call ss.guard(...) again for a new one "
                    f"(ss.guard({again}, ...) here) and enter that."
                )
            self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        """Leave one ``with`` block of the guard: the outermost ends it (:meth:`undo`). Does not block."""
        with _guards_lock:  # (re-entrant; the guard ends under the lock: a `with` entered meanwhile is refused, not ended)
            self._depth = max(self._depth - 1, 0)
            if self._depth:
                return
            self.undo()


def _classes_of(target: Any, verb: str = "guard") -> list[type]:
    if isinstance(target, type):
        return [target]
    if isinstance(target, types.ModuleType):
        found = []
        for profile in profiles():
            for c in profile.classes:
                cls = c if isinstance(c, type) else _resolve(target, c)
                if isinstance(cls, type) and profile.applies_to(cls) and _of_module(cls, target, profile) and cls not in found:
                    found.append(cls)
        if not found:
            raise StreamsafeError(
                f"module {target.__name__!r} has none of the classes a registered profile names "
                f"({', '.join(effect_class_names())}) defined in it or its package: nothing to {verb}. Pass the SDK's "
                "module (nvvfx, PyNvVideoCodec, or streamsafe.testing), a class, or register a profile for your SDK "
                "(streamsafe.profile.register)."
            )
        return found
    if isinstance(target, str):
        module = sys.modules.get(target)
        if module is None:
            try:
                if "" in target.split("."):  # ('' and 'nvvfx.': importlib's ValueError, or a relative import)
                    raise ImportError(f"{target!r} is not a module name: each of its dotted parts must be a name")
                module = importlib.import_module(target)
            except ImportError as e:
                emulations = [p.emulation for p in profiles() if p.module == target and p.emulation]
                fix = (f"or, on a machine without it, call {_emulation(emulations[0])} first (the emulation)"
                       if emulations else "or pass the module or class itself")
                raise FrameworkUnavailableError(target or repr(target), f"{verb}({target!r})", str(e), None, fix) from e
        return _classes_of(module, verb)
    if isinstance(target, Iterable):
        return [cls for item in target for cls in _classes_of(item, verb)]
    raise NotAnEffectError(
        f"cannot {verb} {target!r} (type {type(target).__name__}): pass an effect class, a module such as nvvfx, "
        "its name, or a list of those"
    )


def _of_module(cls: type, module: types.ModuleType, profile: Any) -> bool:
    """Whether ``module`` offers ``cls`` as its own: the class is defined in the module or its package, or the module
    is the SDK the profile says the class is of (its :attr:`~streamsafe.profile.Profile.module`: an emulation installed
    under the SDK's name holds classes defined elsewhere). A class a module only imports is not the module's."""
    name = module.__name__
    defined_in = getattr(cls, "__module__", None) or ""
    return defined_in == name or defined_in.startswith(name + ".") or profile.module == name


def _emulation(where: str) -> str:
    """What installs the emulation a profile names (``"module:object"``), as a call a user types."""
    module, _, attr = where.partition(":")
    try:
        return str(getattr(importlib.import_module(module), attr).install_call)
    except Exception:  # noqa: BLE001  (the message names the object then)
        return f"{module}.{attr}.install()"


def _resolve(module: types.ModuleType, name: str) -> Any:
    """The class a profile names ``name`` (``"pkg.sub.Class"``) as ``module`` gives it: inside the module's package
    (``nvvfx.effects.base.Effect`` for ``nvvfx``, importing the submodule), else by its bare name at the module's top
    (``nvvfx.VideoSuperRes``); ``None`` when the module has neither."""
    prefix = module.__name__ + "."
    if name.startswith(prefix):
        where, _, attr = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(where), attr, None)
        except Exception:  # noqa: BLE001  (a module the SDK does not have: not this SDK's class)
            found = None
        if isinstance(found, type):
            return found
    return getattr(module, name.rpartition(".")[2], None)


def guard(target: Any, *, strategy: Strategy | StrategyName = "auto", **options: Any) -> ClassGuard:
    """Guard every instance of the SDK classes in ``target`` (a class, a module such as ``nvvfx``, its name, or a
    list; a module gives the classes a registered profile names that are defined in it or its package, or whose
    profile's ``module`` it is, never a class it only imports), from their first call: each instance gets its own contract (``strategy``; ``options`` as for the
    contract), whose SDK stream is the program's current stream at each call. Plain ``sr.run(...)`` then returns a
    :class:`~streamsafe.SafeOutput`. Returns a :class:`ClassGuard`; undo it with ``.undo()``, :func:`unguard`, or
    use it as a context manager. Does not block."""
    as_strategy(strategy, allow_none=bool(options.get("allow_none")))
    unknown = sorted(set(options) - set(GUARD_OPTIONS))
    if unknown:
        raise ArgumentError(
            f"guard() got an unexpected option {unknown[0]!r}: a class guard takes strategy= and the contract "
            f"options {', '.join(GUARD_OPTIONS)} (the SDK stream is the current stream at each call)"
        )
    _check_options(options)
    classes = _classes_of(target)
    if not classes:
        raise NotAnEffectError(
            f"guard({target!r}) found no effect class to guard: pass an effect class (nvvfx.VideoSuperRes), "
            "a module such as nvvfx, its name, or a list of those"
        )
    for cls in classes:
        try:
            profile = profile_of(cls)
        except NotAnEffectError as e:
            raise NotAnEffectError(f"cannot guard {cls.__qualname__}: {e}") from None
        check_class(profile, cls)  # (a profile the class contradicts: ProfileError now, not at its objects' first call)
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


def _check_options(options: dict[str, Any]) -> None:
    """Check ``guard()``'s option values now, as a contract checks them (a backend is a backend; a stream is a stream
    or handle streamsafe takes), not at each object's first call: the contract's own errors
    (:class:`~streamsafe.errors.ArgumentError`, :class:`~streamsafe.errors.StreamTypeError`,
    :class:`~streamsafe.errors.StreamValueError`). A handle is looked up in ``backend=`` when given; else one the
    current backend does not know is left for each contract to check in its object's backend. Does not block."""
    backend = options.get("backend")
    if backend is not None:
        require_backend(backend, "guard(backend=...)")
    for name in ("input_stream", "consumer_stream", "conversion_stream"):
        value = options.get(name)
        if value is None:
            continue
        try:
            as_stream(value, backend=backend)
        except CudaDriverError:
            if backend is not None:
                raise


def unguard(target: Any = None) -> None:
    """Undo :func:`guard` for the classes in ``target`` (every class guard when ``None``): each guard of those
    classes ends, except the one ``streamsafe run`` keeps around the program. Does not block and orders nothing
    (see :meth:`ClassGuard.undo`)."""
    classes = list(_guard_stacks) if target is None else _classes_of(target, "unguard")
    with _guards_lock:
        for cls in classes:
            for cg in list(_guard_stacks.get(cls, ())):
                if cg.pinned:
                    continue
                _withdraw(cls, cg)
                if not any(cg in stack for stack in list(_guard_stacks.values())):
                    cg.active = False


def active_guards() -> list[ClassGuard]:
    """The class guards in force now, each once (the oldest first), not the one ``streamsafe run`` keeps around the
    program. Does not block."""
    with _guards_lock:
        found: dict[int, ClassGuard] = {}
        for stack in _guard_stacks.values():
            for cg in stack:
                if not cg.pinned:
                    found.setdefault(id(cg), cg)
        return list(found.values())


_guard_stacks: dict[type, list[ClassGuard]] = {}
"""Per class, its guards from the oldest to the newest; the newest is the one in force."""
_guards_lock = threading.RLock()
"""Held while guards are added or taken off (threads may end their ``with ss.guard(...)`` blocks at once)."""


def _withdraw(cls: type, cg: ClassGuard) -> None:
    """Take ``cg`` off ``cls``'s guards (the caller holds ``_guards_lock``); the newest one left (if any) guards
    ``cls`` again."""
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
