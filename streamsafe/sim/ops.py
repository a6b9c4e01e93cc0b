"""The model's operations and events: :class:`Op` (an issued kernel, copy, event record or wait, or a
host access), :class:`SimEvent`, and :class:`StreamState` (what the model keeps per stream)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..streams import Stream
from .clocks import ActorId, SeqNum, VectorClock

if TYPE_CHECKING:
    from .backend import SimBackend
    from .memory import SimBuffer

__all__ = ["Op", "SimEvent", "StreamState"]


@dataclass(eq=False, slots=True)
class Op:
    """One issued operation (kernel, copy, event record or wait) or host access.

    ``deps`` are the operations it waits for that had not run when it was issued;
    they (and ``fn``) are dropped once it has run, so finished work holds nothing.
    """

    index: int
    name: str
    actor: ActorId
    where: str
    seq: SeqNum
    clock: VectorClock
    deps: tuple[Op, ...]
    reads: tuple[SimBuffer, ...] = ()
    writes: tuple[SimBuffer, ...] = ()
    fn: Callable[[], None] | None = None
    device: int = 0
    done: bool = False
    waiting: int = field(default=0, repr=False)
    dependents: list[Op] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Op(#{self.index} {self.name!r} on {self.where}{', done' if self.done else ''})"


class SimEvent:
    """An event in the model: remembers its latest record (an :class:`Op`) and that record's clock, and
    the model it belongs to (another model's event is refused: its clock would name this model's streams)."""

    __slots__ = ("device", "record_op", "clock", "_model", "__weakref__")

    def __init__(self, device: int, model: SimBackend | None = None) -> None:
        self.device = device
        self.record_op: Op | None = None
        self.clock = VectorClock()
        self._model = weakref.ref(model) if model is not None else None

    def __repr__(self) -> str:
        return f"SimEvent(device={self.device}, record={self.record_op!r})"


@dataclass(eq=False)
class StreamState:
    """What the model keeps of one stream: its last operation, its clock and its place on its device."""

    stream: Stream
    seq: SeqNum = 0
    clock: VectorClock = field(default_factory=VectorClock)
    last: Op | None = None
    where: str = ""
    key: tuple[int, ...] = (0, 0)
    index: int = 0
    """Its place among its device's streams (the order the legacy stream joins them in)."""
    legacy_peer: bool = False
    """The legacy stream of its device is implicitly ordered after its work (a blocking or per-thread stream)."""
