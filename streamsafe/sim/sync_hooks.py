"""Sanitize mode's view of the program's own host synchronisations and event calls.

A program orders its GPU work with calls that are not torch ops, so no dispatch mode sees them: the host
waiting for a stream, an event or a whole device (the vendor's input recipe synchronises the producer's
stream before ``run()``), and event records and waits made through CuPy or ``cuda.bindings``. While sanitize
mode is on, the functions and methods below are wrapped and tell every observer (:mod:`streamsafe.hooks`)
what they did, as streamsafe tells of its own calls: in the mirror, the host's vector clock joins the
clock of the stream waited for, of every stream of the device, or of the event's latest record, so
whatever was issued before them is ordered before the host's later work; an event record or wait orders
streams on the device. A call that fails (an exception, a CUDA error result) or a query that says "not
done" tells nothing, and so does a call streamsafe's own code makes (it tells of its calls itself).

- torch: ``torch.cuda.synchronize``, ``torch.accelerator.synchronize`` (CUDA), ``torch.cuda.Stream``'s
  ``synchronize``, ``query``, ``wait_event``, ``wait_stream``; ``torch.cuda.Event``'s ``record``, ``wait``,
  ``synchronize``, ``query``.
- CuPy: ``cupy.cuda.Device.synchronize``; its streams' ``synchronize``, ``done``, ``record``,
  ``wait_event``; ``cupy.cuda.Event``'s ``record``, ``synchronize``, ``done``; ``cupy.cuda.runtime``'s
  ``deviceSynchronize``, ``streamSynchronize``, ``eventSynchronize``, ``eventRecord``, ``streamWaitEvent``,
  ``eventQuery``, ``streamQuery``.
- ``cuda.bindings.driver``: ``cuCtxSynchronize``, ``cuStreamSynchronize``, ``cuEventSynchronize``,
  ``cuEventRecord``, ``cuEventRecordWithFlags``, ``cuStreamWaitEvent``, ``cuEventQuery``, ``cuStreamQuery``;
  ``cuda.bindings.runtime``: the same as ``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, ``cudaEventRecord``, ``cudaEventRecordWithFlags``, ``cudaStreamWaitEvent``,
  ``cudaEventQuery``, ``cudaStreamQuery``.

The wrappers are installed when the first sanitize block opens (or ``STREAMSAFE_SANITIZE=1`` turns sanitize
mode on, for the process) and the originals put back when the last block closes: outside sanitize mode
nothing is installed and these calls cost what they always cost. Only frameworks the program has imported
are wrapped (nothing is imported here); one imported later is wrapped at the mirror's next call
(:func:`refresh`). Not seen: a call through a name bound before sanitize mode was on (``from torch.cuda
import synchronize``), a host wait inside another call (``tensor.cpu()``, ``.item()``), torch's generic
``torch.Stream``/``torch.Event``, ``cuda.core``. The model has one host: a wait made by any thread orders
the later work of every thread.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import hooks
from ..backend import Backend, current_backend, default_backend
from ..backend.naming import as_stream
from ..streams import Stream, handle_of
from .patching import Patch, Wrap, restore, wrap_attribute, wrap_method

__all__ = ["EventKey", "acquire", "installed", "observing", "refresh", "release"]

class EventKey:
    """An event the program made (a driver handle, or a framework's event) as observers know events: one key
    per handle, on the device of the stream it was last recorded on."""

    __slots__ = ("device", "handle", "__weakref__")

    def __init__(self, device: int, handle: int) -> None:
        self.device = device
        self.handle = handle

    def __repr__(self) -> str:
        return f"event {self.handle:#x} (cuda:{self.device})"


_EVENTS: dict[int, EventKey] = {}
"""The events whose records were seen, by handle (forgotten when the last sanitize block closes)."""


def _recorded(handle: int, device: int) -> EventKey:
    """The key of event ``handle``, recorded now on a stream of ``device`` (a new key when the handle was an
    event of another device: the driver gave a destroyed event's handle to a new one)."""
    key = _EVENTS.get(handle)
    if key is None or key.device != device:
        key = _EVENTS[handle] = EventKey(device, handle)
    return key


def _known(handle: int) -> EventKey | None:
    """The key of event ``handle`` if a record of it was seen (else a wait for it, or its completion, orders
    nothing the observers know)."""
    return _EVENTS.get(handle)


# -- naming what the program passed ------------------------------------------------------------------------------


def _naming_backend() -> Backend | None:
    """The backend that names the program's streams (the driver's), or ``None`` where there is none (the
    model is the current and default backend: the program's real streams are no streams of it)."""
    be = current_backend()
    if be.records_accesses:
        be = default_backend()
        if be.records_accesses:
            return None
    return be


def _handle(obj: Any) -> int:
    """A raw stream or event handle as an int: an int, ``None`` (0), a ``cuda.bindings`` handle, a stream object."""
    if obj is None:
        return 0
    try:
        return int(obj)
    except TypeError:
        return handle_of(obj)[0]


def _stream(obj: Any, *, raw: bool = False) -> Stream | None:
    """The :class:`~streamsafe.streams.Stream` ``obj`` names (a framework's stream object, or with ``raw`` a
    handle a runtime or driver call takes), or ``None`` when no backend names the program's streams."""
    be = _naming_backend()
    if be is None:
        return None
    return as_stream(_handle(obj) if raw else obj, backend=be)


def _event_handle(event: Any, attribute: str) -> int:
    """A framework event's raw handle (torch's ``cuda_event``, CuPy's ``ptr``); 0 for anything else (a generic
    ``torch.Event``): no handle, nothing told."""
    return int(getattr(event, attribute, 0) or 0)


def _ok(result: Any) -> bool:
    """Whether a ``cuda.bindings`` result (a tuple led by the error) or a CUDA status says success."""
    err = result[0] if isinstance(result, tuple) else result
    try:
        return int(err) == 0
    except (TypeError, ValueError):
        return False


# -- what the wrappers tell ------------------------------------------------------------------------------------


def _tell_stream_synchronized(obj: Any, *, raw: bool = False) -> None:
    stream = _stream(obj, raw=raw)
    if stream is not None:
        for o in hooks.observers:
            o.on_stream_synchronize(stream)


def _tell_device_synchronized(device: int) -> None:
    if _naming_backend() is not None:
        for o in hooks.observers:
            o.on_device_synchronize(int(device))


def _tell_event_complete(handle: int) -> None:
    key = _known(handle)
    if key is not None:
        for o in hooks.observers:
            o.on_event_complete(key)


def _tell_record(handle: int, stream_obj: Any, *, raw: bool = False) -> None:
    stream = _stream(stream_obj, raw=raw)
    if stream is not None and handle:
        key = _recorded(handle, stream.device)
        for o in hooks.observers:
            o.on_record(key, stream)


def _tell_wait(stream_obj: Any, handle: int, *, raw: bool = False) -> None:
    key = _known(handle)
    if key is not None:
        stream = _stream(stream_obj, raw=raw)
        if stream is not None:
            for o in hooks.observers:
                o.on_wait(stream, key)


# -- wrappers ------------------------------------------------------------------------------------------------


def _told_by_streamsafe() -> bool:
    """Whether the wrapped call was made by streamsafe's own code (its backend, its emulated effects), which
    tells observers of its calls itself, as it means them: a second report would name the same call twice,
    once by a driver handle. (Called by a wrapper: the frame two up is the wrapper's caller.)"""
    return str(sys._getframe(2).f_globals.get("__name__", "")).startswith("streamsafe.")


Tell = Callable[[tuple[Any, ...], dict[str, Any]], None]
"""``tell(args, kwargs)``: what a wrapper tells the observers, from the arguments of the call it wraps."""


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, *names: str) -> Any:
    """The call's argument at position ``index``, or passed by one of ``names``, else ``None``."""
    if index < len(args):
        return args[index]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return None


def _after(tell: Tell, *, when: Callable[[Any], bool] | None = None) -> Wrap:
    """A wrapper that calls the original, then, if observers listen (and ``when(result)``), tells (a host wait:
    told once it is over)."""

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if hooks.observers and (when is None or when(result)) and not _told_by_streamsafe():
                tell(args, kwargs)
            return result

        return wrapper

    return wrap


def _before(tell: Tell) -> Wrap:
    """A wrapper that tells, if observers listen, then calls the original (an event record or wait: told before
    it is issued, as streamsafe tells of its own)."""

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if hooks.observers and not _told_by_streamsafe():
                tell(args, kwargs)
            return original(*args, **kwargs)

        return wrapper

    return wrap


def _done_property(tell: Tell) -> Wrap:
    """A property like the original whose getter, when it reads true, tells with ``(self,)`` (CuPy's ``done``)."""

    def wrap(original: Any) -> Any:
        def fget(self: Any) -> Any:
            value = original.__get__(self, type(self))
            if value and hooks.observers and not _told_by_streamsafe():
                tell((self,), {})
            return value

        return property(fget, getattr(original, "fset", None), getattr(original, "fdel", None), getattr(original, "__doc__", None))

    return wrap


def _zero(result: Any) -> bool:
    return result == 0  # (CuPy's queries: cudaSuccess)


# -- the frameworks ------------------------------------------------------------------------------------------


def _torch_patches(torch: Any) -> list[Patch | None]:
    cuda = torch.cuda

    def device_index(device: Any) -> int:
        if device is None:
            return int(cuda.current_device())
        if isinstance(device, int):
            return device
        index = getattr(torch.device(device), "index", None)
        return int(index) if index is not None else int(cuda.current_device())

    def current(stream: Any) -> Any:
        return stream if stream is not None else cuda.current_stream()

    def device_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_device_synchronized(device_index(_arg(args, kwargs, 0, "device")))

    def accelerator_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        accelerator = torch.accelerator.current_accelerator()
        if cuda.is_initialized() and getattr(accelerator, "type", None) == "cuda":
            _tell_device_synchronized(device_index(_arg(args, kwargs, 0, "device")))

    def stream_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_stream_synchronized(args[0])

    def stream_waits(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_wait(args[0], _event_handle(_arg(args, kwargs, 1, "event"), "cuda_event"))

    def stream_waits_stream(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_fence(args[0], _arg(args, kwargs, 1, "stream"))

    def event_waited(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_wait(current(_arg(args, kwargs, 1, "stream")), _event_handle(args[0], "cuda_event"))

    def event_complete(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_event_complete(_event_handle(args[0], "cuda_event"))

    def wrap_record(original: Any) -> Any:
        @functools.wraps(original)
        def record(event: Any, stream: Any = None) -> Any:
            tell = bool(hooks.observers) and not _told_by_streamsafe()
            handle = _event_handle(event, "cuda_event") if tell else 0
            if handle:
                _tell_record(handle, current(stream))
            result = original(event, stream)
            if tell and not handle:  # the event was made by this record: no other thread knows it yet
                _tell_record(_event_handle(event, "cuda_event"), current(stream))
            return result

        return record

    Stream, Event = cuda.Stream, cuda.Event  # noqa: N806 - torch's names
    return [
        wrap_attribute(cuda, "synchronize", _after(device_synchronized), "torch.cuda.synchronize"),
        wrap_attribute(getattr(torch, "accelerator", None), "synchronize", _after(accelerator_synchronized),
                      "torch.accelerator.synchronize"),
        wrap_method(Stream, "synchronize", _after(stream_synchronized), "torch.cuda.Stream.synchronize"),
        wrap_method(Stream, "query", _after(stream_synchronized, when=bool), "torch.cuda.Stream.query"),
        wrap_method(Stream, "wait_event", _before(stream_waits), "torch.cuda.Stream.wait_event"),
        wrap_method(Stream, "wait_stream", _before(stream_waits_stream), "torch.cuda.Stream.wait_stream"),
        wrap_method(Event, "record", wrap_record, "torch.cuda.Event.record"),
        wrap_method(Event, "wait", _before(event_waited), "torch.cuda.Event.wait"),
        wrap_method(Event, "synchronize", _after(event_complete), "torch.cuda.Event.synchronize"),
        wrap_method(Event, "query", _after(event_complete, when=bool), "torch.cuda.Event.query"),
    ]


def _tell_fence(waiter: Any, signaller: Any) -> None:
    """``waiter.wait_stream(signaller)``: the waiter's later work after the signaller's work so far."""
    w, s = _stream(waiter), _stream(signaller)
    if w is not None and s is not None:
        for o in hooks.observers:
            o.on_fence(w, s)


def _cupy_patches(cupy: Any) -> list[Patch | None]:
    cuda = cupy.cuda
    runtime = cuda.runtime
    get_device = runtime.getDevice

    def device_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_device_synchronized(args[0].id)

    def current_device_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_device_synchronized(get_device())

    def stream_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_stream_synchronized(args[0])

    def stream_waits(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_wait(args[0], _event_handle(_arg(args, kwargs, 1, "event"), "ptr"))

    def event_recorded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        stream = _arg(args, kwargs, 1, "stream")
        _tell_record(_event_handle(args[0], "ptr"), stream if stream is not None else cuda.get_current_stream())

    def event_complete(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_event_complete(_event_handle(args[0], "ptr"))

    def wrap_stream_record(original: Any) -> Any:
        @functools.wraps(original)
        def record(stream: Any, event: Any = None) -> Any:
            tell = bool(hooks.observers) and not _told_by_streamsafe()
            if tell and event is not None:
                _tell_record(_event_handle(event, "ptr"), stream)
            result = original(stream, event)
            if tell and event is None:  # the event was made by this record
                _tell_record(_event_handle(result, "ptr"), stream)
            return result

        return record

    base = cuda.Stream  # (its methods are defined on a base class ExternalStream shares: wrapped there)
    return [
        wrap_method(cuda.Device, "synchronize", _after(device_synchronized), "cupy.cuda.Device.synchronize", immutable=True),
        wrap_method(base, "synchronize", _after(stream_synchronized), "cupy.cuda.Stream.synchronize"),
        wrap_method(base, "done", _done_property(stream_synchronized), "cupy.cuda.Stream.done"),
        wrap_method(base, "record", wrap_stream_record, "cupy.cuda.Stream.record"),
        wrap_method(base, "wait_event", _before(stream_waits), "cupy.cuda.Stream.wait_event"),
        wrap_method(cuda.Event, "record", _before(event_recorded), "cupy.cuda.Event.record"),
        wrap_method(cuda.Event, "synchronize", _after(event_complete), "cupy.cuda.Event.synchronize"),
        wrap_method(cuda.Event, "done", _done_property(event_complete), "cupy.cuda.Event.done"),
        wrap_attribute(runtime, "deviceSynchronize", _after(current_device_synchronized), "cupy.cuda.runtime.deviceSynchronize"),
        *_raw_patches(runtime, "cupy.cuda.runtime", {
            "streamSynchronize": "stream", "eventSynchronize": "event", "eventRecord": "record",
            "streamWaitEvent": "wait", "eventQuery": "event query", "streamQuery": "stream query",
        }, None, _zero),
    ]


_RAW_NAMES = {"stream": ("hStream", "stream"), "event": ("hEvent", "event")}
"""The parameter names of a stream and of an event in the runtime's and the driver's calls."""


def _raw_patches(module: Any, prefix: str, roles: dict[str, str], waited: Callable[[Any], bool] | None,
                 done: Callable[[Any], bool]) -> list[Patch | None]:
    """Wrappers for the raw calls of CuPy's runtime module and ``cuda.bindings`` (``roles``: what each function
    of ``module`` does): a host wait told when ``waited(result)`` (``None``: whenever it returns; CuPy raises
    on an error), a query when ``done(result)``. Each takes a stream and an event the same way: ``(stream)``,
    ``(event)``, ``(event, stream, ...)`` to record, ``(stream, event, ...)`` to wait."""
    s, e = _RAW_NAMES["stream"], _RAW_NAMES["event"]

    def stream_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_stream_synchronized(_arg(args, kwargs, 0, *s), raw=True)

    def event_complete(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_event_complete(_handle(_arg(args, kwargs, 0, *e)))

    def recorded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_record(_handle(_arg(args, kwargs, 0, *e)), _arg(args, kwargs, 1, *s), raw=True)

    def waits(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _tell_wait(_arg(args, kwargs, 0, *s), _handle(_arg(args, kwargs, 1, *e)), raw=True)

    wrappers: dict[str, Wrap] = {
        "stream": _after(stream_synchronized, when=waited),
        "event": _after(event_complete, when=waited),
        "record": _before(recorded),
        "wait": _before(waits),
        "event query": _after(event_complete, when=done),
        "stream query": _after(stream_synchronized, when=done),
    }
    return [wrap_attribute(module, name, wrappers[role], f"{prefix}.{name}") for name, role in roles.items()]


def _driver_patches(driver: Any) -> list[Patch | None]:
    def device_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        err, device = driver.cuCtxGetDevice()
        if _ok((err,)):
            _tell_device_synchronized(int(device))

    return [
        wrap_attribute(driver, "cuCtxSynchronize", _after(device_synchronized, when=_ok), "cuda.bindings.driver.cuCtxSynchronize"),
        *_raw_patches(driver, "cuda.bindings.driver", {
            "cuStreamSynchronize": "stream", "cuEventSynchronize": "event", "cuEventRecord": "record",
            "cuEventRecordWithFlags": "record", "cuStreamWaitEvent": "wait", "cuEventQuery": "event query",
            "cuStreamQuery": "stream query",
        }, _ok, _ok),
    ]


def _runtime_patches(runtime: Any) -> list[Patch | None]:
    def device_synchronized(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        err, device = runtime.cudaGetDevice()
        if _ok((err,)):
            _tell_device_synchronized(int(device))

    return [
        wrap_attribute(runtime, "cudaDeviceSynchronize", _after(device_synchronized, when=_ok),
                      "cuda.bindings.runtime.cudaDeviceSynchronize"),
        *_raw_patches(runtime, "cuda.bindings.runtime", {
            "cudaStreamSynchronize": "stream", "cudaEventSynchronize": "event", "cudaEventRecord": "record",
            "cudaEventRecordWithFlags": "record", "cudaStreamWaitEvent": "wait", "cudaEventQuery": "event query",
            "cudaStreamQuery": "stream query",
        }, _ok, _ok),
    ]


_FRAMEWORKS: dict[str, Callable[[Any], list[Patch | None]]] = {
    "torch": _torch_patches,
    "cupy": _cupy_patches,
    "cuda.bindings.driver": _driver_patches,
    "cuda.bindings.runtime": _runtime_patches,
}
"""Each framework's module (as ``sys.modules`` names it) and what wraps its calls."""

_lock = threading.RLock()
_users = 0
_installed: dict[str, list[Patch]] = {}
"""The wrappers installed now, by framework (a module object that left ``sys.modules`` keeps its own)."""


def _install_loaded() -> None:
    for name, patches in _FRAMEWORKS.items():
        if name not in _installed:
            module = sys.modules.get(name)
            if module is not None:
                _installed[name] = [p for p in patches(module) if p is not None]


def acquire() -> None:
    """Turn the wrappers on for one more user (a sanitize block, or sanitize mode for the process): the first
    installs them for every framework the program has imported. Does not block."""
    global _users
    with _lock:
        _users += 1
        _install_loaded()


def release() -> None:
    """One user fewer: the last puts every original back and forgets the events seen. Does not block."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            for patches in _installed.values():
                for patch in reversed(patches):
                    restore(patch)
            _installed.clear()
            _EVENTS.clear()


@contextlib.contextmanager
def observing() -> Iterator[None]:
    """The wrappers on inside the block (:func:`acquire`, then :func:`release`). Does not block."""
    acquire()
    try:
        yield
    finally:
        release()


def refresh() -> None:
    """Wrap the frameworks the program imported since the wrappers were turned on; nothing when they are off
    or every framework is wrapped (cheap: the mirror calls it often). Does not block."""
    if _users and len(_installed) < len(_FRAMEWORKS):
        with _lock:
            if _users:
                _install_loaded()


def installed() -> list[str]:
    """The calls wrapped now (``"torch.cuda.synchronize"``, ...), in the order they were installed."""
    with _lock:
        return [p.label for patches in _installed.values() for p in patches]
