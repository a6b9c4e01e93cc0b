"""Race reports: two accesses to one buffer, at least one a write, that nothing orders;
or an access to memory after its release.

An :class:`Access` is what the happens-before model remembers of one read or write:
which operation, on which stream (or the host), and its vector clock. A :class:`Race`
names both accesses and says how to fix it. Pure data; nothing here blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .clocks import ActorId, SeqNum, VectorClock, is_ordered_after

__all__ = ["Access", "Race", "RaceKind", "find_race"]

AccessKind = Literal["read", "write"]
RaceKind = Literal["unordered", "use-after-free", "stale-view"]


@dataclass(frozen=True, slots=True)
class Access:
    """One read or write of a buffer by one operation."""

    op: str
    """The operation's name, e.g. ``"sr.inference#3"``."""
    kind: AccessKind
    actor: ActorId
    """The stream's clock key, or :data:`~streamsafe.sim.clocks.HOST`."""
    where: str
    """The stream (with its kind) or ``"host"``, for people."""
    seq: SeqNum
    clock: VectorClock
    op_index: int
    """Position in issue order; two accesses of one operation share it."""

    def __str__(self) -> str:
        return f"{self.kind} by {self.op!r} on {self.where}"


@dataclass(frozen=True)
class Race:
    """``second`` was issued after ``first`` but is not ordered after it (``kind="unordered"``),
    ``second`` used memory that ``first`` had released (``kind="use-after-free"``, H7), or ``second``
    used a zero-copy view of an effect's output after the effect's next run, ``first``, overwrote it
    (``kind="stale-view"``, H7: ordered, but the data is the next frame's)."""

    buffer: str
    first: Access
    second: Access
    kind: RaceKind = "unordered"

    @property
    def fix(self) -> str:
        """How to order or avoid the second access, in words."""
        if self.kind == "stale-view":
            return (
                "copy what you need before the next run() (a copy helper such as out.torch(), or a clone of the "
                "view issued before it), or import the new output: a zero-copy view is valid until the effect's next "
                "run(), close() or resize (H7)"
            )
        if self.kind == "use-after-free":
            return (
                f"stop using memory after {self.first.op!r} releases it: copy what you need before "
                "(a copy helper such as out.torch(), or a clone issued before the release), "
                "or keep the view only until the next run(), close() or resize"
            )
        if self.first.where == "host" or self.second.where == "host":
            waiter = self.second.where if self.first.where == "host" else "the host"
            return f"make {waiter} wait for {self.first.where} (a host wait on an event recorded after {self.first.op!r})"
        if self.second.op.endswith(".transfer") and self.second.kind == "read":  # the SDK reading its input
            return (f"the SDK read its input before {self.first.op!r} on {self.first.where} wrote it: tell streamsafe "
                    f"where the input comes from (declare input_stream= to the guard: the stream {self.first.where} is, "
                    f"or make that stream current when calling run()); by hand: record an event there after "
                    f"{self.first.op!r} and make the SDK's stream wait on it before run()")
        fix = (
            f"record an event on {self.first.where} after {self.first.op!r} "
            f"and make {self.second.where} wait on it before {self.second.op!r}"
        )
        if self.first.where.startswith("per-thread stream of thread") and self.second.where.startswith("per-thread stream of thread"):
            # two threads' per-thread streams: handle 2 names the issuing thread's, so the record belongs in the first thread
            fix += (" (record it in the first thread, where 2 names its stream; or, from the second thread, on the legacy "
                    "stream, which follows every thread's per-thread stream)")
        return fix

    def __str__(self) -> str:
        if self.kind == "stale-view":
            return (
                f"{self.second} uses a zero-copy view of buffer {self.buffer!r} after {self.first.op} overwrote it "
                f"(a stale view, H7); fix: {self.fix}"
            )
        if self.kind == "use-after-free":
            return (
                f"{self.second} uses buffer {self.buffer!r} after it was released "
                f"by {self.first.op!r} on {self.first.where} (use after free); fix: {self.fix}"
            )
        return f"{self.second} is not ordered after {self.first} on buffer {self.buffer!r}; fix: {self.fix}"


def find_race(previous: Access, new: Access) -> bool:
    """True when ``new`` (issued later) conflicts with ``previous`` and is not ordered after it."""
    if previous.op_index == new.op_index:
        return False
    if previous.kind == "read" and new.kind == "read":
        return False
    return not is_ordered_after(new.clock, previous.actor, previous.seq)
