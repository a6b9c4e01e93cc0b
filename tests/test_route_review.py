"""Routing defects a review found in how plain calls reach the contract of the guard block whose code runs (the
guide's "Guards follow the code, not the thread"): each test fails before its fix and passes after."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import guarding
from streamsafe.class_guard import ClassGuard
from streamsafe.errors import StreamsafeError
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes

pytestmark = pytest.mark.filterwarnings("ignore::streamsafe.errors.HostWaitWarning")


def _effect(sim: SimBackend) -> Any:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def _contract(sim: SimBackend, sr: Any) -> tuple[Any, Any]:
    p = sim.create_stream(non_blocking=True)
    return ss.stream_contract(sr, sim.create_stream(non_blocking=True), input_stream=p, strategy="event"), p


def _x_on(sim: SimBackend, stream: Any) -> Any:
    x = sim.empty((3, 16, 16), np.float32)
    sim.launch(stream, "producer", lambda: None, writes=[x])
    return x


class _Opener:
    """A helper that opens and closes a block (a contract or a ``guarded()`` block) from methods of its own."""

    def __init__(self, block: Any) -> None:
        self.block = block

    def open(self) -> None:
        self.block.__enter__()

    def close(self) -> None:
        self.block.__exit__(None, None, None)


def test_a_block_opened_through_a_helper_inside_another_block_is_innermost_while_a_generator_holds_a_block() -> None:
    """A suspended generator's block on the effect made the helper's (newer) block lose to the outer ``with c1:``."""
    sim = SimBackend()
    sr = _effect(sim)
    c1, _ = _contract(sim, sr)
    c2, p2 = _contract(sim, sr)
    cg, _ = _contract(sim, sr)

    @contextlib.contextmanager
    def session(c: Any) -> Iterator[None]:
        h = _Opener(c)
        h.open()
        try:
            yield
        finally:
            h.close()

    def frames() -> Iterator[None]:
        with cg:
            yield

    held = frames()
    next(held)
    try:
        with c1:
            with session(c2):
                assert guarding.active_contract(sr) is c2
                sr.run(_x_on(sim, p2))
            h = _Opener(c2)
            h.open()
            assert guarding.active_contract(sr) is c2
            h.close()
            assert guarding.active_contract(sr) is c1
    finally:
        held.close()
    assert (c1.stats["runs"], c2.stats["runs"]) == (0, 1)
    assert sim.races == []
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_a_shared_guarded_block_entered_through_helpers_by_two_tasks_ends_each_tasks_own_entry() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c, p = _contract(sim, sr)
    block = c.guarded(host_wait_on_exit=False)
    seen: dict[str, Any] = {}

    async def a(b_open: asyncio.Event, a_closed: asyncio.Event) -> None:
        s = _Opener(block)
        s.open()
        await b_open.wait()
        s.close()
        seen["A after its close"] = guarding.active_contract(sr)
        a_closed.set()

    async def b(b_open: asyncio.Event, a_closed: asyncio.Event) -> None:
        s = _Opener(block)
        s.open()
        b_open.set()
        await a_closed.wait()
        seen["B inside"] = guarding.active_contract(sr)
        seen["B guarded"] = isinstance(sr.run(_x_on(sim, p)), ss.SafeOutput)
        s.close()

    async def main() -> None:
        e1, e2 = asyncio.Event(), asyncio.Event()
        await asyncio.gather(a(e1, e2), b(e1, e2))

    asyncio.run(main())
    assert seen == {"A after its close": None, "B inside": c, "B guarded": True}
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_a_shared_guarded_block_entered_through_helpers_by_two_threads_ends_each_threads_own_entry() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c, _ = _contract(sim, sr)
    block = c.guarded(host_wait_on_exit=False)
    seen: dict[str, Any] = {}
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        h = _Opener(block)
        h.open()
        a_open.set()
        b_open.wait(5)
        h.close()
        seen["A after its close"] = guarding.active_contract(sr)
        a_closed.set()

    def b() -> None:
        a_open.wait(5)
        h = _Opener(block)
        h.open()
        b_open.set()
        a_closed.wait(5)
        seen["B inside"] = guarding.active_contract(sr)
        h.close()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"A after its close": None, "B inside": c}
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_a_block_left_from_another_thread_ends_the_one_whose_code_runs_nowhere_not_a_live_with() -> None:
    """``stop()`` from the main thread ends the block a finished thread opened, not a worker's running ``with c:``."""
    sim = SimBackend()
    sr = _effect(sim)
    c, p = _contract(sim, sr)

    class Pipeline:
        def start(self) -> None:
            c.__enter__()

        def stop(self) -> None:
            c.__exit__(None, None, None)

    pipeline = Pipeline()
    t = threading.Thread(target=pipeline.start)
    t.start()
    t.join()
    inside, stopped, seen = threading.Event(), threading.Event(), {}

    def worker() -> None:
        with c:
            inside.set()
            stopped.wait(5)
            seen["open"] = len(guarding._open.get(id(sr), ()))
            seen["routed"] = guarding.active_contract(sr) is c
            seen["guarded"] = isinstance(sr.run(_x_on(sim, p)), ss.SafeOutput)

    w = threading.Thread(target=worker)
    w.start()
    inside.wait(5)
    pipeline.stop()
    stopped.set()
    w.join()
    assert seen == {"open": 1, "routed": True, "guarded": True}
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_a_class_guard_entered_while_its_outermost_block_ends_is_refused_or_guarded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The outermost exit ends the guard under the lock: a ``with g:`` in another thread meanwhile is not accepted and
    then ended under it."""
    sim = SimBackend()
    sr = _effect(sim)
    g = ss.guard(VideoSuperRes)
    original, b_in = ClassGuard.undo, threading.Event()

    def preempted_undo(self: ClassGuard) -> None:
        if threading.current_thread().name == "route-review-A":
            b_in.wait(1)  # (thread A preempted at the start of undo())
        original(self)

    monkeypatch.setattr(ClassGuard, "undo", preempted_undo)
    result: dict[str, bool] = {}

    def a() -> None:
        with g:
            pass

    def b() -> None:
        time.sleep(0.1)
        try:
            with g:
                b_in.set()
                time.sleep(0.1)
                x = sim.empty((3, 16, 16), np.float32)
                sim.launch(sim.legacy_stream(), "producer", lambda: None, writes=[x])
                result["guarded"] = isinstance(sr.run(x), ss.SafeOutput)
        except StreamsafeError:
            b_in.set()
            result["refused"] = True

    ta, tb = threading.Thread(target=a, name="route-review-A"), threading.Thread(target=b)
    try:
        ta.start()
        tb.start()
        ta.join()
        tb.join()
    finally:
        monkeypatch.undo()
        g.undo()
    assert result.get("refused") or result.get("guarded"), result


def test_closing_a_generator_that_holds_its_own_block_ends_its_block_not_the_callers() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c, p = _contract(sim, sr)

    def frames() -> Iterator[int]:
        with c:
            yield 1
            yield 2

    with c:
        with contextlib.closing(frames()) as gen:
            next(gen)
        assert len(guarding._open.get(id(sr), ())) == 1
        assert isinstance(sr.run(_x_on(sim, p)), ss.SafeOutput)
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_aclosing_an_async_generator_that_holds_its_own_block_ends_its_block_not_the_callers() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c, p = _contract(sim, sr)
    seen: dict[str, Any] = {}

    async def frames() -> AsyncIterator[int]:
        with c:
            for i in range(5):
                await asyncio.sleep(0)
                yield i

    async def main() -> None:
        with c:
            async with contextlib.aclosing(frames()) as agen:
                async for _ in agen:
                    break
            seen["open"] = len(guarding._open.get(id(sr), ()))
            seen["guarded"] = isinstance(sr.run(_x_on(sim, p)), ss.SafeOutput)
        seen["after"] = guarding.active_contract(sr)

    asyncio.run(main())
    assert seen == {"open": 1, "guarded": True, "after": None}
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


def test_a_contextmanager_body_still_stands_for_the_code_that_uses_it() -> None:
    """(The fix above keeps this: a ``@contextmanager``'s body that enters a block guards its ``with`` statement's
    code.)"""
    sim = SimBackend()
    sr = _effect(sim)
    c, _ = _contract(sim, sr)

    @contextlib.contextmanager
    def session() -> Iterator[None]:
        with c:
            yield

    with session():
        assert guarding.active_contract(sr) is c
    assert guarding.active_contract(sr) is None
    assert not guarding._open.get(id(sr))  # (this test's effect: blocks of other tests' abandoned generators may stay)


@pytest.mark.parametrize(("nested", "a_lives"), [(False, False), (True, False), (True, True)],
                         ids=["in the task's coroutine", "one await deeper", "one await deeper, the task still running"])
def test_a_helper_block_of_a_finished_task_is_what_its_close_from_another_task_ends_not_a_live_with(nested: bool,
                                                                                                   a_lives: bool) -> None:
    """One thread, three tasks: A opens a block through a helper (in its own coroutine, or in one it awaits, which
    returns) and finishes (or goes on waiting), C waits inside its own ``with c:``, and B calls the helper's
    ``close()``. It ended C's live block (the newest), not the one whose code runs nowhere: C's later calls went
    unguarded, and its ``with`` then ended A's."""
    sim = SimBackend()
    sr = _effect(sim)
    c, p = _contract(sim, sr)
    helper = _Opener(c)
    seen: dict[str, Any] = {}

    async def setup() -> None:
        helper.open()

    a_goes_on = asyncio.Event()

    async def a() -> None:
        if nested:
            await setup()
        else:
            helper.open()
        if a_lives:
            await a_goes_on.wait()

    async def c_task(entered: asyncio.Event, go: asyncio.Event) -> None:
        with c:
            entered.set()
            await go.wait()
            seen["c's with, after B"] = guarding.active_contract(sr) is c
            seen["guarded"] = isinstance(sr.run(_x_on(sim, p)), ss.SafeOutput)
        seen["after c's with"] = len(guarding._open.get(id(sr), ()))

    async def b() -> None:
        helper.close()

    async def main() -> None:
        task_a = asyncio.create_task(a())
        if a_lives:
            await asyncio.sleep(0)
        else:
            await task_a
        entered, go = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(c_task(entered, go))
        await entered.wait()
        await asyncio.create_task(b())
        seen["open after B"] = len(guarding._open.get(id(sr), ()))
        go.set()
        await task
        a_goes_on.set()
        await task_a

    asyncio.run(main())
    assert seen == {"open after B": 1, "c's with, after B": True, "guarded": True, "after c's with": 0}
