"""Stream holds: the framework objects of the streams a ledger will still fence, kept alive until then.

A stream a program made for one frame (``with cupy.cuda.Stream(): c.run(x)``, a consumer stream per copy),
or declared to a contract dropped without ``close()``, is destroyed when its object goes, and the driver
hands its handle to the next stream it creates, of either kind: a wait on a destroyed handle crashed the
process on an H200. :class:`StreamHolds` keeps, per stream a ledger may still fence (a reader, an SDK
stream of the last run), the framework's object for it, and knows those streams by handle (their kind
cannot have changed while held, so the hot path resolves a handle with no driver query). Only torch's,
CuPy's and cuda.core's stream objects are held: they hold no SDK object. Nothing here blocks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from .streams import LEGACY_HANDLE, Stream, StreamKind

__all__ = ["StreamHolds"]


class StreamHolds:
    """The held streams of one ledger on ``device`` (see the module docstring)."""

    __slots__ = ("device", "held", "declared", "known", "hold_stream")

    def __init__(self, device: int) -> None:
        self.device = device
        self.held: dict[Stream, Any] = {}
        """Each held stream's framework object."""
        self.declared: dict[Stream, Any] = {}
        """Framework objects of the streams declared to the live guards of the ledger (:meth:`declare`)."""
        self.known: dict[int, Stream] = {}
        """Streams by handle whose kind is settled: held ones, and the legacy stream."""
        self.hold_stream: Callable[[Stream], Any] | None = None
        """The backend's own way to keep one of its streams (the model's); set by the ledger."""

    def __len__(self) -> int:
        """How many streams are held."""
        return len(self.held)

    def stream(self, handle: Any) -> Stream | None:
        """The held :class:`Stream` an integer ``handle`` names, else ``None`` (no driver query)."""
        return self.known.get(handle) if type(handle) is int else None

    def declare(self, objects: dict[Stream, Any]) -> Callable[[], None]:
        """A guard's declared streams and their framework objects: what :meth:`hold` keeps while a stream is
        still to be fenced, after the guard went. Returns the call that forgets them (when the guard goes;
        a hold taken stays until its stream is fenced)."""
        self.declared.update(objects)

        def forget() -> None:
            for stream, obj in objects.items():
                if self.declared.get(stream) is obj:
                    self.declared.pop(stream, None)

        return forget

    def hold(self, stream: Stream) -> None:
        """Keep the framework's object for ``stream`` alive until :meth:`release` lets it go."""
        if stream in self.held:
            return
        if stream.kind is StreamKind.LEGACY:
            # the legacy stream lives as long as the context: known by every handle that names it
            for handle in (0, LEGACY_HANDLE):
                self.known.setdefault(handle, stream)
            return
        if stream.kind is StreamKind.PER_THREAD:
            # lives as long as the context too, but handle 2 names another stream in each thread: never
            # known by its handle (as_stream names it for the thread that asks, with no driver query)
            return
        # a guard's declared stream: its object, whoever's current stream it is; else the framework's
        # current stream object when it is this stream; else the backend's own (the model's)
        obj = self.declared.get(stream)
        if obj is None:
            obj = _current_stream_object(stream.handle, self.device)
        if obj is None and self.hold_stream is not None:
            obj = self.hold_stream(stream)
        if obj is not None:
            self.held[stream] = obj
            self.known[stream.handle] = stream

    def release(self, needed: Iterable[Stream]) -> None:
        """Let go of every held stream not in ``needed`` (the streams the ledger may still fence)."""
        if not self.held:
            return
        keep = set(needed)
        for stream in [s for s in self.held if s not in keep]:
            del self.held[stream]
            if self.known.get(stream.handle) == stream:
                del self.known[stream.handle]


def _current_stream_object(handle: int, device: int) -> Any:
    """CuPy's or torch's current stream object on ``device`` when its handle is ``handle``, else ``None``."""
    cupy = sys.modules.get("cupy")  # (None where a program blocked the import)
    if cupy is not None:
        current = cupy.cuda.get_current_stream()
        if current.ptr == handle:
            return current
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        current = torch.cuda.current_stream(device)
        if current.cuda_stream == handle:
            return current
    return None
