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

Here: SimBackend's devices, streams, allocator, events, synchronisation and DLPack import. Its machinery
is :mod:`~streamsafe.sim.engine`; :mod:`~streamsafe.sim.ops` and :mod:`~streamsafe.sim.memory` hold the
operations, events, buffers and arrays (their public names import from here too).
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._env import SANITIZE_MEANING as _SANITIZE_MEANING, env_flag
from ..backend._pool import EventPool, EventPoolStats
from ..backend.naming import as_stream
from ..errors import ArgumentError, CudaDriverError, DeviceMismatchError, RaceError, another_models_array
from ..streams import LEGACY_HANDLE, Stream, StreamKind
from ..streams import thread_token as _thread_token
from .clocks import VectorClock, is_ordered_after
from .lifetimes import StreamLifetimes
from .engine import collecting_races, entry, sanitize_everywhere, sanitizing_everywhere
from .memory import FreeBlock, Lease, PoolKey, SimArray, SimBuffer, SimCapsule, as_dims, as_dtype, fill_poison, pool_stream
from .memory import model_capsule, poisoned_block
from .ops import Op, SimEvent, StreamState
from .races import Access
from .schedule import InOrderScheduler, Scheduler, make_scheduler

__all__ = [
    "SimBackend", "SimEvent", "SimBuffer", "SimArray", "SimCapsule", "Op",
    "sanitize_everywhere", "sanitizing_everywhere", "collecting_races",
]

_HANDLE_BASE = 0x7F00_0000_1000


def _count(name: str, value: Any, meaning: str, example: str) -> int:
    """``value`` as an int of at least 1, else :class:`~streamsafe.errors.ArgumentError` naming ``name``."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 1:
        raise ArgumentError(f"{name}={value!r} is invalid: {meaning} must be an int of at least 1; {example}")
    return int(value.__index__())


class SimBackend(StreamLifetimes):
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
        devices = _count("devices", devices, "the model's number of GPUs", "SimBackend(devices=2)")
        if not isinstance(on_race, str) or on_race not in ("record", "raise"):
            raise ArgumentError(f"on_race={on_race!r} is invalid: it must be 'record' (races are appended to .races) or "
                                "'raise' (a RaceError at the access that races); e.g. SimBackend(on_race='raise')")
        max_pending = _count("max_pending", max_pending, "the bound on the operations waiting to run",
                             "leave it out for the default (1024), or e.g. SimBackend(max_pending=64)")
        max_free_events = _count("max_free_events", max_free_events, "the number of free events the model keeps per device",
                                 "leave it out for the default (64), or e.g. SimBackend(max_free_events=8)")
        if seed is not None:
            if isinstance(seed, bool) or not hasattr(seed, "__index__"):
                raise ArgumentError(f"seed={seed!r} is invalid: the random scheduler's seed must be an int or None; "
                                    "e.g. SimBackend(scheduler='random', seed=7)")
            seed = int(seed.__index__())
        if scheduler is None:
            scheduler = InOrderScheduler()
        elif isinstance(scheduler, str):
            scheduler = make_scheduler(scheduler, seed)
        if env_flag("STREAMSAFE_SANITIZE", False, _SANITIZE_MEANING):
            on_race = "raise"  # sanitize mode for the whole process
        super().__init__(devices=devices, scheduler=scheduler, on_race=on_race, max_pending=max_pending)
        self._handles = itertools.count()
        self._free_handles: dict[int, list[int]] = {}
        """Per device, the handles of destroyed streams, handed out again by :meth:`create_stream`."""
        self._destroyed: set[tuple[int, int, StreamKind]] = set()
        self._stream_holds: dict[Stream, int] = {}
        self._destroy_when_let_go: dict[Stream, StreamState] = {}
        self._stream_pool: dict[tuple[int, bool], list[Stream]] = {}
        self._pool: EventPool[SimEvent] = EventPool(lambda device: SimEvent(device, self), lambda e: None, max_free_events)
        self._free_blocks: dict[PoolKey, list[FreeBlock]] = {}

    # -- devices and streams --------------------------------------------------------------------

    def device_count(self) -> int:
        """How many devices the model has (``devices=`` at construction)."""
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

    @entry
    def create_stream(self, *, non_blocking: bool = False, device: int | None = None) -> Stream:
        """A new stream, like ``cuStreamCreate``: *blocking* unless ``non_blocking`` (ordered with the legacy stream).
        ``torch.cuda.Stream()`` and ``cupy.cuda.Stream(non_blocking=True)`` are non-blocking: spell a torch stream as
        ``create_stream(non_blocking=True)``, or a test on the model may miss a race your program has."""
        if not isinstance(non_blocking, bool):
            raise ArgumentError(f"create_stream(non_blocking={non_blocking!r}): non_blocking must be True or False, not "
                                f"a {type(non_blocking).__name__}; pass non_blocking=True for a stream that does not "
                                "synchronise with the legacy stream (torch's and CuPy's), False (the default) for one that does")
        dev = self.current_device() if device is None else device
        self._check_device(dev)
        free = self._free_handles.get(dev)
        handle = free.pop() if free else _HANDLE_BASE + 0x100 * next(self._handles)  # (the driver hands freed ones out again)
        kind = StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING
        stream = Stream(dev, handle, kind, self)
        self._destroyed.discard((dev, handle, kind))
        self._add_state(StreamState(stream, clock=self._host_clock))
        return stream

    @entry
    def acquire_stream(self, device: int, *, non_blocking: bool = False) -> Stream:
        """A stream from the pool (created when none is free), as on the driver backend."""
        free = self._stream_pool.setdefault((device, non_blocking), [])
        return free.pop() if free else self.create_stream(non_blocking=non_blocking, device=device)

    def release_stream(self, stream: Stream) -> None:
        """Give a pooled stream back (it issues nothing: a finalizer may call it at any time). Does not block."""
        with self._lock:
            self._stream_pool.setdefault((stream.device, stream.kind is StreamKind.NON_BLOCKING), []).append(stream)

    def legacy_stream(self, device: int = 0) -> Stream:
        """The legacy default stream (stream 0) of ``device``: it waits for, and is waited for by, every
        blocking stream of the device. Does not block."""
        try:
            return self._streams[(device, LEGACY_HANDLE)].stream
        except KeyError:
            self._check_device(device, "the legacy stream")  # raises: a device the model does not have
            raise

    def per_thread_stream(self, device: int = 0) -> Stream:
        """The calling thread's per-thread default stream of ``device`` (DLPack's ``2``): it does not
        synchronise with other blocking streams (H11), nor with other threads' per-thread streams. As
        in CUDA, work issued on a per-thread stream goes to the stream of the thread that issues it,
        whichever thread named the stream. Does not block."""
        return self._per_thread_state(device).stream

    @entry
    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` of a stream created by this model; unknown and destroyed handles fail like
        the driver (until a new stream gets the handle)."""
        destroyed = False
        for state in self._streams.values():
            s = state.stream
            if s.handle == handle and (s.device, handle, s.kind) in self._destroyed:
                destroyed = True
            elif s.handle == handle:
                return s.device, s.kind is StreamKind.NON_BLOCKING
        fix = (f"{handle:#x} names a stream that was destroyed (destroy_stream): pass a live stream" if destroyed
               else f"Is {handle:#x} a stream of this SimBackend?")
        raise CudaDriverError("cuStreamGetFlags", 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle", fix)

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

    # -- memory -------------------------------------------------------------------------------------

    @entry
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
        dt = as_dtype(dtype)
        dims = as_dims(shape)
        label = name or f"buf{next(self._handles)}"
        buf = self._reuse((pool_stream(alloc), dims, dt.str))
        if buf is None:
            data = poisoned_block(dims, dt)
            buf = SimBuffer(label, data, dev)
        else:
            buf.name = label
            self.stats["reused_blocks"] += 1
        lease = Lease(buf, alloc)
        done = weakref.finalize(lease, self._on_free, buf, alloc, lease.recorded)
        done.atexit = False
        return SimArray(self, buf, lease=lease)

    @entry
    def malloc(self, shape: Sequence[int] | int, dtype: Any = np.float32, *, device: int | None = None, name: str = "") -> SimArray:
        """Device memory outside the caching allocator, like ``cudaMalloc`` (what an SDK allocates its
        own buffers with): a fresh poisoned block that no stream's pool hands out or takes back, so no
        freed block of the program's, with work still pending on it, can become it. Release it with
        :meth:`free`. Does not block."""
        dev = self.current_device() if device is None else device
        self._check_device(dev)
        data = poisoned_block(as_dims(shape), as_dtype(dtype))
        return SimArray(self, SimBuffer(name or f"buf{next(self._handles)}", data, dev), lease=None)

    def _reuse(self, key: PoolKey) -> SimBuffer | None:
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
                key = (pool_stream(alloc), tuple(buf.data.shape), buf.data.dtype.str)
                self._free_blocks.setdefault(key, []).append((buf, events))
        finally:
            self._draining = False

    @entry
    def _record_stream(self, array: SimArray, stream: Any) -> None:
        lease = array._lease
        if lease is None:
            return
        s = self._state(as_stream(stream, device=array.device, backend=self)).stream
        if s.device != array.device:
            raise DeviceMismatchError("record_stream", s, s.device, array.device, "Record a stream of the array's device.")
        if s != lease.stream:
            lease.recorded.add(s)

    @entry
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

    @entry
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

    @entry
    def free(self, array: SimArray | SimBuffer, *, name: str = "") -> None:
        """Release memory from the host with no stream ordering (like the SDK on close/resize).

        A host write: the memory is poisoned at once, so an unfenced pending reader reads garbage;
        any later access is reported as a use after free. Never returned to the allocator's pool.
        """
        buf = array.buffer if isinstance(array, SimArray) else array

        def poison() -> None:
            fill_poison(buf.data)
            buf.freed = True

        op, found = self._host_op(name or f"free {buf.name}", (), (buf,), poison)
        if buf.freed_by is None:
            buf.freed_by = Access(op.name, "write", op.actor, op.where, op.seq, op.clock, op.index)
        if found:
            self._report(found)

    # -- issuing work -------------------------------------------------------------------------------

    @entry
    def copy(self, src: SimArray, stream: Stream | None = None, *, name: str = "") -> SimArray:
        """Issue a device-to-device copy of ``src`` on ``stream`` (default: current); returns the copy,
        allocated on that stream. Does not block."""
        stream = self._work_stream("copy", src, stream)
        dst = self.empty(src.shape, src.dtype, device=src.device, name=name or f"copy of {src.buffer.name}", stream=stream)
        s, d = src.buffer, dst.buffer  # pending work holds the memory, not the arrays (launch keeps only buffers)
        self.launch(stream, name or f"copy {s.name}", lambda: np.copyto(d.data, s.data), reads=[src], writes=[d])
        return dst

    @entry
    def fill(self, array: SimArray, value: Any, stream: Stream | None = None, *, name: str = "") -> Op:
        """Issue a kernel on ``stream`` that sets every element of ``array`` to ``value``. Does not block."""
        stream = self._work_stream("fill", array, stream)
        buf = array.buffer
        return self.launch(stream, name or f"fill {buf.name}", lambda: buf.data.fill(value), writes=[array])

    @entry
    def download(self, array: SimArray, stream: Stream | None = None) -> np.ndarray:
        """Copy ``array`` to the host on ``stream`` (default: current) and wait for it. Blocks the host."""
        stream = self._work_stream("download", array, stream)
        buf = array.buffer
        out = np.empty_like(buf.data)
        op = self.launch(stream, f"download {buf.name}", lambda: np.copyto(out, buf.data), reads=[array])
        self._run_until(lambda: op.done)
        self._host_join(op.clock)
        return out

    def _work_stream(self, call: str, array: Any, stream: Any) -> Stream:
        """The stream ``call`` issues its work on for ``array`` (``stream``, default: the current stream of the
        array's device), or an :class:`~streamsafe.errors.ArgumentError` for an ``array`` that is not one of the
        model's arrays or a ``stream`` that is no stream (:class:`~streamsafe.errors.InputArrayError` for another
        model's array)."""
        if not isinstance(array, SimArray):
            raise ArgumentError(
                f"{call}: {array!r} ({type(array).__name__}) is not an array of the model: {call} takes a SimArray. "
                "Make one with sim.empty(shape, dtype) or sim.array(values), or import a producer with sim.from_dlpack(x)"
            )
        if array.backend is not self:
            raise another_models_array(array, self, f"{call}'s array")
        if stream is None:
            return self.current_stream(array.device)
        if not isinstance(stream, Stream):
            raise ArgumentError(
                f"{call}: stream={stream!r} ({type(stream).__name__}) is not a stream of the model. Pass one of its "
                "streams (sim.create_stream(), sim.legacy_stream(), sim.current_stream()), or leave stream out for the "
                "current stream"
            )
        return stream

    # -- events and synchronisation --------------------------------------------------------------------

    @entry
    def acquire_event(self, device: int) -> SimEvent:
        """An event of ``device`` from the model's pool (give it back with :meth:`release_event`). Does not block."""
        self._check_device(device)
        return self._pool.acquire(device)

    @entry
    def release_event(self, event: SimEvent) -> None:
        """Give a pooled event back (a later record reuses it; a wait already queued keeps its record)."""
        self._own_event(event, "release_event")
        self._pool.release(event.device, event)

    def pool_stats(self, device: int = 0) -> EventPoolStats:
        """The event pool's counts on ``device`` (events made, in use, free): what a long run keeps."""
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

    @entry
    def query(self, event: SimEvent) -> bool:
        """True when ``event``'s latest record has run (a never-recorded event is complete). Does not block.

        True makes the host know that work complete (a host fence, as on a GPU)."""
        self._own_event(event, "query")
        if self._completed(event):
            self._host_join(event.clock)
            return True
        return False

    @entry
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

    @entry
    def synchronize_event(self, event: SimEvent) -> None:
        """Block the host until ``event``'s latest record has run."""
        self._own_event(event, "synchronize_event")
        op = event.record_op
        if op is not None:
            self._run_until(lambda: op.done)
        self._host_join(event.clock)

    @entry
    def synchronize_stream(self, stream: Stream) -> None:
        """Block the host until everything issued to ``stream`` has run."""
        state = self._state(stream)
        last = state.last
        if last is not None:
            self._run_until(lambda: last.done)
        self._host_join(state.clock)

    @entry
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
        else:  # (refused below, by model_capsule)
            capsule = None
        return self._import_capsule(model_capsule(obj, capsule, self))  # (InputArrayError for what is not the model's)

    @entry
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

    def assert_no_races(self) -> None:
        """Raise ``AssertionError`` naming every race found so far (both accesses and the fix, one a line, as sanitize
        mode reports them) unless there is none: ``sim.assert_no_races()`` in a test reads better than
        ``assert sim.races == []``. Does not block."""
        if self.races:
            raise AssertionError(str(RaceError(list(self.races))))

    def __reduce__(self) -> Any:
        raise ArgumentError("a SimBackend cannot be pickled: it models live streams, events and pending work; "
                            "make a new SimBackend where it is needed (copy arrays out with download())")

    def __repr__(self) -> str:
        return f"SimBackend(devices={self._devices}, scheduler={type(self.scheduler).__name__})"
