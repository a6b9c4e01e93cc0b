"""The model's stream lifetimes: destroyed streams, their handles handed out again, and holds.

:class:`StreamLifetimes` is the part of :class:`~streamsafe.sim.backend.SimBackend` that does what the
driver does with a destroyed stream (``cuStreamDestroy``): work already issued on it still runs, later
work on it raises, and its handle goes to the next stream created on the device, of either kind (an
H200's driver handed a destroyed blocking stream's handle to the next non-blocking stream in 20 of 20
tries). :meth:`StreamLifetimes.hold_stream` keeps a stream alive as a framework's stream object does on
a GPU: streamsafe holds the streams it will still fence. Nothing here blocks the host.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..errors import StreamValueError
from ..streams import Stream, StreamKind
from .engine import OrderingEngine, entry
from .ops import StreamState

__all__ = ["StreamLifetimes"]


class StreamLifetimes(OrderingEngine):
    """Destroying and holding streams: the layer of :class:`~streamsafe.sim.backend.SimBackend` above the
    ordering engine (its state is made by ``SimBackend.__init__``)."""

    _free_handles: dict[int, list[int]]
    _stream_holds: dict[Stream, int]
    _destroy_when_let_go: dict[Stream, StreamState]

    @entry
    def destroy_stream(self, stream: Stream) -> None:
        """Destroy a stream made by :meth:`create_stream`, as ``cuStreamDestroy``: work already issued on it
        still runs (and its history stays for race reports), later work on it raises, and its handle goes
        back to the driver's pool: the next :meth:`create_stream` on the device, of either kind, gets it.
        While :meth:`hold_stream` holds the stream, the destruction waits until the last hold goes (what a
        framework's stream object does on a GPU). Does not block."""
        state = self._state(stream)
        if stream.kind in (StreamKind.LEGACY, StreamKind.PER_THREAD):
            raise StreamValueError(stream, "the default streams live as long as the device", "Destroy only streams you created.")
        if self._stream_holds.get(stream):
            self._destroy_when_let_go[stream] = state
            return
        self._destroy_now(state)

    def _destroy_now(self, state: StreamState) -> None:
        stream = state.stream
        by_device = self._by_handle.get(stream.handle)
        if by_device is not None and by_device.get(stream.device) is state:
            del by_device[stream.device]
        self._destroyed.add((stream.device, stream.handle, stream.kind))
        self._free_handles.setdefault(stream.device, []).append(stream.handle)

    @entry
    def hold_stream(self, stream: Stream) -> Any:
        """An object that keeps ``stream`` from being destroyed while it is referenced (a
        :meth:`destroy_stream` meanwhile takes effect when the last such object goes), as holding a
        framework's stream object does on a GPU. ``None`` for the default streams. Does not block."""
        if stream.kind in (StreamKind.LEGACY, StreamKind.PER_THREAD):
            return None
        self._state(stream)
        hold = _StreamHold()
        self._stream_holds[stream] = self._stream_holds.get(stream, 0) + 1
        weakref.finalize(hold, self._let_stream_go, stream)
        return hold

    def _let_stream_go(self, stream: Stream) -> None:
        with self._lock:
            left = self._stream_holds.get(stream, 1) - 1
            if left > 0:
                self._stream_holds[stream] = left
                return
            self._stream_holds.pop(stream, None)
            state = self._destroy_when_let_go.pop(stream, None)
            if state is not None:
                self._destroy_now(state)


class _StreamHold:
    """What :meth:`StreamLifetimes.hold_stream` hands out: while it lives, the stream is not destroyed."""

    __slots__ = ("__weakref__",)
