from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest

import streamsafe as ss
from streamsafe.backend import _pool as _pool_module
from streamsafe.backend._pool import EventPool


def test_fences_reuse_one_event_in_steady_state() -> None:
    sim = ss.sim.SimBackend(scheduler="in-order")
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    for _ in range(2000):
        sim.fence(b, a)
    stats = sim.pool_stats(0)
    assert (stats.created, stats.in_use, stats.free) == (1, 0, 1)


def test_pool_bounds_free_list_and_destroys_the_rest() -> None:
    destroyed: list[int] = []
    made = iter(range(100))
    pool: EventPool[int] = EventPool(lambda dev: next(made), destroyed.append, max_free=2)
    held = [pool.acquire(0) for _ in range(5)]
    for ev in held:
        pool.release(0, ev)
    stats = pool.stats(0)
    assert (stats.created, stats.free, stats.destroyed, stats.in_use) == (5, 2, 3, 0)
    assert destroyed == [2, 3, 4]
    assert pool.acquire(0) in (0, 1)


def test_pool_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError, match="max_free must be at least 1"):
        EventPool(lambda d: 0, lambda e: None, max_free=0)


def _in_a_thread(fn: Any) -> bool:
    """Run ``fn`` in a daemon thread; whether it returned within 5 s (else it hangs: a deadlock)."""
    done = threading.Event()

    def run() -> None:
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(5)


def test_an_event_given_back_by_a_finalizer_while_the_pool_is_busy_does_not_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound fence program gives its events back from a ``weakref.finalize`` callback; the garbage collector may run
    that callback at any allocation, one inside the pool's own lock included (seen on the GPU: a hazard matrix hung
    in ``acquire``). Here the collection is made to happen at the allocation of a new device's counters."""
    pool: EventPool[int] = EventPool(lambda dev: 7, lambda ev: None)

    class Owner:
        pass

    owner = Owner()
    owner.cycle = owner  # type: ignore[attr-defined]  # (only the collector frees it)
    weakref.finalize(owner, pool.release, 1, 5)
    del owner
    collecting = _pool_module.EventPoolStats

    def stats_after_a_collection() -> Any:
        gc.collect()  # (what an allocation may set off)
        return collecting()

    monkeypatch.setattr(_pool_module, "EventPoolStats", stats_after_a_collection)
    got: list[int] = []
    assert _in_a_thread(lambda: got.append(pool.acquire(1))), "acquire() deadlocked on its own lock"
    assert got == [5]  # (the event the finalizer gave back, lent again)
    stats = pool.stats(1)
    assert (stats.created, stats.in_use, stats.free) == (0, 0, 0)
