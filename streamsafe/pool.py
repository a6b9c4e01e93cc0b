"""Buffer pools: the ordering state of an SDK whose calls write buffers of a pool and hand them out.

A video decoder (PyNvVideoCodec's) writes each decoded frame into one buffer of a pool it reuses, and
hands the frames out; a later call writes the same buffers again. A :class:`BufferPool` keeps, per
buffer (known by its memory: a data pointer), a :class:`~streamsafe.ledger.Ledger` with that buffer's
generation, its readers and its outstanding readers, exactly as one effect's output is tracked. Before a
call that may write any buffer of the pool, the SDK's stream waits on the device for every reader of
every buffer (D5); the call's own host wait for its stream then covers them. After the call, each buffer
it handed out has a new generation (older frames of that buffer are stale); with a prefetching SDK
(a decoder thread that decodes ahead into the buffers no longer handed out), every buffer handed out
before the call is rewritten at any time after it, so it is stale too. A release (a new source, the
end of a threaded decoder) first makes the host wait for every reader (D6).

Nothing here blocks except the release waits (:meth:`BufferPool.release_fences`, applied by the caller).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from .backend import Backend
from .interrupts import after_writes
from .ledger import Ledger, new_stats
from .plan import Fence, FencePlan, release_fences
from .program import apply_fences
from .strategy import Strategy
from .streams import Stream, implicitly_ordered, issuable
from .turns import Turns

__all__ = ["BufferPool", "pool_of", "pool_plan", "waited_streams"]

_RESOLVED = {
    Strategy.AUTO: Strategy.EVENT, Strategy.EVENT: Strategy.EVENT, Strategy.ASYNC: Strategy.EVENT,
    Strategy.STREAM: Strategy.STREAM, Strategy.DEVICE: Strategy.DEVICE, Strategy.NONE: Strategy.NONE,
}
_REASONS = {
    Strategy.EVENT: "the decoder's stream waits on the device for the readers of its buffers; the decoder's own host "
                    "wait then covers them, and no host wait of streamsafe's is needed",
    Strategy.STREAM: "the host synchronises each reader's stream before the decoder writes its buffers again",
    Strategy.DEVICE: "the device-wide synchronisation of the vendor's documented recipe, before each decode",
    Strategy.NONE: "no fences (benchmarks only): the next decode may overwrite a frame still being read",
}


def pool_plan(strategy: Strategy, writer: Stream, *, writer_known: bool = True) -> FencePlan:
    """The plan of a pooled SDK's calls on ``writer`` (the stream it writes its buffers on) under
    ``strategy``: its frames are complete when a call returns (D1, the SDK's own host wait); before a
    call, ``writer`` waits for the readers (D5). ``auto`` and ``async`` resolve to ``event``: a decoder
    has no ``non_blocking`` to drop and no conversion stage. ``writer_known=False`` (the decoder's stream is
    only assumed): a device wait might be on the wrong stream, so ``auto``, ``event`` and ``async`` make the
    host wait for the readers instead. A pure function."""
    resolved = _RESOLVED[strategy]
    if not writer_known and resolved is Strategy.EVENT:
        return dataclasses.replace(
            pool_plan(Strategy.STREAM, writer), requested=strategy, _cache={},
            reason="the decoder's stream is not known (it was made before its class was guarded, and no stream was "
                   "declared), so a device wait could be on the wrong stream: the host waits for the readers before each "
                   "decode. Declare it, stream_contract(decoder, stream), or guard the class before making the decoder "
                   "(ss.guard(PyNvVideoCodec)), for device-side fences",
        )
    fences = () if resolved is Strategy.NONE else (
        Fence("D1", "inside run", "sdk-blocking", None, writer, "the decoder waits for its stream before it hands out the frames"),
    )
    return FencePlan(
        requested=strategy, strategy=resolved, non_blocking=False, sdk=writer, run_stream=writer, conversion=None,
        producer=writer, consumer=writer, fences=fences, on_release=tuple(release_fences(resolved, [writer])),
        reason=_REASONS[resolved], output_complete=True,
    )


def waited_streams(fences: Iterable[Fence]) -> set[Stream]:
    """The streams ``fences`` wait for as a whole (their later captured events need no wait of their own)."""
    return {f.signaller for f in fences if f.signaller is not None}


def _as_decoder_fence(f: Fence) -> Fence:
    """A reuse fence of the plan, named as the decoder's hazard (D5: the next decode overwrites a frame)."""
    return dataclasses.replace(f, hazard="D5", why="the next decode may write the buffer this stream reads")


class BufferPool:
    """The buffers of one SDK object's pool, each with its own ledger. See the module docstring."""

    def __init__(self, owner: Any, backend: Backend | None, device: int = 0) -> None:
        self.name = type(owner).__name__
        self.device = device
        self.backend = backend
        self.buffers: dict[Any, Ledger] = {}
        """Each buffer's ledger, by its memory (a data pointer, or the model's buffer)."""
        self.handed: tuple[Any, ...] = ()
        """The buffers the last call handed out."""
        self.turns = Turns(self.name)
        """The thread rule (:mod:`streamsafe.turns`): one thread at a time calls the SDK object."""
        self.writer: Stream | None = None
        """The stream the SDK writes its buffers on, as the last guard knew it."""
        self.writer_known = False
        """Whether :attr:`writer` is known to be the SDK's stream (else assumed: its default)."""
        self.unguarded_stats: dict[str, int] = new_stats()
        self.default_contract: Any = None
        """The contract a class-level guard made for this object."""
        self.calls = 0
        """Calls that wrote buffers (for messages)."""
        self.plan: FencePlan | None = None
        """The plan of the last guarded call (for reports)."""
        self.out_stats: dict[str, int] | None = None
        """(Reports: a pool's counts are its contracts'.)"""
        self.captured: dict[Stream, Any] = {}
        """Reader streams whose reads of frames are covered by an event recorded right after them (a copy
        helper's copy), with that event: the next call waits for the event, not for the stream's later work."""

    def _ledger(self, owner: Any, key: Any) -> Ledger:
        ledger = self.buffers.get(key)
        if ledger is None:
            ledger = self.buffers[key] = Ledger(owner, self.backend)
            ledger.turns = self.turns  # (one thread rule for the pool: an import waits for, or refuses, a decode)
        return ledger

    # -- calls --------------------------------------------------------------------------------------------

    def readers(self, current: Stream | None) -> tuple[Stream, ...]:
        """Every stream that may still read a buffer of the pool: the readers of each buffer and, where a
        zero-copy view of a buffer escaped, ``current`` (the framework's current stream now)."""
        found: dict[Stream, None] = {}
        for ledger in self.buffers.values():
            found.update(ledger.readers)
            if ledger.escaped and current is not None:
                found[current] = None
        return tuple(found)

    def escaped(self) -> bool:
        """Whether a zero-copy view of a buffer left with no stream streamsafe knows (then the current stream
        at the next call may read it)."""
        return any(ledger.escaped for ledger in self.buffers.values())

    def current_stream(self) -> Stream | None:
        """The framework's current stream (for an escaped view), or ``None`` when no view escaped."""
        for ledger in self.buffers.values():
            if ledger.escaped:
                return ledger.current_stream()
        return None

    def before_call(self, plan: FencePlan) -> list[Fence]:
        """D5, before a call that may write any buffer: ``plan``'s stream waits for every reader of the pool
        (on the device under ``event``; a host wait under ``stream``, a device sync under ``device``). The
        readers whose reads an event covers (:meth:`capture`) are waited for by :meth:`wait_captured`."""
        readers = self.readers(self.current_stream() if self.escaped() else None)
        if not readers:
            return []
        return [_as_decoder_fence(f) for f in plan.reuse_fences(readers, (), ())]

    def capture(self, ledger: Ledger, generation: int, stream: Stream) -> None:
        """A copy of a frame (``ledger``'s buffer, ``generation``) was just issued on ``stream``, and the frame
        is read there no more: record an event on ``stream`` now, which the next call waits for (the expert's
        "event after the reader"), instead of the stream's later work. Does not block."""
        backend = self.backend
        assert backend is not None
        event = self.captured.get(stream)
        if event is None:
            event = self.captured[stream] = backend.acquire_event(self.device)
        backend.record(event, issuable(stream))
        ledger.reader_captured(generation, stream)

    def wait_captured(self, plan: FencePlan, stats: dict[str, int], skip: Iterable[Stream] = ()) -> None:
        """D5 for the captured readers: ``plan``'s stream waits on each one's event (a host wait for it under
        ``stream``, a device sync under ``device``; nothing under ``none``), except for the streams in ``skip``
        (readers waited for as a whole already). The events go back to the pool. Blocks only as said."""
        if not self.captured:
            return
        backend = self.backend
        assert backend is not None
        strategy = plan.strategy
        skip = set(skip)
        synced = False
        for stream, event in list(self.captured.items()):  # (each leaves once its wait is queued: an interrupt keeps the rest)
            counted = True
            if stream in skip or strategy is Strategy.NONE or implicitly_ordered(stream, plan.run_stream):
                counted = False
            elif strategy is Strategy.EVENT:
                backend.wait(issuable(plan.run_stream), event)
                stats["fences"] += 1
            elif strategy is Strategy.STREAM:
                backend.synchronize_event(event)
                stats["host_waits"] += 1
            elif not synced:  # (one device sync covers every reader)
                backend.synchronize_device(self.device)
                stats["device_syncs"] += 1
                synced = True
            else:
                counted = False
            if counted:
                stats["D5"] = stats.get("D5", 0) + 1
            del self.captured[stream]
            backend.release_event(event)

    def after_call(self, owner: Any, plan: FencePlan, keys: Iterable[Any], stats: dict[str, int],
                   default_consumer: Stream, *, prefetches: bool) -> list[tuple[Ledger, int]]:
        """Record a call that returned frames in the buffers ``keys``: each has a new generation (older
        frames of it are stale); with ``prefetches``, so has every buffer handed out before. Returns each
        frame's (ledger, generation), in order."""
        keys = tuple(keys)
        written = dict.fromkeys(keys)
        if prefetches:
            written.update(dict.fromkeys(self.handed))
        made = {key: (self._ledger(owner, key), 0) for key in written}
        for key, (ledger, _) in made.items():
            made[key] = (ledger, ledger.after_run(plan, (), stats, default_consumer))
        self.handed = keys
        self.calls += 1
        return [made[key] for key in keys]

    def after_interrupted_call(self, owner: Any, plan: FencePlan, stats: dict[str, int], default_consumer: Stream) -> None:
        """A call left by an exception that is no error of the SDK's (``KeyboardInterrupt``) after it may have
        written: every buffer may have been, so every frame handed out so far is stale."""
        for key in list(self.buffers):
            self.buffers[key].after_run(plan, (), stats, default_consumer)
        self.handed = ()

    # -- releases ------------------------------------------------------------------------------------------

    def release_fences(self, strategy: Strategy) -> list[Fence]:
        """D6, before the SDK may free or reallocate its buffers: the host waits for every stream that may
        still read one (each buffer's readers and outstanding readers, a view's current stream)."""
        streams: dict[Stream, None] = {}
        for ledger in self.buffers.values():
            streams.update(ledger.outstanding)
            streams.update(ledger.readers)
        current = self.current_stream() if self.escaped() else None
        if current is not None:
            streams[current] = None
        if not streams:
            return []
        return [dataclasses.replace(f, hazard="D6", why="the decoder frees or reallocates its buffers with no stream order")
                for f in release_fences(_RESOLVED[strategy], streams)]

    def released(self) -> None:
        """The host waited for every reader, and the SDK may have freed its buffers: every frame is stale,
        and a buffer at the same address later is a new one."""
        for ledger in self.buffers.values():
            ledger.released()
        self.buffers = {}
        self.handed = ()
        self._drop_captured()

    def _drop_captured(self) -> None:
        if self.captured and self.backend is not None:
            for event in self.captured.values():
                self.backend.release_event(event)
        self.captured = {}

    def waited(self) -> None:
        """The host waited for every reader (a guard's ``synchronize()``): frames stay valid."""
        for ledger in self.buffers.values():
            ledger.waited()
        self._drop_captured()

    def apply(self, fences: Iterable[Fence], stats: dict[str, int]) -> None:
        """Issue ``fences`` through the pool's backend (device waits do not block the host)."""
        backend = self.backend
        assert backend is not None
        apply_fences(backend, self.device, fences, stats)

    def tracked_call(self, owner: Any, name: str, call: Callable[[], Any], frames_of: Callable[[Any], list[Any]],
                     key_of: Callable[[Any], Any], prefetches: bool, *, release: bool = False,
                     error_names: tuple[str, ...] = ()) -> Any:
        """A plain call on an object no guard holds now, but which has a pool: the SDK's raw frames, after
        the device waits that keep the frames streamsafe handed out safe (D5); the buffers it wrote are
        rewritten (their older frames stale). A releasing call (``release``) first makes the host wait for
        every reader (D6). ``error_names``: the SDK's errors that may come after writes. Does not block
        otherwise, beyond the SDK's own wait."""
        writer = self.writer
        if writer is None or self.backend is None:
            return call()
        plan = pool_plan(Strategy.EVENT, writer, writer_known=self.writer_known)
        with self.turns.using(name, False, self):
            if release:
                self.apply(self.release_fences(Strategy.EVENT), self.unguarded_stats)
                try:
                    return call()
                finally:
                    self.released()
            fences = self.before_call(plan)
            self.apply(fences, self.unguarded_stats)
            self.wait_captured(plan, self.unguarded_stats, waited_streams(fences))
            returned = False
            try:
                raw = call()
                returned = True
                self.after_call(owner, plan, [key_of(f) for f in frames_of(raw)], self.unguarded_stats, writer,
                                prefetches=prefetches)
            except BaseException as e:  # interrupted after it may have written, or refused (streamsafe.interrupts)
                if returned or after_writes(e, error_names):
                    self.after_interrupted_call(owner, plan, self.unguarded_stats, writer)
                raise
        return raw

    def __repr__(self) -> str:
        return f"<streamsafe BufferPool {self.name} cuda:{self.device}, {len(self.buffers)} buffer(s), {self.calls} call(s)>"


_POOLS: weakref.WeakKeyDictionary[Any, BufferPool] = weakref.WeakKeyDictionary()
_PINNED: dict[int, tuple[Any, BufferPool]] = {}
_lock = threading.Lock()


def pool_of(owner: Any, backend: Backend | None = None, *, create: bool = True, device: int = 0) -> BufferPool | None:
    """The buffer pool of ``owner`` on ``device`` (made on first use when ``create``; held weakly by ``owner``).
    Does not block."""
    with _lock:
        try:
            pool = _POOLS.get(owner)
            if pool is None and create:
                pool = _POOLS[owner] = BufferPool(owner, backend, device)
        except TypeError:  # cannot be weakly referenced: held for the life of the process
            pinned = _PINNED.get(id(owner))
            pool = pinned[1] if pinned is not None and pinned[0] is owner else None
            if pool is None and create:
                pool = BufferPool(owner, backend, device)
                _PINNED[id(owner)] = (owner, pool)
    return pool
