"""The SDK's own methods: found past streamsafe's dispatchers, and called with a mark while they run.

The guards (:mod:`streamsafe.guarding`) put dispatchers on an SDK class's guarded and releasing calls and keep
the originals here (:func:`keep_originals`). A guarded call runs the SDK's own method through
:func:`call_raw`, which marks the object as inside its own method for the call's length: a dispatcher
reached from inside it (an SDK method that calls another of its guarded methods, a subclass's ``super()``
call, a worker thread the method waits for) calls through instead of guarding the call a second time
(:func:`in_raw_call`). A mark an interrupt left behind is known by its frame, no longer running, and goes.
Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["MARK", "raw_method", "call_raw", "in_raw_call", "keep_originals", "originals", "forget_originals", "classes_with_originals"]

MARK = "__streamsafe_dispatch__"
"""The attribute set on streamsafe's own wrappers (dispatchers, recording constructors)."""

_originals: dict[type, dict[str, Any]] = {}
"""Per class with dispatchers: what stood in its ``__dict__`` before (``None``: nothing, it was inherited)."""
_raw_cache: dict[tuple[Any, ...], Any] = {}
"""The SDK's own methods by (class, name) or (class, name, the class a dispatcher was put on)."""
_running: dict[int, tuple[int, Any]] = {}
"""Object id -> (thread, frame) of the raw call running the object's own method."""
_get_ident = threading.get_ident
_NO_MARK = (None, None)


def keep_originals(cls: type, saved: dict[str, Any]) -> None:
    """Record what stood in ``cls.__dict__`` before dispatchers replaced it (:mod:`streamsafe.guarding`)."""
    _originals[cls] = saved
    _raw_cache.clear()


def originals(cls: type) -> dict[str, Any] | None:
    """What stood in ``cls.__dict__`` before its dispatchers, or ``None`` when it has none."""
    return _originals.get(cls)


def classes_with_originals() -> list[tuple[type, dict[str, Any]]]:
    """Every class with dispatchers, with what stood in its ``__dict__`` before them."""
    return list(_originals.items())


def forget_originals(cls: type) -> None:
    """``cls`` has no dispatchers any more."""
    _originals.pop(cls, None)
    _raw_cache.clear()


def raw_method(cls: type, name: str, start: type | None = None) -> Any:
    """The SDK's own ``name`` for instances of ``cls`` (never a dispatcher), or ``None``. With ``start`` (a
    class in ``cls``'s MRO): the one ``super()`` reaches from a method of the class before ``start``, i.e. the
    first along ``cls.__mro__`` from ``start`` on."""
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
        if getattr(attr, MARK, False) and base in _originals:  # (a user's functools.wraps copies the mark)
            attr = _originals[base].get(name)
            if attr is None:  # the dispatcher stood in for an inherited method: keep looking
                continue
        _raw_cache[key] = attr
        return attr
    return None


def call_raw(obj: Any, method: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``method(obj, *args, **kwargs)`` (the SDK's own method) with ``obj`` marked as inside its own method while
    it runs, so that dispatchers reached from inside call through. Blocks as the SDK's method does."""
    key = id(obj)
    if key in _running and in_raw_call(obj):
        return method(obj, *args, **kwargs)
    me = _get_ident()
    try:
        _running[key] = (me, sys._getframe())  # (held in no local: a frame holding itself would keep the inputs)
        return method(obj, *args, **kwargs)
    finally:
        if _running.get(key, _NO_MARK)[0] == me:
            _running.pop(key, None)


def in_raw_call(obj: Any, other_threads: bool = False) -> bool:
    """Whether ``obj``'s own method runs now in this thread (a call from inside it calls through); with
    ``other_threads``, in any thread (a worker thread the method waits for calls through too: ``super()``
    from there). A mark an interrupt left behind in this thread (its frame no longer runs) goes."""
    key = id(obj)
    mark = _running.get(key)
    if mark is None:
        return False
    if mark[0] != _get_ident():
        return other_threads
    frame = mark[1]
    caller: Any = sys._getframe(1)
    while caller is not None:
        if caller is frame:
            return True
        caller = caller.f_back
    if _running.get(key) is mark:
        del _running[key]
    return False
