"""A mapping keyed by object identity, held weakly: what streamsafe keeps per SDK object and per view.

``weakref.WeakKeyDictionary`` finds a key by hash and ``==``: two SDK objects that compare equal (a frozen
dataclass, a value object) would share one entry, and an array's ``==`` is elementwise (a torch view asked
``view == view`` raises "Boolean value of Tensor with more than one value is ambiguous"). Here an entry is
found by ``id()`` and belongs to the very object it was made for; it goes when that object dies. Nothing
here blocks the host.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["WeakIdentityMap"]

V = TypeVar("V")


class WeakIdentityMap(Generic[V]):
    """``object -> value`` by identity, each object held weakly. Setting a value for an object that cannot be
    weakly referenced raises ``TypeError`` (the caller decides how to hold it). Thread-safe."""

    __slots__ = ("_entries", "_lock", "__weakref__")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}
        self._lock = threading.RLock()  # (re-entrant: an entry's object may die, and its entry go, while one is set)

    def get(self, obj: Any, default: Any = None) -> Any:
        """``obj``'s value, else ``default``."""
        entry = self._entries.get(id(obj))
        if entry is None or entry[0]() is not obj:  # (an id outlives its object: a new object there has no entry)
            return default
        return entry[1]

    def __contains__(self, obj: Any) -> bool:
        entry = self._entries.get(id(obj))
        return entry is not None and entry[0]() is obj

    def __setitem__(self, obj: Any, value: V) -> None:
        key = id(obj)
        ref = weakref.ref(obj, functools.partial(_gone, weakref.ref(self), key))  # (TypeError: no weak reference)
        with self._lock:
            self._entries[key] = (ref, value)

    def __delitem__(self, obj: Any) -> None:
        with self._lock:
            entry = self._entries.get(id(obj))
            if entry is None or entry[0]() is not obj:
                raise KeyError(obj)
            del self._entries[id(obj)]

    def pop(self, obj: Any, default: Any = None) -> Any:
        """Remove ``obj``'s entry and return its value, else ``default``."""
        with self._lock:
            entry = self._entries.get(id(obj))
            if entry is None or entry[0]() is not obj:
                return default
            del self._entries[id(obj)]
            return entry[1]

    def drop_dead(self, key: int, ref: weakref.ref[Any]) -> None:
        """The object at ``key`` died (``ref`` was its weak reference): its entry goes, unless another object, at the
        same id since, has one now."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]

    def values(self) -> list[V]:
        """The values of the objects alive now."""
        return [value for ref, value in list(self._entries.values()) if ref() is not None]

    def __iter__(self) -> Iterator[Any]:
        for ref, _ in list(self._entries.values()):
            obj = ref()
            if obj is not None:
                yield obj

    def __len__(self) -> int:
        return sum(1 for ref, _ in list(self._entries.values()) if ref() is not None)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __repr__(self) -> str:
        return f"<WeakIdentityMap of {len(self)} object(s)>"


def _gone(owner: weakref.ref[WeakIdentityMap[Any]], key: int, ref: weakref.ref[Any]) -> None:
    """A weak reference's callback: its object died (the map, if it still lives, drops the entry)."""
    table = owner()
    if table is not None:
        table.drop_dead(key, ref)
