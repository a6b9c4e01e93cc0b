"""Sanitize mode's state: the happens-before shadow of real GPU calls.

When active, every fence, event, synchronisation and emulated-effect stage issued
through streamsafe, every producer write a contract sees at ``run()`` and every consumer
import of a contract's output is mirrored into a :class:`~streamsafe.SimBackend` whose
only job is its vector clocks. A missing fence raises :class:`~streamsafe.RaceError`
naming both accesses, whether or not timing corrupted the data. It sees only what goes
through streamsafe: a bare ``torch.cuda.synchronize()`` is invisible to it.
"""

from __future__ import annotations

from typing import Any

from .backend.schedule import InOrderScheduler
from .backend.sim import SimArray, SimBackend
from .streams import Stream, StreamKind

__all__ = ["Shadow", "active", "activate", "deactivate", "sim_sanitizing", "enable_from_environment"]

_ACTIVE: Shadow | None = None


def active() -> Shadow | None:
    return _ACTIVE


def activate(shadow: Shadow | None) -> Shadow | None:
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, shadow
    return previous


def deactivate(previous: Shadow | None) -> None:
    global _ACTIVE
    _ACTIVE = previous


def enable_from_environment() -> None:
    """``STREAMSAFE_SANITIZE=1``: a process-wide shadow, started once."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = Shadow()


def sim_sanitizing(backend: Any) -> bool:
    return isinstance(backend, SimBackend) and backend.on_race == "raise"


def array_key(arr: Any) -> Any:
    """What identifies an array's memory: a pointer, or the model's buffer."""
    if isinstance(arr, SimArray):
        return arr.buffer
    data = getattr(arr, "data", None)
    ptr = getattr(data, "ptr", None)  # CuPy
    if isinstance(ptr, int):
        return ptr
    data_ptr = getattr(arr, "data_ptr", None)  # torch
    if callable(data_ptr):
        return data_ptr()
    return None


class Shadow:
    """The model that shadows real calls. Raises :class:`~streamsafe.RaceError` on the first race."""

    def __init__(self, devices: int = 16) -> None:
        self.sim = SimBackend(scheduler=InOrderScheduler(), on_race="raise", devices=devices)
        self._streams: dict[tuple[int, int], Stream] = {}
        self._buffers: dict[Any, SimArray] = {}
        self._events: dict[int, Any] = {}

    @property
    def races(self) -> list[Any]:
        return self.sim.races

    def stream(self, s: Stream) -> Stream:
        mirror = self._streams.get(s.key)
        if mirror is None:
            if s.kind is StreamKind.LEGACY:
                mirror = self.sim.legacy_stream(s.device)
            elif s.kind is StreamKind.PER_THREAD:
                mirror = self.sim.per_thread_stream(s.device)
            else:
                mirror = self.sim.create_stream(non_blocking=s.kind is StreamKind.NON_BLOCKING, device=s.device)
            self._streams[s.key] = mirror
        return mirror

    def buffer(self, key: Any, device: int = 0, name: str = "") -> SimArray:
        mirror = self._buffers.get(key)
        if mirror is None:
            label = name or (f"buffer {key:#x}" if isinstance(key, int) else f"buffer {key}")
            mirror = self._buffers[key] = self.sim.empty(1, device=device, name=label)
        return mirror

    def _event(self, event: Any) -> Any:
        mirror = self._events.get(id(event))
        if mirror is None:
            mirror = self._events[id(event)] = self.sim.create_event(event.device)
        return mirror

    # -- ordering primitives ------------------------------------------------------------------

    def record(self, event: Any, stream: Stream) -> None:
        self.sim.record(self._event(event), self.stream(stream))

    def wait(self, stream: Stream, event: Any) -> None:
        self.sim.wait(self.stream(stream), self._event(event))

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        self.sim.fence(self.stream(waiter), self.stream(signaller))

    def synchronize_event(self, event: Any) -> None:
        self.sim.synchronize_event(self._event(event))

    def synchronize_stream(self, stream: Stream) -> None:
        self.sim.synchronize_stream(self.stream(stream))

    def synchronize_device(self, device: int) -> None:
        self.sim.synchronize_device(device)

    # -- accesses -----------------------------------------------------------------------------

    def launch(self, stream: Stream, name: str, reads: list[Any], writes: list[Any]) -> None:
        dev = stream.device
        self.sim.launch(
            self.stream(stream),
            name,
            reads=[self.buffer(k, dev) for k in reads if k is not None],
            writes=[self.buffer(k, dev) for k in writes if k is not None],
        )

    def host_write(self, key: Any, name: str, device: int = 0) -> None:
        if key is not None:
            self.sim.host_access(name, writes=[self.buffer(key, device)])

    def producer_writes(self, contract: Any, arrays: list[Any], producers: list[Stream | None]) -> None:
        for arr, producer in zip(arrays, producers):
            if producer is not None and not isinstance(arr, SimArray):
                self.launch(producer, "producer.write", [], [array_key(arr)])

    def consumer_reads(self, contract: Any, image: Any, consumer: Stream) -> None:
        from ._dlpack import capsule_data_key

        if isinstance(contract.backend, SimBackend):
            return  # the model already sees the real accesses
        self.launch(consumer, "consumer.copy (import)", [capsule_data_key(image._capsule)], [])
