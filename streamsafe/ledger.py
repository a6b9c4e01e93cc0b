"""Ledgers: the ordering state of one SDK object, shared by every guard on it.

Every contract, decorator, class-level guard and tracked unguarded call on one SDK object reads and writes
the same :class:`Ledger` (held weakly by the object; one that cannot be weakly referenced is held until it
is closed). A ledger has the object's turn (:mod:`streamsafe.turns`: one thread at a time), the streams it
will still fence (:mod:`streamsafe.holds`), and its buffers (:mod:`streamsafe.buffers`):

* :class:`EffectLedger`: an effect's one output buffer, which every call rewrites, with the SDK streams of
  the last call (the next call, on whatever stream, waits for them before it overwrites the SDK's buffers:
  H5), the input shapes (an input-size change may make the SDK reallocate: H6), the output-size and
  encoding attributes, and the inputs kept alive after asynchronous calls (:mod:`streamsafe.keepalive`: H12);
* :class:`PoolLedger`: a decoder's pool of buffers, each written by some calls and handed out as frames
  (D5, D6), with the events recorded right after a copy helper's reads; or, for an SDK whose frames hold their
  buffers until dropped (:attr:`~streamsafe.profile.PoolProfile.frames_hold_buffers`: PyAV), a buffer per frame
  handed out, and the SDK's frames dropped since, each kept until its readers are done (D7).

Both answer the engine (:mod:`streamsafe.engine`) with one protocol: :meth:`~Ledger.reuse_fences` (what must
come before a call that writes), :meth:`~Ledger.record_write`, :meth:`~Ledger.record_interrupted`,
:meth:`~Ledger.record_refused`, and :meth:`~Ledger.release_fences` / :meth:`~Ledger.released` around a
release. Nothing here blocks the host except the release waits the caller applies.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import hooks
from .backend import Backend, current_backend
from .buffers import OUTSTANDING_BOUND, Buffer, PoolBuffer, new_stats
from .frameworks import framework_current_stream_handle
from .holds import StreamHolds
from .identity import WeakIdentityMap
from .errors import NotAnEffectError
from .keepalive import KeepAlive
from .plan import Fence, FencePlan, release_fences
from .profile import PoolProfile, profile_of
from .program import ImportPrograms, apply_fences
from .strategy import Strategy
from .streams import Stream, implicitly_ordered, issuable
from .turns import Turns

if TYPE_CHECKING:
    from .frame import Frame

__all__ = ["Ledger", "EffectLedger", "PoolLedger", "ledger_of", "pool_of", "adopt_ledger", "forget_ledger", "new_stats",
           "held_reason"]


class Ledger:
    """The ordering state of one SDK object, named ``name``, on ``device`` (see the module docstring)."""

    def __init__(self, name: str, backend: Backend | None, device: int) -> None:
        self.name = name
        self.device = device
        self.backend = backend
        self.turns = Turns(name)
        """The thread rule: one thread at a time holds the object (:mod:`streamsafe.turns`)."""
        self.holds = StreamHolds(device)
        self.holds.hold_stream = self._hold_own_stream
        self.programs = ImportPrograms(self.resolved_backend, device)
        """Bound import fences by (plan, consumer)."""
        self.closed = False
        self.adopted = False
        """Whether a guard other than the one that made it has taken it up (then it stays, whatever becomes of
        its maker: :func:`forget_ledger`)."""
        self.unguarded_stats: dict[str, int] = new_stats()
        """Fences made for tracked raw calls (plain calls outside any guard)."""
        self.captured: dict[Stream, Any] = {}
        """Reader streams whose reads an event recorded right after them covers (a pool's; empty for effects)."""
        self.keepalive = KeepAlive(self.resolved_backend, device)
        """Inputs the SDK may still read after an asynchronous call (H12; an effect's)."""

    def resolved_backend(self) -> Backend:
        """The backend of the object's fences (the current one until a guard set it)."""
        if self.backend is None:
            self.backend = current_backend()
        return self.backend

    def _hold_own_stream(self, stream: Stream) -> Any:
        return self.resolved_backend().hold_stream(stream)

    def apply(self, fences: Iterable[Fence], stats: dict[str, int]) -> None:
        """Issue ``fences`` through the object's backend, counted in ``stats`` (device waits do not block the
        host; host waits and device syncs do)."""
        apply_fences(self.resolved_backend(), self.device, fences, stats)

    def current_stream(self) -> Stream:
        """The framework's current stream on the object's device (held handles need no driver query)."""
        be = self.resolved_backend()
        if be.framework_streams:
            found = framework_current_stream_handle(self.device)
            if found is not None:
                known = self.holds.stream(found[0])
                if known is not None:
                    return known
        return be.current_stream(self.device)

    def buffers(self) -> Iterable[Buffer]:
        """Every buffer the ledger tracks."""
        raise NotImplementedError

    def needed_streams(self) -> Iterable[Stream]:
        """The streams the ledger may still fence (their framework objects stay held)."""
        for buffer in self.buffers():
            yield from buffer.readers
            yield from buffer.outstanding

    def import_counters(self) -> list[dict[str, int]]:
        """The counters that imports of the current outputs still count their fences into (a guard's ``stats``)."""
        return [buffer.stats for buffer in self.buffers()]

    def release_holds(self) -> None:
        """Let go of the held streams the ledger will no longer fence."""
        if self.holds.held:
            self.holds.release(self.needed_streams())

    def escaped_reader(self) -> Stream | None:
        """The framework's current stream when a zero-copy view of a buffer escaped (it may read it), else ``None``."""
        if any(b.escaped for b in self.buffers()):
            return self.current_stream()
        return None

    def all_readers(self, current: Stream | None = None) -> tuple[Stream, ...]:
        """Every stream that may still read a buffer: each buffer's readers and, where a view of one escaped,
        ``current`` (the framework's current stream now)."""
        found: dict[Stream, None] = {}
        for buffer in self.buffers():
            found.update(buffer.readers)
            if buffer.escaped and current is not None:
                found[current] = None
        return tuple(found)

    def release_fences(self, plan: FencePlan | None, strategy: Strategy | None = None) -> list[Fence]:
        """H6/D6, before the SDK may release or replace its buffers: the host waits for every stream that may
        still touch them, as ``plan``'s strategy (else ``strategy``, else ``event``) waits."""
        raise NotImplementedError

    def released(self) -> None:
        """The host waited for every reader, and the SDK may have released or replaced its buffers."""
        raise NotImplementedError

    def waited(self) -> None:
        """The host waited for every reader (a guard's ``synchronize()``): outputs stay valid."""
        raise NotImplementedError

    def wait_for_readers(self, plan: FencePlan | None, strategy: Strategy | None, stats: dict[str, int]) -> None:
        """Apply :meth:`release_fences`. Blocks the host."""
        self.apply(self.release_fences(plan, strategy), stats)

    def closed_object(self, obj: Any) -> None:
        """The object was closed: its buffers are gone, and so is every input it may have read."""
        self.released()
        self.closed = True
        self.keepalive.drain()
        _unpin(obj)

    # -- the engine's protocol -------------------------------------------------------------------------------

    def record_write(self, frame: Frame, raw: Any, stats: dict[str, int]) -> Any:
        """``frame``'s call returned ``raw``: record what it wrote; returns what the output needs (the
        generation, or each frame's buffer and generation)."""
        raise NotImplementedError

    def record_interrupted(self, frame: Frame, stats: dict[str, int]) -> None:
        """``frame``'s call was left by an exception after it may have written (:mod:`streamsafe.interrupts`)."""
        raise NotImplementedError

    def record_refused(self, frame: Frame) -> None:
        """The SDK refused ``frame``'s call (it wrote nothing)."""

    def wait_captured(self, plan: FencePlan, stats: dict[str, int], skip: Iterable[Stream] = ()) -> None:
        """Wait for the readers an event covers (:attr:`captured`; a pool's). Blocks only as the plan says."""

    def __repr__(self) -> str:
        return f"<streamsafe {type(self).__name__} {self.name} cuda:{self.device}>"


class EffectLedger(Ledger):
    """An effect's ordering state: its one output buffer, rewritten by every call (see the module docstring)."""

    def __init__(self, name: str, backend: Backend | None, device: int) -> None:
        super().__init__(name, backend, device)
        self.output = Buffer(self)
        """The SDK's output buffer."""
        self.previous_sdk: tuple[Stream, ...] = ()
        """The SDK streams of the last call (run stream, conversion stream)."""
        self.input_shapes: tuple[Any, ...] | None = None
        self.config: tuple[Any, ...] | None = None
        """The effect's output-size and encoding attributes as the last guard saw or set them."""

    # (the output buffer's state, as the guards and reports read it)
    @property
    def generation(self) -> int:
        """The output's generation (bumped by every call and release)."""
        return self.output.generation

    @property
    def plan(self) -> FencePlan | None:
        """The plan of the call that wrote the current output."""
        return self.output.plan

    @property
    def readers(self) -> dict[Stream, None]:
        """The streams that read the current output."""
        return self.output.readers

    @property
    def outstanding(self) -> dict[Stream, None]:
        """The streams the host has not waited for since the last release."""
        return self.output.outstanding

    @property
    def escaped(self) -> bool:
        """Whether a zero-copy view of the current output escaped."""
        return self.output.escaped

    def buffers(self) -> Iterable[Buffer]:
        return (self.output,)

    def needed_streams(self) -> Iterable[Stream]:
        yield from super().needed_streams()
        yield from self.previous_sdk

    def state(self) -> tuple[Any, ...]:
        """What decides a call's fences besides the call itself and the effect's attributes now: a steady frame is
        reused while this is unchanged."""
        output = self.output
        return (tuple(output.readers), output.escaped, output.plan, self.previous_sdk, self.input_shapes, self.config)

    def reuse_fences(self, plan: FencePlan, shapes: tuple[Any, ...], current: Stream | None) -> list[Fence]:
        """What must come before ``plan``'s call: a release wait when the inputs' size changed (the SDK may
        reallocate its buffers inside the call), then the SDK streams wait for the readers of the current
        output and for the previous call's SDK streams (H5). ``current``: the framework's current stream,
        a reader when a view escaped."""
        output = self.output
        fences: list[Fence] = []
        if self.input_shapes is not None and shapes != self.input_shapes:
            fences += self.release_fences(plan, sdk_streams=False)  # (the SDK's own streams: H5 below, on the device)
        readers: Iterable[Stream] = output.readers
        if output.escaped and current is not None and current not in output.readers:
            readers = (*output.readers, current)  # a view escaped: the framework's current stream may read it
        if output.plan is not None or self.previous_sdk:
            fences += plan.reuse_fences(tuple(readers), self.previous_sdk, tuple(output.readers))
        return fences

    def record_write(self, frame: Frame, raw: Any, stats: dict[str, int]) -> Any:
        plan = frame.plan
        if not frame.guarded:  # a raw call: its output is not handed out; the next guarded call waits for its streams
            self.output.wrote(None, self.output.stats, self.output.default_consumer, handed_out=False)
            self._after(plan.sdk_streams, frame.shapes, True)
            return None
        output = self.output
        new_streams = plan is not output.plan or not self.previous_sdk  # (else the same SDK streams, held already)
        # (the output's new contents, as Buffer.wrote records them: written here, a call fewer a frame)
        generation = output.generation = output.generation + 1
        output.plan = plan
        output.stats = stats
        output.default_consumer = frame.default_consumer
        output.readers = {}
        output.escaped = False
        if new_streams:
            self._after(plan.sdk_streams, frame.shapes, True)
        elif frame.shapes != self.input_shapes:  # (the same plan: the same SDK streams, held already)
            self._resized(frame.shapes)
        if len(output.outstanding) > OUTSTANDING_BOUND:
            output.retire_outstanding()
            self.release_holds()
        return generation

    def record_interrupted(self, frame: Frame, stats: dict[str, int]) -> None:
        """The output may be overwritten, so every older output is stale; the next call and release wait for
        the call's SDK streams as for any call's (the readers stay known)."""
        if not frame.guarded:
            self.record_write(frame, None, stats)
            return
        self.output.overwritten(frame.plan)
        self._after(frame.plan.sdk_streams, frame.shapes, True)

    def record_refused(self, frame: Frame) -> None:
        """The output is as before, but the next call and release also wait for the call's streams, in case
        it issued work before it raised."""
        if not frame.guarded:
            return
        extra = tuple(s for s in frame.plan.sdk_streams if s not in self.previous_sdk)
        if extra:
            self._after((*extra, *self.previous_sdk), self.input_shapes, True)  # (the previous output's writer stays last)

    def _resized(self, shapes: tuple[Any, ...] | None) -> None:
        """A call's inputs are of another size than the previous call's: the SDK may have put its output elsewhere."""
        self.output.moved()
        self.input_shapes = shapes

    def _after(self, sdk_streams: tuple[Stream, ...], shapes: tuple[Any, ...] | None, hold: bool) -> None:
        self.previous_sdk = sdk_streams
        if shapes != self.input_shapes:
            self._resized(shapes)
        if hold:
            # Keep the framework objects of the SDK streams alive until a later call has fenced them (or a
            # release waited for them): a stream made for one frame, or declared to a guard dropped without
            # close(), would otherwise be destroyed, and its handle reused, before the next call's wait on it.
            for stream in sdk_streams:
                self.holds.hold(stream)
            self.release_holds()

    def release_fences(self, plan: FencePlan | None, strategy: Strategy | None = None, *,  # type: ignore[override]
                       sdk_streams: bool = True) -> list[Fence]:
        """H6: the host waits for the readers of the current output, a view's current stream, and
        (``sdk_streams``) the previous call's SDK streams (the SDK's own work on buffers it may keep; after
        the wait no later call needs to order after them, and a stream the program then destroys is never
        used again)."""
        output = self.output
        streams = [*output.outstanding, *output.readers]
        if output.escaped:
            streams.append(self.current_stream())
        if sdk_streams:
            streams += [s for s in self.previous_sdk if s not in streams]
        if not streams:
            return []
        if plan is not None:
            return list(plan.release_fences(streams))
        return release_fences(strategy or Strategy.EVENT, streams)

    def released(self) -> None:
        self.output.released()
        self.previous_sdk = ()
        self.input_shapes = None
        self.release_holds()

    def waited(self) -> None:
        self.output.waited()
        self.previous_sdk = ()
        self.release_holds()


_HELD_STRATEGY = {
    Strategy.AUTO: Strategy.EVENT, Strategy.EVENT: Strategy.EVENT, Strategy.ASYNC: Strategy.EVENT,
    Strategy.STREAM: Strategy.STREAM, Strategy.DEVICE: Strategy.DEVICE, Strategy.NONE: Strategy.NONE,
}
"""How a dropped frame is given back under each strategy (D7): kept until events on its readers complete (no host
wait), or after a host wait for each reader (``stream``) or for the device (``device``), or at once (``none``)."""


_HELD_REASONS = {
    Strategy.EVENT: "the decoder hands out complete frames, and no call rewrites a buffer a frame holds: a dropped frame "
                    "goes back to the decoder once events recorded on every stream that read it have completed (D7), "
                    "with no host wait of streamsafe's",
    Strategy.STREAM: "a dropped frame goes back to the decoder after the host waits for each stream that read it (D7)",
    Strategy.DEVICE: "a dropped frame goes back to the decoder after a device-wide synchronisation (D7)",
    Strategy.NONE: "no fences (benchmarks only): a dropped frame goes back to the decoder at once, while its reads may "
                   "still be queued",
}


def held_reason(strategy: Strategy) -> str:
    """Why the plan of an SDK whose frames hold their buffers (PyAV's) is what it is, under ``strategy``."""
    return _HELD_REASONS[_HELD_STRATEGY[strategy]]


class PoolLedger(Ledger):
    """A pooled SDK object's ordering state: a buffer per pool buffer, by its memory (see the module docstring).

    Before a call that may write any buffer, the SDK's stream waits on the device for every reader of every
    buffer (D5); the call's own host wait for its stream then covers them. After the call, each buffer it
    handed out has a new generation; with a prefetching SDK (a decoder thread that decodes ahead into the
    buffers no longer handed out), every buffer handed out before the call is rewritten at any time after it,
    so it is stale too. A release first makes the host wait for every reader (D6).

    When the SDK's frames hold their buffers (``profile.frames_hold_buffers``: the SDK takes a buffer back when the
    last reference to its frame goes, and never rewrites one a frame holds), no call is fenced: each frame handed
    out gets a buffer of its own, and the SDK's frame a guarded frame dropped (or closed) is kept until its readers
    are done (D7: :meth:`give_back`), so the SDK reuses the buffer only after them."""

    def __init__(self, name: str, backend: Backend | None, device: int, profile: PoolProfile | None = None) -> None:
        super().__init__(name, backend, device)
        self.turns.kind = "decoder"
        self.profile = profile
        """The SDK's pool profile (``None``: not known; its buffers are rewritten by later calls)."""
        self.frames_hold = bool(profile is not None and profile.frames_hold_buffers)
        """Whether each frame holds its buffer until it is dropped (see the class docstring)."""
        self.dropped: deque[tuple[Any, Buffer]] = deque()
        """The SDK's frames whose guarded frames were dropped, with their buffers, not yet given back (appended by a
        finalizer, in whatever thread drops the last reference: :meth:`frame_dropped`)."""
        self.pool: dict[Any, Buffer] = {}
        """Each buffer, by its memory (a data pointer, or the model's buffer); by itself when frames hold their
        buffers (a buffer per frame handed out, until the frame is given back)."""
        self.handed: tuple[Any, ...] = ()
        """The buffers the last call handed out."""
        self.writer: Stream | None = None
        """The stream the SDK writes its buffers on, as the last guard knew it."""
        self.writer_known = False
        """Whether :attr:`writer` is known to be the SDK's stream (else assumed: its default)."""
        self.calls = 0
        """Calls that wrote buffers (for messages and reports)."""
        self.plan: FencePlan | None = None
        """The plan of the last guarded call (for reports)."""

    def buffers(self) -> Iterable[Buffer]:
        return self.pool.values()

    def needed_streams(self) -> Iterable[Stream]:
        yield from super().needed_streams()
        if self.writer is not None:
            yield self.writer

    def buffer(self, key: Any) -> Buffer:
        """The buffer of memory ``key`` (made on first use)."""
        buffer = self.pool.get(key)
        if buffer is None:
            buffer = self.pool[key] = PoolBuffer(self)
        return buffer

    def escaped(self) -> bool:
        """Whether a zero-copy view of a buffer left with no stream streamsafe knows."""
        return any(b.escaped for b in self.pool.values())

    def reuse_fences(self, plan: FencePlan) -> list[Fence]:
        """D5, before a call that may write any buffer: ``plan``'s stream waits for every reader of the pool (on
        the device under ``event``; a host wait under ``stream``, a device sync under ``device``). The readers
        an event covers (:meth:`capture`) are waited for by :meth:`wait_captured`. None when frames hold their
        buffers (the SDK writes no buffer a frame holds)."""
        if self.frames_hold:
            return []
        readers = self.all_readers(self.escaped_reader())
        if not readers:
            return []
        return [dataclasses.replace(f, hazard="D5", why="the next decode may write the buffer this stream reads")
                for f in plan.reuse_fences(readers, (), ())]

    def capture(self, buffer: Buffer, generation: int, stream: Stream) -> None:
        """A copy of a frame (``buffer``, ``generation``) was just issued on ``stream``, and the frame is read there
        no more: record an event on ``stream`` now, which the next call waits for (the expert's "event after the
        reader"), instead of the stream's later work. Does not block."""
        if self.frames_hold:  # (the frame's readers are waited for when it is given back, not by the next call)
            return
        backend = self.resolved_backend()
        event = self.captured.get(stream)
        if event is None:
            event = self.captured[stream] = backend.acquire_event(self.device)
        backend.record(event, issuable(stream))
        buffer.reader_captured(generation, stream)

    def wait_captured(self, plan: FencePlan, stats: dict[str, int], skip: Iterable[Stream] = ()) -> None:
        """D5 for the captured readers: ``plan``'s stream waits on each one's event (a host wait for it under
        ``stream``, a device sync under ``device``; nothing under ``none``), except for the streams in ``skip``
        (readers waited for as a whole already). The events go back to the pool. Blocks only as said."""
        if not self.captured:
            return
        backend = self.resolved_backend()
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

    def record_write(self, frame: Frame, raw: Any, stats: dict[str, int]) -> Any:
        """Each buffer the call handed out has a new generation (older frames of it are stale); with a
        prefetching SDK, so has every buffer handed out before. Returns each frame's (buffer, generation)."""
        profile: Any = frame.profile  # (a PoolProfile)
        if self.frames_hold:
            return self._hand_out(frame, raw, stats)
        keys = profile.buffer_keys(raw)
        if hooks.observers and not self.resolved_backend().records_accesses:
            # sanitize mode on a GPU: the SDK's writes, which no kernel of streamsafe's shows, go to the observers
            # (after the fences, which they saw), then its own host wait for its stream
            for o in hooks.observers:
                for key in keys:
                    o.on_launch(frame.plan.run_stream, f"{self.name} writes a decoded frame", [], [key], self.device)
                o.on_stream_synchronize(frame.plan.run_stream)
        written = dict.fromkeys(keys)
        if profile.prefetches:
            written.update(dict.fromkeys(self.handed))
        made = {key: (self.buffer(key), 0) for key in written}
        for key, (buffer, _) in made.items():
            made[key] = (buffer, buffer.wrote(frame.plan, stats, frame.default_consumer, handed_out=frame.guarded))
            if len(buffer.outstanding) > OUTSTANDING_BOUND:
                buffer.retire_outstanding()
        self.handed = keys
        self.calls += 1
        self.holds.hold(frame.plan.run_stream)
        self.release_holds()
        return [made[key] for key in keys]

    def record_interrupted(self, frame: Frame, stats: dict[str, int]) -> None:
        """Every buffer may have been written, so every frame handed out so far is stale (none when frames hold
        their buffers: the SDK writes none a frame holds)."""
        if self.frames_hold:
            return
        for buffer in self.pool.values():
            buffer.wrote(frame.plan, stats, frame.default_consumer)
        self.handed = ()

    def release_fences(self, plan: FencePlan | None, strategy: Strategy | None = None) -> list[Fence]:
        streams: dict[Stream, None] = {}
        for buffer in self.pool.values():
            streams.update(buffer.outstanding)
            streams.update(buffer.readers)
        current = self.escaped_reader()
        if current is not None:
            streams[current] = None
        if not streams:
            return []
        resolved = plan.strategy if plan is not None else (strategy or Strategy.EVENT)
        return [dataclasses.replace(f, hazard="D6", why="the decoder frees or reallocates its buffers with no stream order")
                for f in release_fences(resolved, streams)]

    def released(self) -> None:
        """Every frame is stale, and a buffer at the same address later is a new one. When frames hold their buffers,
        the frames handed out stay valid (the SDK frees no buffer a frame holds), and those dropped are given back
        (the host waited for their readers)."""
        if self.frames_hold:
            self.waited()
            return
        for buffer in self.pool.values():
            buffer.released()
        self.pool = {}
        self.handed = ()
        self._drop_captured()
        self.release_holds()

    def waited(self) -> None:
        if self.frames_hold:  # the host waited for every reader: the frames dropped go back now, and those kept too
            self._give_back_now()
            self.keepalive.drain()
        for buffer in self.pool.values():
            buffer.waited()
        self._drop_captured()
        self.release_holds()

    # -- frames that hold their buffers (D7) ---------------------------------------------------------------------

    def _hand_out(self, frame: Frame, raw: Any, stats: dict[str, int]) -> list[tuple[Buffer, int]]:
        """``frame``'s call returned ``raw``: a buffer of its own for each frame in it (no buffer is rewritten), after
        the frames dropped since the last call are given back. Returns each frame's (buffer, generation)."""
        if self.dropped:
            self.give_back(frame.plan.requested, stats)
        made: list[tuple[Buffer, int]] = []
        for _ in frame.profile.frames_of(raw):  # type: ignore[union-attr]
            buffer = PoolBuffer(self)
            self.pool[buffer] = buffer
            made.append((buffer, buffer.wrote(frame.plan, stats, frame.default_consumer)))
        self.calls += 1
        self.holds.hold(frame.plan.run_stream)
        self.release_holds()
        return made

    def frame_dropped(self, raw: Any, buffer: Buffer) -> None:
        """A guarded frame of ``buffer`` went (its finalizer, in whatever thread dropped it): its SDK frame ``raw`` is
        kept until the next call, or the next wait, gives it back (:meth:`give_back`). Issues nothing. Once the
        object is closed, the SDK decodes no more into its pool, so ``raw`` goes at once."""
        if self.closed:
            self.pool.pop(buffer, None)
            return
        self.dropped.append((raw, buffer))

    def frame_closed(self, raw: Any, buffer: Buffer) -> None:
        """``frame.close()``: ``raw`` is given back now, as a dropped frame is at the next call (under the plan that
        wrote it). Takes the object's turn; blocks the host only under ``stream`` and ``device``."""
        if self.closed:  # (the SDK decodes no more into its pool)
            self.pool.pop(buffer, None)
            buffer.released()
            return
        plan = buffer.plan
        self.dropped.append((raw, buffer))
        self.turns.run("close", self.give_back, plan.requested if plan is not None else Strategy.EVENT, buffer.stats)

    def give_back(self, strategy: Strategy, stats: dict[str, int]) -> None:
        """D7: each SDK frame dropped since goes back to the SDK once its readers are done: under ``auto``, ``event``
        and ``async`` it is kept until events recorded now on every stream that read it complete (no host wait); under
        ``stream`` the host waits for each reader, under ``device`` for the device, first; under ``none`` it goes at
        once. The frame's buffer is released (a view of it used later is stale). Call under the object's turn."""
        resolved = _HELD_STRATEGY[strategy]
        waiting: dict[Stream, None] = {}
        kept: list[Any] = []  # (let go at the end, once the host waited for their readers)
        current: Stream | None = None
        while self.dropped:
            raw, buffer = self.dropped.popleft()
            streams = dict(buffer.outstanding)
            streams.update(buffer.readers)
            if buffer.escaped:  # (a view that left with no stream streamsafe knows: the current stream may read it)
                current = current or self.current_stream()
                streams[current] = None
            self.pool.pop(buffer, None)
            buffer.released()
            if not streams or resolved is Strategy.NONE:
                continue
            if resolved is Strategy.EVENT:
                stats["D7"] = stats.get("D7", 0) + 1
                self.keepalive.add(raw, streams, ordering=True, stats=stats)
            else:
                waiting.update(streams)
                kept.append(raw)
        if waiting:
            self.apply([dataclasses.replace(f, hazard="D7", why="the SDK takes the buffer back when its frame goes, with "
                                            "no stream order") for f in release_fences(resolved, waiting)], stats)
        self.release_holds()

    def _give_back_now(self) -> None:
        """The host waited for every reader: the frames dropped go back at once."""
        while self.dropped:
            _, buffer = self.dropped.popleft()
            self.pool.pop(buffer, None)
            buffer.released()

    def _drop_captured(self) -> None:
        if self.captured:
            backend = self.resolved_backend()
            for event in self.captured.values():
                backend.release_event(event)
        self.captured = {}

    def __repr__(self) -> str:
        return f"<streamsafe PoolLedger {self.name} cuda:{self.device}, {len(self.pool)} buffer(s), {self.calls} call(s)>"


# -- the registry: one ledger per SDK object -------------------------------------------------------------------

_LEDGERS: WeakIdentityMap[Ledger] = WeakIdentityMap()  # (by identity: two SDK objects that compare equal are two)
_PINNED: dict[int, tuple[Any, Ledger]] = {}
_registry_lock = threading.RLock()


def _registered(obj: Any) -> Ledger | None:
    ledger: Ledger | None = _LEDGERS.get(obj)
    if ledger is None:  # (one that cannot be weakly referenced is pinned)
        pinned = _PINNED.get(id(obj))
        return pinned[1] if pinned is not None and pinned[0] is obj else None
    return ledger


def _register(obj: Any, make: Callable[[], Ledger]) -> Ledger:
    with _registry_lock:
        ledger = _registered(obj)
        if ledger is None:
            ledger = make()
            try:
                _LEDGERS[obj] = ledger
            except TypeError:  # held for the life of the process (until closed)
                _PINNED[id(obj)] = (obj, ledger)
        return ledger


def ledger_of(effect: Any, backend: Backend | None = None, *, create: bool = True, device: int | None = None) -> Any:
    """The ledger of ``effect`` (an :class:`EffectLedger`, made on first use when ``create``; a decoder's is its
    :class:`PoolLedger`), or ``None``. Does not block."""
    ledger = _registered(effect)
    if ledger is not None or not create:
        return ledger
    dev = int(getattr(effect, "device", 0) or 0) if device is None else device
    return _register(effect, lambda: EffectLedger(type(effect).__name__, backend, dev))


def pool_of(owner: Any, backend: Backend | None = None, *, create: bool = True, device: int = 0) -> Any:
    """The :class:`PoolLedger` of ``owner`` on ``device`` (made on first use when ``create``, with ``owner``'s pool
    profile), or ``None``."""
    ledger = _registered(owner)
    if ledger is not None or not create:
        return ledger
    try:
        profile = profile_of(owner)
    except NotAnEffectError:
        profile = None
    return _register(owner, lambda: PoolLedger(type(owner).__name__, backend, device,
                                               profile if isinstance(profile, PoolProfile) else None))


def adopt_ledger(obj: Any) -> Ledger | None:
    """``obj``'s ledger, if it has one, marked as taken up by another guard (so the refusal of the guard that
    made it cannot drop it: :func:`forget_ledger`). Does not block."""
    with _registry_lock:
        ledger = _registered(obj)
        if ledger is not None:
            ledger.adopted = True
        return ledger


def forget_ledger(obj: Any, ledger: Ledger) -> None:
    """Drop ``obj``'s ledger if it is ``ledger`` and no other guard has taken it up (a guard refused while it
    was being made)."""
    with _registry_lock:
        if ledger.adopted:
            return
        if _registered(obj) is ledger:
            if _LEDGERS.pop(obj) is None:
                del _PINNED[id(obj)]


def _unpin(obj: Any) -> None:
    """Drop a pinned ledger once its object is closed (weakly held ledgers go with their object)."""
    pinned = _PINNED.get(id(obj))
    if pinned is not None and pinned[0] is obj:
        del _PINNED[id(obj)]
