"""Sanitize mode's observer: a happens-before mirror of the real GPU calls (the model, fed by hooks).

A :class:`Mirror` is a :class:`streamsafe.hooks.Observer`. While registered (inside
``ss.sanitize()``, or for the whole process with ``STREAMSAFE_SANITIZE=1``), every fence,
event record and wait, host synchronisation, emulated-effect kernel and release, every
producer write a contract sees at ``run()`` and every consumer import of a contract's
output is mirrored into a :class:`~streamsafe.sim.SimBackend` whose only job is its vector
clocks. A missing fence raises :class:`~streamsafe.errors.RaceError` naming both accesses, whether
or not timing corrupted the data; a read of released memory raises a use-after-free report
(H7). Besides what goes through streamsafe, it hears of torch's ops on the memory it tracks
(:mod:`~streamsafe.sim.torch_observer`) and of the program's own host synchronisations and event
calls through torch, CuPy and ``cuda.bindings`` (:mod:`~streamsafe.sim.sync_hooks`).

Memory is identified by its key (a device pointer): a *write* to a key whose mirror was
released starts a new allocation at that address (allocators hand addresses out again), so
it is checked against the old accesses like any reuse; a *read* of it is a use after free.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .. import hooks
from . import sync_hooks
from .schedule import InOrderScheduler
from .backend import SimArray, SimBackend, SimBuffer
from .._dlpack import array_key, capsule_data_key
from ..streams import Stream, StreamKind

__all__ = ["Mirror", "active", "enable_from_environment", "is_release"]

_ENV_MIRROR: Mirror | None = None
_env_lock = threading.Lock()


def active() -> Mirror | None:
    """The most recently registered :class:`Mirror`, or ``None`` when sanitize mode is off."""
    for observer in reversed(hooks.observers):
        if isinstance(observer, Mirror):
            return observer
    return None


def enable_from_environment() -> Mirror:
    """``STREAMSAFE_SANITIZE=1``: register one process-wide mirror, once; returns it."""
    global _ENV_MIRROR
    with _env_lock:
        if _ENV_MIRROR is None:
            _ENV_MIRROR = Mirror()
            sync_hooks.acquire()  # (for the process's life, as the mirror)
            hooks.register(_ENV_MIRROR)
            from .torch_observer import TorchWatch

            watch = TorchWatch(_ENV_MIRROR)  # (for the process's life, in the thread of the first guarded call on CUDA)
            if not watch.started:
                hooks.register(watch)
        return _ENV_MIRROR


def is_release(name: str) -> bool:
    """Whether a host write named ``name`` releases the memory (the effects name theirs
    ``"<Effect>.release <what>"``; ``free``/``close`` count too)."""
    lowered = name.lower()
    return "release" in lowered or "free" in lowered or "close" in lowered


class Mirror(hooks.Observer):
    """The model that mirrors real calls. Raises :class:`~streamsafe.errors.RaceError` on the first race;
    the model stays usable after it (the racing access is fully recorded). Thread-safe."""

    strict = True
    """Sanitize mode is on while it listens: an unguarded change of an effect's output raises."""

    def __init__(self, devices: int = 16) -> None:
        self.sim = SimBackend(scheduler=InOrderScheduler(), on_race="raise", devices=devices)
        self._lock = threading.RLock()
        self._streams: dict[Stream, Stream] = {}
        self._buffers: dict[Any, SimArray] = {}
        self._events: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._events_by_id: dict[int, Any] = {}
        self._seen_writes: set[Any] = set()
        """Memory whose writes are reported as launches (a lab, an instrumented producer): a contract's
        assumed write at ``run()`` is then not added."""

    @property
    def races(self) -> list[Any]:
        return self.sim.races

    def tracked_keys(self) -> Any:
        """The memory the mirror knows (guarded inputs, outputs imported, buffers the effects touch)."""
        return self._buffers.keys()

    def stream(self, s: Stream) -> Stream:
        with self._lock:
            mirror = self._streams.get(s)
            if mirror is None:
                if s.kind is StreamKind.LEGACY:
                    mirror = self.sim.legacy_stream(s.device)
                elif s.kind is StreamKind.PER_THREAD:
                    with self.sim.acting_as(s.thread):  # that thread's, whichever thread reports it
                        mirror = self.sim.per_thread_stream(s.device)
                else:
                    mirror = self.sim.create_stream(non_blocking=s.kind is StreamKind.NON_BLOCKING, device=s.device)
                    self.sim.label_stream(mirror, str(s))  # (reports name the program's stream, not the mirror's)
                self._streams[s] = mirror
            return mirror

    def buffer(self, key: Any, device: int = 0, name: str = "") -> SimArray:
        with self._lock:
            mirror = self._buffers.get(key)
            if mirror is None:
                label = name or (f"buffer {key:#x}" if isinstance(key, int) else f"buffer {key}")
                mirror = self._buffers[key] = self.sim.empty(1, device=device, name=label)
            return mirror

    def _reallocated(self, key: Any, device: int) -> SimArray:
        """The mirror of ``key`` for a write: memory released before is allocated again at that address."""
        mirror = self.buffer(key, device)
        buf = mirror.buffer
        if buf.freed:
            buf.freed = False
            buf.freed_by = None
        return mirror

    def _event(self, event: Any) -> Any:
        with self._lock:
            try:
                mirror = self._events.get(event)
                if mirror is None:
                    mirror = self._events[event] = self.sim.create_event(event.device)
            except TypeError:  # not weakly referenceable
                mirror = self._events_by_id.get(id(event))
                if mirror is None:
                    mirror = self._events_by_id[id(event)] = self.sim.create_event(event.device)
            return mirror

    # -- hooks.Observer ---------------------------------------------------------------------------

    def on_fence(self, waiter: Any, signaller: Any) -> None:
        self.sim.fence(self.stream(waiter), self.stream(signaller))

    def on_record(self, event: Any, stream: Any) -> None:
        self.sim.record(self._event(event), self.stream(stream))

    def on_wait(self, stream: Any, event: Any) -> None:
        self.sim.wait(self.stream(stream), self._event(event))

    def on_event_complete(self, event: Any) -> None:
        self.sim.synchronize_event(self._event(event))

    def on_stream_synchronize(self, stream: Any) -> None:
        self.sim.synchronize_stream(self.stream(stream))

    def on_device_synchronize(self, device: int) -> None:
        self.sim.synchronize_device(device)

    def on_launch(self, stream: Any, name: str, reads: list[Any], writes: list[Any], device: int) -> None:
        if _is_model(stream):
            return  # a SimBackend's own work: the model already sees the real accesses
        sync_hooks.refresh()  # (a framework the program imported since sanitize mode was turned on)
        with self._lock:
            read_mirrors = [self.buffer(k, device) for k in reads if k is not None]
            write_mirrors = [self._reallocated(k, device) for k in writes if k is not None]
            self._seen_writes.update(k for k in writes if k is not None)
        with self.sim.acting_as(_thread_of(stream)):
            self.sim.launch(self.stream(stream), name, reads=read_mirrors, writes=write_mirrors)

    def on_host_write(self, key: Any, name: str, device: int) -> None:
        if key is None or isinstance(key, SimBuffer):
            return
        with self._lock:
            mirror = self._reallocated(key, device)
            self._seen_writes.discard(key)
        if is_release(name):
            self.sim.free(mirror, name=name)
        else:
            self.sim.host_access(name, writes=[mirror])

    def on_input_write(self, key: Any, producer: Any, device: int) -> None:
        if key is None or isinstance(key, SimBuffer) or producer is None or _is_model(producer):
            return
        sync_hooks.refresh()
        if key in self._seen_writes:
            return  # its producer reports its own writes (a lab, an instrumented kernel): no assumed write
        with self._lock:
            mirror = self._reallocated(key, device)
        with self.sim.acting_as(_thread_of(producer)):  # (a declared producer thread's stream 2: that thread's)
            self.sim.launch(self.stream(producer), "producer.write", writes=[mirror])

    def on_label(self, stream: Any, label: str) -> None:
        if not _is_model(stream):
            self.sim.label_stream(self.stream(stream), label)

    def on_output_read(self, key: Any, consumer: Any, device: int) -> None:
        if key is None or isinstance(key, SimBuffer) or _is_model(consumer):
            return
        with self.sim.acting_as(_thread_of(consumer)):
            self.sim.launch(self.stream(consumer), "consumer.copy (import)", reads=[self.buffer(key, device)])

    # -- what contract.py calls today (thin wrappers over the hooks) --------------------------------

    def producer_writes(self, contract: Any, arrays: list[Any], producers: list[Stream | None]) -> None:
        for arr, producer in zip(arrays, producers):
            if producer is not None and not isinstance(arr, SimArray):
                self.on_input_write(array_key(arr), producer, producer.device)

    def consumer_reads(self, contract: Any, image: Any, consumer: Stream) -> None:
        if isinstance(contract.backend, SimBackend):
            return  # the model already sees the real accesses
        self.on_output_read(capsule_data_key(image._capsule), consumer, consumer.device)


def _thread_of(stream: Any) -> int:
    """The thread whose per-thread stream ``stream`` is (0 for any other stream: the reporting thread's rule)."""
    return getattr(stream, "thread", 0) or 0


def _is_model(stream: Any) -> bool:
    return isinstance(getattr(stream, "backend", None), SimBackend)


hooks.set_environment_observer(enable_from_environment)
