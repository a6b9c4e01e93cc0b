"""Lanes run by one thread each: the worker threads and the group that the video server
(:mod:`streamsafe.bench.server`) and the several-GPU bench (:mod:`streamsafe.bench.multi_gpu`) share.

A *lane* is one bench pipeline (``step``, ``drain``, ``settle``, ``check``, ``counters``, ``close``,
``thread_init``). A :class:`LaneGroup` gives each lane a :class:`LaneWorker` thread and hands them
blocks of steps at once; it is itself a pipeline for :func:`~streamsafe.bench.run_bench`.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LaneReport", "LaneWorker", "LaneGroup"]


@dataclass
class LaneReport:
    """What one lane's worker did with one block: its wall and CPU seconds, the latencies its drain
    returned (when the worker drains), or the exception that stopped it."""

    index: int
    wall_s: float
    cpu_s: float
    latencies: list[float] = field(default_factory=list)
    error: BaseException | None = None


class LaneWorker(threading.Thread):
    """One lane's thread: ``thread_init()`` once, then each block it is given (its steps, then the lane's
    ``drain()`` when ``drain`` is set), reported to ``done``. A failed ``thread_init`` is reported with
    the first block."""

    def __init__(self, lane: Any, index: int, done: queue.Queue[LaneReport], *, name: str, drain: bool) -> None:
        super().__init__(name=f"{name}-{index}", daemon=True)
        self.lane, self.index, self.done, self.drain = lane, index, done, drain
        self.inbox: queue.Queue[tuple[int, int] | None] = queue.Queue()
        self._failed: BaseException | None = None

    def run(self) -> None:
        try:
            self.lane.thread_init()
        except BaseException as e:
            self._failed = e
        while True:
            job = self.inbox.get()
            if job is None:
                return
            if self._failed is not None:
                self.done.put(LaneReport(self.index, 0.0, 0.0, error=self._failed))
                continue
            first, count = job
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                for i in range(first, first + count):
                    self.lane.step(i)
                latencies = self.lane.drain() if self.drain else []
            except BaseException as e:
                self.done.put(LaneReport(self.index, time.perf_counter() - t0, time.thread_time() - c0, error=e))
            else:
                self.done.put(LaneReport(self.index, time.perf_counter() - t0, time.thread_time() - c0, latencies))


class LaneGroup:
    """``lanes``, each run by a :class:`LaneWorker` (``threaded=False``: one after another on the caller's
    thread). ``drain_in_worker``: each worker drains its lane at the end of every block (its wall time
    then covers its own streams). Subclasses define ``run_block``."""

    def __init__(self, lanes: list[Any], *, threaded: bool = True, drain_in_worker: bool = False,
                 thread_name: str = "streamsafe-bench-lane") -> None:
        if not lanes:
            raise ValueError("a lane group needs at least one lane")
        self.lanes = lanes
        self.frames_per_step = len(lanes)
        self.threaded = threaded
        self._done: queue.Queue[LaneReport] = queue.Queue()
        self._workers: list[LaneWorker] = []
        if threaded:
            self._workers = [LaneWorker(lane, i, self._done, name=thread_name, drain=drain_in_worker)
                             for i, lane in enumerate(lanes)]
            for w in self._workers:
                w.start()

    def _run_on(self, workers: list[LaneWorker], first: int, count: int) -> list[LaneReport]:
        """``workers`` run steps ``first .. first + count - 1`` at once; their reports. Blocks until all are
        done; then re-raises the first lane exception."""
        for w in workers:
            w.inbox.put((first, count))
        reports = [self._done.get() for _ in workers]
        for r in reports:
            if r.error is not None:
                raise r.error
        return reports

    def step(self, frame: int) -> None:
        """One frame on every lane, one after another on the caller's thread (no timing)."""
        for lane in self.lanes:
            lane.step(frame)

    def drain(self) -> list[float]:
        latencies: list[float] = []
        for lane in self.lanes:
            latencies += lane.drain()
        return latencies

    def settle(self) -> None:
        for lane in self.lanes:
            lane.settle()

    def check(self) -> tuple[int, int]:
        checked = corrupt = 0
        for i, lane in enumerate(self.lanes):
            a, b = lane.check()
            checked, corrupt = checked + a, corrupt + b
            self._checked(i, a, b)
        return checked, corrupt

    def _checked(self, index: int, checked: int, corrupt: int) -> None:
        """Lane ``index``'s share of a check (a hook for subclasses that keep per-lane records)."""

    def counters(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for lane in self.lanes:
            for k, v in lane.counters().items():
                total[k] = total.get(k, 0) + v
        return total

    def close(self) -> None:
        for w in self._workers:
            w.inbox.put(None)
        for w in self._workers:
            w.join()
        self._workers = []
        for lane in self.lanes:
            lane.close()
