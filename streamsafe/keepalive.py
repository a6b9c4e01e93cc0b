"""Keep-alives: objects kept until the work issued before them on some streams is done.

Two uses, one mechanism (one :class:`KeepAlive` per ledger):

* **inputs an SDK may still read after an asynchronous call** (H12): torch tensors and a backend's own arrays are
  protected with ``record_stream`` (their allocator then waits for the run stream); anything else (a CuPy array, a
  JAX array, an object with ``__dlpack__``) is kept alive here until an event recorded on the run stream completes;
* **the SDK's frames whose last reference gives their buffer back to the SDK** (a decoder whose frames hold their
  buffers, :attr:`~streamsafe.profile.PoolProfile.frames_hold_buffers`): a dropped frame is kept until events
  recorded on every stream that read it complete, so the SDK gets the buffer back only then (an event-ordered
  release, as torch's allocator does for ``record_stream``). Letting such an entry go *is* what orders the SDK's
  next write of the buffer after the reads, so its events are queried (a completed query orders the host after
  the work, on a GPU and on the model), where an input's are only polled.

Pruned by event queries (never a host wait), bounded: past :data:`LIMIT` pending entries the host waits for the
oldest (counted as a host wait when the caller passes its counters).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .streams import Stream, issuable

__all__ = ["KeepAlive", "LIMIT"]

LIMIT = 64
"""Pending entries past which :meth:`KeepAlive.add` makes the host wait for the oldest."""

_Entry = tuple[tuple[Any, ...], Any, bool]
"""(events, the objects kept, whether a completed query orders the host after the work: an ordering entry)."""


class KeepAlive:
    """Objects kept alive until the work issued before them on some streams is done, for one ledger."""

    __slots__ = ("entries", "backend_of", "device")

    def __init__(self, backend_of: Callable[[], Any], device: int) -> None:
        self.entries: deque[_Entry] = deque()
        self.backend_of = backend_of
        """The backend the events are made on (resolved when first needed)."""
        self.device = device

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, objects: Any, stream: Stream | Iterable[Stream], *, ordering: bool = False,
            stats: dict[str, int] | None = None) -> None:
        """Keep ``objects`` alive until the work issued so far on ``stream`` (a stream, or several: an event on each)
        is done. ``ordering``: letting them go hands memory back to an owner that reuses it with no stream order (a
        decoder's surface), so completion is learnt by a query that orders the host after the work. Does not block
        (beyond the bound: past :data:`LIMIT` pending entries the host waits for the oldest, counted in ``stats``)."""
        be = self.backend_of()
        streams = (stream,) if isinstance(stream, Stream) else tuple(stream)
        events = []
        for s in streams:
            event = be.acquire_event(self.device)
            be.record(event, issuable(s))
            events.append(event)
        self.entries.append((tuple(events), objects, ordering))
        self.prune()
        while len(self.entries) > LIMIT:
            old, _, _ = self.entries.popleft()
            for event in old:
                be.synchronize_event(event)
                be.release_event(event)
            if stats is not None:
                stats["host_waits"] += 1

    def prune(self) -> None:
        """Drop the entries, oldest first, whose work has ended (their events complete). Does not block. An input's
        events are polled (on the model, ``SimBackend.poll`` gives the host no ordering: the program learns
        nothing); an ordering entry's are queried (a completed query orders the host after them)."""
        if not self.entries:
            return
        be = self.backend_of()
        poll = getattr(be, "poll", None) or be.query
        query = be.query
        entries = self.entries
        while entries:
            events, _, ordering = entries[0]
            done = query if ordering else poll
            if not all(done(event) for event in events):
                return
            entries.popleft()
            for event in events:
                be.release_event(event)

    def drain(self) -> None:
        """Block the host until every kept object's work is done, and let them all go."""
        if not self.entries:
            return
        be = self.backend_of()
        while self.entries:
            events, _, _ = self.entries.popleft()
            for event in events:
                be.synchronize_event(event)
                be.release_event(event)
