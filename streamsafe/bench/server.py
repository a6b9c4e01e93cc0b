"""The video-server scenario: N effects, each with its own stream, its own thread, GPU-bound stages.

Each lane is one bench pipeline (:class:`~streamsafe.bench.pipelines.GpuPipeline` on the GPU,
:class:`~streamsafe.bench.pipelines.SimPipeline` on the model, all lanes on one shared
:class:`~streamsafe.SimBackend` there) with its own effect, stream and contract (or hand-written
fences). A block runs on N persistent worker threads at once, one per lane, each issuing its
frames with no coordination but the block's start and end, as a server's sessions do. The
aggregate frames/s is every lane's frames over the block's wall time; latency is per frame,
from each lane's own device events.

What it shows: a device-wide synchronisation (``device``) waits for every other lane's work, so
the lanes serialise; device-side event fences order only the streams of one lane.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from .harness import Row

__all__ = ["ServerPipeline", "PRIME_STEPS"]

PRIME_STEPS = 3
"""Steps each lane runs alone, one lane after another, before the lanes run at once."""


class _Worker(threading.Thread):
    """One lane's thread: runs the steps it is given, reports its CPU time or its exception."""

    def __init__(self, lane: Any, index: int, done: queue.Queue[tuple[int, float, BaseException | None]]) -> None:
        super().__init__(name=f"streamsafe-bench-lane-{index}", daemon=True)
        self.lane, self.index, self.done = lane, index, done
        self.inbox: queue.Queue[tuple[int, int] | None] = queue.Queue()

    def run(self) -> None:
        try:
            self.lane.thread_init()
        except BaseException as e:  # reported with the first block
            self._failed: BaseException | None = e
        else:
            self._failed = None
        while True:
            job = self.inbox.get()
            if job is None:
                return
            first, count = job
            if self._failed is not None:
                self.done.put((self.index, 0.0, self._failed))
                continue
            c0 = time.thread_time()
            try:
                for i in range(first, first + count):
                    self.lane.step(i)
            except BaseException as e:
                self.done.put((self.index, time.thread_time() - c0, e))
            else:
                self.done.put((self.index, time.thread_time() - c0, None))


class ServerPipeline:
    """N lanes run by N threads (``threaded=False``: one after another on the caller's thread)."""

    def __init__(self, lanes: list[Any], *, threaded: bool = True) -> None:
        if not lanes:
            raise ValueError("a video server needs at least one lane")
        self.lanes = lanes
        self.frames_per_step = len(lanes)
        self.threaded = threaded
        self._done: queue.Queue[tuple[int, float, BaseException | None]] = queue.Queue()
        self._workers: list[_Worker] = []
        self._primed = False
        if threaded:
            self._workers = [_Worker(lane, i, self._done) for i, lane in enumerate(lanes)]
            for w in self._workers:
                w.start()

    @classmethod
    def build(cls, sc: Any, row: Row, *, gpu: bool, threaded: bool = True) -> ServerPipeline:
        """``sc.effects`` lanes of scenario ``sc`` under ``row``: on the GPU, or on one shared model."""
        from .pipelines import GpuPipeline, SimPipeline

        lanes: list[Any] = []
        try:
            if gpu:
                for _ in range(sc.effects):
                    lanes.append(GpuPipeline(sc, row))
            else:
                from ..backend import SimBackend

                sim = SimBackend(scheduler="adversarial")
                for _ in range(sc.effects):
                    lanes.append(SimPipeline(sc, row, sim=sim))
        except BaseException:
            for lane in lanes:
                lane.close()
            raise
        return cls(lanes, threaded=threaded)

    def run_block(self, first: int, count: int) -> float:
        """Every lane runs steps ``first .. first + count - 1`` on its own thread at once; returns the
        worker threads' CPU seconds. Blocks until all are done; re-raises a lane's exception."""
        if not self.threaded:
            for i in range(first, first + count):
                self.step(i)
            return 0.0  # the caller's CPU clock counts this thread already
        cpu = 0.0
        if not self._primed:
            # The first steps one lane at a time: the emulated SDK captures its CUDA graphs in them, and a
            # capture fails while another thread synchronises the device (as the `device` rows do).
            self._primed = True
            primed = min(count, PRIME_STEPS)
            for w in self._workers:
                cpu += self._run_on([w], first, primed)
            first, count = first + primed, count - primed
        if count:
            cpu += self._run_on(self._workers, first, count)
        return cpu

    def _run_on(self, workers: list[_Worker], first: int, count: int) -> float:
        """``workers`` run steps ``first .. first + count - 1`` at once; their CPU seconds. Blocks until
        all are done; re-raises a lane's exception."""
        for w in workers:
            w.inbox.put((first, count))
        cpu, error = 0.0, None
        for _ in workers:
            _, used, exc = self._done.get()
            cpu += used
            error = error or exc
        if error is not None:
            raise error
        return cpu

    def step(self, frame: int) -> None:
        """One frame on every lane, one after another on the caller's thread."""
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
        for lane in self.lanes:
            a, b = lane.check()
            checked, corrupt = checked + a, corrupt + b
        return checked, corrupt

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
