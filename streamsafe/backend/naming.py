"""Naming a stream: what a user passes (a torch/CuPy/cuda.core stream, an object with
``__cuda_stream__``, a DLPack-style integer, ``None``) as a :class:`~streamsafe.streams.Stream` of a backend.

None of these calls blocks the host or orders GPU work; they may query the driver for a created
stream's device and flags.
"""

from __future__ import annotations

import numbers
import operator
import threading
from typing import Any

from ..errors import CudaDriverError, DeviceMismatchError, StreamTypeError, StreamValueError
from ..streams import ACCEPTED_STREAMS, LEGACY_HANDLE, PER_THREAD_HANDLE, Stream, StreamKind, handle_of, stream_from_handle
from . import Backend, current_backend, require_backend, thread_uses_default

__all__ = ["as_stream", "stream_on_device", "check_device"]


def as_stream(obj: Any = None, *, device: int | None = None, backend: Backend | None = None) -> Stream:
    """Normalise ``obj`` into a :class:`~streamsafe.streams.Stream`.

    ``device``, when given, is the device the stream must belong to (a stream of another
    device raises :class:`~streamsafe.errors.DeviceMismatchError`), and the device of
    the default streams named by 0, 1, 2 or ``None``: a device the backend does not have raises
    :class:`~streamsafe.errors.StreamValueError` (:func:`check_device`). ``backend`` defaults to the one
    owning ``obj``, else :func:`streamsafe.backend.current_backend`; anything that is not a backend raises
    :class:`~streamsafe.errors.ArgumentError`.

    Does not block the host; may call ``cuStreamGetFlags``/``cuStreamGetDevice``.
    """
    if backend is not None and type(backend) not in _backend_types:
        _backend_types.add(type(require_backend(backend, "as_stream(backend=...)")))
    if isinstance(obj, Stream):
        if backend is not None and obj.backend is not None and obj.backend is not backend:
            if obj.kind is StreamKind.LEGACY or obj.kind is StreamKind.PER_THREAD:  # the same stream in every backend
                return _check_device(Stream(obj.device, obj.handle, obj.kind, backend, obj.thread), obj, device)
            _refuse_another_model(obj, backend)
        return _check_device(obj, obj, device)
    be = backend if backend is not None else getattr(obj, "_streamsafe_backend", None) or current_backend()
    if obj is None:
        if device is not None:
            check_device(device, be, "the legacy stream")  # (the current stream of a device it lacks: none set)
        return _check_device(be.current_stream(device), obj, device)
    if isinstance(obj, bool) or isinstance(obj, float):
        raise StreamTypeError(obj, ACCEPTED_STREAMS)
    if isinstance(obj, int):
        return _named(obj, obj, None, device, be)
    if isinstance(obj, numbers.Integral):  # np.int64 and the like: an int handle
        return _named(int(obj), obj, None, device, be)
    handle, obj_device = handle_of(obj)
    return _named(handle, obj, obj_device, device, be)


_backend_types: set[type] = set()
"""The types of the backends :func:`as_stream` was given that :func:`~streamsafe.backend.require_backend` passed
(checked once per type: it is on the path of every guarded call)."""


def _named(handle: int, obj: Any, obj_device: int | None, device: int | None, be: Backend) -> Stream:
    if device is not None and obj_device is None and handle in (0, LEGACY_HANDLE, PER_THREAD_HANDLE):
        check_device(device, be, "the per-thread stream" if handle == PER_THREAD_HANDLE else "the legacy stream")
    dev = obj_device if obj_device is not None else device if device is not None else None
    if dev is None and handle in (0, 1, 2):
        dev = be.current_device()
    try:
        stream = stream_from_handle(handle, dev if dev is not None else 0, be, obj)
    except CudaDriverError as e:
        hint = _no_backend_hint(be)
        if not hint or e.name != "CUDA_ERROR_INVALID_HANDLE":
            raise
        raise CudaDriverError(e.call, e.code, e.name, e.description, f"{e.hint} {hint}" if e.hint else hint) from None
    return _check_device(stream, obj, device)


def _no_backend_hint(be: Backend) -> str:
    """Why a model may not know a stream: this thread set no backend (``use_backend`` is per thread), so ``be``
    is the process's default model, and the stream is likely another model's. Empty when that is not so."""
    if not getattr(be, "private_handles", False) or not thread_uses_default(be):
        return ""
    return (f"This thread ({threading.current_thread().name!r}) has no backend set: call ss.use_backend(...) in it, "
            "or pass backend= to what it makes (an effect, a contract). "
            "ss.use_backend() holds for the thread (and task) that entered it only: a thread you start gets the "
            f"process's default backend, {be!r}, which numbers its streams apart from every other model")


def _refuse_another_model(stream: Stream, backend: Backend) -> None:
    """A :class:`Stream` of one model used with another backend: its handle would name an unrelated
    stream there (two models number their streams alike). Streams of the driver mix freely, and the
    default streams are the same in every backend (the caller maps those)."""
    if getattr(stream.backend, "private_handles", False) or getattr(backend, "private_handles", False):
        hint = _no_backend_hint(backend)
        raise StreamValueError(
            stream,
            f"it is a stream of {stream.backend!r} (id {id(stream.backend):#x}), not of the backend in use here, "
            f"{backend!r} (id {id(backend):#x}); its handle would name another stream there",
            "Create the stream with the effect's backend (backend.create_stream(...)), or make the effect with the "
            "backend the stream belongs to (backend=...)." + (f" {hint}" if hint else ""),
        )


def check_device(device: Any, backend: Any, what: str = "a new stream") -> int:
    """``device`` when it is a device of ``backend`` (an ``int``, 0 to ``backend.device_count() - 1``), else a
    :class:`~streamsafe.errors.StreamValueError` naming ``what`` (the stream asked for) on that device, the
    devices there are and the fix. The one check of a device number: :func:`as_stream` and the model's calls
    (:class:`~streamsafe.sim.SimBackend`'s ``create_stream``, ``device``, ``empty``, ...) make it. Does not block."""
    count = backend.device_count()
    if not isinstance(device, bool) and not isinstance(device, int) and hasattr(type(device), "__index__"):
        device = operator.index(device)  # (an integer of another type: NumPy's, as a handle may be)
    if isinstance(device, bool) or not isinstance(device, int):
        guess = _as_number(device)
        pick = f"device={guess}" if guess is not None and 0 <= guess < count else "the device"
        raise StreamValueError(
            f"{what} of device {device!r}", f"a device is named by its number (an int), not a {type(device).__name__}",
            f"Pass {pick} as an int (0 to {count - 1}).",
        )
    if not 0 <= device < count:
        model = getattr(backend, "private_handles", False)
        there = f"the model has {count} device(s)" if model else f"there are {count} CUDA device(s)"
        more = f", or make the model with more: SimBackend(devices={device + 1})" if model and device > 0 else ""
        raise StreamValueError(f"{what} of device {device}", f"{there}, numbered 0 to {count - 1}", f"Pick one of them{more}.")
    return device


def _as_number(device: Any) -> int | None:
    """The device number ``device`` spells another way (``1.0``, ``"1"``), else ``None`` (a bool is no number: ``True``
    is more likely a flag in the wrong place than device 1)."""
    if isinstance(device, float) and device.is_integer():
        return int(device)
    if isinstance(device, str) and device.strip().isdigit():
        return int(device)
    return None


def _check_device(stream: Stream, obj: Any, device: int | None) -> Stream:
    if device is not None and stream.device != device:
        raise DeviceMismatchError(
            "stream",
            obj if obj is not None else stream,
            stream.device,
            device,
            f"Create the stream on device {device} (e.g. inside `with torch.cuda.device({device}):`) "
            f"or use an effect on device {stream.device}.",
        )
    return stream


_STREAM_FIXES = {
    "sdk": (
        "the SDK stream",
        "Pass a stream of device {expected} (e.g. torch.cuda.Stream({expected}), or one made inside "
        "`with torch.cuda.device({expected}):`), or use an effect created with device={actual}.",
    ),
    "input": (
        "the input's producer stream",
        "Declare the stream of device {expected} that writes the inputs, or use an effect created with device={actual}.",
    ),
    "consumer": (
        "the consumer's stream",
        "The output lives on device {expected}, the effect's: import it on a stream of device {expected} (e.g. "
        "inside `with torch.cuda.device({expected}):`, or out.torch(stream) with a stream of device {expected}), "
        "then copy the result to device {actual} (y.to('cuda:{actual}')).",
    ),
    "decoder": (
        "the decoder's stream",
        "The decoder writes its frames on device {expected} (its gpu_id): declare a stream of device {expected} (the "
        "cuda_stream it was made with), or none; a decoder made with gpu_id={actual} writes on device {actual}.",
    ),
    "frame consumer": (
        "the consumer's stream",
        "The decoder's frames live on device {expected} (its gpu_id): read them on a stream of device {expected} (e.g. "
        "inside `with torch.cuda.device({expected}):`, or frame.torch(stream) with a stream of device {expected}), "
        "then copy the result to device {actual} (y.to('cuda:{actual}')).",
    ),
    "conversion": (
        "the conversion stream",
        "Pass a stream of device {expected}, or leave conversion_stream unset (the legacy stream of device {expected}).",
    ),
}


def stream_on_device(obj: Any, device: int, backend: Any, role: str) -> Any:
    """``as_stream(obj, device=device, backend=backend)``, with a
    :class:`~streamsafe.errors.DeviceMismatchError` that names the stream's ``role`` (``"sdk"``,
    ``"input"``, ``"consumer"``, ``"conversion"``; a decoder's ``"decoder"`` and ``"frame consumer"``), both devices and the fix for that role.
    Does not block."""
    what, fix = _STREAM_FIXES[role]
    try:
        return as_stream(obj, device=device, backend=backend)
    except DeviceMismatchError as e:
        raise DeviceMismatchError(what, e.value, e.actual, e.expected, fix.format(actual=e.actual, expected=e.expected)) from None
