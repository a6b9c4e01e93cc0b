"""The model's machinery, the base of :class:`~streamsafe.sim.backend.SimBackend`: the streams' states,
issuing operations with their implicit dependencies and vector clocks, the ready queue and the
scheduler's steps, recording accesses and reporting races, and the host's joins.

Also the process-wide switches the machinery reads: :func:`sanitize_everywhere` (every model raises at
a race) and :func:`collecting_races` (every race any model finds goes to a list too)."""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..backend.naming import check_device
from ..errors import DeviceMismatchError, RaceError, StreamValueError
from ..streams import LEGACY_HANDLE, PER_THREAD_HANDLE, Stream, StreamKind, implicitly_ordered
from ..streams import thread_token as _thread_token
from .clocks import HOST, VectorClock, is_ordered_after
from .memory import SimArray, SimBuffer, buffers_of, stale_views
from .ops import Op, SimEvent, StreamState
from .races import Access, AccessKind, Race, find_race
from .schedule import Scheduler

__all__ = ["OrderingEngine", "collecting_races", "entry", "sanitize_everywhere", "sanitizing_everywhere"]

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


def sanitizing_everywhere() -> bool:
    """Whether a :func:`sanitize_everywhere` block is open (in any thread)."""
    return _SANITIZE_ALL > 0


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


_E = TypeVar("_E", bound="OrderingEngine")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def entry(method: Callable[Concatenate[_E, _P], _R]) -> Callable[Concatenate[_E, _P], _R]:
    """A public entry point: runs under the model's lock, after handing freed blocks back to the pool."""

    @functools.wraps(method)
    def locked(self: _E, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            if self._released and not self._draining:
                self._drain_released()
            return method(self, *args, **kwargs)

    return locked
# The hot entry points (launch, record, wait, fence) spell the same two lines out: no wrapper call.


_UNKNOWN_RELEASE = Access("release", "write", HOST, "host", 0, VectorClock(), -1)


class OrderingEngine:
    """The machinery of the model (:class:`~streamsafe.sim.backend.SimBackend` is one): streams' states,
    pending operations, clocks, the race reports. Its public calls are :meth:`launch`, :meth:`host_access`,
    :meth:`progress`, :attr:`pending`, :meth:`take_races` and :meth:`acting_as`; the rest is the model's own."""

    _destroyed: set[tuple[int, int, StreamKind]]
    """The streams destroyed by :meth:`~streamsafe.sim.backend.SimBackend.destroy_stream` (device, handle, kind)."""

    def __init__(self, *, devices: int, scheduler: Scheduler, on_race: str, max_pending: int) -> None:
        self.scheduler: Scheduler = scheduler
        self.on_race = on_race
        self.max_pending = max_pending
        self.races: list[Race] = []
        self._lock = threading.RLock()
        self._sanitize_blocks = 0
        """How many ``ss.sanitize(model)`` blocks are open on this model, in any thread (:meth:`sanitized`)."""
        self._local = threading.local()
        self._devices = devices
        self._counter = itertools.count()
        self._streams: dict[tuple[int, ...], StreamState] = {}
        self._by_handle: dict[int, dict[int, StreamState]] = {}  # handle -> device -> state (no key tuple per lookup)
        self._by_device: dict[int, list[StreamState]] = {dev: [] for dev in range(devices)}
        self._unseen: dict[int, dict[int, StreamState]] = {dev: {} for dev in range(devices)}
        """Per device, by index: the legacy stream's peers with work issued since its last operation."""
        self._legacy: dict[int, StreamState] = {}
        self._pending: dict[int, Op] = {}  # by issue number, in issue order
        self._ready: dict[int, Op] = {}  # the pending operations whose dependencies have all run
        self._host_seq = 0
        self._host_clock = VectorClock()
        self._unordered: list[tuple[int, Op]] = []  # (earlier op's index, later op) of reported races
        self._released: collections.deque[tuple[SimBuffer, Stream, set[Stream], int]] = collections.deque()
        """Blocks whose last array object is gone, for :meth:`_drain_released` at the next public call."""
        self._draining = False
        self.stats = {"fences": 0, "host_waits": 0, "ops_run": 0, "reused_blocks": 0}
        self.trace: list[dict[str, Any]] | None = None
        """Set to a list to record the order operations ran in (for timelines)."""
        self._per_thread: dict[tuple[int, int], StreamState] = {}  # (device, thread) -> that thread's default stream
        for dev in range(devices):
            self._add_state(StreamState(Stream(dev, LEGACY_HANDLE, StreamKind.LEGACY, self)))

    def _drain_released(self) -> None:
        """Hand the blocks of :attr:`_released` back to the allocator (the model's: its caching allocator)."""
        raise NotImplementedError

    # -- the streams' states ----------------------------------------------------------------------

    def _add_state(self, state: StreamState) -> None:
        state.where = str(state.stream)
        key = state.stream.key
        if key in self._streams:  # a destroyed stream's handle again: a new actor, whose clock starts afresh
            key = (*key, len(self._by_device[state.stream.device]))
        state.key = key
        self._streams[state.stream.key] = state
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

    def _per_thread_state(self, device: int) -> StreamState:
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
                    state = StreamState(stream, clock=self._host_clock)
                    self._add_state(state)
        return state

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

    def _check_device(self, device: int, what: str = "a new stream") -> None:
        check_device(device, self, what)  # (the one check of a device number, as_stream's too)

    @entry
    def label_stream(self, stream: Stream, label: str) -> None:
        """Name ``stream`` ``label`` in race reports (the mirror names each of its streams after the real one
        it stands for). Does not block."""
        self._state(stream).where = label

    def _state(self, stream: Stream) -> StreamState:
        if stream.kind is StreamKind.PER_THREAD:  # handle 2: the issuing thread's stream (CUDA's rule)
            state: StreamState | None = self._per_thread_state(stream.device)
        else:
            by_device = self._by_handle.get(stream.handle)
            state = by_device.get(stream.device) if by_device is not None else None
        if state is None or state.stream.kind is not stream.kind or (stream.backend is not self and stream.backend is not None):
            if (stream.device, stream.handle, stream.kind) in self._destroyed:
                raise StreamValueError(
                    stream, "it was destroyed (destroy_stream), and work on a destroyed stream is an error, as on the driver"
                    + (f"; its handle now names a {state.stream.kind} stream" if state is not None else ""),
                    "Keep the stream until its last use (streamsafe keeps the streams it still orders: "
                    "backend.hold_stream), or use a live one.",
                )
            raise StreamValueError(stream, "the stream does not belong to this SimBackend", "Create it with create_stream().")
        return state

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
            stale = stale_views(reads, writes)
            op = self._issue(stream, name, fn, buffers_of(reads), buffers_of(writes))
            if stale:
                self._report_stale(op, stale)
            return op

    @entry
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
        stale = stale_views(reads, writes)
        op, found = self._host_op(name, buffers_of(reads), buffers_of(writes), fn)
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
        state: StreamState,
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

    def _implicit_deps(self, state: StreamState, deps: tuple[Op, ...]) -> tuple[tuple[Op, ...], list[VectorClock] | None]:
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

    def _implicit_peers(self, state: StreamState) -> Iterable[StreamState]:
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

    def _every_implicit_peer(self, state: StreamState) -> Iterable[StreamState]:
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
        if found and (self.on_race == "raise" or self._sanitize_blocks or _SANITIZE_ALL):
            raise RaceError(found)

    @contextlib.contextmanager
    def sanitized(self) -> Iterator[None]:
        """Inside the block this model raises at a race (``ss.sanitize(model)``); blocks of several threads may
        overlap in any order: it raises while any is open."""
        with self._lock:
            self._sanitize_blocks += 1
        try:
            yield
        finally:
            with self._lock:
                self._sanitize_blocks -= 1

    @property
    def sanitizing(self) -> bool:
        """Whether races raise at once (``on_race="raise"``, an ``ss.sanitize()`` block on this model, or one
        without a backend)."""
        return self.on_race == "raise" or self._sanitize_blocks > 0 or _SANITIZE_ALL > 0

    @entry
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

    @entry
    def progress(self, steps: int = 1) -> None:
        """Let the modelled GPU run up to ``steps`` ready operations (time passing). Does not sync."""
        self._progress(steps)

    @property
    def pending(self) -> list[Op]:
        """Issued operations that have not run yet, in issue order."""
        with self._lock:
            return list(self._pending.values())
