"""Lazy calls: an SDK call whose result is an iterator that hands out its frames one step at a time.

A decoder may hand out its frames from a generator (PyAV's ``container.decode()``): calling it decodes nothing,
each ``next()`` decodes until a frame comes out. A profile names such calls (:attr:`~streamsafe.profile.PoolProfile.lazy`); the guarded call makes the
SDK's iterator (no GPU work) and returns :func:`steps` of it: a generator whose every step is a guarded call
of its own through the engine (:mod:`streamsafe.engine`: the object's turn, the fences before it, the records
after it, its frames guarded by the caller's output), so the program between two steps holds no turn and the
frames come out as they are made. The SDK's iterator ending (``StopIteration``) is no call: it ends the
generator; closing the generator closes the SDK's iterator. Blocks as each step of the SDK's does.

A lazy call made where no guard holds the object (``frames = container.decode()`` before the block that reads
them) returns :func:`deferred` steps: each is guarded by the guard that holds the object when it is taken, else
is the SDK's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from . import engine
from .calls import call_raw

__all__ = ["deferred", "steps"]


def _advance(obj: Any, iterator: Iterator[Any]) -> Any:
    """One step of the SDK's ``iterator`` (what the engine calls as the SDK's method of ``obj``)."""
    return next(iterator)


def steps(caller: engine.Caller, obj: Any, iterator: Any, name: str) -> Iterator[Any]:
    """The guarded result of a lazy call ``name`` of ``obj``: each step of the SDK's ``iterator`` made as a guarded
    call of ``caller`` (see the module docstring), its output what ``caller`` makes of the step's result."""
    return deferred(obj, iterator, name, lambda _: caller)


def deferred(obj: Any, iterator: Any, name: str, guard_of: Callable[[Any], engine.Caller | None]) -> Iterator[Any]:
    """The result of a lazy call ``name`` of ``obj``: each step of the SDK's ``iterator`` is a guarded call of
    ``guard_of(obj)``, the guard that holds ``obj`` when the step is taken (see the module docstring), or the SDK's
    own step where none does (a call made where no guard held ``obj``)."""
    it = iter(iterator)
    try:
        while True:
            caller = guard_of(obj)
            try:
                out = call_raw(obj, _advance, (it,), {}) if caller is None else engine.call(caller, obj, _advance, name, (it,), {})
            except StopIteration:
                return
            yield out
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
