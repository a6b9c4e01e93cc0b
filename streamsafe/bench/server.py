"""The video-server scenario: N effects, each with its own stream, its own thread, GPU-bound stages.

Each lane is one bench pipeline (:class:`~streamsafe.bench.pipelines.GpuPipeline` on the GPU,
:class:`~streamsafe.bench.pipelines.SimPipeline` on the model, all lanes on one shared
:class:`~streamsafe.sim.SimBackend` there) with its own effect, stream and contract (or hand-written
fences). A block runs on N persistent worker threads at once, one per lane, each issuing its
frames with no coordination but the block's start and end, as a server's sessions do. The
aggregate frames/s is every lane's frames over the block's wall time; latency is per frame,
from each lane's own device events.

What it shows: a device-wide synchronisation (``device``) waits for every other lane's work, so
the lanes serialise; device-side event fences order only the streams of one lane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .lanes import LaneGroup

__all__ = ["ServerPipeline", "PRIME_STEPS"]

PRIME_STEPS = 3
"""Steps each lane runs alone, one lane after another, before the lanes run at once."""


class ServerPipeline(LaneGroup):
    """N lanes run by N threads (``threaded=False``: one after another on the caller's thread)."""

    def __init__(self, lanes: list[Any], *, threaded: bool = True) -> None:
        if not lanes:
            raise ValueError("a video server needs at least one lane")
        super().__init__(lanes, threaded=threaded, thread_name="streamsafe-bench-lane")
        self._primed = False

    @classmethod
    def build(cls, count: int, make_lane: Callable[[], Any], *, threaded: bool = True) -> ServerPipeline:
        """``count`` lanes, each ``make_lane()`` (the bench's factory passes one that builds a
        :class:`~streamsafe.bench.pipelines.GpuPipeline`, or a
        :class:`~streamsafe.bench.pipelines.SimPipeline` on one model all lanes share); the lanes made
        are closed if a later one fails."""
        lanes: list[Any] = []
        try:
            for _ in range(count):
                lanes.append(make_lane())
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
                cpu += sum(r.cpu_s for r in self._run_on([w], first, primed))
            first, count = first + primed, count - primed
        if count:
            cpu += sum(r.cpu_s for r in self._run_on(self._workers, first, count))
        return cpu
