"""Guards: how a plain ``effect.run(...)`` reaches a contract, with no edit to the effect.

streamsafe replaces ``run``, ``run_at_timestep``, ``close`` and ``__setattr__`` on the
effect's *class* (once, the first time a contract is made for one of its instances) with
small dispatchers. A dispatcher looks, per call, for what guards *this* instance:

1. the innermost open guard block on it (``with stream_contract(sr):``, a call of a
   ``@stream_safe`` function): the call goes through that contract;
2. a class-level guard (:func:`guard`, ``streamsafe run``): the call goes through the
   instance's own contract, made at its first call;
3. a ledger (a contract was once made for it): a *tracked* raw call; it returns the SDK's
   raw output, but still waits on the device for the readers streamsafe knows, and makes
   older outputs stale;
4. nothing: the SDK's own method, untouched.

The original methods are kept and called directly, so guards never recurse, whatever the
nesting of blocks, decorators and class guards, and whether or not instances have a
``__dict__``. Instances of other classes are not affected. Nothing here blocks the host.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import StreamsafeError

if TYPE_CHECKING:
    from .contract import StreamContract

__all__ = [
    "CONFIG_ATTRS",
    "EFFECT_CLASSES",
    "ClassGuard",
    "guard",
    "unguard",
    "install",
    "call_raw",
    "raw_method",
    "push",
    "pop",
    "active_contract",
]

CONFIG_ATTRS = ("output_width", "output_height", "image_encoding", "input_width", "input_height")
"""Attributes whose change may release or replace the SDK's output buffer (H6)."""

EFFECT_CLASSES = ("VideoSuperRes", "VideoFrameGeneration", "TrueHDR")
"""The classes :func:`guard` patches when given a module (``nvvfx`` or the emulation)."""

_METHODS = ("run", "run_at_timestep", "close")
_MARK = "__streamsafe_dispatch__"

_originals: dict[type, dict[str, Any]] = {}
_raw_cache: dict[tuple[type, str], Any] = {}
_stacks: dict[int, list[StreamContract]] = {}
_class_guards: dict[type, ClassGuard] = {}
_local = threading.local()
_lock = threading.Lock()


def _raw_ids() -> set[int]:
    ids: set[int] | None = getattr(_local, "raw", None)
    if ids is None:
        ids = _local.raw = set()
    return ids


# -- originals ------------------------------------------------------------------------------------------


def raw_method(cls: type, name: str) -> Any:
    """The effect's own ``name`` for instances of ``cls`` (never a dispatcher), or ``None``."""
    key = (cls, name)
    found = _raw_cache.get(key)
    if found is not None:
        return found
    for base in cls.__mro__:
        attr = base.__dict__.get(name)
        if attr is None:
            continue
        if getattr(attr, _MARK, False):
            attr = _originals[base][name]
            if attr is None:  # the dispatcher stood in for an inherited method: keep looking
                continue
        _raw_cache[key] = attr
        return attr
    return None


def call_raw(effect: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the effect's own ``name``; dispatchers reached from inside it call through too."""
    method = raw_method(type(effect), name)
    ids = _raw_ids()
    key = id(effect)
    if key in ids:
        return method(effect, *args, **kwargs)
    ids.add(key)
    try:
        return method(effect, *args, **kwargs)
    finally:
        ids.discard(key)


def install(cls: type) -> bool:
    """Put the dispatchers on ``cls`` (once). False when the class refuses new attributes."""
    if cls in _originals:
        return True
    with _lock:
        if cls in _originals:
            return True
        saved: dict[str, Any] = {}
        try:
            for name in (*_METHODS, "__setattr__"):
                if name != "__setattr__" and not hasattr(cls, name):
                    continue
                saved[name] = cls.__dict__.get(name)
                dispatcher = _dispatcher(name)
                original = raw_method(cls, name)
                if original is not None and name != "__setattr__":
                    functools.update_wrapper(dispatcher, original)  # help() and signatures show the SDK's
                setattr(cls, name, dispatcher)
        except (TypeError, AttributeError):
            for name, value in saved.items():
                _restore(cls, name, value)
            return False
        _originals[cls] = saved
        _raw_cache.clear()
        return True


def _restore(cls: type, name: str, value: Any) -> None:
    try:
        if value is None:
            delattr(cls, name)
        else:
            setattr(cls, name, value)
    except (TypeError, AttributeError):
        pass


def _dispatcher(name: str) -> Callable[..., Any]:
    if name == "__setattr__":

        def dispatch_setattr(self: Any, attr: str, value: Any) -> None:
            if attr in CONFIG_ATTRS and id(self) not in _raw_ids():
                _tracked_setattr(self, attr, value)
            else:
                raw_method(type(self), "__setattr__")(self, attr, value)

        setattr(dispatch_setattr, _MARK, True)
        return dispatch_setattr

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) in _raw_ids():
            return raw_method(type(self), name)(self, *args, **kwargs)
        contract = active_contract(self)
        if contract is not None:
            return getattr(contract, name)(*args, **kwargs)
        return _tracked_call(self, name, args, kwargs)

    dispatch.__name__ = name
    setattr(dispatch, _MARK, True)
    return dispatch


# -- blocks -------------------------------------------------------------------------------------------------


def push(effect: Any, contract: StreamContract) -> None:
    """Route ``effect``'s plain calls through ``contract`` until :func:`pop` (blocks nest)."""
    _stacks.setdefault(id(effect), []).append(contract)


def pop(effect: Any, contract: StreamContract) -> None:
    stack = _stacks.get(id(effect))
    if not stack:
        return
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is contract:
            del stack[i]
            break
    if not stack:
        del _stacks[id(effect)]


def active_contract(effect: Any) -> StreamContract | None:
    """The contract a plain call on ``effect`` goes through now, or ``None``."""
    stack = _stacks.get(id(effect))
    if stack:
        return stack[-1]
    if _class_guards:
        for base in type(effect).__mro__:
            cg = _class_guards.get(base)
            if cg is not None:
                return cg.contract_for(effect)
    return None


# -- tracked raw calls -------------------------------------------------------------------------------------


def _tracked_call(effect: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from .ledger import ledger_of

    ledger = ledger_of(effect, create=False)
    if ledger is None or ledger.closed:
        return call_raw(effect, name, *args, **kwargs)
    from .contract import tracked_raw_call

    return tracked_raw_call(effect, ledger, name, args, kwargs)


def _tracked_setattr(effect: Any, attr: str, value: Any) -> None:
    from .ledger import ledger_of

    contract = active_contract(effect)
    if contract is not None:
        contract.configure(**{attr: value})
        return
    ledger = ledger_of(effect, create=False)
    if ledger is None or ledger.closed:
        call_raw(effect, "__setattr__", attr, value)
        return
    from .contract import tracked_setattr

    tracked_setattr(effect, ledger, attr, value)


# -- class-level guards ------------------------------------------------------------------------------------


@dataclass
class ClassGuard:
    """Every instance of ``classes`` goes through its own contract (``strategy``, ``options``)
    from its first call. Undo with :meth:`undo` or by leaving the ``with`` block."""

    classes: tuple[type, ...]
    strategy: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    contracts: list[StreamContract] = field(default_factory=list)
    """Every contract this guard made, in order (for reports)."""
    active: bool = True

    def contract_for(self, effect: Any) -> StreamContract:
        from .contract import StreamContract
        from .ledger import ledger_of

        ledger = ledger_of(effect, create=False)
        contract = ledger.default_contract if ledger is not None else None
        if contract is None or contract.closed or contract.guard_owner is not self:
            contract = StreamContract(effect, None, strategy=self.strategy, **self.options)
            contract.guard_owner = self
            contract.ledger.default_contract = contract
            self.contracts.append(contract)
        return contract

    def undo(self) -> None:
        """Stop guarding the classes (instances already running keep their ledgers). Idempotent."""
        if not self.active:
            return
        self.active = False
        for cls in self.classes:
            if _class_guards.get(cls) is self:
                del _class_guards[cls]

    def __enter__(self) -> ClassGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def _classes_of(target: Any) -> list[type]:
    if isinstance(target, type):
        return [target]
    if isinstance(target, types.ModuleType):
        found = [getattr(target, n) for n in EFFECT_CLASSES if isinstance(getattr(target, n, None), type)]
        if not found:
            raise StreamsafeError(
                f"module {target.__name__!r} has none of {', '.join(EFFECT_CLASSES)}: nothing to guard. "
                "Pass the nvvfx module (or streamsafe.testing), or an effect class."
            )
        return found
    if isinstance(target, str):
        module = sys.modules.get(target)
        if module is None:
            import importlib

            module = importlib.import_module(target)
        return _classes_of(module)
    if isinstance(target, Iterable):
        return [cls for item in target for cls in _classes_of(item)]
    raise TypeError(
        f"cannot guard {target!r} (type {type(target).__name__}): pass an effect class, a module such as nvvfx, "
        "its name, or a list of those"
    )


def guard(target: Any, *, strategy: str = "auto", **options: Any) -> ClassGuard:
    """Guard every instance of the effect classes in ``target`` (a class, a module such as
    ``nvvfx``, its name, or a list), from their first ``run()``: each instance gets its own
    :class:`~streamsafe.StreamContract` (``strategy``; ``options`` as for the contract), whose
    SDK stream is the program's current stream at each call. Plain ``sr.run(...)`` then returns a
    :class:`~streamsafe.SafeOutput`. Returns a :class:`ClassGuard`; undo it with ``.undo()``,
    :func:`unguard`, or use it as a context manager. Does not block."""
    from .strategy import as_strategy

    as_strategy(strategy, allow_none=bool(options.get("allow_none")))
    classes = _classes_of(target)
    for cls in classes:
        if not install(cls):
            raise StreamsafeError(
                f"cannot guard {cls.__qualname__}: the class does not accept new attributes. "
                "Make a StreamContract per effect and call c.run(...) instead."
            )
    cg = ClassGuard(tuple(classes), str(strategy), dict(options))
    for cls in classes:
        _class_guards[cls] = cg
    return cg


def unguard(target: Any = None) -> None:
    """Undo :func:`guard` for the classes in ``target`` (every class guard when ``None``)."""
    classes = list(_class_guards) if target is None else _classes_of(target)
    for cls in classes:
        cg = _class_guards.pop(cls, None)
        if cg is not None and not any(v is cg for v in _class_guards.values()):
            cg.active = False


@contextmanager
def guarded_classes(target: Any, **kwargs: Any) -> Iterator[ClassGuard]:
    cg = guard(target, **kwargs)
    try:
        yield cg
    finally:
        cg.undo()
