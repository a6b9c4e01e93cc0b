"""Observers of the ordering calls streamsafe makes: a registry with a cheap "anyone listening?" check.

Backends, the emulated effects and contracts report what they do (fences, event records
and waits, host synchronisations, kernels, releases, the input writes a contract sees and
the output reads it hands out) to every registered :class:`Observer`; while sanitize mode is on,
so do the program's own host waits and event calls made through torch, CuPy and ``cuda.bindings``
(:mod:`streamsafe.sim.sync_hooks` wraps them). Sanitize mode is one such observer: a happens-before
model that mirrors the real calls. Nothing here imports a backend, so the CUDA backend knows of
observers, never of the model.

The registry is process-wide: a tuple replaced on every change, read without a lock, so the
hot path costs one global load and a truth test (``if hooks.observers:``). Every callback runs
on the host thread that made the call, before the call's own effect where order matters
(fences, records, waits) and after it for host synchronisations. Nothing here blocks.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Observer", "observers", "register", "unregister", "observing", "label", "strict", "set_environment_observer", "observe_from_environment"]


class Observer:
    """Base class: every callback is a no-op; override the ones you need.

    ``stream`` arguments are :class:`~streamsafe.streams.Stream` values; ``key`` arguments
    identify device memory (a data pointer, or the model's buffer); events are the backend's own, or
    for the program's own event calls a key with the event's ``device`` and ``handle``
    (:class:`streamsafe.sim.sync_hooks.EventKey`).
    """

    def on_fence(self, waiter: Any, signaller: Any) -> None:
        """``waiter`` will wait for the work issued so far on ``signaller`` (an event, device-side)."""

    def on_record(self, event: Any, stream: Any) -> None:
        """``event`` is recorded on ``stream``."""

    def on_wait(self, stream: Any, event: Any) -> None:
        """``stream`` waits for ``event``'s latest record."""

    def on_event_complete(self, event: Any) -> None:
        """The host learnt that ``event``'s latest record completed (a synchronize, or a query that said so)."""

    def on_stream_synchronize(self, stream: Any) -> None:
        """The host waited for everything issued to ``stream``."""

    def on_device_synchronize(self, device: int) -> None:
        """The host waited for everything issued on ``device``."""

    def on_launch(self, stream: Any, name: str, reads: list[Any], writes: list[Any], device: int) -> None:
        """A kernel named ``name`` was issued on ``stream``, reading and writing the memory of these keys."""

    def on_host_write(self, key: Any, name: str, device: int) -> None:
        """The host wrote or released the memory of ``key`` now, with no stream ordering."""

    def on_input_write(self, key: Any, producer: Any, device: int) -> None:
        """A contract's input (memory ``key``) was written on ``producer`` before the ``run()`` that takes it."""

    def on_output_read(self, key: Any, consumer: Any, device: int) -> None:
        """A consumer on ``consumer`` imported the output whose memory is ``key`` and reads it from now on."""

    def on_label(self, stream: Any, label: str) -> None:
        """``stream`` is streamsafe's own (a shadow stream): race reports should call it ``label``."""

    strict: bool = False
    """A checking observer (sanitize mode's): while one listens, what streamsafe would only warn of raises."""


observers: tuple[Observer, ...] = ()
"""The registered observers, oldest first. Read it; change it only with :func:`register`/:func:`unregister`."""

_lock = threading.Lock()


def register(observer: Observer) -> Observer:
    """Add ``observer``; returns it. Registering one twice is harmless."""
    global observers
    with _lock:
        if observer not in observers:
            observers = (*observers, observer)
    return observer


def unregister(observer: Observer) -> None:
    """Remove ``observer`` (no error when it is not registered)."""
    global observers
    with _lock:
        observers = tuple(o for o in observers if o is not observer)


def label(stream: Any, name: str) -> None:
    """Name one of streamsafe's own streams ``name`` in race reports: in its backend's model, if it keeps one
    (``label_stream``), and for every observer. Does not block."""
    own = getattr(getattr(stream, "backend", None), "label_stream", None)
    if own is not None:
        own(stream, name)
    for o in observers:
        o.on_label(stream, name)


def observing() -> bool:
    """True when any observer is registered (the cheap check callers make first)."""
    return bool(observers)


def strict() -> bool:
    """True when a checking observer (:attr:`Observer.strict`, sanitize mode) is registered."""
    return any(o.strict for o in observers)


_environment_observer: Any = None


def set_environment_observer(factory: Any) -> None:
    """The call that registers the process-wide observer ``STREAMSAFE_SANITIZE=1`` asks for (the model's
    mirror registers itself so when it is imported; the core never imports it)."""
    global _environment_observer
    _environment_observer = factory


def observe_from_environment() -> None:
    """``STREAMSAFE_SANITIZE=1``: register the process-wide observer, once (nothing when none is known)."""
    if _environment_observer is not None:
        _environment_observer()
