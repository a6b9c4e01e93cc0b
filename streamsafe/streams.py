"""Stream identity: one immutable value for every way a user can name a CUDA stream.

:func:`as_stream` turns a torch/CuPy/cuda.core stream, any object with
``__cuda_stream__``, a DLPack-style integer or ``None`` into a :class:`Stream`:
device, canonical handle and :class:`StreamKind`. The kind of a created stream is
read from the driver (``cuStreamGetFlags``), never guessed. Whether two streams are
implicitly ordered is decided in one place, :func:`implicitly_ordered`.

None of these calls blocks the host or orders any GPU work.
"""

from __future__ import annotations

import enum
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from .errors import StreamTypeError, StreamValueError

__all__ = [
    "StreamKind",
    "Stream",
    "implicitly_ordered",
    "handle_of",
    "stream_from_handle",
    "on_this_thread",
    "issuable",
    "thread_token",
    "LEGACY_HANDLE",
    "PER_THREAD_HANDLE",
    "ACCEPTED_STREAMS",
]

LEGACY_HANDLE = 1
"""Canonical handle of the legacy default stream (``CU_STREAM_LEGACY``, DLPack 1)."""
PER_THREAD_HANDLE = 2
"""Canonical handle of the per-thread default stream (``CU_STREAM_PER_THREAD``, DLPack 2)."""

ACCEPTED_STREAMS = (
    "torch.cuda.Stream/ExternalStream, cupy.cuda.Stream/ExternalStream, cuda.core streams, "
    "any object with __cuda_stream__(), a streamsafe Stream, an int handle "
    "(0 or 1 = legacy default stream, 2 = per-thread default stream, larger = a cudaStream_t "
    "pointer), or None for the current stream"
)


class StreamKind(enum.Enum):
    """How a stream synchronises implicitly with other streams of its device."""

    LEGACY = "legacy"
    """The legacy default stream (handle 0 or 1): waits for, and is waited on by, blocking streams."""
    PER_THREAD = "per-thread"
    """``cudaStreamPerThread`` (handle 2): ordered with the legacy stream only, not with other streams.
    Each host thread has its own: handle 2 names the stream of the thread that issues the work."""
    BLOCKING = "blocking"
    """Created without ``CU_STREAM_NON_BLOCKING``: implicitly ordered with the legacy stream."""
    NON_BLOCKING = "non-blocking"
    """Created with ``CU_STREAM_NON_BLOCKING``: ordered with nothing but itself."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, eq=False)
class Stream:
    """One CUDA stream, identified by device and canonical handle.

    ``handle`` is 1 for the legacy default stream, 2 for the per-thread default stream,
    and the ``CUstream`` pointer otherwise. The kind is part of the identity (and of every cache key
    a stream is): a destroyed stream's handle comes back from the driver as the next stream it
    creates, of either kind. ``backend`` is the backend that owns the
    stream (the driver, or a :class:`~streamsafe.sim.SimBackend`); it takes no
    part in equality.

    A per-thread default stream is a different stream in each host thread (CUDA resolves
    handle 2 in the thread that issues the work), so its ``thread`` (the
    :func:`thread_token` of the thread it was named in, filled in when left out) is part
    of its identity: the per-thread streams of two threads are neither equal nor ordered.
    Every other stream has ``thread`` 0.

    Three integers name a stream, and they differ only for the legacy stream: :attr:`handle` (1 for the legacy
    stream, 2 per-thread, else the ``CUstream`` pointer) is streamsafe's own name, part of the stream's identity;
    :attr:`ptr` is what a C API takes as a ``cudaStream_t`` (an SDK's ``stream_ptr``, ``cuda_stream=``): 0 for the
    legacy stream; :attr:`dlpack` is what ``__dlpack__(stream=...)`` takes (DLPack numbers the legacy stream 1, and
    0 is not allowed). Pass :attr:`ptr` to an SDK and :attr:`dlpack` to ``__dlpack__``: for a created stream both are
    its pointer, for the legacy stream they are 0 and 1.
    """

    device: int
    handle: int
    kind: StreamKind
    backend: Any = field(default=None, compare=False, repr=False)
    thread: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind is StreamKind.PER_THREAD:
            if not self.thread:
                object.__setattr__(self, "thread", _local_token.token)
        elif self.thread:
            object.__setattr__(self, "thread", 0)
        # streams key dicts on every frame: the hash is computed once (an attribute, not a field). The kind is
        # part of the identity: the driver hands a destroyed stream's handle to the next stream it creates,
        # whatever its flags, so one handle may name a blocking stream and later a non-blocking one.
        object.__setattr__(self, "_hash", hash((self.device, self.handle, self.thread, self.kind.value)))

    @property
    def ptr(self) -> int:
        """The value to pass as a ``stream_ptr``/``cudaStream_t`` (an SDK's stream argument): 0 for the legacy stream,
        else :attr:`handle`."""
        return 0 if self.kind is StreamKind.LEGACY else self.handle

    @property
    def dlpack(self) -> int:
        """The value to pass as ``__dlpack__(stream=...)``: 1 legacy, 2 per-thread, else the pointer (the same as
        :attr:`handle`; unlike :attr:`ptr`, never 0, which DLPack does not allow)."""
        return self.handle

    @property
    def key(self) -> tuple[int, ...]:
        """``(device, handle)``, and the thread for a per-thread stream: the stream's key in a vector clock."""
        return (self.device, self.handle, self.thread) if self.thread else (self.device, self.handle)

    def __hash__(self) -> int:  # device, handle, thread and kind identify a stream (computed once)
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __eq__(self, other: object) -> bool:  # the same identity as the hash
        if other.__class__ is Stream:
            return (
                self.handle == other.handle and self.device == other.device  # type: ignore[attr-defined]
                and self.thread == other.thread and self.kind is other.kind  # type: ignore[attr-defined]
            )
        return NotImplemented

    def __repr__(self) -> str:
        thread = f", thread={self.thread}" if self.thread else ""
        return f"Stream(device={self.device}, handle={self.handle}, kind={self.kind!r}{thread})"

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)

    def __str__(self) -> str:
        if self.kind is StreamKind.LEGACY:
            return f"legacy stream (cuda:{self.device})"
        if self.kind is StreamKind.PER_THREAD:
            return f"per-thread stream of thread {_thread_name(self.thread)} (cuda:{self.device})"
        return f"{self.kind} stream {self.handle:#x} (cuda:{self.device})"


def implicitly_ordered(a: Stream, b: Stream) -> bool:
    """True when CUDA orders work on ``a`` and ``b`` with no explicit fence.

    This is the one place that decides it. Work on one stream is ordered with itself.
    The legacy default stream waits for all earlier work of the blocking streams of
    its device (the per-thread default stream counts as blocking) and they wait for
    it. Non-blocking streams are ordered with nothing else, and blocking streams are
    not ordered with each other (nor are the per-thread streams of two threads).
    Streams of different devices are never ordered.
    """
    if a.device != b.device:
        return False
    if a.handle == b.handle and a.thread == b.thread:
        return True
    implicit = {StreamKind.LEGACY, StreamKind.BLOCKING, StreamKind.PER_THREAD}
    if a.kind is StreamKind.LEGACY:
        return b.kind in implicit
    if b.kind is StreamKind.LEGACY:
        return a.kind in implicit
    return False


class _ThreadToken(threading.local):
    """This thread's number for per-thread streams: unique for the process's life (``threading.get_ident``
    is reused as soon as a thread ends, and the next thread's per-thread stream is another stream)."""

    def __init__(self) -> None:
        with _token_lock:
            self.token = next(_tokens)
            if len(_thread_names) >= 4096:  # (names are for messages only: a thread-per-request server forgets the oldest)
                for old in list(_thread_names)[:2048]:
                    del _thread_names[old]
            _thread_names[self.token] = threading.current_thread().name


_token_lock = threading.RLock()  # (re-entrant: the collector may run a finalizer that names a stream inside it)
_tokens = itertools.count(1)
_thread_names: dict[int, str] = {}
_local_token = _ThreadToken()


def thread_token() -> int:
    """The calling thread's number (from 1; never reused): what ``Stream.thread`` holds for a per-thread
    stream named in this thread. Does not block."""
    return _local_token.token


def _thread_name(token: int) -> str:
    name = _thread_names.get(token)
    return f"{name!r} (#{token})" if name is not None else f"#{token}"


def on_this_thread(stream: Stream) -> Stream:
    """``stream`` as the calling thread names it: a per-thread default stream named in another thread
    becomes this thread's (what handle 2 means in work issued here, e.g. a contract's declared
    stream 2 when another thread runs it). Any other stream is itself. Issues nothing."""
    if stream.thread and stream.thread != _local_token.token:
        return Stream(stream.device, stream.handle, stream.kind, stream.backend)
    return stream


def issuable(stream: Stream) -> Stream:
    """The stream on which this thread issues an event record or a wait that must order with ``stream``:
    ``stream`` itself, except another thread's per-thread default stream, which no other thread can
    name (handle 2 would be its own). That one becomes the device's legacy stream: CUDA orders
    legacy-stream work after the earlier work of every blocking and per-thread stream of the
    device, and their later work after it, so an event recorded there follows the other thread's
    work, and a wait there comes before its later work. Issues nothing."""
    if stream.thread and stream.thread != _local_token.token:
        return Stream(stream.device, LEGACY_HANDLE, StreamKind.LEGACY, stream.backend)
    return stream


def handle_of(obj: Any) -> tuple[int, int | None]:
    """The raw handle of a framework's stream object and, when the object says, its device (no driver
    query). Raises :class:`~streamsafe.errors.StreamTypeError` for anything else."""
    module = type(obj).__module__ or ""
    if module.startswith("torch") and hasattr(obj, "cuda_stream"):
        dev = getattr(obj, "device", None)
        return int(obj.cuda_stream), getattr(dev, "index", None)
    if module.startswith("cupy") and hasattr(obj, "ptr"):
        dev = getattr(obj, "device_id", None)
        return int(obj.ptr), dev if isinstance(dev, int) and dev >= 0 else None  # -1: CuPy's null/ptds stream objects
    protocol = getattr(obj, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        if not (isinstance(value, tuple) and len(value) == 2):
            raise StreamTypeError(obj, ACCEPTED_STREAMS + " (__cuda_stream__() must return (version, handle))")
        dev = getattr(obj, "device", None)
        dev_index = dev if isinstance(dev, int) else getattr(dev, "device_id", getattr(dev, "index", None))
        return int(value[1]), dev_index
    raise StreamTypeError(obj, ACCEPTED_STREAMS)


def stream_from_handle(handle: int, device: int, backend: Any, obj: Any = None) -> Stream:
    """The :class:`Stream` that ``handle`` names: the legacy stream for 0 and 1, the per-thread stream for 2
    (both of ``device``), else a created stream whose device and kind ``backend.stream_info`` reads from
    the driver (``device`` is then not used). ``obj``: what the user passed, for the error. Does not
    block; may call ``cuStreamGetFlags``/``cuStreamGetDevice``."""
    if handle < 0:
        raise StreamValueError(
            obj if obj is not None else handle,
            "negative handles name no stream (DLPack's -1 means 'do not synchronise')",
            "Pass a stream object, 0/1 for the legacy stream, 2 for the per-thread stream, or None.",
        )
    if handle in (0, LEGACY_HANDLE, PER_THREAD_HANDLE):
        if handle == PER_THREAD_HANDLE:
            return Stream(device, PER_THREAD_HANDLE, StreamKind.PER_THREAD, backend)
        return Stream(device, LEGACY_HANDLE, StreamKind.LEGACY, backend)
    dev, non_blocking = backend.stream_info(handle)  # from the driver, not from the object's own claim
    return Stream(dev, handle, StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING, backend)
