"""The backend protocol: the few ordering primitives streamsafe needs from CUDA."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..streams import Stream

__all__ = ["Backend", "Event"]


@runtime_checkable
class Event(Protocol):
    """A reusable CUDA event created with timing disabled."""

    device: int


@runtime_checkable
class Backend(Protocol):
    """Ordering primitives, implemented by the driver (:class:`CudaBackend`) or a model (:class:`SimBackend`).

    Each method's docstring in the implementations says whether it blocks the host.
    """

    name: str

    def device_count(self) -> int: ...

    def current_device(self) -> int: ...

    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` of a created stream, read from the driver."""
        ...

    def current_stream(self, device: int | None = None) -> Stream: ...

    # Events are the backend's own type (CudaEvent, SimEvent): pass back what acquire_event gave.
    def acquire_event(self, device: int) -> Any: ...

    def release_event(self, event: Any) -> None: ...

    def record(self, event: Any, stream: Stream) -> None: ...

    def wait(self, stream: Stream, event: Any) -> None: ...

    def query(self, event: Any) -> bool: ...

    def synchronize_event(self, event: Any) -> None: ...

    def synchronize_stream(self, stream: Stream) -> None: ...

    def synchronize_device(self, device: int) -> None: ...

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        """Make later work on ``waiter`` wait for work issued so far on ``signaller``."""
        ...
