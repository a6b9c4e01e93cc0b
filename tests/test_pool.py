from __future__ import annotations

import pytest

import streamsafe as ss
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
