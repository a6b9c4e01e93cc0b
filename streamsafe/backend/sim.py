"""SimBackend: a pure-Python model of CUDA stream ordering, with real (small, numpy) data.

Streams are queues of operations. An operation runs only after what CUDA orders it
after: the previous operation on its stream; for the legacy default stream, all
earlier work of the blocking (and per-thread) streams of its device, and the other
way round; the event record a ``wait`` captured. Among the ready operations a
:mod:`scheduler <streamsafe.backend.schedule>` picks any, so a missing fence can
produce wrong data, as on a GPU, and a seed or Hypothesis replays the schedule.

Independently of the schedule, each operation gets a vector clock at issue time;
every pair of accesses to one buffer where one writes and neither is ordered before
the other is reported as a :class:`~streamsafe.races.Race` naming both. The report is
deterministic: it depends on the program, not on which order the scheduler chose.

Host calls issue work and return at once, as on a GPU; only the synchronise calls
(and :meth:`SimBackend.download`) make the host wait, and that is when pending work runs.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._dlpack import DLPACK_CUDA, SimCapsule
from ..clocks import HOST, ActorId, SeqNum, VectorClock, is_ordered_after
from ..errors import CudaDriverError, DeviceMismatchError, RaceError, StreamValueError
from ..races import Access, Race, find_race
from ..streams import LEGACY_HANDLE, PER_THREAD_HANDLE, Stream, StreamKind, as_stream, implicitly_ordered
from ._pool import EventPool, EventPoolStats
from .schedule import InOrderScheduler, Scheduler, make_scheduler

__all__ = ["SimBackend", "SimEvent", "SimBuffer", "SimArray", "Op"]

_HANDLE_BASE = 0x7F00_0000_1000
_POISON = 0xDEAD


@dataclass(eq=False)
class SimBuffer:
    """Device memory in the model: a numpy array and the accesses not yet known complete."""

    name: str
    data: np.ndarray
    device: int
    freed: bool = False
    history: list[Access] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        return f"SimBuffer({self.name!r}, shape={self.data.shape}, dtype={self.data.dtype}, device={self.device})"


@dataclass(eq=False)
class Op:
    """One issued operation (kernel, copy, event record or wait) or host access."""

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

    def __repr__(self) -> str:
        return f"Op(#{self.index} {self.name!r} on {self.where}{', done' if self.done else ''})"


class SimEvent:
    """An event in the model: remembers its latest record (an :class:`Op`) and that record's clock."""

    __slots__ = ("device", "record_op", "clock", "__weakref__")

    def __init__(self, device: int) -> None:
        self.device = device
        self.record_op: Op | None = None
        self.clock = VectorClock()

    def __repr__(self) -> str:
        return f"SimEvent(device={self.device}, record={self.record_op!r})"


@dataclass(eq=False)
class _StreamState:
    stream: Stream
    seq: SeqNum = 0
    clock: VectorClock = field(default_factory=VectorClock)
    last: Op | None = None


class SimArray:
    """A CUDA array in the model, with the DLPack producer protocol of a torch tensor.

    ``__dlpack__(stream=s)`` makes ``s`` wait for the model's current stream (the
    producing framework's stream), as torch does; ``stream=None`` means, like torch 2.11,
    no synchronisation at all (``dlpack_none="no-sync"``) or, like the DLPack standard,
    the legacy stream (``dlpack_none="legacy"``).
    """

    def __init__(self, backend: SimBackend, buffer: SimBuffer, *, dlpack_none: str = "no-sync") -> None:
        if dlpack_none not in ("no-sync", "legacy"):
            raise ValueError(f"dlpack_none must be 'no-sync' or 'legacy', got {dlpack_none!r}")
        self.backend = backend
        self.buffer = buffer
        self.dlpack_none = dlpack_none

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.buffer.data.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.buffer.data.dtype

    @property
    def device(self) -> int:
        return self.buffer.device

    @property
    def ndim(self) -> int:
        return self.buffer.data.ndim

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


class SimBackend:
    """The model of CUDA ordering. ``scheduler`` may be a name or a :class:`Scheduler`.

    ``on_race="record"`` appends reports to :attr:`races`; ``"raise"`` raises
    :class:`~streamsafe.errors.RaceError` at the access that races.
    """

    name = "sim"

    def __init__(
        self,
        *,
        devices: int = 1,
        scheduler: Scheduler | str | None = None,
        seed: int | None = 0,
        on_race: str = "record",
        max_free_events: int = 64,
    ) -> None:
        if devices < 1:
            raise ValueError(f"devices must be at least 1, got {devices}")
        if on_race not in ("record", "raise"):
            raise ValueError(f"on_race must be 'record' or 'raise', got {on_race!r}")
        if scheduler is None:
            scheduler = InOrderScheduler()
        elif isinstance(scheduler, str):
            scheduler = make_scheduler(scheduler, seed)
        self.scheduler: Scheduler = scheduler
        self.on_race = on_race
        self.races: list[Race] = []
        self._devices = devices
        self._current_device = 0
        self._counter = itertools.count()
        self._handles = itertools.count()
        self._streams: dict[tuple[int, int], _StreamState] = {}
        self._pending: list[Op] = []
        self._host_seq = 0
        self._host_clock = VectorClock()
        self._current: dict[int, Stream] = {}
        self._buffers: weakref.WeakSet[SimBuffer] = weakref.WeakSet()
        self._stream_pool: dict[tuple[int, bool], list[Stream]] = {}
        self._unordered: list[tuple[int, Op]] = []  # (earlier op's index, later op) of reported races
        self._pool: EventPool[SimEvent] = EventPool(SimEvent, lambda e: None, max_free_events)
        self.stats = {"fences": 0, "host_waits": 0, "ops_run": 0}
        self.trace: list[dict[str, Any]] | None = None
        """Set to a list to record the order operations ran in (for timelines)."""
        for dev in range(devices):
            for handle, kind in ((LEGACY_HANDLE, StreamKind.LEGACY), (PER_THREAD_HANDLE, StreamKind.PER_THREAD)):
                stream = Stream(dev, handle, kind, self)
                self._streams[stream.key] = _StreamState(stream)

    # -- devices and streams --------------------------------------------------------------------

    def device_count(self) -> int:
        return self._devices

    def current_device(self) -> int:
        return self._current_device

    @contextlib.contextmanager
    def device(self, device: int) -> Iterator[None]:
        """Make ``device`` current inside the block (like ``torch.cuda.device``)."""
        self._check_device(device)
        saved, self._current_device = self._current_device, device
        try:
            yield
        finally:
            self._current_device = saved

    def _check_device(self, device: int) -> None:
        if not 0 <= device < self._devices:
            raise StreamValueError(
                device, f"the model has {self._devices} device(s), numbered 0 to {self._devices - 1}", "Pick one of them."
            )

    def create_stream(self, *, non_blocking: bool = False, device: int | None = None) -> Stream:
        """A new stream (blocking unless ``non_blocking``), like ``cuStreamCreate``."""
        dev = self._current_device if device is None else device
        self._check_device(dev)
        handle = _HANDLE_BASE + 0x100 * next(self._handles)
        kind = StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING
        stream = Stream(dev, handle, kind, self)
        self._streams[stream.key] = _StreamState(stream, clock=self._host_clock)
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        """Forget nothing: the model keeps a stream's history for its race reports."""

    def acquire_stream(self, device: int, *, non_blocking: bool = False) -> Stream:
        """A stream from the pool (created when none is free), as on the driver backend."""
        free = self._stream_pool.setdefault((device, non_blocking), [])
        return free.pop() if free else self.create_stream(non_blocking=non_blocking, device=device)

    def release_stream(self, stream: Stream) -> None:
        self._stream_pool.setdefault((stream.device, stream.kind is StreamKind.NON_BLOCKING), []).append(stream)

    def legacy_stream(self, device: int = 0) -> Stream:
        return self._streams[(device, LEGACY_HANDLE)].stream

    def per_thread_stream(self, device: int = 0) -> Stream:
        return self._streams[(device, PER_THREAD_HANDLE)].stream

    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` of a stream created by this model; unknown handles fail like the driver."""
        for (dev, h), state in self._streams.items():
            if h == handle:
                return dev, state.stream.kind is StreamKind.NON_BLOCKING
        raise CudaDriverError(
            "cuStreamGetFlags",
            400,
            "CUDA_ERROR_INVALID_HANDLE",
            "invalid resource handle",
            f"Is {handle:#x} a stream of this SimBackend?",
        )

    def current_stream(self, device: int | None = None) -> Stream:
        """The stream work goes to when none is named (set with :meth:`use_stream`), else legacy."""
        dev = self._current_device if device is None else device
        return self._current.get(dev) or self.legacy_stream(dev)

    @contextlib.contextmanager
    def use_stream(self, stream: Stream) -> Iterator[Stream]:
        """Make ``stream`` the current stream of its device inside the block (like ``torch.cuda.stream``)."""
        stream = as_stream(stream, backend=self)
        saved = self._current.get(stream.device)
        self._current[stream.device] = stream
        try:
            yield stream
        finally:
            if saved is None:
                self._current.pop(stream.device, None)
            else:
                self._current[stream.device] = saved

    def _state(self, stream: Stream) -> _StreamState:
        state = self._streams.get(stream.key)
        if state is None or stream.backend not in (None, self):
            raise StreamValueError(stream, "the stream does not belong to this SimBackend", "Create it with create_stream().")
        return state

    # -- memory -------------------------------------------------------------------------------------

    def empty(self, shape: Sequence[int] | int, dtype: Any = np.float32, *, device: int | None = None, name: str = "") -> SimArray:
        """New device memory filled with a poison pattern (never zeros). Does not block."""
        dev = self._current_device if device is None else device
        self._check_device(dev)
        data = np.empty(shape, dtype=dtype)
        _poison(data)
        buf = SimBuffer(name or f"buf{next(self._handles)}", data, dev)
        self._buffers.add(buf)
        return SimArray(self, buf)

    def array(self, values: Any, *, dtype: Any = None, device: int | None = None, name: str = "") -> SimArray:
        """New device memory holding ``values`` (a host write, like an upload the host waits for)."""
        host = np.array(values, dtype=dtype)
        arr = self.empty(host.shape, host.dtype, device=device, name=name)
        self.host_access(f"upload {arr.buffer.name}", writes=[arr], fn=lambda: np.copyto(arr.buffer.data, host))
        return arr

    def free(self, array: SimArray | SimBuffer, *, name: str = "") -> None:
        """Release memory from the host with no stream ordering (like the SDK on close/resize).

        A host write: the memory is poisoned at once, so an unfenced pending reader reads garbage.
        """
        buf = array.buffer if isinstance(array, SimArray) else array

        def poison() -> None:
            _poison(buf.data)
            buf.freed = True

        self.host_access(name or f"free {buf.name}", writes=[buf], fn=poison)

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
        return self._issue(stream, name, fn, _buffers(reads), _buffers(writes))

    def copy(self, src: SimArray, stream: Stream | None = None, *, name: str = "") -> SimArray:
        """Issue a device-to-device copy of ``src`` on ``stream`` (default: current); returns the copy."""
        stream = self.current_stream(src.device) if stream is None else stream
        dst = self.empty(src.shape, src.dtype, device=src.device, name=name or f"copy of {src.buffer.name}")
        self.launch(
            stream,
            name or f"copy {src.buffer.name}",
            lambda: np.copyto(dst.buffer.data, src.buffer.data),
            reads=[src],
            writes=[dst],
        )
        return dst

    def fill(self, array: SimArray, value: Any, stream: Stream | None = None, *, name: str = "") -> Op:
        """Issue a kernel on ``stream`` that sets every element of ``array`` to ``value``."""
        stream = self.current_stream(array.device) if stream is None else stream
        return self.launch(stream, name or f"fill {array.buffer.name}", lambda: array.buffer.data.fill(value), writes=[array])

    def download(self, array: SimArray, stream: Stream | None = None) -> np.ndarray:
        """Copy ``array`` to the host on ``stream`` (default: current) and wait for it. Blocks the host."""
        stream = self.current_stream(array.device) if stream is None else stream
        out = np.empty_like(array.buffer.data)
        op = self.launch(stream, f"download {array.buffer.name}", lambda: np.copyto(out, array.buffer.data), reads=[array])
        self._run_until(lambda: op.done)
        self._host_join(op.clock)
        return out

    def host_access(
        self,
        name: str,
        *,
        reads: Iterable[SimArray | SimBuffer] = (),
        writes: Iterable[SimArray | SimBuffer] = (),
        fn: Callable[[], None] | None = None,
    ) -> Op:
        """A read or write the host makes now (e.g. freeing a buffer); runs at once."""
        self._host_seq += 1
        clock = self._host_clock.advanced(HOST, self._host_seq)
        self._host_clock = clock
        op = Op(next(self._counter), name, HOST, "host", self._host_seq, clock, (), _buffers(reads), _buffers(writes), fn)
        self._record_accesses(op)
        self._execute(op)
        return op

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
        state = self._state(stream)
        for buf in reads + writes:
            if buf.device != stream.device:
                raise DeviceMismatchError(
                    f"buffer used by {name!r}", buf.name, buf.device, stream.device, "Copy it to the stream's device first."
                )
        deps: list[Op] = [state.last] if state.last is not None else []
        clock = state.clock.join(self._host_clock)
        for other in self._streams.values():
            if other is state or other.last is None or other.stream.device != stream.device:
                continue
            if implicitly_ordered(stream, other.stream):
                deps.append(other.last)
                clock = clock.join(other.clock)
        if after is not None and after.record_op is not None:
            deps.append(after.record_op)
            clock = clock.join(after.clock)
        state.seq += 1
        clock = clock.advanced(stream.key, state.seq)
        op = Op(
            next(self._counter), name, stream.key, str(stream), state.seq, clock, tuple(deps), reads, writes, fn, stream.device
        )
        state.clock = clock
        state.last = op
        self._record_accesses(op)
        self._pending.append(op)
        self._progress(self.scheduler.eager_steps(len(self._ready())))
        return op

    # -- happens-before ------------------------------------------------------------------------------

    def _record_accesses(self, op: Op) -> None:
        found: list[Race] = []
        for kind, bufs in (("read", op.reads), ("write", op.writes)):
            for buf in bufs:
                access = Access(op.name, kind, op.actor, op.where, op.seq, op.clock, op.index)  # type: ignore[arg-type]
                for previous in buf.history:
                    if find_race(previous, access):
                        found.append(Race(buf.name, previous, access))
                buf.history.append(access)
        if found:
            if op.actor != HOST:
                self._unordered += [(race.first.op_index, op) for race in found]
            self.races.extend(found)
            if self.on_race == "raise":
                raise RaceError(found)

    def take_races(self) -> list[Race]:
        """The races reported so far, clearing the list."""
        races, self.races = self.races, []
        return races

    def _host_join(self, clock: VectorClock) -> None:
        self._host_clock = host = self._host_clock.join(clock)
        self.stats["host_waits"] += 1
        if self.trace is not None:
            self.trace.append({"name": "host wait", "where": "host", "issued": -1, "step": len(self.trace), "kind": "host-wait"})
        # Every later access joins the host clock, so accesses the host knows complete can race no more.
        for buf in list(self._buffers):
            buf.history = [a for a in buf.history if not is_ordered_after(host, a.actor, a.seq)]

    # -- scheduling -------------------------------------------------------------------------------------

    def _ready(self) -> list[Op]:
        return [op for op in self._pending if all(d.done for d in op.deps)]

    def _execute(self, op: Op) -> None:
        # Released memory keeps its poison: an op that touches it reads or writes garbage.
        if op.fn is not None:
            op.fn()
        if self.trace is not None:
            self.trace.append({"name": op.name, "where": op.where, "issued": op.index, "step": len(self.trace), "kind": "op"})
        op.done = True
        self.stats["ops_run"] += 1

    def _urgent(self, ready: list[Op]) -> list[int]:
        """Ready ops that lead to the later side of a race whose earlier side is still pending."""
        pending = {op.index for op in self._pending}
        self._unordered = [(a, b) for a, b in self._unordered if a in pending and not b.done]
        if not self._unordered:
            return []
        ready_ids = {op.index for op in ready}
        urgent: set[int] = set()
        for _, later in self._unordered:
            stack, seen = [later], set()
            while stack:
                op = stack.pop()
                if op.index in seen or op.done:
                    continue
                seen.add(op.index)
                if op.index in ready_ids:
                    urgent.add(op.index)
                stack.extend(op.deps)
        return sorted(urgent)

    def _step(self) -> bool:
        ready = self._ready()
        if not ready:
            return False
        op = ready[self.scheduler.pick([o.index for o in ready], self._urgent(ready))]
        self._pending.remove(op)
        self._execute(op)
        return True

    def _progress(self, steps: int) -> None:
        for _ in range(steps):
            if not self._step():
                return

    def _run_until(self, done: Callable[[], bool]) -> None:
        while not done():
            if not self._step():  # pragma: no cover - the ordering graph is acyclic
                raise RuntimeError("SimBackend deadlock: nothing ready but the awaited work is pending")

    def progress(self, steps: int = 1) -> None:
        """Let the modelled GPU run up to ``steps`` ready operations (time passing). Does not sync."""
        self._progress(steps)

    @property
    def pending(self) -> list[Op]:
        """Issued operations that have not run yet, in issue order."""
        return list(self._pending)

    # -- events and synchronisation --------------------------------------------------------------------

    def acquire_event(self, device: int) -> SimEvent:
        self._check_device(device)
        return self._pool.acquire(device)

    def release_event(self, event: SimEvent) -> None:
        self._pool.release(event.device, event)

    def pool_stats(self, device: int = 0) -> EventPoolStats:
        return self._pool.stats(device)

    def create_event(self, device: int | None = None) -> SimEvent:
        """A fresh, never-recorded event (outside the pool)."""
        dev = self._current_device if device is None else device
        self._check_device(dev)
        return SimEvent(dev)

    def record(self, event: SimEvent, stream: Stream) -> None:
        """Record ``event`` on ``stream``; a later wait sees this record. Does not block."""
        if event.device != stream.device:
            raise DeviceMismatchError("event", event, event.device, stream.device, "Record an event of the stream's device.")
        op = self._issue(stream, "event record", None)
        event.record_op = op
        event.clock = op.clock

    def wait(self, stream: Stream, event: SimEvent) -> None:
        """Make later work on ``stream`` wait for ``event``'s latest record (none: no wait). Does not block."""
        self._issue(stream, "event wait", None, after=event)

    def query(self, event: SimEvent) -> bool:
        """True when ``event``'s latest record has run (a never-recorded event is complete). Does not block."""
        self._progress(self.scheduler.eager_steps(len(self._ready())))
        if event.record_op is None or event.record_op.done:
            self._host_join(event.clock)
            return True
        return False

    def synchronize_event(self, event: SimEvent) -> None:
        """Block the host until ``event``'s latest record has run."""
        op = event.record_op
        if op is not None:
            self._run_until(lambda: op.done)
        self._host_join(event.clock)

    def synchronize_stream(self, stream: Stream) -> None:
        """Block the host until everything issued to ``stream`` has run."""
        state = self._state(stream)
        last = state.last
        if last is not None:
            self._run_until(lambda: last.done)
        self._host_join(state.clock)

    def synchronize_device(self, device: int = 0) -> None:
        """Block the host until everything issued on ``device`` has run."""
        self._check_device(device)
        self._run_until(lambda: not any(op.device == device and op.actor != HOST for op in self._pending))
        states = [s for s in self._streams.values() if s.stream.device == device]
        self._host_join(VectorClock().join(*(s.clock for s in states)))

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        """Order later work on ``waiter`` after work issued so far on ``signaller``. Does not block."""
        event = self.acquire_event(signaller.device)
        try:
            self.record(event, signaller)
            self.wait(waiter, event)
        finally:
            self.release_event(event)
        self.stats["fences"] += 1

    # -- DLPack consumer --------------------------------------------------------------------------------

    def from_dlpack(self, obj: Any, *, stream: Stream | None = None, max_version: tuple[int, int] | None = (1, 0)) -> SimArray:
        """Import a producer (or a capsule) zero-copy, asking it to order ``stream`` (default: current).

        Like ``torch.from_dlpack``: the consumer passes its stream to ``__dlpack__``. Does not block.
        A capsule that was already imported raises :class:`BufferError`.
        """
        if isinstance(obj, SimCapsule):
            capsule = obj
        elif hasattr(obj, "__dlpack__"):
            device = obj.__dlpack_device__()[1]
            consumer = self.current_stream(device) if stream is None else as_stream(stream, backend=self)
            try:
                capsule = obj.__dlpack__(stream=consumer.dlpack, max_version=max_version)
            except TypeError:
                capsule = obj.__dlpack__(stream=consumer.dlpack)
        else:
            raise TypeError(f"from_dlpack needs an object with __dlpack__ or a SimCapsule, got {type(obj).__name__}")
        array = capsule.consume()
        if not isinstance(array, SimArray) or array.backend is not self:
            raise TypeError("the capsule does not hold memory of this SimBackend")
        return SimArray(self, array.buffer)

    def __repr__(self) -> str:
        return f"SimBackend(devices={self._devices}, scheduler={type(self.scheduler).__name__})"


def _buffers(items: Iterable[SimArray | SimBuffer]) -> tuple[SimBuffer, ...]:
    return tuple(item.buffer if isinstance(item, SimArray) else item for item in items)


def _poison(data: np.ndarray) -> None:
    if data.dtype.kind == "f":
        data.fill(np.nan)
    elif data.dtype.kind in "iu":
        data.fill(_POISON % (np.iinfo(data.dtype).max + 1))
    else:
        data.fill(0)
