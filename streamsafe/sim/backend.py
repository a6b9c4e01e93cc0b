"""SimBackend: a pure-Python model of CUDA stream ordering, with real (small, numpy) data.

Streams are queues of operations. An operation runs only after what CUDA orders it
after: the previous operation on its stream; for the legacy default stream, all
earlier work of the blocking (and per-thread) streams of its device, and the other
way round; the event record a ``wait`` captured. Among the ready operations a
:mod:`scheduler <streamsafe.sim.schedule>` picks any, so a missing fence can
produce wrong data, as on a GPU, and a seed or Hypothesis replays the schedule.
At most ``max_pending`` operations wait at once: beyond that the oldest ready ones
run, as a real GPU would have progressed.

Independently of the schedule, each operation gets a vector clock at issue time;
every access to one buffer that conflicts with an earlier one (one of them writes)
and is not ordered after it is reported as a :class:`~streamsafe.sim.races.Race` naming
both; an access to memory released with :meth:`SimBackend.free` is reported as a
use after free. The report is deterministic: it depends on the program, not on which
order the scheduler chose. A buffer keeps only the accesses that can still race (per
stream, the last read and the last write not superseded, and none the host knows
complete), so long programs run in bounded memory and linear time.

Memory comes from a caching allocator, like torch's and CuPy's: when the last array
object of an allocation is gone, the block returns to the free pool of the stream it
was allocated on, and the next allocation of the same shape and dtype on that stream
gets it back at once, with no ordering against other streams that may still use it
(unless :meth:`SimArray.record_stream` said so).

Host calls issue work and return at once, as on a GPU; only the synchronise calls
(and :meth:`SimBackend.download`) make the host wait, and that is when pending work runs.
The backend is thread-safe; the current device and stream are per thread, as in torch.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from .._env import SANITIZE_MEANING as _SANITIZE_MEANING, env_flag
from .._dlpack import DLPACK_CUDA
from ..backend.naming import as_stream
from .clocks import HOST, ActorId, SeqNum, VectorClock, is_ordered_after
from ..errors import ArgumentError, CudaDriverError, DeviceMismatchError, RaceError, StreamValueError, another_models_array
from .races import Access, AccessKind, Race, find_race
from ..streams import LEGACY_HANDLE, PER_THREAD_HANDLE, Stream, StreamKind, implicitly_ordered
from ..streams import thread_token as _thread_token
from ..backend._pool import EventPool, EventPoolStats
from .schedule import InOrderScheduler, Scheduler, make_scheduler

__all__ = ["SimBackend", "SimEvent", "SimBuffer", "SimArray", "SimCapsule", "Op", "sanitize_everywhere", "collecting_races"]

_SANITIZE_ALL = 0
"""How many ``ss.sanitize()`` blocks without a backend are open: every model raises at a race then."""


@contextlib.contextmanager
def sanitize_everywhere() -> Iterator[None]:
    """Inside the block every :class:`SimBackend` raises at a race (``ss.sanitize()`` without a backend)."""
    global _SANITIZE_ALL
    _SANITIZE_ALL += 1
    try:
        yield
    finally:
        _SANITIZE_ALL -= 1

_RACE_SINKS: list[list[Any]] = []
"""Lists that hear of every race any model finds (:func:`collecting_races`); empty almost always."""


@contextlib.contextmanager
def collecting_races() -> Iterator[list[Any]]:
    """Inside the block, every race any :class:`SimBackend` finds, also one the program made itself,
    is appended to the list yielded (as well as to that model's own ``races``)."""
    sink: list[Any] = []
    _RACE_SINKS.append(sink)
    try:
        yield sink
    finally:
        _RACE_SINKS.remove(sink)

_HANDLE_BASE = 0x7F00_0000_1000
_POISON = 0xDEAD

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _entry(method: Callable[Concatenate[SimBackend, _P], _R]) -> Callable[Concatenate[SimBackend, _P], _R]:
    """A public entry point: runs under the backend's lock, after handing freed blocks back to the pool."""

    @functools.wraps(method)
    def locked(self: SimBackend, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            return method(self, *args, **kwargs)

    return locked
# The hot entry points (launch, record, wait, fence) spell the same two lines out: no wrapper call.


@dataclass(eq=False)
class SimBuffer:
    """Device memory in the model: a numpy array and the accesses that may still race.

    ``freed`` is set by :meth:`SimBackend.free` (``freed_by`` names that release); any
    later access is reported as a use after free.
    """

    name: str
    data: np.ndarray
    device: int
    freed: bool = False
    history: list[Access] = field(default_factory=list, repr=False)
    freed_by: Access | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"SimBuffer({self.name!r}, shape={self.data.shape}, dtype={self.data.dtype}, device={self.device})"


@dataclass(eq=False, slots=True)
class Op:
    """One issued operation (kernel, copy, event record or wait) or host access.

    ``deps`` are the operations it waits for that had not run when it was issued;
    they (and ``fn``) are dropped once it has run, so finished work holds nothing.
    """

    index: int
    name: str
    actor: ActorId
    where: str
    seq: SeqNum
    clock: VectorClock
    deps: tuple[Op, ...]
    reads: tuple[SimBuffer, ...] = ()
    writes: tuple[SimBuffer, ...] = ()
    fn: Callable[[], None] | None = None
    device: int = 0
    done: bool = False
    waiting: int = field(default=0, repr=False)
    dependents: list[Op] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Op(#{self.index} {self.name!r} on {self.where}{', done' if self.done else ''})"


class SimEvent:
    """An event in the model: remembers its latest record (an :class:`Op`) and that record's clock, and
    the model it belongs to (another model's event is refused: its clock would name this model's streams)."""

    __slots__ = ("device", "record_op", "clock", "_model", "__weakref__")

    def __init__(self, device: int, model: SimBackend | None = None) -> None:
        self.device = device
        self.record_op: Op | None = None
        self.clock = VectorClock()
        self._model = weakref.ref(model) if model is not None else None

    def __repr__(self) -> str:
        return f"SimEvent(device={self.device}, record={self.record_op!r})"


@dataclass(eq=False)
class _StreamState:
    stream: Stream
    seq: SeqNum = 0
    clock: VectorClock = field(default_factory=VectorClock)
    last: Op | None = None
    where: str = ""
    key: tuple[int, ...] = (0, 0)
    index: int = 0
    """Its place among its device's streams (the order the legacy stream joins them in)."""
    legacy_peer: bool = False
    """The legacy stream of its device is implicitly ordered after its work (a blocking or per-thread stream)."""


class _Lease:
    """One allocation of the caching allocator, shared by every :class:`SimArray` of it
    (views made by ``from_dlpack``, capsules). When the last one is gone, a finalizer hands
    the block back to the pool of ``stream``. Pending operations hold the buffer, never this."""

    __slots__ = ("buffer", "stream", "recorded", "__weakref__")

    def __init__(self, buffer: SimBuffer, stream: Stream) -> None:
        self.buffer = buffer
        self.stream = stream
        self.recorded: set[Stream] = set()


class SimCapsule:
    """What a simulated producer's ``__dlpack__`` returns: importable once, like a PyCapsule.

    ``name`` follows the DLPack convention: ``"dltensor"`` (or ``"dltensor_versioned"``)
    until consumed, then ``"used_dltensor"`` (``"used_dltensor_versioned"``).
    """

    __slots__ = ("_array", "versioned", "_consumed", "view_of")

    def __init__(self, array: Any, *, versioned: bool = False) -> None:
        self._array = array
        self.versioned = versioned
        self._consumed = False
        self.view_of: Any = None
        """``(weak reference to a ledger, generation)`` when it is a guarded effect's output: an array the
        model imports from it is a view of that run's output (H7 when used after the next run)."""

    @property
    def name(self) -> str:
        base = "dltensor_versioned" if self.versioned else "dltensor"
        return f"used_{base}" if self._consumed else base

    @property
    def consumed(self) -> bool:
        return self._consumed

    @property
    def __streamsafe_key__(self) -> Any:
        """The memory it points at (the array's buffer), read without consuming it."""
        return self._array.buffer

    @property
    def array(self) -> Any:
        """The array it exports, while not consumed (``None`` after): the memory an importer gets."""
        return None if self._consumed else self._array

    def consume(self) -> Any:
        """Take the tensor out; a second call raises :class:`BufferError` as a real capsule does."""
        if self._consumed:
            raise BufferError(
                f"this DLPack capsule was already imported (its name is now {self.name!r}); a capsule "
                "can be consumed once. Import it once and copy the result, or ask the producer for a new capsule."
            )
        self._consumed = True
        return self._array

    def __repr__(self) -> str:
        return f"<SimCapsule {self.name!r}>"



class SimArray:
    """A CUDA array in the model, with the DLPack producer protocol of a torch tensor.

    ``__dlpack__(stream=s)`` makes ``s`` wait for the model's current stream (the
    producing framework's stream), as torch does; ``stream=None`` means, like torch 2.11,
    no synchronisation at all (``dlpack_none="no-sync"``) or, like the DLPack standard,
    the legacy stream (``dlpack_none="legacy"``).

    Arrays made by :meth:`SimBackend.empty` (and views and capsules of them) share one
    allocation; when the last is gone its memory returns to the allocator's pool.
    """

    def __init__(
        self, backend: SimBackend, buffer: SimBuffer, *, dlpack_none: str = "no-sync", lease: _Lease | None = None
    ) -> None:
        if dlpack_none not in ("no-sync", "legacy"):
            raise ValueError(f"dlpack_none must be 'no-sync' or 'legacy', got {dlpack_none!r}")
        self.backend = backend
        self.buffer = buffer
        self.dlpack_none = dlpack_none
        self._lease = lease
        self._view_of: tuple[Any, int] | None = None
        """``(weak reference to a ledger, generation)`` for a zero-copy view of a guarded effect's output."""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.buffer.data.shape)

    @property
    def __streamsafe_key__(self) -> SimBuffer:
        """What identifies its memory: the buffer (shared by every view of one allocation)."""
        return self.buffer

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.buffer.data.dtype

    @property
    def device(self) -> int:
        return self.buffer.device

    @property
    def ndim(self) -> int:
        return self.buffer.data.ndim

    def record_stream(self, stream: Any) -> None:
        """Like ``torch.Tensor.record_stream``: the memory is in use on ``stream`` too.

        When the allocation is freed, an event is recorded on ``stream`` and the block is not
        handed out again before that event has completed. Does not block; orders nothing now.
        A no-op for the allocation stream and for memory the allocator does not own.
        """
        self.backend._record_stream(self, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self.buffer.device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> SimCapsule:
        """Export as a capsule; orders ``stream`` after the producer's current stream. Does not block."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"SimArray lives on {self.__dlpack_device__()}, cannot export to {dl_device}")
        if copy:
            raise BufferError("SimArray cannot copy during export (copy=True); import with copy=False, then copy")
        if stream == 0:
            raise ValueError("stream=0 is ambiguous for CUDA in DLPack; pass 1 for the legacy stream or 2 for per-thread")
        if stream is None and self.dlpack_none == "legacy":
            stream = LEGACY_HANDLE
        if stream is not None and stream != -1:
            consumer = as_stream(stream, device=self.device, backend=self.backend)
            producer = self.backend.current_stream(self.device)
            if consumer != producer:
                self.backend.fence(consumer, producer)
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return SimCapsule(self, versioned=versioned)

    def numpy(self) -> np.ndarray:
        """A host copy, ordered after the current stream (like ``tensor.cpu()``). Blocks the host."""
        return self.backend.download(self)

    def __repr__(self) -> str:
        return f"SimArray({self.buffer.name!r}, shape={self.shape}, dtype={self.dtype}, device={self.device})"


_FreeBlock = tuple[SimBuffer, list[SimEvent]]
_PoolKey = tuple[tuple[int, int], tuple[int, ...], str]


def _pool_stream(stream: Stream) -> tuple[int, int]:
    """The allocator's key for the pool of ``stream``: device and handle. Torch's allocator and CuPy's pool
    know a stream by its handle, so every thread's per-thread stream (2) shares one pool, and a block a
    thread freed there goes to another thread's allocation on its own per-thread stream unordered."""
    return (stream.device, stream.handle)


class SimBackend:
    """The model of CUDA ordering. ``scheduler`` may be a name (``"in-order"``, the default: work runs
    in issue order, so a missing fence rarely changes a frame; ``"adversarial"``: ready work runs in the
    order that breaks a missing fence; ``"random"``, seeded by ``seed``) or a :class:`Scheduler`. Every
    scheduler reports every unordered pair in :attr:`races`.

    ``on_race="record"`` appends reports to :attr:`races`; ``"raise"`` raises
    :class:`~streamsafe.errors.RaceError` at the access that races, once that access is
    fully issued (the program may catch it and go on). ``max_pending`` bounds the
    operations waiting to run. Thread-safe; the current device and stream are per thread.
    """

    name = "sim"
    records_accesses = True
    framework_streams = False
    private_handles = True
    array_type: type | None = SimArray
    host_array_fix = "On the simulated backend (this effect's): sim.array(x), a device copy, or sim.empty(shape, dtype) and a kernel."

    @property
    def sanitizing(self) -> bool:
        """Whether races raise at once (``on_race="raise"``, or an ``ss.sanitize()`` block without a backend)."""
        return self.on_race == "raise" or _SANITIZE_ALL > 0

    def __init__(
        self,
        *,
        devices: int = 1,
        scheduler: Scheduler | str | None = None,
        seed: int | None = 0,
        on_race: str = "record",
        max_free_events: int = 64,
        max_pending: int = 1024,
    ) -> None:
        count: Any = devices
        if isinstance(count, bool) or not hasattr(count, "__index__") or count.__index__() < 1:
            raise ArgumentError(f"devices={devices!r} is invalid: the model's number of GPUs must be an int of at least 1; "
                             "e.g. SimBackend(devices=2)")
        devices = count.__index__()
        if on_race not in ("record", "raise"):
            raise ValueError(f"on_race must be 'record' or 'raise', got {on_race!r}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        if scheduler is None:
            scheduler = InOrderScheduler()
        elif isinstance(scheduler, str):
            scheduler = make_scheduler(scheduler, seed)
        self.scheduler: Scheduler = scheduler
        if env_flag("STREAMSAFE_SANITIZE", False, _SANITIZE_MEANING):
            on_race = "raise"  # sanitize mode for the whole process
        self.on_race = on_race
        self.max_pending = max_pending
        self.races: list[Race] = []
        self._lock = threading.RLock()
        self._local = threading.local()
        self._devices = devices
        self._counter = itertools.count()
        self._handles = itertools.count()
        self._streams: dict[tuple[int, ...], _StreamState] = {}
        self._by_handle: dict[int, dict[int, _StreamState]] = {}  # handle -> device -> state (no key tuple per lookup)
        self._by_device: dict[int, list[_StreamState]] = {dev: [] for dev in range(devices)}
        self._unseen: dict[int, dict[int, _StreamState]] = {dev: {} for dev in range(devices)}
        """Per device, by index: the legacy stream's peers with work issued since its last operation."""
        self._legacy: dict[int, _StreamState] = {}
        self._pending: dict[int, Op] = {}  # by issue number, in issue order
        self._ready: dict[int, Op] = {}  # the pending operations whose dependencies have all run
        self._host_seq = 0
        self._host_clock = VectorClock()
        self._stream_pool: dict[tuple[int, bool], list[Stream]] = {}
        self._unordered: list[tuple[int, Op]] = []  # (earlier op's index, later op) of reported races
        self._pool: EventPool[SimEvent] = EventPool(lambda device: SimEvent(device, self), lambda e: None, max_free_events)
        self._released: collections.deque[tuple[SimBuffer, Stream, set[Stream], int]] = collections.deque()
        self._draining = False
        self._free_blocks: dict[_PoolKey, list[_FreeBlock]] = {}
        self.stats = {"fences": 0, "host_waits": 0, "ops_run": 0, "reused_blocks": 0}
        self.trace: list[dict[str, Any]] | None = None
        """Set to a list to record the order operations ran in (for timelines)."""
        self._per_thread: dict[tuple[int, int], _StreamState] = {}  # (device, thread) -> that thread's default stream
        for dev in range(devices):
            self._add_state(_StreamState(Stream(dev, LEGACY_HANDLE, StreamKind.LEGACY, self)))

    def _add_state(self, state: _StreamState) -> None:
        state.where = str(state.stream)
        state.key = state.stream.key
        self._streams[state.key] = state
        if state.stream.kind is StreamKind.PER_THREAD:
            self._per_thread[(state.stream.device, state.stream.thread)] = state
        else:
            self._by_handle.setdefault(state.stream.handle, {})[state.stream.device] = state
        state.index = len(self._by_device[state.stream.device])
        self._by_device[state.stream.device].append(state)
        if state.stream.kind is StreamKind.LEGACY:
            self._legacy[state.stream.device] = state
        else:
            state.legacy_peer = implicitly_ordered(self._legacy[state.stream.device].stream, state.stream)

    def _per_thread_state(self, device: int) -> _StreamState:
        """The calling thread's per-thread default stream of ``device`` (made on its first use, as CUDA
        makes it when a thread first names handle 2)."""
        thread = getattr(self._local, "acting_thread", 0) or _thread_token()
        state = self._per_thread.get((device, thread))
        if state is None:
            self._check_device(device, "the per-thread stream")
            with self._lock:
                state = self._per_thread.get((device, thread))
                if state is None:
                    stream = Stream(device, PER_THREAD_HANDLE, StreamKind.PER_THREAD, self, thread)
                    state = _StreamState(stream, clock=self._host_clock)
                    self._add_state(state)
        return state

    # -- devices and streams --------------------------------------------------------------------

    def device_count(self) -> int:
        return self._devices

    def current_device(self) -> int:
        """This thread's current device (set with :meth:`device`), else 0."""
        return getattr(self._local, "device", 0)  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def device(self, device: int) -> Iterator[None]:
        """Make ``device`` current in this thread inside the block (like ``torch.cuda.device``)."""
        self._check_device(device)
        saved = self.current_device()
        self._local.device = device
        try:
            yield
        finally:
            self._local.device = saved

    def _check_device(self, device: int, what: str = "a new stream") -> None:
        if isinstance(device, bool) or not isinstance(device, int):
            raise StreamValueError(
                f"{what} of device {device!r}", f"a device is named by its number (an int), not a {type(device).__name__}",
                f"Pass device={device if not isinstance(device, str) or not device.isdigit() else int(device)} as an int "
                f"(0 to {self._devices - 1}).",
            )
        if not 0 <= device < self._devices:
            raise StreamValueError(
                f"{what} of device {device}",
                f"the model has {self._devices} device(s), numbered 0 to {self._devices - 1}",
                f"Pick one of them, or make the model with more: SimBackend(devices={max(2, device + 1)}).",
            )

    @_entry
    def create_stream(self, *, non_blocking: bool = False, device: int | None = None) -> Stream:
        """A new stream (blocking unless ``non_blocking``), like ``cuStreamCreate``."""
        dev = self.current_device() if device is None else device
        self._check_device(dev)
        handle = _HANDLE_BASE + 0x100 * next(self._handles)
        kind = StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING
        stream = Stream(dev, handle, kind, self)
        self._add_state(_StreamState(stream, clock=self._host_clock))
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        """Forget nothing: the model keeps a stream's history for its race reports."""

    @_entry
    def acquire_stream(self, device: int, *, non_blocking: bool = False) -> Stream:
        """A stream from the pool (created when none is free), as on the driver backend."""
        free = self._stream_pool.setdefault((device, non_blocking), [])
        return free.pop() if free else self.create_stream(non_blocking=non_blocking, device=device)

    @_entry
    def release_stream(self, stream: Stream) -> None:
        self._stream_pool.setdefault((stream.device, stream.kind is StreamKind.NON_BLOCKING), []).append(stream)

    def legacy_stream(self, device: int = 0) -> Stream:
        """The legacy default stream (stream 0) of ``device``: it waits for, and is waited for by, every
        blocking stream of the device. Does not block."""
        try:
            return self._streams[(device, LEGACY_HANDLE)].stream
        except KeyError:
            self._check_device(device, "the legacy stream")  # raises: a device the model does not have
            raise

    @contextlib.contextmanager
    def acting_as(self, thread: int) -> Iterator[None]:
        """Inside the block, work this thread issues on a per-thread stream goes to the per-thread stream of
        ``thread`` (a :func:`~streamsafe.streams.thread_token`; 0: this thread's), as if that thread issued
        it: what a recorder of another thread's work needs (torch's allocator recording its events in the
        thread that freed a block; sanitize mode replaying a producer thread's writes)."""
        saved = getattr(self._local, "acting_thread", 0)
        self._local.acting_thread = thread
        try:
            yield
        finally:
            self._local.acting_thread = saved

    def per_thread_stream(self, device: int = 0) -> Stream:
        """The calling thread's per-thread default stream of ``device`` (DLPack's ``2``): it does not
        synchronise with other blocking streams (H11), nor with other threads' per-thread streams. As
        in CUDA, work issued on a per-thread stream goes to the stream of the thread that issues it,
        whichever thread named the stream. Does not block."""
        return self._per_thread_state(device).stream

    @_entry
    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` of a stream created by this model; unknown handles fail like the driver."""
        for state in self._streams.values():
            if state.stream.handle == handle:
                return state.stream.device, state.stream.kind is StreamKind.NON_BLOCKING
        raise CudaDriverError(
            "cuStreamGetFlags",
            400,
            "CUDA_ERROR_INVALID_HANDLE",
            "invalid resource handle",
            f"Is {handle:#x} a stream of this SimBackend?",
        )

    def _current(self) -> dict[int, Stream]:
        try:
            return self._local.current  # type: ignore[no-any-return]
        except AttributeError:
            current: dict[int, Stream] = {}
            self._local.current = current
            return current

    def current_stream(self, device: int | None = None) -> Stream:
        """This thread's current stream (set with :meth:`use_stream`), else the legacy stream. A per-thread
        stream made current is this thread's, whichever thread named it (as torch's current stream of
        handle 2 is, read in each thread)."""
        dev = self.current_device() if device is None else device
        stream = self._current().get(dev)
        if stream is None:
            return self.legacy_stream(dev)
        if stream.thread and stream.thread != _thread_token():
            return self.per_thread_stream(stream.device)
        return stream

    @contextlib.contextmanager
    def use_stream(self, stream: Stream) -> Iterator[Stream]:
        """Make ``stream`` the current stream of its device in this thread inside the block
        (like ``torch.cuda.stream``; other threads keep theirs)."""
        stream = as_stream(stream, backend=self)
        current = self._current()
        saved = current.get(stream.device)
        current[stream.device] = stream
        try:
            yield stream
        finally:
            if saved is None:
                current.pop(stream.device, None)
            else:
                current[stream.device] = saved

    def _state(self, stream: Stream) -> _StreamState:
        if stream.kind is StreamKind.PER_THREAD:  # handle 2: the issuing thread's stream (CUDA's rule)
            state: _StreamState | None = self._per_thread_state(stream.device)
        else:
            by_device = self._by_handle.get(stream.handle)
            state = by_device.get(stream.device) if by_device is not None else None
        if state is None or (stream.backend is not self and stream.backend is not None):
            raise StreamValueError(stream, "the stream does not belong to this SimBackend", "Create it with create_stream().")
        return state

    # -- memory -------------------------------------------------------------------------------------

    @_entry
    def empty(
        self,
        shape: Sequence[int] | int,
        dtype: Any = np.float32,
        *,
        device: int | None = None,
        name: str = "",
        stream: Stream | None = None,
    ) -> SimArray:
        """Device memory from the caching allocator, allocated on ``stream`` (default: this
        thread's current stream of the device). Does not block.

        A fresh block is filled with a poison pattern (never zeros). A block freed earlier on
        the same stream with the same shape and dtype is handed back as it is (its data and its
        access history kept), with no ordering against other streams that may still use it,
        as torch's caching allocator and CuPy's pool do; see :meth:`SimArray.record_stream`.
        """
        if stream is not None:
            alloc = self._state(as_stream(stream, backend=self)).stream
            if device is not None and device != alloc.device:
                raise DeviceMismatchError("allocation stream", alloc, alloc.device, device, "Allocate on a stream of that device.")
            dev = alloc.device
        else:
            dev = self.current_device() if device is None else device
            self._check_device(dev)
            alloc = self.current_stream(dev)
        dt = np.dtype(dtype)
        dims = _dims(shape)
        label = name or f"buf{next(self._handles)}"
        buf = self._reuse((_pool_stream(alloc), dims, dt.str))
        if buf is None:
            data = np.empty(dims, dtype=dt)
            _poison(data)
            buf = SimBuffer(label, data, dev)
        else:
            buf.name = label
            self.stats["reused_blocks"] += 1
        lease = _Lease(buf, alloc)
        done = weakref.finalize(lease, self._on_free, buf, alloc, lease.recorded)
        done.atexit = False
        return SimArray(self, buf, lease=lease)

    @_entry
    def malloc(self, shape: Sequence[int] | int, dtype: Any = np.float32, *, device: int | None = None, name: str = "") -> SimArray:
        """Device memory outside the caching allocator, like ``cudaMalloc`` (what an SDK allocates its
        own buffers with): a fresh poisoned block that no stream's pool hands out or takes back, so no
        freed block of the program's, with work still pending on it, can become it. Release it with
        :meth:`free`. Does not block."""
        dev = self.current_device() if device is None else device
        self._check_device(dev)
        data = np.empty(_dims(shape), dtype=np.dtype(dtype))
        _poison(data)
        return SimArray(self, SimBuffer(name or f"buf{next(self._handles)}", data, dev), lease=None)

    def _reuse(self, key: _PoolKey) -> SimBuffer | None:
        """The most recently freed block of ``key`` whose recorded streams' events have completed."""
        blocks = self._free_blocks.get(key)
        if not blocks:
            return None
        for i in range(len(blocks) - 1, -1, -1):
            buf, events = blocks[i]
            if all(self._completed(event) for event in events):
                del blocks[i]
                # The allocator saw those streams' work on the block finish: the block's accesses before
                # them are retired (the new owner's accesses are not checked against them). The program
                # learns nothing from it: the host clock does not move, so its other buffers keep every
                # race they had (whether the allocator's query succeeds is timing, not ordering).
                buf.history = [a for a in buf.history if not any(is_ordered_after(e.clock, a.actor, a.seq) for e in events)]
                for event in events:
                    self._pool.release(event.device, event)
                return buf
        return None

    def _on_free(self, buf: SimBuffer, alloc: Stream, recorded: set[Stream]) -> None:
        """The last array object of a block went, in this thread (the one whose ``record_stream`` events
        torch's allocator records: a per-thread stream among them is this thread's)."""
        self._released.append((buf, alloc, recorded, _thread_token()))

    def _drain_released(self) -> None:
        """Hand blocks whose last array object is gone back to their stream's pool (at a safe
        point: the start of a public call). Records an event on each stream the block was
        recorded on, as torch's allocator does when it frees the block."""
        self._draining = True
        try:
            while self._released:
                buf, alloc, recorded, thread = self._released.popleft()
                if buf.freed:
                    continue  # released by free(): the SDK's memory, never pooled
                events = []
                with self.acting_as(thread):  # (a per-thread stream here is the freeing thread's)
                    for stream in recorded:
                        event = self._pool.acquire(stream.device)
                        self._record(event, stream)
                        events.append(event)
                key = (_pool_stream(alloc), tuple(buf.data.shape), buf.data.dtype.str)
                self._free_blocks.setdefault(key, []).append((buf, events))
        finally:
            self._draining = False

    @_entry
    def _record_stream(self, array: SimArray, stream: Any) -> None:
        lease = array._lease
        if lease is None:
            return
        s = self._state(as_stream(stream, device=array.device, backend=self)).stream
        if s.device != array.device:
            raise DeviceMismatchError("record_stream", s, s.device, array.device, "Record a stream of the array's device.")
        if s != lease.stream:
            lease.recorded.add(s)

    @_entry
    def empty_cache(self) -> int:
        """Drop the pooled free blocks whose recorded events have completed; returns how many.
        (Like ``torch.cuda.empty_cache``.) Does not block."""
        dropped = 0
        for key, blocks in list(self._free_blocks.items()):
            keep = []
            for buf, events in blocks:
                if all(self._completed(event) for event in events):
                    for event in events:
                        self._pool.release(event.device, event)
                    dropped += 1
                else:
                    keep.append((buf, events))
            if keep:
                self._free_blocks[key] = keep
            else:
                del self._free_blocks[key]
        return dropped

    @_entry
    def array(
        self, values: Any, *, dtype: Any = None, device: int | None = None, name: str = "", stream: Stream | None = None
    ) -> SimArray:
        """New device memory holding ``values``, allocated on ``stream`` (default: current).

        Like ``torch.tensor(values, device="cuda")``: an upload the host waits for, ordered
        after the work issued so far on the allocation stream. Blocks the host.
        """
        host = np.array(values, dtype=dtype)
        arr = self.empty(host.shape, host.dtype, device=device, name=name, stream=stream)
        alloc = arr._lease.stream if arr._lease is not None else self.current_stream(arr.device)
        state = self._state(alloc)
        last = state.last
        if last is not None and not last.done:
            self._run_until(lambda: last.done)
        self._host_clock = self._host_clock.join(state.clock)
        buf = arr.buffer
        self.host_access(f"upload {buf.name}", writes=[buf], fn=lambda: np.copyto(buf.data, host))
        return arr

    @_entry
    def free(self, array: SimArray | SimBuffer, *, name: str = "") -> None:
        """Release memory from the host with no stream ordering (like the SDK on close/resize).

        A host write: the memory is poisoned at once, so an unfenced pending reader reads garbage;
        any later access is reported as a use after free. Never returned to the allocator's pool.
        """
        buf = array.buffer if isinstance(array, SimArray) else array

        def poison() -> None:
            _poison(buf.data)
            buf.freed = True

        op, found = self._host_op(name or f"free {buf.name}", (), (buf,), poison)
        if buf.freed_by is None:
            buf.freed_by = Access(op.name, "write", op.actor, op.where, op.seq, op.clock, op.index)
        if found:
            self._report(found)

    # -- issuing work -------------------------------------------------------------------------------

    def launch(
        self,
        stream: Stream,
        name: str,
        fn: Callable[[], None] | None = None,
        *,
        reads: Iterable[SimArray | SimBuffer] = (),
        writes: Iterable[SimArray | SimBuffer] = (),
    ) -> Op:
        """Issue a kernel on ``stream`` that reads/writes the given buffers when it runs. Does not block."""
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            reads, writes = tuple(reads), tuple(writes)
            stale = _stale_views(reads, writes)
            op = self._issue(stream, name, fn, _buffers(reads), _buffers(writes))
            if stale:
                self._report_stale(op, stale)
            return op

    @_entry
    def copy(self, src: SimArray, stream: Stream | None = None, *, name: str = "") -> SimArray:
        """Issue a device-to-device copy of ``src`` on ``stream`` (default: current); returns the copy,
        allocated on that stream. Does not block."""
        stream = self.current_stream(src.device) if stream is None else stream
        dst = self.empty(src.shape, src.dtype, device=src.device, name=name or f"copy of {src.buffer.name}", stream=stream)
        s, d = src.buffer, dst.buffer  # pending work holds the memory, not the arrays (launch keeps only buffers)
        self.launch(stream, name or f"copy {s.name}", lambda: np.copyto(d.data, s.data), reads=[src], writes=[d])
        return dst

    @_entry
    def fill(self, array: SimArray, value: Any, stream: Stream | None = None, *, name: str = "") -> Op:
        """Issue a kernel on ``stream`` that sets every element of ``array`` to ``value``. Does not block."""
        stream = self.current_stream(array.device) if stream is None else stream
        buf = array.buffer
        return self.launch(stream, name or f"fill {buf.name}", lambda: buf.data.fill(value), writes=[array])

    @_entry
    def download(self, array: SimArray, stream: Stream | None = None) -> np.ndarray:
        """Copy ``array`` to the host on ``stream`` (default: current) and wait for it. Blocks the host."""
        stream = self.current_stream(array.device) if stream is None else stream
        buf = array.buffer
        out = np.empty_like(buf.data)
        op = self.launch(stream, f"download {buf.name}", lambda: np.copyto(out, buf.data), reads=[array])
        self._run_until(lambda: op.done)
        self._host_join(op.clock)
        return out

    @_entry
    def host_access(
        self,
        name: str,
        *,
        reads: Iterable[SimArray | SimBuffer] = (),
        writes: Iterable[SimArray | SimBuffer] = (),
        fn: Callable[[], None] | None = None,
    ) -> Op:
        """A read or write the host makes now (e.g. freeing a buffer); runs at once."""
        reads, writes = tuple(reads), tuple(writes)
        stale = _stale_views(reads, writes)
        op, found = self._host_op(name, _buffers(reads), _buffers(writes), fn)
        if found:
            self._report(found)
        if stale:
            self._report_stale(op, stale)
        return op

    def _report_stale(self, op: Op, stale: list[tuple[SimArray, AccessKind, Any, int]]) -> None:
        """Report each use of a view of an effect's output that the effect's next run overwrote (H7)."""
        found = []
        for array, kind, ledger, generation in stale:
            run = Access(f"{ledger.name}'s run #{ledger.generation} (the view is of run #{generation})", "write", HOST,
                         "the SDK", 0, VectorClock(), -1)
            found.append(Race(array.buffer.name, run, Access(op.name, kind, op.actor, op.where, op.seq, op.clock, op.index),
                              kind="stale-view"))
        self.races.extend(found)
        for sink in _RACE_SINKS:
            sink.extend(found)
        self._report(found)

    def _host_op(
        self, name: str, reads: tuple[SimBuffer, ...], writes: tuple[SimBuffer, ...], fn: Callable[[], None] | None
    ) -> tuple[Op, list[Race] | None]:
        self._host_seq += 1
        clock = self._host_clock.advanced(HOST, self._host_seq)
        self._host_clock = clock
        op = Op(next(self._counter), name, HOST, "host", self._host_seq, clock, (), reads, writes, fn)
        found = self._record_accesses(op)
        self._execute(op)
        return op, found

    def _issue(
        self,
        stream: Stream,
        name: str,
        fn: Callable[[], None] | None,
        reads: tuple[SimBuffer, ...] = (),
        writes: tuple[SimBuffer, ...] = (),
        *,
        after: SimEvent | None = None,
    ) -> Op:
        """Issue an operation: pending, its stream's last, its accesses recorded; then report races.

        (Split in small steps: the model's hot path, also under ``tracemalloc``, whose cost per
        allocation grows with the allocating function's length.)
        """
        state = self._state(stream)
        if reads or writes:
            self._check_buffers(stream, name, reads, writes)
        op = state.last = self._new_op(state, name, fn, reads, writes, after)
        self._enqueue(op)
        found = self._record_accesses(op) if reads or writes else None
        steps = self.scheduler.eager_steps(len(self._ready))
        if steps:
            self._progress(steps)
        if len(self._pending) > self.max_pending:
            self._bound_pending()
        if found:
            self._report(found)
        return op

    @staticmethod
    def _check_buffers(stream: Stream, name: str, reads: tuple[SimBuffer, ...], writes: tuple[SimBuffer, ...]) -> None:
        for buf in (*reads, *writes):
            if buf.device != stream.device:
                raise DeviceMismatchError(
                    f"buffer used by {name!r}", buf.name, buf.device, stream.device, "Copy it to the stream's device first."
                )

    def _new_op(
        self,
        state: _StreamState,
        name: str,
        fn: Callable[[], None] | None,
        reads: tuple[SimBuffer, ...],
        writes: tuple[SimBuffer, ...],
        after: SimEvent | None,
    ) -> Op:
        """The next operation of ``state``'s stream: what it waits for, and its clock."""
        last = state.last
        deps: tuple[Op, ...] = (last,) if last is not None and not last.done else ()
        extra: list[VectorClock] | None = None
        if state.stream.kind is not StreamKind.NON_BLOCKING:
            deps, extra = self._implicit_deps(state, deps)
        if after is not None and after.record_op is not None:
            waited = after.record_op
            if not waited.done and waited not in deps:
                deps = (*deps, waited)
            extra = [after.clock] if extra is None else [*extra, after.clock]
        state.seq += 1
        clock = state.clock.joined_and_advanced(self._host_clock, extra, state.key, state.seq)
        state.clock = clock
        if state.legacy_peer:
            self._unseen[state.stream.device][state.index] = state
        elif state.stream.kind is StreamKind.LEGACY:
            self._unseen[state.stream.device].clear()  # (each one joined now, or known already)
        return Op(next(self._counter), name, state.key, state.where, state.seq, clock, deps, reads, writes, fn, state.stream.device)

    def _implicit_deps(self, state: _StreamState, deps: tuple[Op, ...]) -> tuple[tuple[Op, ...], list[VectorClock] | None]:
        extra: list[VectorClock] | None = None
        for other in self._implicit_peers(state):
            if other.last is not None:
                if not other.last.done and other.last not in deps:
                    deps = (*deps, other.last)
                extra = [other.clock] if extra is None else [*extra, other.clock]
        return deps, extra

    def _enqueue(self, op: Op) -> None:
        self._pending[op.index] = op
        if not op.deps:
            self._ready[op.index] = op
            return
        op.waiting = len(op.deps)
        for dep in op.deps:
            if dep.dependents is None:
                dep.dependents = [op]
            else:
                dep.dependents.append(op)

    def _implicit_peers(self, state: _StreamState) -> Iterable[_StreamState]:
        """The other streams of the device whose earlier work CUDA orders ``state``'s next work after."""
        stream = state.stream
        if stream.kind is not StreamKind.LEGACY:
            return (self._legacy[stream.device],) if state.legacy_peer else ()  # (the order is mutual)
        # A peer with no work since the legacy stream last learnt of its last operation adds nothing: the
        # legacy stream's clock holds that operation's clock, and its last operation waits for it. (Exact,
        # and what keeps a thread-per-request program from slowing as its threads' streams pile up.) Only
        # a peer that has issued since the legacy stream's last operation can have such work (_unseen).
        unseen = self._unseen[stream.device]
        if not unseen:
            return ()
        known = state.clock._entries
        return [o for _, o in sorted(unseen.items()) if o.seq > known.get(o.key, 0)]

    def _every_implicit_peer(self, state: _StreamState) -> Iterable[_StreamState]:
        """:meth:`_implicit_peers` without leaving out the streams with nothing new: what the model joined
        before (the reference ``tests/test_model_many_threads.py`` compares against, and
        ``benchmarks/model_threads.py`` times)."""
        stream = state.stream
        if stream.kind is not StreamKind.LEGACY:
            return (self._legacy[stream.device],) if state.legacy_peer else ()
        return [o for o in self._by_device[stream.device] if o is not state and implicitly_ordered(stream, o.stream)]

    # -- happens-before ------------------------------------------------------------------------------

    def _record_accesses(self, op: Op) -> list[Race] | None:
        """Check ``op``'s accesses against each buffer's history and add them to it; returns the races.

        A history keeps only what may still race: an access the host knows complete can race
        with nothing later (every later access joins the host clock); an earlier access that a
        new write is ordered after, or an earlier read that a new read is ordered after, is
        superseded (whatever is ordered after the new access is ordered after it, and whatever
        is not conflicts with the new access itself). Every race keeps one report naming both sides.
        """
        found: list[Race] | None = None
        for buf in op.reads:
            found = self._check_access(op, "read", buf, found)
        for buf in op.writes:
            found = self._check_access(op, "write", buf, found)
        if found:
            if op.actor != HOST:
                self._unordered += [(race.first.op_index, op) for race in found if race.kind == "unordered"]
            self.races.extend(found)
            for sink in _RACE_SINKS:
                sink.extend(found)
        return found

    def _check_access(self, op: Op, kind: AccessKind, buf: SimBuffer, found: list[Race] | None) -> list[Race] | None:
        access = Access(op.name, kind, op.actor, op.where, op.seq, op.clock, op.index)
        if buf.freed:
            found = found if found is not None else []
            found.append(Race(buf.name, buf.freed_by or _UNKNOWN_RELEASE, access, kind="use-after-free"))
        history = buf.history
        host = self._host_clock
        racing: list[Access] | None = None
        for i in range(len(history) - 1, -1, -1):  # backwards: entries may be deleted in place
            previous = history[i]
            if is_ordered_after(host, previous.actor, previous.seq):
                del history[i]  # the host knows it complete
            elif find_race(previous, access):
                racing = [previous] if racing is None else [previous, *racing]
            elif (kind == "write" or previous.kind == "read") and is_ordered_after(op.clock, previous.actor, previous.seq):
                del history[i]  # superseded by the new access
        history.append(access)
        if racing is not None:
            found = found if found is not None else []
            found += [Race(buf.name, previous, access) for previous in racing]
        return found

    def _report(self, found: list[Race]) -> None:
        if found and (self.on_race == "raise" or _SANITIZE_ALL):
            raise RaceError(found)

    @_entry
    def take_races(self) -> list[Race]:
        """The races reported so far, clearing the list."""
        races, self.races = self.races, []
        return races

    def _host_join(self, clock: VectorClock) -> None:
        # Every later access joins the host clock, so accesses the host knows complete can race
        # no more; buffer histories drop them when next touched.
        self._host_clock = self._host_clock.join(clock)
        self.stats["host_waits"] += 1
        if self.trace is not None:
            self.trace.append(
                {"name": "host wait", "where": "host", "issued": -1, "step": len(self.trace), "kind": "host-wait"}
            )

    # -- scheduling -------------------------------------------------------------------------------------

    def _execute(self, op: Op) -> None:
        # Released memory keeps its poison: an op that touches it reads or writes garbage.
        self.stats["ops_run"] += 1
        fn, op.fn = op.fn, None
        try:
            if fn is not None:
                fn()
        finally:
            del fn  # what the kernel held (arrays of a user's closure) may be freed from now on
            self._finish(op)

    def _finish(self, op: Op) -> None:
        op.done = True
        op.deps = ()
        if op.dependents is not None:
            for later in op.dependents:
                later.waiting -= 1
                if later.waiting == 0:
                    self._ready[later.index] = later
            op.dependents = None
        if self.trace is not None:
            self.trace.append({"name": op.name, "where": op.where, "issued": op.index, "step": len(self.trace), "kind": "op"})

    def _urgent(self, ready: list[int]) -> Sequence[int]:
        """Ready ops that lead to the later side of a race whose earlier side is still pending."""
        if not self._unordered:
            return ()
        pending = self._pending
        self._unordered = [(a, b) for a, b in self._unordered if a in pending and not b.done]
        if not self._unordered:
            return ()
        ready_ids = set(ready)
        urgent: set[int] = set()
        seen: set[int] = set()
        for _, later in self._unordered:
            stack = [later]
            while stack:
                op = stack.pop()
                if op.index in seen or op.done:
                    continue
                seen.add(op.index)
                if op.index in ready_ids:
                    urgent.add(op.index)
                stack.extend(op.deps)
        return sorted(urgent)

    def _run(self, index: int) -> None:
        op = self._ready.pop(index)
        del self._pending[index]
        self._execute(op)

    def _step(self) -> bool:
        if not self._ready:
            return False
        ready = sorted(self._ready) if len(self._ready) > 1 else list(self._ready)
        self._run(ready[self.scheduler.pick(ready, self._urgent(ready))])
        return True

    def _progress(self, steps: int) -> None:
        for _ in range(steps):
            if not self._step():
                return

    def _bound_pending(self) -> None:
        """Beyond ``max_pending`` waiting operations, the oldest ready ones run (the GPU progressed)."""
        while len(self._pending) > self.max_pending and self._ready:
            self._run(min(self._ready))

    def _run_until(self, done: Callable[[], bool]) -> None:
        while not done():
            if not self._step():  # pragma: no cover - the ordering graph is acyclic
                raise RuntimeError("SimBackend deadlock: nothing ready but the awaited work is pending")

    @_entry
    def progress(self, steps: int = 1) -> None:
        """Let the modelled GPU run up to ``steps`` ready operations (time passing). Does not sync."""
        self._progress(steps)

    @property
    def pending(self) -> list[Op]:
        """Issued operations that have not run yet, in issue order."""
        with self._lock:
            return list(self._pending.values())

    # -- events and synchronisation --------------------------------------------------------------------

    @_entry
    def acquire_event(self, device: int) -> SimEvent:
        self._check_device(device)
        return self._pool.acquire(device)

    @_entry
    def release_event(self, event: SimEvent) -> None:
        self._own_event(event, "release_event")
        self._pool.release(event.device, event)

    def pool_stats(self, device: int = 0) -> EventPoolStats:
        return self._pool.stats(device)

    def create_event(self, device: int | None = None) -> SimEvent:
        """A fresh, never-recorded event (outside the pool)."""
        dev = self.current_device() if device is None else device
        self._check_device(dev)
        return SimEvent(dev, self)

    def _own_event(self, event: SimEvent, call: str) -> None:
        """Refuse another model's event (or a hand-made one): its record's clock counts operations of
        that model's streams, which have the same keys here, and would order this model's work wrongly."""
        model = event._model() if type(event) is SimEvent and event._model is not None else None
        if model is not self:
            whose = "another model made it" if model is not None else "no model made it"
            raise ArgumentError(
                f"{call}: {event!r} is not an event of this SimBackend ({whose}): a model orders only its own "
                "events. Make events with this model's create_event() or acquire_event()."
            )

    def record(self, event: SimEvent, stream: Stream) -> None:
        """Record ``event`` on ``stream``; a later wait sees this record. Does not block."""
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            self._record(event, stream)

    def _record(self, event: SimEvent, stream: Stream) -> None:
        self._own_event(event, "record")
        if event.device != stream.device:
            raise DeviceMismatchError("event", event, event.device, stream.device, "Record an event of the stream's device.")
        op = self._issue(stream, "event record", None)
        event.record_op = op
        event.clock = op.clock

    def wait(self, stream: Stream, event: SimEvent) -> None:
        """Make later work on ``stream`` wait for ``event``'s latest record (none: no wait). Does not block."""
        self._own_event(event, "wait")
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            self._issue(stream, "event wait", None, after=event)

    @_entry
    def query(self, event: SimEvent) -> bool:
        """True when ``event``'s latest record has run (a never-recorded event is complete). Does not block.

        True makes the host know that work complete (a host fence, as on a GPU)."""
        self._own_event(event, "query")
        if self._completed(event):
            self._host_join(event.clock)
            return True
        return False

    @_entry
    def poll(self, event: SimEvent) -> bool:
        """Whether ``event``'s latest record has run, as :meth:`query`, but giving the host no ordering:
        for bookkeeping a program draws no conclusion from (streamsafe's keep-alive list, an allocator's
        free blocks), so a race the program has stays reported whichever order the scheduler chose.
        Does not block."""
        self._own_event(event, "poll")
        return self._completed(event)

    def _completed(self, event: SimEvent) -> bool:
        self._progress(self.scheduler.eager_steps(len(self._ready)))
        return event.record_op is None or event.record_op.done

    @_entry
    def synchronize_event(self, event: SimEvent) -> None:
        """Block the host until ``event``'s latest record has run."""
        self._own_event(event, "synchronize_event")
        op = event.record_op
        if op is not None:
            self._run_until(lambda: op.done)
        self._host_join(event.clock)

    @_entry
    def synchronize_stream(self, stream: Stream) -> None:
        """Block the host until everything issued to ``stream`` has run."""
        state = self._state(stream)
        last = state.last
        if last is not None:
            self._run_until(lambda: last.done)
        self._host_join(state.clock)

    @_entry
    def synchronize_device(self, device: int = 0) -> None:
        """Block the host until everything issued on ``device`` has run."""
        self._check_device(device)
        states = self._by_device[device]
        for state in states:  # a stream's operations are a chain: its last done means all done
            last = state.last
            if last is not None and not last.done:
                self._run_until(lambda last=last: last.done)  # type: ignore[misc]
        self._host_join(VectorClock().join(*(s.clock for s in states)))

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        """Order later work on ``waiter`` after work issued so far on ``signaller``. Does not block."""
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            self.stats["fences"] += 1
            self._check_device(signaller.device)
            event = self._pool.acquire(signaller.device)
            try:
                self._record(event, signaller)
                self._issue(waiter, "event wait", None, after=event)
            finally:
                self._pool.release(event.device, event)

    # -- DLPack consumer --------------------------------------------------------------------------------

    def from_dlpack(self, obj: Any, *, stream: Stream | None = None, max_version: tuple[int, int] | None = (1, 0)) -> SimArray:
        """Import a producer (or a capsule) zero-copy, asking it to order ``stream`` (default: current).

        Like ``torch.from_dlpack``: the consumer passes its stream to ``__dlpack__``. Does not block.
        A capsule that was already imported raises :class:`BufferError`. The result shares the
        producer's allocation: the memory stays allocated while either is alive.

        The producer's ``__dlpack__`` runs outside the model's lock, as a framework calls it with no
        lock of its own held (a guarded output's may wait for an effect another thread holds, whose
        host wait needs the model).
        """
        if isinstance(obj, SimCapsule):
            capsule = obj
        elif isinstance(obj, SimArray) and obj.backend is not self:
            raise another_models_array(obj, self)  # (before its capsule is taken: the array stays as it was)
        elif hasattr(obj, "__dlpack__"):
            device = obj.__dlpack_device__()[1]
            consumer = self.current_stream(device) if stream is None else as_stream(stream, backend=self)
            try:
                capsule = obj.__dlpack__(stream=consumer.dlpack, max_version=max_version)
            except TypeError:
                capsule = obj.__dlpack__(stream=consumer.dlpack)
        else:
            raise TypeError(f"from_dlpack needs an object with __dlpack__ or a SimCapsule, got {type(obj).__name__}")
        return self._import_capsule(capsule)

    @_entry
    def _import_capsule(self, capsule: SimCapsule) -> SimArray:
        view_of = capsule.view_of
        array = capsule.consume()
        if not isinstance(array, SimArray) or array.backend is not self:
            raise another_models_array(array, self)
        imported = SimArray(self, array.buffer, lease=array._lease)
        view_of = view_of or array._view_of
        if view_of is not None:  # a view of a guarded effect's output, or of such a view
            imported._view_of = view_of
        return imported

    def __repr__(self) -> str:
        return f"SimBackend(devices={self._devices}, scheduler={type(self.scheduler).__name__})"


_UNKNOWN_RELEASE = Access("release", "write", HOST, "host", 0, VectorClock(), -1)


def _stale_views(reads: Iterable[Any], writes: Iterable[Any]) -> list[tuple[SimArray, AccessKind, Any, int]]:
    """The arrays among ``reads`` and ``writes`` that are views of a guarded effect's output that the
    effect has run again since (with whether each is read or written, its ledger and the view's run)."""
    stale = []
    for kind, items in (("read", reads), ("write", writes)):
        for item in items:
            tag = item._view_of if type(item) is SimArray else None
            if tag is not None and not item.buffer.freed:  # (released memory: a use after free, reported as such)
                ledger = tag[0]()
                if ledger is not None and ledger.generation != tag[1]:
                    stale.append((item, kind, ledger, tag[1]))
    return stale  # type: ignore[return-value]


def _buffers(items: Iterable[SimArray | SimBuffer]) -> tuple[SimBuffer, ...]:
    if not items:
        return ()
    return tuple([item.buffer if isinstance(item, SimArray) else item for item in items])


def _dims(shape: Sequence[int] | int) -> tuple[int, ...]:
    """An allocation's shape as a tuple of ints (an int for one dimension)."""
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _poison(data: np.ndarray) -> None:
    if data.dtype.kind == "f":
        data.fill(np.nan)
    elif data.dtype.kind in "iu":
        data.fill(_POISON % (np.iinfo(data.dtype).max + 1))
    else:
        data.fill(0)
