"""Timing wrappers for the benchmarks' ``--in-frame`` modes: each wrapped call's own time inside real frames."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class OwnTimers:
    """Timing wrappers that keep each wrapped call's own time: its time less the wrapped calls inside it."""

    def __init__(self) -> None:
        self.clock = time.perf_counter_ns
        self.own_ns: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self._inside = [0]  # per open wrapped call: the time its wrapped callees took, wrappers included
        self.overhead_ns = 0.0  # a wrapper's whole cost per call
        self.inner_ns = 0.0  # the part of it between its two clock reads (counted in the call's own time)

    def wrap(self, label: str, fn: Any) -> Any:
        clock, inside, own, calls = self.clock, self._inside, self.own_ns, self.calls
        own.setdefault(label, 0)
        calls.setdefault(label, 0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            inside.append(0)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = clock() - t0
                own[label] += dt - inside.pop()
                calls[label] += 1
                inside[-1] += dt + self.overhead_ns - self.inner_ns

        return timed

    def calibrate(self) -> None:
        """The wrapper's own cost per call, from a wrapped no-op beside a plain one, and the part of it
        that falls between its clock reads (the own time it records for the no-op)."""
        def noop(*args: Any, **kwargs: Any) -> None:
            pass

        wrapped = self.wrap("(calibration)", noop)
        best, inner = float("inf"), float("inf")
        for _ in range(7):
            self.own_ns["(calibration)"] = 0
            t0 = self.clock()
            for _ in range(20000):
                noop(1, k=2)
            t1 = self.clock()
            for _ in range(20000):
                wrapped(1, k=2)
            best = min(best, ((self.clock() - t1) - (t1 - t0)) / 20000)
            inner = min(inner, self.own_ns["(calibration)"] / 20000)
        self.overhead_ns, self.inner_ns = best, inner
        del self.own_ns["(calibration)"], self.calls["(calibration)"]

    def reset(self) -> None:
        for label in self.own_ns:
            self.own_ns[label] = 0
            self.calls[label] = 0

    def run_frames(self, frame: Any, sync: Any, frames: int, warmup: int = 500, per_block: int | None = None) -> int:
        """Warm up, zero the counts, then run ``frames`` frames: their wall time in nanoseconds. With
        ``per_block``, in blocks of that many frames, ``sync`` (untimed) before each: the GPU is drained,
        so only host work is timed."""
        for _ in range(warmup):
            frame()
        sync()
        self.reset()
        block = per_block or frames
        wall_ns = 0
        for _ in range(frames // block):
            if per_block:
                sync()
            t0 = self.clock()
            for _ in range(block):
                frame()
            wall_ns += self.clock() - t0
        sync()
        return wall_ns

    def parts_us(self, wall_ns: int, frames: int, rest: str) -> tuple[dict[str, float], float]:
        """Each label's own microseconds per frame, less the timers' cost inside the calls, with
        ``rest`` (what no wrapped call took); and the frame's microseconds less every timer's cost."""
        parts = {label: (ns - self.calls[label] * self.inner_ns) / frames / 1000 for label, ns in self.own_ns.items()}
        instrumented_us = (wall_ns - sum(self.calls.values()) * self.overhead_ns) / frames / 1000
        parts[rest] = instrumented_us - sum(parts.values())
        return parts, instrumented_us


@contextmanager
def patch_all(timers: OwnTimers, sites: list[tuple[Any, str, str]]) -> Iterator[None]:
    """Wrap ``owner.name`` with ``timers.wrap(label, ...)`` for each ``(owner, name, label)`` for the
    block (an instance, a class or a module), and put every original back after it."""
    patched: list[tuple[Any, str, Any, bool]] = []
    try:
        for owner, name, label in sites:
            own = name in vars(owner)
            old = getattr(owner, name)
            patched.append((owner, name, vars(owner).get(name), own))
            setattr(owner, name, timers.wrap(label, old))
        yield
    finally:
        for owner, name, old, own in reversed(patched):
            if own:
                setattr(owner, name, old)
            else:
                delattr(owner, name)
