"""A mapping keyed by object identity, held weakly: what streamsafe keeps per SDK object and per view; and the
comparison of a setting's values that never trusts a user's ``==`` blindly.

``weakref.WeakKeyDictionary`` finds a key by hash and ``==``: two SDK objects that compare equal (a frozen
dataclass, a value object) would share one entry, and an array's ``==`` is elementwise (a torch view asked
``view == view`` raises "Boolean value of Tensor with more than one value is ambiguous"). Here an entry is
found by ``id()`` and belongs to the very object it was made for; it goes when that object dies. Nothing
here blocks the host, but a user's ``==`` or truth that :func:`same_value` asks (a device array's may wait).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

__all__ = ["WeakIdentityMap", "same_value"]

V = TypeVar("V")


class WeakIdentityMap(Generic[V]):
    """``object -> value`` by identity, each object held weakly. Setting a value for an object that cannot be
    weakly referenced raises ``TypeError`` (the caller decides how to hold it). Thread-safe: sets and pops hold a
    lock; an object's entry goes in its weak reference's callback, without it (the callback runs while the dying
    object still holds its memory, so no new object has its id yet)."""

    __slots__ = ("_entries", "_keys", "_gone", "_lock")

    def __init__(self) -> None:
        entries: dict[int, tuple[weakref.ref[Any], V]] = {}
        keys: dict[int, int] = {}  # (id of an entry's weak reference -> the entry's key: what its callback drops)

        def gone(ref: weakref.ref[Any]) -> None:
            key = keys.pop(id(ref), None)
            if key is not None:
                entries.pop(key, None)

        self._entries, self._keys, self._gone = entries, keys, gone
        self._lock = threading.RLock()  # (re-entrant: a finalizer the collector runs inside a set may set too)

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
        ref = weakref.ref(obj, self._gone)  # (TypeError: obj cannot be weakly referenced)
        with self._lock:
            old = self._entries.get(key)
            self._entries[key] = (ref, value)
            self._keys[id(ref)] = key
            if old is not None:  # (the object's earlier entry, or a dead object's: its reference goes)
                self._keys.pop(id(old[0]), None)

    def __delitem__(self, obj: Any) -> None:
        if self.pop(obj, _MISSING) is _MISSING:
            raise KeyError(obj)

    def pop(self, obj: Any, default: Any = None) -> Any:
        """Remove ``obj``'s entry and return its value, else ``default``."""
        with self._lock:
            entry = self._entries.get(id(obj))
            if entry is None or entry[0]() is not obj:
                return default
            del self._entries[id(obj)]
            self._keys.pop(id(entry[0]), None)
            return entry[1]

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


_MISSING = object()


def same_value(a: Any, b: Any) -> bool:
    """Whether a setting's two values are the same: the same object, or equal by ``==`` with a plain truth. An ``==``
    that raises or is elementwise (an array's: its truth raises) counts as a difference, the cautious answer."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (any error of a user's __eq__ or __bool__: not known to be the same)
        return False
