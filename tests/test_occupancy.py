"""auto picks async for one pipeline, event once several threads drive effects on a device (occupancy).

Blocking shadow streams are ordered with stream 0, where every pipeline's conversion runs, so
several async pipelines serialise one another; event fences do not. Each test checks the
choice and that every frame is right, on the adversarial model. Each runs with the C extension's
``note_run`` (where it is built) and with the Python one it mirrors.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import occupancy
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K


def _pipeline(sim: ss.sim.SimBackend, device: int = 0, strategy: str = "auto") -> tuple[Any, Any, ss.Stream]:
    s = sim.create_stream(non_blocking=True, device=device)
    sr = VideoSuperRes(backend=sim, device=device)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr, ss.StreamContract(sr, s, strategy=strategy, input_stream=s), s


def _frames(sim: ss.sim.SimBackend, c: Any, s: ss.Stream, n: int, device: int = 0, seed: int = 0) -> list[bool]:
    ok = []
    with sim.use_stream(s):
        for i in range(n):
            x = np.random.default_rng(seed + i).random((3, 16, 16), dtype=np.float32)
            arr = sim.empty(x.shape, np.float32, device=device, name="frame")
            sim.launch(s, "producer.write", lambda arr=arr, x=x: np.copyto(arr.buffer.data, x), writes=[arr])
            copy = sim.copy(sim.from_dlpack(c.run(arr).image, stream=s), s)
            sim.synchronize_stream(s)
            ref = K.to_rgb8(np, K.resize_bilinear(np, x, 32, 32)).astype(np.float32) / np.float32(255)
            ok.append(bool(np.allclose(copy.buffer.data, ref, atol=1.5 / 255)))
    return ok


def _together(*jobs: Any) -> list[Any]:
    """Run each job on its own thread, all started together; their results (exceptions re-raised)."""
    barrier, end = threading.Barrier(len(jobs)), threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def body(i: int, job: Any) -> None:
        barrier.wait()
        try:
            results[i] = job()
        except BaseException as e:
            results[i] = e
        end.wait()  # no thread ends (and stops counting) before the others are done

    threads = [threading.Thread(target=body, args=(i, j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.fixture(autouse=True)
def _fresh_occupancy() -> None:
    occupancy.forget()


def test_one_thread_gets_async() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    _, c, s = _pipeline(sim)
    assert all(_frames(sim, c, s, 4))
    assert c.last_plan.strategy is ss.Strategy.ASYNC
    assert c.stats["sdk_waits"] == 0 and sim.races == []


class _Turns:
    """Threads take turns: lane 0, lane 1, lane 0, ... (their runs interleave, as a server's do)."""

    def __init__(self, lanes: int) -> None:
        self.lanes, self.turn, self.cond = lanes, 0, threading.Condition()

    def wait(self, lane: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn % self.lanes == lane)

    def done(self) -> None:
        with self.cond:
            self.turn += 1
            self.cond.notify_all()


def test_two_interleaved_threads_on_one_device_get_event_and_stay_correct() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    lanes = [_pipeline(sim) for _ in range(2)]
    turns = _Turns(2)

    def lane(i: int) -> tuple[list[bool], list[Any]]:
        _, c, s = lanes[i]
        ok, chosen = [], []
        for k in range(6):
            turns.wait(i)
            ok += _frames(sim, c, s, 1, seed=10 * i + k)
            chosen.append(c.last_plan.strategy)
            turns.done()
        return ok, chosen

    results = _together(lambda: lane(0), lambda: lane(1))
    for ok, chosen in results:
        assert all(ok)
        assert chosen[1:] == [ss.Strategy.EVENT] * 5, chosen  # lane 1's first run already follows lane 0's
    assert results[0][1][0] is ss.Strategy.ASYNC  # lane 0's first run: nobody else yet
    assert occupancy.threads_on(0) == 0  # both threads ended
    assert sim.races == []


def test_threads_that_take_long_turns_keep_async_within_a_turn() -> None:
    """Pipelines that do not interleave (each runs a burst alone, as the bench's rows do) keep async
    after the first run of each burst."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    lanes = [_pipeline(sim) for _ in range(2)]
    turns = _Turns(2)

    def lane(i: int) -> list[Any]:
        _, c, s = lanes[i]
        chosen = []
        for _ in range(2):
            turns.wait(i)
            for k in range(3):
                assert all(_frames(sim, c, s, 1, seed=k))
                chosen.append(c.last_plan.strategy)
            turns.done()
        return chosen

    first, second = _together(lambda: lane(0), lambda: lane(1))
    assert first == [ss.Strategy.ASYNC] * 3 + [ss.Strategy.EVENT, ss.Strategy.ASYNC, ss.Strategy.ASYNC]
    assert second == [ss.Strategy.EVENT, ss.Strategy.ASYNC, ss.Strategy.ASYNC] * 2
    assert sim.races == []


def test_back_to_async_when_the_other_thread_ends() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    _, c, s = _pipeline(sim)
    _, c2, s2 = _pipeline(sim)
    _frames(sim, c, s, 1)
    t = threading.Thread(target=lambda: _frames(sim, c2, s2, 2))
    t.start()
    t.join()
    assert all(_frames(sim, c, s, 3))
    assert c.last_plan.strategy is ss.Strategy.ASYNC
    assert sim.races == []


def test_threads_on_different_devices_do_not_share() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", devices=2)
    lanes = [_pipeline(sim, device=d) for d in (0, 1)]
    turns = _Turns(2)

    def lane(d: int) -> Any:
        _, c, s = lanes[d]
        for k in range(4):
            turns.wait(d)
            assert all(_frames(sim, c, s, 1, device=d, seed=k))
            turns.done()
        return c.last_plan.strategy

    assert _together(lambda: lane(0), lambda: lane(1)) == [ss.Strategy.ASYNC, ss.Strategy.ASYNC]
    assert sim.races == []


@pytest.mark.parametrize("strategy", ["async", "event", "device"])
def test_named_strategies_do_not_change_with_threads(strategy: str) -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    lanes = [_pipeline(sim, strategy=strategy) for _ in range(2)]
    turns = _Turns(2)

    def lane(i: int) -> Any:
        _, c, s = lanes[i]
        for k in range(3):
            turns.wait(i)
            assert all(_frames(sim, c, s, 1, seed=k))
            turns.done()
        return c.last_plan.strategy

    assert _together(lambda: lane(0), lambda: lane(1)) == [ss.Strategy(strategy)] * 2


def test_a_thread_that_takes_an_ended_threads_ident_counts_as_live() -> None:
    """CPython hands an ended thread's ``get_ident()`` to the next thread: the device is shared while that
    next thread lives, whatever ident it got."""
    occupancy.forget()
    ended = threading.Thread(target=occupancy.note_run, args=(0,))
    ended.start()
    ended.join()
    ran, done = threading.Event(), threading.Event()

    def live() -> None:
        occupancy.note_run(0)
        ran.set()
        done.wait()

    t = threading.Thread(target=live)
    t.start()
    ran.wait()
    try:
        assert occupancy.note_run(0) is True
        assert occupancy.threads_on(0) == 2
    finally:
        done.set()
        t.join()
        occupancy.forget()


def test_a_thread_quiet_for_a_while_counts_again_once_it_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread drops a quiet thread's record (no run for over WINDOW_S); once the quiet thread runs again
    the device is shared again, for both threads."""
    now = [100.0]
    monkeypatch.setattr(occupancy, "_clock", lambda: now[0])
    ran, resume, ran_again, end = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    answer = []

    def other() -> None:
        occupancy.note_run(0)  # runs, then goes quiet
        ran.set()
        resume.wait()
        answer.append(occupancy.note_run(0))  # runs again after the quiet spell
        ran_again.set()
        end.wait()

    t = threading.Thread(target=other)
    t.start()
    try:
        ran.wait()
        occupancy.note_run(0)
        now[0] += occupancy.WINDOW_S + 1  # the other thread is quiet past the window ...
        assert occupancy.note_run(0) is False  # ... and this thread drops it
        resume.set()
        ran_again.wait()
        assert answer == [True]  # this thread ran since the other's last run
        assert occupancy.note_run(0) is True  # and this thread sees the other again
        assert occupancy.threads_on(0) == 2
    finally:
        resume.set()
        end.set()
        t.join()


def test_a_thread_whose_record_another_thread_dropped_late_is_counted_again_from_its_next_run() -> None:
    """Two threads may drop a quiet thread at once: the later one can pop the record the quiet thread has just added
    again. The thread finds itself missing at its next run and adds itself again (it is never left out for good)."""
    ran, resume, ran_again, end = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    token: list[int] = []

    def other() -> None:
        occupancy.note_run(0)
        token.append(occupancy._mine.token)
        ran.set()
        resume.wait(5)
        occupancy.note_run(0)
        ran_again.set()
        end.wait(5)

    t = threading.Thread(target=other)
    t.start()
    try:
        ran.wait(5)
        occupancy.note_run(0)
        occupancy._seen[0].pop(token[0])  # (a late dropper pops the other thread's newest record)
        assert occupancy.threads_on(0) == 1
        resume.set()
        ran_again.wait(5)
        assert occupancy.threads_on(0) == 2
        assert occupancy.note_run(0) is True
    finally:
        resume.set()
        end.set()
        t.join()
