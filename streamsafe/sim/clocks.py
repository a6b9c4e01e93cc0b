"""Vector clocks: the happens-before relation between operations on streams and the host.

Each *actor* (a stream, or the host thread) counts its own operations. An operation's
clock says, for every actor, the last operation of that actor known to be complete
before it starts. Operation ``a`` (actor ``A``, sequence number ``n``) happens before an
operation whose clock is ``c`` exactly when ``c[A] >= n``; :func:`is_ordered_after`
answers that. Nothing here touches a GPU or blocks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeAlias

__all__ = ["ActorId", "SeqNum", "StreamId", "HOST", "VectorClock", "is_ordered_after"]

StreamId: TypeAlias = tuple[int, int]
"""A stream's key in a clock: ``(device, handle)``."""
ActorId: TypeAlias = Hashable
"""A clock key: a :data:`StreamId` or :data:`HOST`."""
SeqNum: TypeAlias = int
"""How many operations an actor has issued; 0 means none."""

HOST: ActorId = ("host", 0)
"""The host thread's key in a clock."""


class VectorClock:
    """An immutable map from actor to the last sequence number known to have completed."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[ActorId, SeqNum] | None = None) -> None:
        self._entries: dict[ActorId, SeqNum] = {k: v for k, v in (entries or {}).items() if v > 0}

    def __getitem__(self, actor: ActorId) -> SeqNum:
        return self._entries.get(actor, 0)

    def items(self) -> Iterable[tuple[ActorId, SeqNum]]:
        """The clock's (actor, count) pairs."""
        return self._entries.items()

    @classmethod
    def _trusted(cls, entries: dict[ActorId, SeqNum]) -> VectorClock:
        """A clock over ``entries`` (all positive, owned by the clock from now on), with no copy."""
        clock = object.__new__(cls)
        clock._entries = entries
        return clock

    def join(self, *others: VectorClock) -> VectorClock:
        """The pointwise maximum: everything known to this clock or to any of ``others``."""
        merged = dict(self._entries)
        for other in others:
            if other is self:
                continue
            for actor, seq in other._entries.items():
                if seq > merged.get(actor, 0):
                    merged[actor] = seq
        return VectorClock._trusted(merged)

    def advanced(self, actor: ActorId, seq: SeqNum) -> VectorClock:
        """A copy in which ``actor`` has reached ``seq``."""
        merged = dict(self._entries)
        if seq > merged.get(actor, 0):
            merged[actor] = seq
        return VectorClock._trusted(merged)

    def joined_and_advanced(
        self, other: VectorClock, more: Iterable[VectorClock] | None, actor: ActorId, seq: SeqNum
    ) -> VectorClock:
        """``self.join(other, *more).advanced(actor, seq)`` with one copy (the model's hot path)."""
        merged = dict(self._entries)
        if other is not self:
            for a, s in other._entries.items():
                if s > merged.get(a, 0):
                    merged[a] = s
        if more is not None:
            for clock in more:
                for a, s in clock._entries.items():
                    if s > merged.get(a, 0):
                        merged[a] = s
        if seq > merged.get(actor, 0):
            merged[actor] = seq
        return VectorClock._trusted(merged)

    def covers(self, other: VectorClock) -> bool:
        """True when every operation known to ``other`` is known to this clock."""
        return all(self[actor] >= seq for actor, seq in other._entries.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VectorClock) and self._entries == other._entries

    def __hash__(self) -> int:
        return hash(frozenset(self._entries.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{_actor_name(a)}:{s}" for a, s in sorted(self._entries.items(), key=str))
        return f"VectorClock({{{inner}}})"


def is_ordered_after(clock: VectorClock, actor: ActorId, seq: SeqNum) -> bool:
    """True when an operation with ``clock`` starts after operation ``seq`` of ``actor`` ends."""
    return clock._entries.get(actor, 0) >= seq


def _actor_name(actor: ActorId) -> str:
    if actor == HOST:
        return "host"
    if isinstance(actor, tuple) and len(actor) == 2:
        return f"cuda:{actor[0]}/{actor[1]:#x}"
    return str(actor)
