"""Keep-alives: inputs an SDK may still read after an asynchronous call, kept until the read is done (H12).

torch tensors and a backend's own arrays are protected with ``record_stream`` (their allocator then waits
for the run stream); anything else (a CuPy array, a JAX array, an object with ``__dlpack__``) is kept
alive here until an event recorded on the run stream completes. Pruned by event queries, bounded: past
:data:`LIMIT` pending entries the host waits for the oldest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .streams import Stream, issuable

__all__ = ["KeepAlive", "LIMIT"]

LIMIT = 64
"""Pending entries past which :meth:`KeepAlive.add` makes the host wait for the oldest."""


class KeepAlive:
    """Objects kept alive until the work issued before them on a stream is done, for one ledger."""

    __slots__ = ("entries", "backend_of", "device")

    def __init__(self, backend_of: Callable[[], Any], device: int) -> None:
        self.entries: deque[tuple[Any, Any]] = deque()
        self.backend_of = backend_of
        """The backend the events are made on (resolved when first needed)."""
        self.device = device

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, objects: list[Any], stream: Stream) -> None:
        """Keep ``objects`` alive until the work issued so far on ``stream`` is done. Does not block
        (beyond the bound: past :data:`LIMIT` pending entries the host waits for the oldest)."""
        be = self.backend_of()
        event = be.acquire_event(self.device)
        be.record(event, issuable(stream))
        self.entries.append((event, objects))
        self.prune()
        while len(self.entries) > LIMIT:
            old, _ = self.entries.popleft()
            be.synchronize_event(old)
            be.release_event(old)

    def prune(self) -> None:
        """Drop the entries whose work has ended (their events complete). Does not block; on the model it
        gives the host no ordering (``SimBackend.poll``): the program learns nothing."""
        if not self.entries:
            return
        be = self.backend_of()
        poll = getattr(be, "poll", None) or be.query
        while self.entries and poll(self.entries[0][0]):
            be.release_event(self.entries.popleft()[0])

    def drain(self) -> None:
        """Block the host until every kept object's work is done, and let them all go."""
        if not self.entries:
            return
        be = self.backend_of()
        while self.entries:
            event, _ = self.entries.popleft()
            be.synchronize_event(event)
            be.release_event(event)
