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

    Each method's docstring in the implementations says whether it blocks the host. The ordering
    core asks a backend what it can do through the properties below (plain class attributes in the
    implementations), never what class it is.
    """

    name: str

    @property
    def records_accesses(self) -> bool:
        """The backend sees every memory access itself (a model): contracts report nothing to observers
        for its memory, and draw no NVTX ranges."""
        ...

    @property
    def framework_streams(self) -> bool:
        """The current stream is an array framework's (torch's, CuPy's): a stream object the program holds."""
        ...

    @property
    def private_handles(self) -> bool:
        """Its stream handles are numbers of its own (a model): a stream of it names nothing in another backend."""
        ...

    @property
    def array_type(self) -> type | None:
        """The type of the arrays the backend itself makes (a model's), or ``None``: the fast paths compare
        an input's type with it. Such an array has ``backend``, ``shape``, ``record_stream(stream)`` and
        ``__streamsafe_key__`` (what identifies its memory)."""
        ...

    @property
    def sanitizing(self) -> bool:
        """Races raise at once (sanitize mode on a model); an unguarded change then raises too."""
        ...

    @property
    def host_array_fix(self) -> str:
        """How to make a device array of this backend from host data (for error messages), or ``""``."""
        ...

    def device_count(self) -> int: ...

    def current_device(self) -> int: ...

    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` of a created stream, read from the driver."""
        ...

    def current_stream(self, device: int | None = None) -> Stream: ...

    # Events are the backend's own type (CudaEvent, SimEvent): pass back what acquire_event gave.
    def acquire_event(self, device: int) -> Any: ...

    def release_event(self, event: Any) -> None: ...

    def hold_stream(self, stream: Stream) -> Any:
        """An object that keeps ``stream`` alive while referenced (the model's), or ``None`` where the
        program's own stream object does (the driver)."""
        ...

    def record(self, event: Any, stream: Stream) -> None: ...

    def wait(self, stream: Stream, event: Any) -> None: ...

    def query(self, event: Any) -> bool: ...

    def synchronize_event(self, event: Any) -> None: ...

    def synchronize_stream(self, stream: Stream) -> None: ...

    def synchronize_device(self, device: int) -> None: ...

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        """Make later work on ``waiter`` wait for work issued so far on ``signaller``."""
        ...
