"""A bounded pool of reusable events, one free list per device."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

__all__ = ["EventPool", "EventPoolStats"]

E = TypeVar("E")


@dataclass
class EventPoolStats:
    """How many events a device's pool created, lent out, holds free and destroyed."""

    created: int = 0
    in_use: int = 0
    free: int = 0
    destroyed: int = 0


class EventPool(Generic[E]):
    """Lends events per device; creates one only when none is free, keeps at most ``max_free``.

    Thread-safe, and safe to give events back to from a finalizer (``weakref.finalize``): the collector may run one
    at any allocation, inside this pool's own lock too, so the lock is re-entrant and each step leaves the lists
    consistent. Creating and destroying are the caller's callbacks (driver calls or model objects).
    """

    def __init__(self, create: Callable[[int], E], destroy: Callable[[E], None], max_free: int = 64) -> None:
        if max_free < 1:
            raise ValueError(f"max_free must be at least 1, got {max_free}")
        self._create = create
        self._destroy = destroy
        self._max_free = max_free
        self._free: dict[int, list[E]] = {}
        self._stats: dict[int, EventPoolStats] = {}
        self._lock = threading.RLock()

    def acquire(self, device: int) -> E:
        with self._lock:
            stats = self._stats.setdefault(device, EventPoolStats())
            free = self._free.setdefault(device, [])
            if free:
                stats.free -= 1
                stats.in_use += 1
                return free.pop()
        event = self._create(device)
        with self._lock:
            stats.created += 1
            stats.in_use += 1
        return event

    def release(self, device: int, event: E) -> None:
        with self._lock:
            stats = self._stats.setdefault(device, EventPoolStats())
            free = self._free.setdefault(device, [])
            stats.in_use -= 1
            if len(free) < self._max_free:
                free.append(event)
                stats.free += 1
                return
            stats.destroyed += 1
        self._destroy(event)

    def stats(self, device: int = 0) -> EventPoolStats:
        with self._lock:
            return replace(self._stats.get(device, EventPoolStats()))
