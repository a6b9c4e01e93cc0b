"""Guards: how a plain ``effect.run(...)`` reaches a contract, with no edit to the effect.

streamsafe replaces the guarded calls and the releasing calls of an SDK object's profile
(:mod:`streamsafe.profile`; for nvvfx ``run``, ``run_at_timestep``, ``close``) and ``__setattr__`` on its
*class* (once, the first time a contract is made for one of its instances, or the class is guarded) with small
dispatchers. A dispatcher looks, per call, for what guards *this* instance:

1. the innermost open guard block on it (``with stream_contract(sr):``, a call of a ``@stream_safe`` function):
   the call goes through that contract;
2. a class-level guard (:func:`streamsafe.guard`, ``streamsafe run``): the call goes through the instance's own
   contract, made at its first call;
3. a ledger (a contract was once made for it): a *tracked* raw call through the engine
   (:mod:`streamsafe.engine`); it returns the SDK's raw output, but still waits on the device for the readers
   streamsafe knows, and makes older outputs stale;
4. nothing: the SDK's own method, untouched.

The dispatchers go on every class a registered profile names as soon as streamsafe sees the class
(:func:`watch_profiles`: at ``import streamsafe`` for SDK modules already imported, when an SDK module is
imported later, and when a profile is registered), not at the first guard: a method bound before the first guard
(``run = sr.run``, ``get = decoder.get_batch_frames``) is then the dispatcher too, and a guard block made later
guards it. A method bound before ``import streamsafe`` is the SDK's own, and no guard reaches it: import streamsafe
first (``streamsafe run`` does). A class no profile names (one duck-typed on nvvfx's API) gets its dispatchers at its
first guard. An unguarded instance's call costs the dispatcher about a microsecond.

The original methods are kept (:mod:`streamsafe.calls`) and called directly, so guards never recurse, whatever
the nesting of blocks, decorators and class guards, and whether or not instances have a ``__dict__``. Instances
of other classes are not affected. Nothing here blocks the host.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.abc
import inspect
import operator
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import engine, lazy
from .calls import MARK, call_raw, classes_with_originals, forget_originals, in_raw_call, keep_originals, originals, raw_method
from .construction import recording_init
from .errors import NotAnEffectError
from .identity import same_value
from .frame import Frame, pool_frame, raw_frame
from .ledger import EffectLedger, Ledger, PoolLedger, ledger_of
from .plan import FencePlan, pool_plan
from .profile import EffectProfile, PoolProfile, Profile, is_method, on_register, profile_of, profiles
from .strategy import Strategy
from .streams import thread_token

__all__ = [
    "GuardBlock",
    "GuardedBlocks",
    "install",
    "push",
    "pop",
    "active_contract",
    "register_class_guard",
    "withdraw_class_guard",
    "snapshot",
    "uninstall_all",
    "code_frame",
    "check_object",
    "settable",
    "config_reader",
    "watch_profiles",
    "install_named",
    "stack_frame_argument",
]

_lock = threading.Lock()


class _Block:
    """One open guard block on an SDK object: its contract, the frame whose code it guards (the ``with``
    statement's, the decorated function's wrapper), the frames whose code it guards once that one has returned, and
    the thread that opened it (its :func:`~streamsafe.streams.thread_token`, never reused)."""

    __slots__ = ("contract", "frame", "frames", "thread", "suspendable", "task")

    def __init__(self, contract: Any, frame: Any, thread: int) -> None:
        self.contract = contract
        self.frame = frame
        self.frames = _owners(frame)
        """``frame`` and its callers up to the first generator's or coroutine's (just ``frame`` when none is one): the
        innermost of them still running is the code the block guards (a helper that opened it may have returned)."""
        self.thread = thread
        self.suspendable = bool(self.frames[-1].f_code.co_flags & _SUSPENDABLE)
        """The code it guards is a generator's or a coroutine's: it can be suspended with the block open."""
        self.task = _task_of(self.frames[-1]) if self.suspendable else None
        """When that code is a coroutine's of an asyncio task: the task and, where the code is the task's own coroutine,
        that coroutine, weakly (they tell when the code finished; a frame alone does not tell a finished coroutine's
        from a suspended one's)."""

    def finished(self) -> bool:
        """Whether the code it guards is known to run nowhere any more, and never will: its task finished, or the
        coroutine it is (the task's own, or one the task awaited) returned. (An ordinary frame's block: see
        :func:`_live_frames`.) Asked only where leaving a block is ambiguous: for a coroutine the task awaited, it
        looks for the coroutine among the frame's referrers (a heap walk)."""
        found = self.task
        if found is None:
            return False
        task = found[0]()
        if task is None or task.done():
            return True
        if found[1] is not None:
            coroutine = found[1]()
            return coroutine is None or coroutine.cr_frame is None
        frame = self.frames[-1]  # (a coroutine that returned no longer holds its frame)
        return not any(getattr(r, "cr_frame", None) is frame for r in gc.get_referrers(frame))


def _task_of(frame: Any) -> tuple[Any, Any] | None:
    """For a coroutine's ``frame`` run by an asyncio task: weak references to the task and, when ``frame`` is the
    task's own coroutine's, to that coroutine (else ``None`` in its place); ``None`` otherwise."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not frame.f_code.co_flags & inspect.CO_COROUTINE:
        return None
    try:
        task = asyncio.current_task()
    except RuntimeError:  # (no event loop runs in this thread)
        return None
    if task is None:
        return None
    coroutine = task.get_coro()
    try:
        return weakref.ref(task), weakref.ref(coroutine) if getattr(coroutine, "cr_frame", None) is frame else None
    except TypeError:  # (a task or coroutine of a loop that cannot be weakly referenced)
        return None


_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_CONTEXTLIB = contextlib.__file__
_PROTOCOL = frozenset(("__enter__", "__exit__", "__aenter__", "__aexit__"))
"""A context manager's own methods: a block opened or left in one guards the code of the ``with`` that called it."""


def _owners(frame: Any) -> tuple[Any, ...]:
    """``frame`` and the code that called it (each caller as :func:`code_frame` reads it: context-manager machinery
    stands for the code that uses the context manager) up to the first generator's or coroutine's frame; ``(frame,)``
    when none is one. When a helper opened a block and returned (``def open(self): self.c.__enter__()``), its
    caller's code goes on in the block, and in a generator or a coroutine that code is the one frame's that can be
    suspended."""
    chain = [frame]
    here = frame
    while not here.f_code.co_flags & _SUSPENDABLE:
        here = code_frame(here.f_back)
        if here is None:
            return (frame,)
        chain.append(here)
    return tuple(chain)


def code_frame(frame: Any) -> Any:
    """The frame whose code a guard block entered from ``frame`` guards: ``frame`` itself, unless it is
    context-manager machinery: a frame of :mod:`contextlib` (``ExitStack``, a ``@contextmanager``'s
    ``__enter__``), the generator such a context manager drives (the body of a ``@contextmanager`` or
    ``@asynccontextmanager``: :func:`_drives`; not one ``closing()`` or ``aclosing()`` closes), or a context
    manager's own ``__enter__``, ``__exit__``, ``__aenter__`` or ``__aexit__`` (a program's class whose ``__enter__``
    enters the block): then the frame of the code that uses that context manager (its ``with`` statement's)."""
    while frame is not None:
        back = frame.f_back
        code = frame.f_code
        if code.co_filename == _CONTEXTLIB or (back is not None and (
                code.co_name in _PROTOCOL or (code.co_flags & _SUSPENDABLE and back.f_code.co_filename == _CONTEXTLIB
                                              and _drives(back, frame)))):
            frame = back
            continue
        return frame
    return None


def _drives(manager: Any, frame: Any) -> bool:
    """Whether ``manager`` (a frame of :mod:`contextlib`) is a ``@contextmanager``'s or ``@asynccontextmanager``'s own
    ``__enter__``, ``__exit__``, ``__aenter__`` or ``__aexit__`` driving the generator whose frame is ``frame`` (its
    body); not ``closing(gen)``, ``aclosing(agen)`` or an ``ExitStack`` callback closing a generator, whose frame is
    that generator's own code (its own blocks end there)."""
    if manager.f_code.co_name not in _PROTOCOL:
        return False
    try:
        gen = getattr(manager.f_locals.get("self"), "gen", None)
    except Exception:  # (a frame whose locals cannot be read)
        return False
    return gen is not None and (getattr(gen, "gi_frame", None) is frame or getattr(gen, "ag_frame", None) is frame)


_open: dict[int, list[_Block]] = {}
"""Object id -> the guard blocks open on it, in the order they were opened (every thread's)."""
_suspendable: dict[int, int] = {}
"""Object id -> how many of its open blocks are in a generator's or a coroutine's frame."""
_class_guards: dict[type, Any] = {}
"""Class-level guards by class (:class:`streamsafe.class_guard.ClassGuard`: anything with ``contract_for``)."""


def register_class_guard(cls: type, guard: Any) -> None:
    """Make ``guard`` (anything with ``contract_for(obj)``) route the plain calls of ``cls``'s instances."""
    _class_guards[cls] = guard


def withdraw_class_guard(cls: type) -> None:
    """No class guard routes ``cls``'s calls any more."""
    _class_guards.pop(cls, None)


def snapshot(effect: Any, profile: EffectProfile | None = None) -> tuple[Any, ...]:
    """The values of the profile's :attr:`~streamsafe.profile.EffectProfile.settings` on ``effect`` now."""
    return tuple(getattr(effect, name, None) for name in (profile or profile_of(effect)).settings)


# -- dispatchers -------------------------------------------------------------------------------------------------


def install(cls: type) -> bool:
    """Put the dispatchers on ``cls``: on its profile's guarded and releasing calls and on ``__setattr__``, each
    once (a later profile of the class adds those of the calls it names besides). False when the class refuses
    new attributes."""
    profile = profile_of(cls)
    existing = originals(cls)
    if existing is not None and not _replaced(cls, existing) and not _missing(cls, existing, profile):
        return True
    with _lock:
        existing = originals(cls)
        if existing is not None and not _replaced(cls, existing) and not _missing(cls, existing, profile):
            return True
        saved: dict[str, Any] = {}
        try:
            init = _init_to_record(cls, existing or {}, profile)
            if init is not None:
                saved["__init__"] = cls.__dict__.get("__init__")
                cls.__init__ = recording_init(init, profile.constructor_keywords, MARK)  # type: ignore[misc]
            for name in (*profile.calls, *profile.releases, "__setattr__"):
                if name != "__setattr__" and not is_method(cls, name):
                    continue
                if existing is not None and name in existing and name not in _replaced(cls, existing):
                    continue
                saved[name] = cls.__dict__.get(name)
                dispatcher = _dispatcher(name, cls, saved[name])
                original = raw_method(cls, name)
                if original is not None and name != "__setattr__":
                    functools.update_wrapper(dispatcher, original)  # help() and signatures show the SDK's
                setattr(cls, name, dispatcher)
        except Exception:  # (a class that refuses new attributes; anything else leaves it as it was, too)
            for name, value in saved.items():
                _restore(cls, name, value)
            if existing is None:
                forget_originals(cls)
            return False
        keep_originals(cls, {**(existing or {}), **saved})
        return True


def _replaced(cls: type, existing: dict[str, Any]) -> list[str]:
    """The calls of ``cls`` whose dispatcher something else replaced after it was put there (a profiler's or a
    user's wrapper, which may call the dispatcher it replaced): a new dispatcher goes on top, standing in for it."""
    return [name for name in existing if name != "__init__" and name in cls.__dict__
            and not getattr(cls.__dict__[name], MARK, False)]


def _missing(cls: type, existing: dict[str, Any], profile: Profile) -> list[str]:
    """The calls ``profile`` names that ``cls`` has and no dispatcher stands for, and its constructor when ``profile``
    records constructor keywords and none records them yet (a later profile of the class)."""
    missing = [name for name in (*profile.calls, *profile.releases) if name not in existing and is_method(cls, name)]
    if _init_to_record(cls, existing, profile) is not None:
        missing.append("__init__")
    return missing


def _init_to_record(cls: type, existing: dict[str, Any], profile: Profile) -> Any:
    """``cls``'s ``__init__`` (its own or inherited) when ``profile`` records constructor keywords and nothing records
    them on ``cls`` yet, else ``None``."""
    init = getattr(cls, "__init__", None)
    if (profile.constructor_keywords and "__init__" not in existing and callable(init) and init is not object.__init__
            and not getattr(init, MARK, False)):
        return init
    return None


def _loaded(name: str) -> type | None:
    """The class a profile names ``"module.QualName"``, where its module is imported already (nothing is imported)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        found: Any = module
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found if isinstance(found, type) else None
    return None


def install_named(profile: Profile | None = None) -> list[type]:
    """Put the dispatchers on every class ``profile`` (default: every registered profile) names that exists now: a
    class it holds, or one whose module is imported. Imports nothing; returns the classes that have them."""
    done: list[type] = []
    for p in (profile,) if profile is not None else profiles():
        for c in p.classes:
            cls = c if isinstance(c, type) else _loaded(c)
            if cls is None or cls in done:
                continue
            try:
                profile_of(cls)
            except NotAnEffectError:
                continue
            if install(cls):
                done.append(cls)
    return done


def _watched() -> set[str]:
    """Every module a registered profile's classes may live in (each dotted prefix of a named class), and each
    profile's SDK module."""
    names: set[str] = set()
    for p in profiles():
        if p.module:
            names.add(p.module)
        for c in p.classes:
            if isinstance(c, str):
                parts = c.split(".")
                names.update(".".join(parts[:cut]) for cut in range(1, len(parts)))
    return names


class _Loader(importlib.abc.Loader):
    """A module's own loader, and then the dispatchers on the classes of it that a profile names."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader  # (the module's loader is its own again: reload() and resources use it)
        install_named()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module a profile names, the spec the other finders give, with a loader that puts
    the dispatchers on its classes right after the module runs (:func:`watch_profiles`)."""

    def __init__(self) -> None:
        self.busy = threading.local()
        self.names = _watched()
        """The modules watched (refreshed when a profile is registered)."""

    def registered(self, profile: Profile) -> None:
        self.names = _watched()
        install_named(profile)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names or getattr(self.busy, "on", False):
            return None
        self.busy.on = True  # (the other finders may import: this one stays out of that)
        spec = None
        try:
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(name, path, target)
                    if spec is not None:
                        break
        finally:
            self.busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


_watcher: _Watcher | None = None


def watch_profiles() -> None:
    """Put the dispatchers on every class a registered profile names as soon as it exists (``import streamsafe``
    calls this once): those imported already now, those of a module imported later right after it runs, those of
    a profile registered later when it is registered. Imports nothing; idempotent."""
    global _watcher
    with _lock:
        if _watcher is None:
            _watcher = _Watcher()
            sys.meta_path.insert(0, _watcher)
            on_register(_watcher.registered)
    install_named()


def uninstall_all() -> int:
    """Put every class's own methods back where a dispatcher stands (for tools that document the classes, e.g.
    the API reference); returns how many. Objects guarded before keep their ledgers, and their plain calls are
    the SDK's own again. Does not block."""
    restored = 0
    with _lock:
        for cls, saved in classes_with_originals():
            for name, original in saved.items():
                if not getattr(cls.__dict__.get(name), MARK, False):
                    continue
                _restore(cls, name, original)
                restored += 1
            forget_originals(cls)
    return restored


def _restore(cls: type, name: str, value: Any) -> None:
    try:
        if value is None:
            delattr(cls, name)
        else:
            setattr(cls, name, value)
    except (TypeError, AttributeError):
        pass


def _profile_now(obj: Any, contract: Any) -> Profile | None:
    """The profile a plain call on ``obj`` is guarded by: the one ``contract`` (the guard it goes through now) was made
    with, else the newest registered for its class (``None``: none now). A contract keeps its profile; a later
    profile of the class guards the contracts made after it."""
    if contract is not None:
        return contract.profile  # type: ignore[no-any-return]
    try:
        return profile_of(obj)  # type: ignore[no-any-return]
    except NotAnEffectError:
        return None


def _lazy_guard(name: str, obj: Any) -> Any:
    """The guard that holds ``obj`` now and takes its lazy call ``name`` step by step, or ``None``."""
    contract = active_contract(obj)
    return contract if contract is not None and name in getattr(contract.profile, "lazy", ()) else None


def _names(profile: Profile | None, name: str) -> bool:
    """Whether ``profile`` names ``name`` a guarded or a releasing call (a dispatcher for a call it does not name, put on
    for another profile of the class, calls the SDK's method through)."""
    return profile is not None and (name in profile.calls or name in profile.releases)


def _dispatcher(name: str, owner: type, replaced: Any = None) -> Callable[..., Any]:
    """The dispatcher of ``owner.name``, standing in for ``replaced`` (what ``owner.__dict__`` held; ``None``: it
    was inherited). Where it calls the SDK's own method, it calls ``replaced``, else the one ``super()`` would reach
    from ``owner`` in ``type(self)``'s MRO, not ``type(self)``'s: a subclass whose ``run()`` calls ``super().run()``
    reaches this dispatcher from inside its own method, and ``type(self)``'s would call that again (forever); and a
    wrapper put over this dispatcher later (and a dispatcher over that) would call this one again."""
    if name == "__setattr__":

        def dispatch_setattr(self: Any, attr: str, value: Any) -> None:
            if not in_raw_call(self):
                block = _block_contract(self)  # (an open block's contract keeps its profile; no class guard's is made)
                if attr in getattr(_profile_now(self, block), "settings", ()):
                    _tracked_setattr(self, attr, value, block if block is not None else active_contract(self))
                    return
            raw_method(type(self), "__setattr__", owner)(self, attr, value)

        setattr(dispatch_setattr, MARK, True)
        return dispatch_setattr

    after: dict[type, Any] = {}  # (per class: the class after owner in its MRO, where an inherited method is found)

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        if replaced is not None:
            method = replaced
        else:
            start = after.get(cls)
            if start is None:
                mro = cls.__mro__
                start = after[cls] = mro[mro.index(owner) + 1] if owner in mro else owner.__mro__[1]
            method = raw_method(cls, name, start)
        if in_raw_call(self, cls is not owner):
            return method(self, *args, **kwargs)  # (from inside the object's own method, or super()'s from its worker)
        contract = active_contract(self)
        if contract is not None:
            if not _names(contract.profile, name):
                return method(self, *args, **kwargs)  # (a call of a later profile of the class: not this contract's)
            # reached by super() from a subclass's method no dispatcher wrapped (a class guard's first call on a
            # subclass): the contract runs this method, not type(self)'s, which is running already
            own = cls is owner or method is raw_method(cls, name)
            return contract.guarded_call(name, args, kwargs, None if own else method)
        now = _profile_now(self, None)
        if now is not None and name in getattr(now, "lazy", ()):
            # a lazy call no guard holds (frames = container.decode() before the block): each step is guarded by the
            # guard that holds the object when it is taken
            return lazy.deferred(self, call_raw(self, method, args, kwargs), name, functools.partial(_lazy_guard, name))
        ledger = ledger_of(self, create=False)
        if ledger is None or now is None or not _names(now, name):
            # never guarded (nothing to order, and a call the object makes from inside finds no guard and no ledger
            # either: an unguarded instance of a guarded class pays about a microsecond), or no profile of the
            # class names the call now
            return method(self, *args, **kwargs)
        return tracked_call(self, ledger, now, name, method, args, kwargs)

    dispatch.__name__ = name
    setattr(dispatch, MARK, True)
    return dispatch


# -- blocks ---------------------------------------------------------------------------------------------------


def push(obj: Any, contract: Any, frame: Any) -> None:
    """Route ``obj``'s plain calls made by the code of ``frame`` (and what it calls) through ``contract`` until
    :func:`pop`. Blocks nest: the innermost block whose frame is running takes a call. A block in a generator or
    a coroutine guards its code only while it runs (not the caller's code between two of its resumptions), so
    blocks held across ``yield`` or ``await`` interleave correctly in one thread. (The two tables change with no
    call between: an interrupt leaves both as they were or both changed; a block left pushed by an interrupt on the
    way out of its entry is popped by the block's ``__enter__``.)"""
    block = _Block(contract, frame, thread_token())
    key = id(obj)
    with _lock:
        blocks = [*_open.get(key, ()), block]  # (a new list: readers take no lock)
        count = _suspendable.get(key, 0) + 1 if block.suspendable else 0
        _open[key] = blocks
        if count:
            _suspendable[key] = count


def pop(obj: Any, contract: Any, frame: Any) -> None:
    """End the block of ``contract`` on ``obj`` whose code ``frame`` runs (:func:`_to_end`; nothing when none of
    ``contract`` is open), in whichever thread it was opened. (As in :func:`push`, the tables change with no call
    between.)"""
    key = id(obj)
    with _lock:
        blocks = _open.get(key)
        if not blocks:
            return
        i = _to_end(blocks, contract, frame)
        if i is None:
            return
        rest = blocks[:i] + blocks[i + 1:]
        left = _suspendable.get(key, 0) - 1 if blocks[i].suspendable else -1
        if rest:
            _open[key] = rest
        else:
            del _open[key]
        if left > 0:
            _suspendable[key] = left
        elif left == 0:
            del _suspendable[key]


def _to_end(blocks: list[_Block], contract: Any, frame: Any) -> int | None:
    """The index in ``blocks`` of the block of ``contract`` that leaving from the code of ``frame`` ends: the newest
    opened by ``frame``; else, of those whose ``with`` does not run above ``frame`` (their own exit is to come)
    when there are any, (entered and left through helpers of different frames) the generator's or coroutine's
    block whose code runs ``frame`` (the innermost); else this thread's newest not in a generator's or coroutine's
    code; else, of those whose code runs nowhere any more (their thread ended, the helper that opened them
    returned, or their asyncio task finished) when there are any, this thread's newest, else (left from another
    thread than the one that entered it) the newest of any thread's. ``None`` when no block of ``contract`` is open.
    Does not block."""
    mine = [i for i in range(len(blocks)) if blocks[i].contract is contract]
    if not mine:
        return None
    exact = [i for i in mine if blocks[i].frame is frame]
    if exact:
        return exact[-1]
    # (a block whose `with` runs above this frame is not what a deeper frame leaves: its own exit is to come)
    above = set()
    here = frame.f_back if frame is not None else None
    while here is not None:
        above.add(id(here))
        here = here.f_back
    below = [i for i in mine if id(blocks[i].frame) not in above]
    mine = below or mine
    suspendable = [i for i in mine if blocks[i].suspendable]
    if suspendable:
        here = frame
        while here is not None:
            running = [i for i in suspendable if any(f is here for f in blocks[i].frames)]
            if running:
                return running[-1]
            here = here.f_back
    me = thread_token()
    plain = [i for i in mine if blocks[i].thread == me and not blocks[i].suspendable]
    if plain:
        return plain[-1]
    if len(mine) > 1:
        # (a block whose code runs nowhere any more, its thread ended, its helper returned or its task finished,
        # before one whose `with` is still executing in a thread or suspended in a task: that one's own exit is to come)
        live = _live_frames()
        done = [i for i in mine if (blocks[i].finished() if blocks[i].suspendable else id(blocks[i].frame) not in live)]
        mine = done or mine
    ours = [i for i in mine if blocks[i].thread == me]
    return ours[-1] if ours else mine[-1]


def _live_frames() -> set[int]:
    """The ids of the frames on every thread's stack now."""
    live: set[int] = set()
    for top in sys._current_frames().values():
        here: Any = top
        while here is not None and id(here) not in live:
            live.add(id(here))
            here = here.f_back
    return live


def open_blocks(obj: Any, contract: Any, frame: Any) -> int:
    """How many blocks of ``contract`` on ``obj`` opened by ``frame`` are open (what a block's ``__enter__`` and
    ``__exit__`` compare, to end their own block and no other when an interrupt leaves them)."""
    return sum(1 for b in _open.get(id(obj), ()) if b.contract is contract and b.frame is frame)


def _running_block(blocks: list[_Block], obj_id: int) -> _Block | None:
    """The innermost of ``blocks`` whose code is running now in this thread: when none is in a generator's or
    coroutine's code, the newest of this thread's (an ordinary frame's block is open only while its frame, or the
    code that called the helper that opened it, runs); else the newest block of the innermost frame on this
    thread's stack that one guards (its own frame, or for a block a helper opened and returned from, its caller's
    still running), unless that frame is ordinary code and a newer block of this thread in no generator's or
    coroutine's code is open (opened inside it through a helper that returned: the innermost)."""
    if obj_id not in _suspendable:
        return _newest_of_this_thread(blocks, suspendable_too=True)
    by_frame: dict[int, tuple[Any, int]] = {}
    for i, b in enumerate(blocks):  # (oldest first: the newest block a frame's code opened wins)
        for f in b.frames:
            by_frame[id(f)] = (f, i)
    frame: Any = sys._getframe(2)
    while frame is not None:
        found = by_frame.get(id(frame))
        if found is not None and found[0] is frame:
            if not frame.f_code.co_flags & _SUSPENDABLE:
                # (ordinary code, running since its block opened: a newer block of this thread in no generator's or
                # coroutine's code was opened inside it, through a helper that returned, and is the innermost)
                me = thread_token()
                for j in range(len(blocks) - 1, found[1], -1):
                    if blocks[j].thread == me and not blocks[j].suspendable:
                        return blocks[j]
            return blocks[found[1]]
        frame = frame.f_back
    # (a block entered through a helper whose frame has returned, in an ordinary thread's code: it guards its thread)
    return _newest_of_this_thread(blocks, suspendable_too=False)


def _newest_of_this_thread(blocks: list[_Block], *, suspendable_too: bool) -> _Block | None:
    me = thread_token()
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].thread == me and (suspendable_too or not blocks[i].suspendable):
            return blocks[i]
    return None


def _block_contract(obj: Any) -> Any:
    """The contract of the innermost open guard block whose code makes a call on ``obj`` now (:func:`push`), or
    ``None``."""
    blocks = _open.get(id(obj))
    if blocks:
        block = _running_block(blocks, id(obj))
        if block is not None:
            return block.contract
    return None


def active_contract(obj: Any) -> Any:
    """The contract a plain call on ``obj`` goes through now, or ``None``: the innermost open guard block whose
    code makes the call (:func:`push`), else a class guard (every thread's: it makes one for ``obj`` if it has none)."""
    contract = _block_contract(obj)
    if contract is not None:
        return contract
    if _class_guards:
        for base in type(obj).__mro__:
            cg = _class_guards.get(base)
            if cg is not None:
                return cg.contract_for(obj)
    return None


class GuardBlock:
    """A guard block of one contract (:meth:`StreamContract.guarded`): the code of the frame that enters it calls
    the object through the contract until it leaves. One object may be entered again while it is open (nested in
    one frame, or shared by threads or asyncio tasks): each entry guards its own code, and each exit ends the entry
    of the code that leaves (like ``with contract:``). Does not block on entry."""

    __slots__ = ("contract", "host_wait", "_entries")

    def __init__(self, contract: Any, host_wait: bool) -> None:
        self.contract = contract
        self.host_wait = host_wait
        self._entries: list[Any] = []
        """The Python stack frame of the code each open entry guards, oldest first."""

    @property
    def stack_frame(self) -> Any:
        """The Python stack frame of the code the newest open entry of the block guards (``None`` outside it)."""
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def frame(self) -> Any:
        """Deprecated: :attr:`stack_frame` (a frame is a video frame in streamsafe)."""
        warnings.warn("GuardBlock.frame is deprecated: use GuardBlock.stack_frame (a Python stack frame; in streamsafe "
                      "a frame is a video frame)", DeprecationWarning, stacklevel=2)
        return self.stack_frame

    def __enter__(self) -> Any:
        stack_frame = code_frame(sys._getframe(1))
        self._entries.append(stack_frame)
        try:
            _entered(self.contract, stack_frame)
        except BaseException:  # (refused, or interrupted: no block of this entry is open)
            self._take(stack_frame, exact=True)
            raise
        return self.contract

    def __exit__(self, *exc: object) -> None:
        here = None
        try:
            here = code_frame(sys._getframe(1))  # (entered again while open: the entry of the code that leaves)
        finally:  # (an interrupt in code_frame: the newest entry ends all the same)
            stack_frame = self._take(here)
            if stack_frame is not None:
                _left(self.contract, stack_frame, self.host_wait)

    def _take(self, here: Any, *, exact: bool = False) -> Any:
        """Forget the newest open entry whose code is ``here``'s (else, unless ``exact``, the one whose block leaving
        from ``here`` ends, as :func:`pop` chooses among the blocks of these entries: entered and left through helpers,
        the entry of the code that leaves, not another task's or thread's; else the newest; ``None`` when none is
        open) and return its stack frame."""
        with _lock:
            entries = self._entries
            for i in range(len(entries) - 1, -1, -1):
                if entries[i] is here:
                    return entries.pop(i)
            if not entries or exact:
                return None
            if here is not None and len(entries) > 1:
                effect = getattr(self.contract, "effect", None)
                ours = [b for b in _open.get(id(effect), ()) if b.contract is self.contract
                        and any(b.frame is e for e in entries)]
                chosen = _to_end(ours, self.contract, here) if ours else None
                if chosen is not None:
                    for j in range(len(entries) - 1, -1, -1):
                        if entries[j] is ours[chosen].frame:
                            return entries.pop(j)
            return entries.pop()


def _entered(contract: Any, stack_frame: Any) -> None:
    """``contract.enter_block(stack_frame)``; an exception that leaves it after it opened the block (an interrupt)
    closes that block again, and no other (an enclosing block of the same contract stays open)."""
    before = -1
    try:
        before = open_blocks(contract.effect, contract, stack_frame)
        contract.enter_block(stack_frame)
    except BaseException:
        if before >= 0 and open_blocks(contract.effect, contract, stack_frame) > before:
            pop(contract.effect, contract, stack_frame)
        raise


def _left(contract: Any, stack_frame: Any, host_wait: bool, caller: Any = None) -> None:
    """``contract.leave_block(stack_frame, host_wait=host_wait)`` (``stack_frame`` ``None``: the one ``caller``'s code
    guards); an exception that leaves it before it closed the block (an interrupt) closes it all the same, and no
    other; one in the host wait after it leaves it closed."""
    before = -1
    try:
        if stack_frame is None:
            stack_frame = code_frame(caller)
        before = open_blocks(contract.effect, contract, stack_frame)
        contract.leave_block(stack_frame, host_wait=host_wait)
    except BaseException:
        if stack_frame is None:
            stack_frame = code_frame(caller)
        if before < 0 or (before > 0 and open_blocks(contract.effect, contract, stack_frame) == before):
            pop(contract.effect, contract, stack_frame)
        raise


def stack_frame_argument(stack_frame: Any, deprecated: dict[str, Any], method: str) -> Any:
    """``enter_block``'s and ``leave_block``'s stack frame, also given by the deprecated keyword ``frame=`` (which
    warns, naming ``stack_frame=``); any other keyword raises :class:`TypeError`."""
    if "frame" in deprecated:
        warnings.warn(f"{method}(frame=...) is deprecated: pass stack_frame=... (the guarded code's Python stack frame; "
                      "in streamsafe a frame is a video frame)", DeprecationWarning, stacklevel=3)
        if stack_frame is None:
            stack_frame = deprecated.pop("frame")
        else:
            deprecated.pop("frame")
    if deprecated:
        raise TypeError(f"{method}() got an unexpected keyword argument {sorted(deprecated)[0]!r}")
    if stack_frame is None:
        raise TypeError(f"{method}() missing its argument stack_frame (the guarded code's Python stack frame)")
    return stack_frame


_C = TypeVar("_C", bound="GuardedBlocks")


class GuardedBlocks:
    """``with contract:`` and ``contract.guarded()`` for a contract with ``enter_block`` and ``leave_block``."""

    def enter_block(self, stack_frame: Any = None, **deprecated: Any) -> None:
        """Route the plain calls made by the code of ``stack_frame`` (a Python stack frame) through this contract
        (each contract's own)."""
        raise NotImplementedError

    def leave_block(self, stack_frame: Any = None, *, host_wait: bool, **deprecated: Any) -> None:
        """End :meth:`enter_block` for ``stack_frame`` (each contract's own)."""
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        """``with contract:`` as :meth:`guarded` (plain calls made by the code inside the block go through the
        contract). Does not block."""
        _entered(self, code_frame(sys._getframe(1)))
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop routing plain calls; blocks the host until the reads streamsafe knows of and the SDK's own work are
        done (as the contract's ``synchronize()``)."""
        _left(self, None, True, sys._getframe(1))

    def guarded(self, *, host_wait_on_exit: bool = True) -> GuardBlock:
        """Route the plain calls of the guarded object (its profile's calls and releases, and configuration
        changes) made by the code inside the block (a context manager) through this contract. Blocks nest: the
        innermost guard takes plain calls; a block in a generator or a coroutine guards its code, not the caller's
        between two resumptions (threads, asyncio tasks and generators each keep their own). Leaving the block
        blocks the host, by default, until the reads streamsafe knows of and the SDK's own work are done (as
        ``synchronize()``); ``host_wait_on_exit=False`` leaves without waiting (the next call still waits for them
        on the device)."""
        return GuardBlock(self, host_wait_on_exit)


# -- tracked raw calls ------------------------------------------------------------------------------------------


class _Tracked:
    """The engine's caller for a tracked raw call (see :func:`tracked_call`): the ledger's own counters, the SDK's
    raw output."""

    __slots__ = ("ledger", "stats", "last_plan", "make")

    def __init__(self, ledger: Ledger, make: Callable[[str, Sequence[Any], dict[str, Any]], Frame]) -> None:
        self.ledger = ledger
        self.stats = ledger.unguarded_stats
        self.last_plan: FencePlan | None = None
        self.make = make

    def frame_for(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Frame:
        return self.make(name, args, kwargs).ready(self.ledger.resolved_backend(), self.ledger.device)

    def sdk_arguments(self, frame: Frame, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        return args, kwargs, None

    copy_inputs = sdk_arguments  # (a tracked raw call's frame never copies)
    undeclared = None

    def protect(self, arrays: Sequence[Any], frame: Frame, seen: Any) -> None:
        pass

    def output(self, raw: Any, made: Any, frame: Frame, obj: Any) -> Any:
        return raw


def tracked_call(obj: Any, ledger: Ledger, profile: Profile, name: str, method: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
    """A plain call on an object no guard holds now, but which has a ledger: the SDK's raw call and output, through
    the engine, after the device waits that keep the outputs streamsafe handed out safe (H5, D5); older outputs
    become stale. A releasing call first makes the host wait for every reader (H6, D6). Blocks the host only
    then, and in the SDK's own wait."""
    if ledger.closed:
        return call_raw(obj, method, args, kwargs)
    if isinstance(ledger, PoolLedger):
        assert isinstance(profile, PoolProfile)
        writer = ledger.writer
        if writer is None or ledger.backend is None:  # never called through a guard: no frame handed out yet
            return call_raw(obj, method, args, kwargs)
        plan = pool_plan(Strategy.EVENT, writer, writer_known=ledger.writer_known)
        if name in profile.releases:
            return engine.release(ledger, obj, method, args, kwargs, plan=plan, strategy=None, stats=ledger.unguarded_stats,
                                  closes=name in profile.closes, call=name)
        pool = ledger
        return engine.call(_Tracked(ledger, lambda n, a, k: pool_frame(n, plan, pool, writer, profile, guarded=False)),
                           obj, method, name, args, kwargs)
    assert isinstance(ledger, EffectLedger) and isinstance(profile, EffectProfile)
    if name in profile.releases:
        return engine.release(ledger, obj, method, args, kwargs, plan=None, strategy=None, stats=ledger.unguarded_stats,
                              closes=name in profile.closes, call=name)
    effect_ledger = ledger
    return engine.call(_Tracked(ledger, lambda n, a, k: raw_frame(n, effect_ledger, profile, obj, tuple(a), k)),
                       obj, method, name, args, kwargs)


def _tracked_setattr(effect: Any, attr: str, value: Any, contract: Any) -> None:
    if contract is not None:
        contract.configure(**{attr: value})
        return
    ledger = ledger_of(effect, create=False)
    if not isinstance(ledger, EffectLedger) or ledger.closed:
        call_raw(effect, raw_method(type(effect), "__setattr__"), (attr, value), {})
        return
    tracked_setattr(effect, ledger, attr, value)


def tracked_setattr(effect: Any, ledger: EffectLedger, attr: str, value: Any) -> None:
    """A plain change of an output-size or encoding attribute outside any guard: the host waits for the readers
    streamsafe knows of before the effect may release its buffer (H6)."""
    current = getattr(effect, attr, None)
    profile = profile_of(effect)
    setattr_ = raw_method(type(effect), "__setattr__")
    if same_value(current, value) or current is None or not profile.releases_output(effect, attr):  # nothing to release
        call_raw(effect, setattr_, (attr, value), {})
        return

    def change() -> None:
        ledger.wait_for_readers(None, None, ledger.unguarded_stats)
        call_raw(effect, setattr_, (attr, value), {})
        ledger.released()
        ledger.config = snapshot(effect, profile)

    ledger.turns.run("configure", change)


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


def config_reader(effect: Any, profile: EffectProfile) -> Callable[[Any], Any]:
    """A fast reader of the profile's settings the effect has (a reused frame compares what it reads)."""
    present = [name for name in profile.settings if hasattr(effect, name)]
    return operator.attrgetter(*present) if present else _nothing


def _nothing(effect: Any) -> tuple[()]:
    return ()


def check_object(obj: Any, profile_kind: str = "effect") -> Profile:
    """``obj``'s profile; raise :class:`~streamsafe.errors.NotAnEffectError` unless ``obj`` is an instance (not a
    class, a module, ``None``) that a registered profile describes."""
    if obj is None or isinstance(obj, type) or inspect.ismodule(obj):
        what = "a class" if isinstance(obj, type) else "a module" if inspect.ismodule(obj) else type(obj).__name__
        raise NotAnEffectError(
            f"a contract needs an SDK object (an instance), got {obj!r} ({what}): an nvvfx effect (VideoSuperRes, "
            "VideoFrameGeneration, TrueHDR, or streamsafe.testing's), a video decoder, or an object of a class a "
            "registered profile names. Create it first, e.g. sr = VideoSuperRes(); sr.load(); then StreamContract(sr)."
        )
    return profile_of(obj)  # type: ignore[no-any-return]
