"""Guards: how a plain ``effect.run(...)`` reaches a contract, with no edit to the effect.

streamsafe replaces the guarded calls and the releasing calls of the effect's profile
(:mod:`streamsafe.profile`; for nvvfx ``run``, ``run_at_timestep``, ``close``) and ``__setattr__``
on the effect's *class* (once, the first time a contract is made for one of its instances) with
small dispatchers. A dispatcher looks, per call, for what guards *this* instance:

1. the innermost open guard block on it (``with stream_contract(sr):``, a call of a
   ``@stream_safe`` function): the call goes through that contract;
2. a class-level guard (:func:`streamsafe.guard`, ``streamsafe run``): the call goes through
   the instance's own contract, made at its first call;
3. a ledger (a contract was once made for it): a *tracked* raw call; it returns the SDK's
   raw output, but still waits on the device for the readers streamsafe knows, and makes
   older outputs stale;
4. nothing: the SDK's own method, untouched.

The original methods are kept and called directly, so guards never recurse, whatever the
nesting of blocks, decorators and class guards, and whether or not instances have a
``__dict__``. Instances of other classes are not affected. Nothing here blocks the host.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import operator
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .backend.naming import as_stream
from .construction import recording_init
from .errors import NotAnEffectError
from .interrupts import after_writes
from .ledger import Ledger, ledger_of
from .pool import pool_of
from .profile import Profile, profile_of
from .streams import LEGACY_HANDLE

__all__ = [
    "GuardBlock",
    "GuardedBlocks",
    "install",
    "tracked_raw_call",
    "tracked_setattr",
    "shape_of",
    "call_raw",
    "raw_method",
    "push",
    "pop",
    "active_contract",
    "register_class_guard",
    "withdraw_class_guard",
    "snapshot",
    "uninstall_all",
    "code_frame",
    "check_effect",
    "settable",
    "config_reader",
]

_MARK = "__streamsafe_dispatch__"

_originals: dict[type, dict[str, Any]] = {}
_raw_cache: dict[tuple[Any, ...], Any] = {}
"""The SDK's own methods by (class, name) or (class, name, the class a dispatcher was put on)."""


class _Block:
    """One open guard block on an effect: its contract, the frame whose code it guards (the ``with``
    statement's, the decorated function's wrapper), and the thread that opened it."""

    __slots__ = ("contract", "frame", "thread", "suspendable")

    def __init__(self, contract: Any, frame: Any, thread: int) -> None:
        self.contract = contract
        self.frame = frame
        self.thread = thread
        self.suspendable = bool(frame.f_code.co_flags & _SUSPENDABLE)
        """The frame is a generator's or a coroutine's: it can be suspended with the block open."""


_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_CONTEXTLIB = contextlib.__file__


def code_frame(frame: Any) -> Any:
    """The frame whose code a guard block entered from ``frame`` guards: ``frame`` itself, unless it is
    context-manager machinery: a frame of :mod:`contextlib` (``ExitStack``, a ``@contextmanager``'s
    ``__enter__``) or a generator or coroutine that one drives (the body of a ``@contextmanager`` or
    ``@asynccontextmanager``): then the frame of the code that uses that context manager."""
    while frame is not None:
        back = frame.f_back
        if frame.f_code.co_filename == _CONTEXTLIB or (
                frame.f_code.co_flags & _SUSPENDABLE and back is not None and back.f_code.co_filename == _CONTEXTLIB):
            frame = back
            continue
        return frame
    return None


class _RawCalls(threading.local):
    """Per thread: ids of the effects whose own methods are running (their dispatchers call through), and
    the method a guarded call is to run instead of ``type(effect)``'s (a dispatcher reached by ``super()``)."""

    def __init__(self) -> None:
        self.raw: dict[int, Any] = {}
        """Effect id -> the frame of the raw call running its own method (see :func:`_in_raw_call`)."""
        self.override: dict[int, Any] = {}


# (threading.local subclasses: each thread's attributes exist from its first access, so the hot path
# reads them without the AttributeError a missing attribute of a plain threading.local costs)
_open: dict[int, list[_Block]] = {}
"""Effect id -> the guard blocks open on it, in the order they were opened (every thread's)."""
_suspendable: dict[int, int] = {}
"""Effect id -> how many of its open blocks are in a generator's or a coroutine's frame."""
_local = _RawCalls()
_class_guards: dict[type, Any] = {}
"""Class-level guards by class (:class:`streamsafe.class_guard.ClassGuard`: anything with ``contract_for``)."""
_lock = threading.Lock()


def register_class_guard(cls: type, guard: Any) -> None:
    """Make ``guard`` (anything with ``contract_for(effect)``) route the plain calls of ``cls``'s instances."""
    _class_guards[cls] = guard


def withdraw_class_guard(cls: type) -> None:
    """No class guard routes ``cls``'s calls any more."""
    _class_guards.pop(cls, None)


def snapshot(effect: Any, profile: Profile | None = None) -> tuple[Any, ...]:
    """The values of the profile's :attr:`~streamsafe.profile.Profile.settings` on ``effect`` now."""
    return tuple(getattr(effect, name, None) for name in (profile or profile_of(effect)).settings)


# -- originals ------------------------------------------------------------------------------------------


def raw_method(cls: type, name: str, start: type | None = None) -> Any:
    """The effect's own ``name`` for instances of ``cls`` (never a dispatcher), or ``None``. With
    ``start`` (a class in ``cls``'s MRO): the one ``super()`` reaches from a method of the class
    before ``start``, i.e. the first along ``cls.__mro__`` from ``start`` on."""
    key: tuple[Any, ...] = (cls, name) if start is None or start is cls else (cls, name, start)
    found = _raw_cache.get(key)
    if found is not None:
        return found
    mro = cls.__mro__
    if start is not None and start is not cls:
        mro = mro[mro.index(start):] if start in mro else start.__mro__
    for base in mro:
        attr = base.__dict__.get(name)
        if attr is None:
            continue
        if getattr(attr, _MARK, False) and base in _originals:  # (a user's functools.wraps copies the mark)
            attr = _originals[base].get(name)
            if attr is None:  # the dispatcher stood in for an inherited method: keep looking
                continue
        _raw_cache[key] = attr
        return attr
    return None


def call_raw(effect: Any, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> Any:
    """``effect.name(*args, **kwargs)``, the effect's own method; dispatchers reached from inside it call through too."""
    overrides = _local.override
    method = overrides.pop(id(effect), None) if overrides else None
    if method is None:
        method = _raw_cache.get((type(effect), name)) or raw_method(type(effect), name)
    return _call_marked(effect, method, args, kwargs or {})


def _call_marked(effect: Any, method: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``method(effect, ...)`` with ``effect`` in this thread's set of raw calls while it runs."""
    key = id(effect)
    ids = _local.raw
    if ids and _in_raw_call(key):
        return method(effect, *args, **kwargs)
    try:
        ids[key] = _any_thread[key] = sys._getframe()  # (held in no local: a frame holding itself would keep the inputs)
        return method(effect, *args, **kwargs)
    finally:
        if _any_thread.get(key) is ids.pop(key, None):
            _any_thread.pop(key, None)


_any_thread: dict[int, Any] = {}
"""Effect id -> the frame of a raw call running its own method, in any thread: a ``super()`` call a worker
thread makes for it (a deadline by ``future.result(timeout=...)``) calls through."""


def _in_raw_call(key: int) -> bool:
    """Whether effect ``key``'s own method runs in this thread now (a call from inside it calls through). A
    mark an interrupt left behind (it skipped the removal) is known by its frame, no longer running, and goes."""
    frame = _local.raw.get(key)
    if frame is None:
        return False
    caller: Any = sys._getframe(1)
    while caller is not None:
        if caller is frame:
            return True
        caller = caller.f_back
    if _any_thread.get(key) is _local.raw.pop(key, None):
        _any_thread.pop(key, None)
    return False


def install(cls: type) -> bool:
    """Put the dispatchers on ``cls`` (once): on its profile's guarded and releasing calls and on
    ``__setattr__``. False when the class refuses new attributes."""
    if cls in _originals:
        return True
    profile = profile_of(cls)
    with _lock:
        if cls in _originals:
            return True
        saved: dict[str, Any] = {}
        try:
            init = getattr(cls, "__init__", None)  # (its own or inherited)
            if profile.constructor_keywords and inspect.isfunction(init) and not getattr(init, _MARK, False):
                saved["__init__"] = cls.__dict__.get("__init__")
                cls.__init__ = recording_init(init, profile.constructor_keywords, _MARK)  # type: ignore[misc]
            for name in (*profile.calls, *profile.releases, "__setattr__"):
                if name != "__setattr__" and not hasattr(cls, name):
                    continue
                saved[name] = cls.__dict__.get(name)
                dispatcher = _dispatcher(name, cls, profile)
                original = raw_method(cls, name)
                if original is not None and name != "__setattr__":
                    functools.update_wrapper(dispatcher, original)  # help() and signatures show the SDK's
                setattr(cls, name, dispatcher)
        except Exception:  # (a class that refuses new attributes; anything else leaves it as it was, too)
            for name, value in saved.items():
                _restore(cls, name, value)
            _raw_cache.clear()
            return False
        _originals[cls] = saved
        _raw_cache.clear()
        return True


def uninstall_all() -> int:
    """Put every class's own methods back where a dispatcher stands (for tools that document the
    classes, e.g. the API reference); returns how many. Effects made guarded before keep their ledgers,
    and their plain calls are the SDK's own again. Does not block."""
    restored = 0
    with _lock:
        for cls, saved in list(_originals.items()):
            for name, original in saved.items():
                if not getattr(cls.__dict__.get(name), _MARK, False):
                    continue
                _restore(cls, name, original)
                restored += 1
            del _originals[cls]
        _raw_cache.clear()
    return restored


def _restore(cls: type, name: str, value: Any) -> None:
    try:
        if value is None:
            delattr(cls, name)
        else:
            setattr(cls, name, value)
    except (TypeError, AttributeError):
        pass


def _dispatcher(name: str, owner: type, profile: Profile) -> Callable[..., Any]:
    """The dispatcher of ``owner.name``. Where it calls the SDK's own method, it calls the one ``super()``
    would reach from ``owner`` on in ``type(self)``'s MRO, not ``type(self)``'s: a subclass whose
    ``run()`` calls ``super().run()`` reaches this dispatcher from inside its own method, and
    ``type(self)``'s would call that again (forever)."""
    if name == "__setattr__":
        settings = frozenset(profile.settings)

        def dispatch_setattr(self: Any, attr: str, value: Any) -> None:
            if attr in settings and not _in_raw_call(id(self)):
                _tracked_setattr(self, attr, value)
            else:
                raw_method(type(self), "__setattr__", owner)(self, attr, value)

        setattr(dispatch_setattr, _MARK, True)
        return dispatch_setattr

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        method = _raw_cache.get((cls, name) if cls is owner else (cls, name, owner)) or raw_method(cls, name, owner)
        if (_local.raw and _in_raw_call(id(self))) or (cls is not owner and id(self) in _any_thread):
            return method(self, *args, **kwargs)  # (from inside the effect's own method, or super()'s from its worker)
        contract = active_contract(self)
        if contract is not None:
            if cls is owner or method is raw_method(cls, name):
                return getattr(contract, name)(*args, **kwargs)
            # reached by super() from a subclass's method no dispatcher wrapped (a class guard's first call
            # on a subclass): the contract runs this method, not type(self)'s, which is running already
            overrides = _local.override
            overrides[id(self)] = method
            try:
                return getattr(contract, name)(*args, **kwargs)
            finally:
                overrides.pop(id(self), None)
        if profile.pool:
            pool = pool_of(self, create=False)
            if pool is None:
                return method(self, *args, **kwargs)
            return pool.tracked_call(self, name, lambda: _call_marked(self, method, args, kwargs), profile.frames_of,
                                     profile.buffer_key, profile.prefetches, release=name in profile.releases,
                                     error_names=profile.errors_after_writes)
        ledger = ledger_of(self, create=False)
        if ledger is None:
            # never guarded: nothing to order, and a call the effect makes from inside finds no guard
            # and no ledger either, so the thread's set of raw calls is left alone (the common case of
            # an unguarded instance of a guarded class: about a microsecond less per call)
            return method(self, *args, **kwargs)
        if ledger.closed:
            return _call_marked(self, method, args, kwargs)
        return tracked_raw_call(self, ledger, name, args, kwargs, method=method)

    dispatch.__name__ = name
    setattr(dispatch, _MARK, True)
    return dispatch


# -- blocks -------------------------------------------------------------------------------------------------


def push(effect: Any, contract: Any, frame: Any) -> None:
    """Route ``effect``'s plain calls made by the code of ``frame`` (and what it calls) through ``contract``
    until :func:`pop`. Blocks nest: the innermost block whose frame is running takes a call. A block in a
    generator or a coroutine guards its code only while it runs (not the caller's code between two of its
    resumptions), so blocks held across ``yield`` or ``await`` interleave correctly in one thread."""
    block = _Block(contract, frame, threading.get_ident())
    with _lock:
        _open[id(effect)] = [*_open.get(id(effect), ()), block]  # (a new list: readers take no lock)
        if block.suspendable:
            _suspendable[id(effect)] = _suspendable.get(id(effect), 0) + 1


def pop(effect: Any, contract: Any, frame: Any) -> None:
    """End the innermost block of ``contract`` on ``effect`` opened by ``frame`` (else, entered and left
    through helpers of different frames, this thread's newest block of ``contract``; nothing when none is
    open)."""
    with _lock:
        blocks = _open.get(id(effect))
        if not blocks:
            return
        me = threading.get_ident()
        match = [i for i in range(len(blocks)) if blocks[i].contract is contract and blocks[i].frame is frame]
        if not match:
            match = [i for i in range(len(blocks)) if blocks[i].contract is contract and blocks[i].thread == me]
        if match:
            block = blocks[match[-1]]
            blocks = _open[id(effect)] = blocks[:match[-1]] + blocks[match[-1] + 1:]
            if block.suspendable:
                left = _suspendable[id(effect)] - 1
                if left:
                    _suspendable[id(effect)] = left
                else:
                    del _suspendable[id(effect)]
        if not blocks:
            del _open[id(effect)]


def _running_block(blocks: list[_Block], effect_id: int) -> _Block | None:
    """The innermost of ``blocks`` whose code is running now in this thread: when none is in a generator's
    or coroutine's frame, the newest of this thread's (an ordinary frame's block is open only while its
    frame runs); else the block of the innermost frame on this thread's stack that has one."""
    if effect_id not in _suspendable:
        return _newest_of_this_thread(blocks, suspendable_too=True)
    by_frame = {id(b.frame): b for b in blocks}
    frame: Any = sys._getframe(2)
    while frame is not None:
        found = by_frame.get(id(frame))
        if found is not None and found.frame is frame:
            return found
        frame = frame.f_back
    # (a block entered through a helper whose frame has returned, in an ordinary frame: it guards its thread)
    return _newest_of_this_thread(blocks, suspendable_too=False)


def _newest_of_this_thread(blocks: list[_Block], *, suspendable_too: bool) -> _Block | None:
    me = threading.get_ident()
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].thread == me and (suspendable_too or not blocks[i].suspendable):
            return blocks[i]
    return None


def active_contract(effect: Any) -> Any:
    """The contract a plain call on ``effect`` goes through now, or ``None``: the innermost open guard
    block whose code makes the call (:func:`push`), else a class guard (every thread's)."""
    blocks = _open.get(id(effect))
    if blocks:
        block = _running_block(blocks, id(effect))
        if block is not None:
            return block.contract
    if _class_guards:
        for base in type(effect).__mro__:
            cg = _class_guards.get(base)
            if cg is not None:
                return cg.contract_for(effect)
    return None


class GuardBlock:
    """A guard block of one contract (:meth:`StreamContract.guarded`): the code of the frame that enters it
    calls the effect through the contract until it leaves. Does not block on entry."""

    __slots__ = ("contract", "host_wait", "frame")

    def __init__(self, contract: Any, host_wait: bool) -> None:
        self.contract = contract
        self.host_wait = host_wait
        self.frame: Any = None

    def __enter__(self) -> Any:
        self.frame = code_frame(sys._getframe(1))
        self.contract.enter_block(self.frame)
        return self.contract

    def __exit__(self, *exc: object) -> None:
        frame, self.frame = self.frame, None
        self.contract.leave_block(frame, host_wait=self.host_wait)


_C = TypeVar("_C", bound="GuardedBlocks")


class GuardedBlocks:
    """``with contract:`` and ``contract.guarded()`` for a contract with ``enter_block`` and ``leave_block``
    (an effect's and a decoder's)."""

    def enter_block(self, frame: Any) -> None:
        """Route the plain calls made by ``frame``'s code through this contract (each contract's own)."""
        raise NotImplementedError

    def leave_block(self, frame: Any, *, host_wait: bool) -> None:
        """End :meth:`enter_block` for ``frame`` (each contract's own)."""
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        """``with contract:`` as :meth:`guarded` (plain calls made by the code inside the block go through the
        contract). Does not block."""
        self.enter_block(code_frame(sys._getframe(1)))
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop routing plain calls; blocks the host until the reads streamsafe knows of and the SDK's own work
        are done (as the contract's ``synchronize()``)."""
        self.leave_block(code_frame(sys._getframe(1)), host_wait=True)

    def guarded(self, *, host_wait_on_exit: bool = True) -> GuardBlock:
        """Route the plain calls of the guarded object (its profile's calls and releases, and configuration
        changes) made by the code inside the block (a context manager) through this contract. Blocks nest:
        the innermost guard takes plain calls; a block in a generator or a coroutine guards its code, not the
        caller's between two resumptions (threads, asyncio tasks and generators each keep their own). Leaving
        the block blocks the host, by default, until the reads streamsafe knows of and the SDK's own work are
        done (as ``synchronize()``); ``host_wait_on_exit=False`` leaves without waiting (the next call still
        waits for them on the device)."""
        return GuardBlock(self, host_wait_on_exit)


# -- tracked raw calls -------------------------------------------------------------------------------------


def _tracked_setattr(effect: Any, attr: str, value: Any) -> None:
    contract = active_contract(effect)
    if contract is not None:
        contract.configure(**{attr: value})
        return
    ledger = ledger_of(effect, create=False)
    if ledger is None or ledger.closed:
        call_raw(effect, "__setattr__", (attr, value))
        return
    tracked_setattr(effect, ledger, attr, value)


def tracked_raw_call(
    effect: Any, ledger: Ledger, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, method: Any = None
) -> Any:
    """A plain ``run()`` on an effect no guard holds now, but which has a ledger: the SDK's raw call and
    output, preceded by the device waits that keep the copies streamsafe knows of safe (H5), and a
    release wait when an input's size changed; older outputs become stale. Blocks the host only then.
    ``method``: the SDK's method to call (default: ``type(effect)``'s own ``name``)."""
    if method is None:
        method = raw_method(type(effect), name)
    profile = profile_of(effect)
    if name in profile.releases:
        with ledger.using(name):
            ledger.wait_for_readers(None, None, ledger.unguarded_stats)
            ledger.drain_keepalive()
            result = _call_marked(effect, method, (), {})
            ledger.closed_effect(effect)
        return result
    be, dev = ledger.resolved_backend(), ledger.device
    stream_ptr = kwargs.get(profile.stream_keyword, 0)
    sdk = as_stream(stream_ptr, device=dev, backend=be)
    conversion = as_stream(LEGACY_HANDLE, device=dev, backend=be) if profile.converts(effect) else None
    plan = ledger.raw_plan(sdk, conversion, bool(kwargs.get(profile.blocking_keyword, False)))
    arrays = [a for a in args if hasattr(a, "__dlpack__")] + [kwargs[k] for k in profile.input_keywords if k in kwargs]
    shapes = tuple(shape_of(a) for a in arrays)
    with ledger.using(name):
        current = ledger.current_stream() if ledger.escaped else None
        ledger.apply(ledger.before_run(plan, shapes, current), ledger.unguarded_stats)
        returned = False
        try:
            result = _call_marked(effect, method, args, kwargs)
            returned = True
            ledger.after_unguarded_run(plan.sdk_streams, shapes)
        except BaseException as e:  # interrupted after it may have written, or refused (streamsafe.interrupts)
            if returned or after_writes(e):
                ledger.after_unguarded_run(plan.sdk_streams, shapes)
            raise
    return result


def tracked_setattr(effect: Any, ledger: Ledger, attr: str, value: Any) -> None:
    """A plain change of an output-size or encoding attribute outside any guard: the host waits for
    the readers streamsafe knows of before the effect may release its buffer (H6)."""
    current = getattr(effect, attr, None)
    profile = profile_of(effect)
    if current == value or current is None or not profile.releases_output(effect, attr):  # nothing to release
        call_raw(effect, "__setattr__", (attr, value))
        return
    with ledger.using("configure"):
        ledger.wait_for_readers(None, None, ledger.unguarded_stats)
        call_raw(effect, "__setattr__", (attr, value))
        ledger.released()
        ledger.config = snapshot(effect, profile)


def shape_of(arr: Any) -> Any:
    shape = getattr(arr, "shape", None)
    return tuple(shape) if shape is not None else None


def settable(cls: type, effect: Any) -> set[str]:
    """The public attributes of an effect that can be set: properties with a setter, plain attributes."""
    names: set[str] = set()
    for attr in dir(cls):
        if attr.startswith("_"):
            continue
        value = getattr(cls, attr, None)
        if isinstance(value, property):
            if value.fset is not None:
                names.add(attr)
        elif not callable(value) and not isinstance(value, type):
            names.add(attr)
    names.update(a for a in getattr(effect, "__dict__", {}) if not a.startswith("_") and not callable(getattr(effect, a)))
    return names


def config_reader(effect: Any, profile: Profile) -> Callable[[Any], Any]:
    """A fast reader of the profile's settings the effect has (a replay compares what it reads)."""
    present = [name for name in profile.settings if hasattr(effect, name)]
    return operator.attrgetter(*present) if present else _nothing


def _nothing(effect: Any) -> tuple[()]:
    return ()


def check_effect(effect: Any) -> None:
    """Raise :class:`~streamsafe.errors.NotAnEffectError` unless ``effect`` is an effect instance (it has ``run``)."""
    if effect is None or isinstance(effect, type) or not callable(getattr(effect, "run", None)):
        what = "a class" if isinstance(effect, type) else f"{type(effect).__name__}"
        raise NotAnEffectError(
            f"StreamContract needs an effect instance with a run() method (nvvfx.VideoSuperRes, VideoFrameGeneration, "
            f"TrueHDR, or streamsafe.testing's), got {effect!r} ({what}). Create the effect first, e.g. "
            "sr = VideoSuperRes(); sr.load(); then StreamContract(sr)."
        )
