"""The ordering ledger: one per effect instance, shared by every guard on it.

Every contract, decorator, class-level guard and tracked unguarded call on one effect
reads and writes the same :class:`Ledger`. It knows, for the SDK's buffers:

* the **output generation**: bumped by every ``run()`` that returns, every release
  (close, output-size or encoding change, an input-size change); an output of an older
  generation can no longer be imported (:class:`~streamsafe.errors.StaleOutputError`);
* the **readers** of the current output: every stream a consumer imported it on, or
  declared with :meth:`~streamsafe.outputs.SafeOutput.record_stream`, and the framework's
  current stream when a zero-copy view escaped; the next ``run()`` waits for them (H5);
* the **SDK streams** of the last run (run stream, conversion stream): the next run, on
  whatever stream, waits for them before it overwrites the SDK's buffers (H5);
* the **outstanding** readers the host has not waited for since the last release: a
  release (close, resize) makes the host wait for them first (H6; the SDK waits for its own
  work itself);
* the **inputs** the SDK may still read after an asynchronous run (H12): kept alive until an
  event on the run stream completes (torch tensors use ``record_stream`` instead).

Outputs talk to the ledger through :meth:`Ledger.import_output`, :meth:`Ledger.check_current`,
:meth:`Ledger.add_reader` and :meth:`Ledger.reader_done`. Ledgers are held weakly by
effect; an effect that cannot be weakly referenced is held until it is closed.

Thread rule: an effect, and so its ledger and contracts, is used by one thread at a time.
Calls from two threads at once raise :class:`~streamsafe.errors.ConcurrentUseError`; calls
that a program serialises itself (a lock, a queue) are fine.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from . import hooks
from .backend import Backend, current_backend
from .errors import StaleOutputError
from .frameworks import framework_current_stream_handle
from .plan import Fence, FencePlan, plan_fences, release_fences
from .program import FenceProgram, apply_fences
from .strategy import Strategy
from .streams import LEGACY_HANDLE, Stream, StreamKind, issuable
from .turns import Turns

__all__ = ["Ledger", "ledger_of", "adopt_ledger", "forget_ledger", "new_stats"]

_MAX_KEEPALIVE = 64
_OUTSTANDING_BOUND = 8
"""Past this many outstanding reader streams (a new consumer stream a frame), the ledger drops those whose
reads are known complete (an event query; no host wait)."""

_LEDGERS: weakref.WeakKeyDictionary[Any, Ledger] = weakref.WeakKeyDictionary()
_PINNED: dict[int, tuple[Any, Ledger]] = {}
_registry_lock = threading.Lock()


def ledger_of(effect: Any, backend: Backend | None = None, *, create: bool = True) -> Ledger | None:
    """The ledger of ``effect`` (made on first use when ``create``). Does not block."""
    try:
        ledger = _LEDGERS.get(effect)
    except TypeError:  # cannot be weakly referenced
        pinned = _PINNED.get(id(effect))
        ledger = pinned[1] if pinned is not None and pinned[0] is effect else None
    if ledger is not None or not create:
        return ledger
    with _registry_lock:
        try:
            ledger = _LEDGERS.get(effect)
            if ledger is None:
                ledger = _LEDGERS[effect] = Ledger(effect, backend)
        except TypeError:
            pinned = _PINNED.get(id(effect))
            if pinned is not None and pinned[0] is effect:
                return pinned[1]
            ledger = Ledger(effect, backend)
            _PINNED[id(effect)] = (effect, ledger)
    return ledger


def adopt_ledger(effect: Any) -> Ledger | None:
    """``effect``'s ledger, if it has one, marked as taken up by another contract (so the refusal of the
    contract that made it cannot drop it: :func:`forget_ledger`). Does not block."""
    with _registry_lock:
        ledger = ledger_of(effect, create=False)
        if ledger is not None:
            ledger.adopted = True
        return ledger


def forget_ledger(effect: Any, ledger: Ledger) -> None:
    """Drop ``effect``'s ledger if it is ``ledger`` and no other contract has taken it up (a contract
    refused while it was being made)."""
    with _registry_lock:
        if ledger.adopted:
            return
        try:
            if _LEDGERS.get(effect) is ledger:
                del _LEDGERS[effect]
        except TypeError:
            pinned = _PINNED.get(id(effect))
            if pinned is not None and pinned[0] is effect and pinned[1] is ledger:
                del _PINNED[id(effect)]


def _forget(effect: Any) -> None:
    """Drop a pinned ledger once its effect is closed (weakly held ledgers go with their effect)."""
    pinned = _PINNED.get(id(effect))
    if pinned is not None and pinned[0] is effect:
        del _PINNED[id(effect)]


def new_stats() -> dict[str, int]:
    """Counters of one guard: runs; device-side fences; host waits and device syncs streamsafe
    made; runs in which the SDK itself made the host wait (``non_blocking=False``); and, under
    each hazard's name (``"H1"``, ``"H3"``, ...), the fences of any kind made for it."""
    return {"runs": 0, "fences": 0, "host_waits": 0, "device_syncs": 0, "sdk_waits": 0}


class Ledger:
    """The ordering state of one effect instance. See the module docstring."""

    def __init__(self, effect: Any, backend: Backend | None) -> None:
        self.ref = weakref.ref(self)
        """A weak reference to the ledger (what the views registry keeps)."""
        self.adopted = False
        """Whether a contract other than the one that made it has taken it up (then it stays, whatever
        becomes of its maker: see :func:`forget_ledger`)."""
        self.name = type(effect).__name__
        self.device = int(getattr(effect, "device", 0))
        self.backend = backend
        self.generation = 0
        self.closed = False
        self.plan: FencePlan | None = None
        """The plan of the run that wrote the current output (``None`` before the first run)."""
        self.out_stats: dict[str, int] = new_stats()
        self.unguarded_stats: dict[str, int] = new_stats()
        """Fences made for tracked raw calls (plain ``run()`` outside any guard)."""
        self.default_consumer: Stream | None = None
        self.readers: dict[Stream, None] = {}
        self.escaped = False
        self.previous_sdk: tuple[Stream, ...] = ()
        self.outstanding: dict[Stream, None] = {}
        self.retiring: dict[Stream, Any] = {}
        """Events recorded on outstanding readers that no longer read (see :meth:`_retire_outstanding`)."""
        self.release_generation = 0
        """The generation the last release started: views of an older output may point at freed memory."""
        self.tagged_views: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """Zero-copy views handed out by a copy helper (``out.torch(copy=False)``), with their generation."""
        self.input_shapes: tuple[Any, ...] | None = None
        self.holds: dict[Stream, Any] = {}
        self.declared: dict[Stream, Any] = {}
        """Framework objects of the streams declared to the live contracts on this effect (see :meth:`declare`)."""
        self.known: dict[int, Stream] = {}
        """Streams by handle whose kind is settled: their framework objects are held here (so the
        handle cannot be freed and reused with other flags while the entry stands)."""
        self.keepalive: deque[tuple[Any, Any]] = deque()
        self.torch_streams: dict[Stream, Any] = {}
        self.raw_plans: dict[tuple[Stream, Stream | None, bool], FencePlan] = {}
        """The plans of tracked raw calls, by (SDK stream, conversion stream, non_blocking)."""
        self.import_programs: dict[Stream, FenceProgram] = {}
        """Bound import fences by consumer stream, for the plan that wrote the current output."""
        self.config: tuple[Any, ...] | None = None
        """The effect's output-size and encoding attributes as the last guard saw or set them."""
        self.default_contract: Any = None
        """The contract a class-level guard (:func:`streamsafe.guard`) made for this effect."""
        self.turns = Turns(self.name)
        """The thread rule: one thread at a time holds the effect (:mod:`streamsafe.turns`)."""

    # -- the thread rule --------------------------------------------------------------------------

    def using(self, call: str, *, wait: bool = False) -> Any:
        """Hold the effect for one call (a context manager); another thread's concurrent call raises
        :class:`~streamsafe.errors.ConcurrentUseError`, or, with ``wait``, waits for it to end (the
        implicit host wait that ends a ``with`` block). Does not block otherwise."""
        return self.turns.using(call, wait, self)

    def try_hold(self) -> tuple[int | None, bool] | None:
        """Hold the effect for one call if no other thread does, without blocking (the hot path's
        :meth:`using`): the previous holder, to give to :meth:`let_go`; ``None`` when another thread
        holds it (then :meth:`using` waits for its closing host wait, or raises)."""
        return self.turns.try_hold()

    def let_go(self, outer: tuple[int | None, bool]) -> None:
        """End a hold taken by :meth:`try_hold` (or :meth:`using`): the previous holder is restored."""
        self.turns.let_go(outer)

    # -- outputs ------------------------------------------------------------------------------------

    def check_current(self, generation: int, what: str = "this output", fix: str | None = None,
                      source: str = "the effect") -> None:
        """Raise :class:`~streamsafe.errors.StaleOutputError` unless ``generation`` is the current output
        (``fix``: what the message tells the user to do, if not the effect's rule; ``source``: who writes the
        buffer, for the message)."""
        if generation != self.generation:
            raise StaleOutputError(
                what, generation, self.generation,
                fix or "Copy each output before the next run(), close() or resize (out.torch(), out.cupy(), ...).",
                closed=self.closed, source=source,
            )

    def view_escaped(self, generation: int) -> None:
        """Output ``generation`` left as a view streamsafe does not see read (a CUDA array interface): the
        framework's current stream at the next run may read it, as for any escaped view."""
        self.check_current(generation)
        self.escaped = True

    def import_output(self, generation: int, consumer: Stream, *, escapes: bool, key: Any = None) -> None:
        """A consumer on ``consumer`` imports output ``generation``: order it after the SDK's writes
        (H3/H4, on the device, or by a host wait under ``stream``/``device``) and remember it as a
        reader until the next run, and as outstanding until the next release. ``escapes``: the
        consumer keeps a zero-copy view (not one of streamsafe's copy helpers)."""
        turns = self.turns
        outer = turns.try_hold()
        if outer is None:
            with self.using("import"):  # another thread holds the effect: wait for its closing wait, or raise
                self._import_held(generation, consumer, escapes, key)
            return
        try:
            self._import_held(generation, consumer, escapes, key)
        finally:
            turns.let_go(outer)

    def _import_held(self, generation: int, consumer: Stream, escapes: bool, key: Any) -> None:
        if generation != self.generation:
            self.check_current(generation)
        plan = self.plan
        assert plan is not None
        program = self.import_programs.get(consumer)
        if program is None or program.plan is not plan:
            program = self._import_program(plan, consumer)
        if program.fences:
            program(self.out_stats)
        if hooks.observers and key is not None and not self.resolved_backend().records_accesses:
            for o in hooks.observers:  # after the fences that order it
                o.on_output_read(key, consumer, self.device)
        self.readers[consumer] = None
        self.outstanding[consumer] = None
        if self.retiring:
            self._unretire(consumer)
        if escapes:
            self.escaped = True
        if consumer not in self.holds:
            self._hold(consumer)

    def _import_program(self, plan: FencePlan, consumer: Stream) -> FenceProgram:
        """The bound fences of an import of ``plan``'s output on ``consumer`` (cached per consumer)."""
        if len(self.import_programs) > 64:
            self.import_programs.clear()
        program = self.import_programs[consumer] = FenceProgram(
            self.resolved_backend(), self.device, plan.import_fences(consumer), plan
        )
        return program

    def add_reader(self, generation: int, stream: Stream) -> None:
        """Declare that ``stream`` reads output ``generation`` (a view used on another stream):
        orders it after the SDK's writes now, and the next run and release after it."""
        with self.using("record_stream"):
            self.check_current(generation)
            assert self.plan is not None
            self.apply(self.plan.import_fences(stream), self.out_stats)
            self.readers[stream] = None
            self.outstanding[stream] = None
            if self.retiring:
                self._unretire(stream)
            self._hold(stream)

    def refuse_stale_view(self, generation: int, what: str) -> None:
        """Raise :class:`~streamsafe.errors.StaleOutputError` for a zero-copy view of output ``generation``."""
        how = ("has released its buffer since (close(), a change of output size or encoding): the view points at "
               "freed memory" if generation < self.release_generation else "has run again since and overwrote it")
        raise StaleOutputError(
            f"this {what} (a zero-copy view of {self.name}'s output #{generation})", generation, self.generation,
            f"{self.name} {how}. Copy each output before the next run() "
            "(out.torch(), out.cupy(), ...) and pass the copy down the pipeline.",
            closed=self.closed,
        )

    def tag_view(self, view: Any, generation: int) -> None:
        """Remember that ``view`` (a framework's array object) is a zero-copy view of output ``generation``."""
        try:
            self.tagged_views[view] = generation
        except TypeError:  # (not weakly referenceable: the memory's address still tells, streamsafe.views.read_by)
            pass

    def reader_done(self, generation: int, stream: Stream | None) -> None:
        """The host waited for the copy on ``stream`` (a helper that blocks): it reads no more."""
        if stream is None or generation != self.generation or self.escaped:
            return
        self.readers.pop(stream, None)
        self.outstanding.pop(stream, None)
        self._release_holds()

    def reader_captured(self, generation: int, stream: Stream) -> None:
        """The reads of output ``generation`` on ``stream`` are all issued, and an event the caller recorded
        there right after them covers them (a copy helper's copy): ``stream`` is no longer a reader whose
        later work the next run must wait for. It stays outstanding (a release still waits for it)."""
        if generation == self.generation and not self.escaped:
            self.readers.pop(stream, None)

    # -- runs -----------------------------------------------------------------------------------------

    def before_run(self, plan: FencePlan, input_shapes: tuple[Any, ...], current: Stream | None) -> list[Fence]:
        """What must come before ``plan``'s run: a release wait when the inputs' size changed (the SDK
        may reallocate its buffers inside ``run()``), then the SDK streams wait for the readers of
        the current output and for the previous run's SDK streams (H5)."""
        fences: list[Fence] = []
        if self.input_shapes is not None and input_shapes != self.input_shapes:
            fences += self.release_fences(plan, sdk_streams=False)  # (the SDK's own streams: H5 below, on the device)
        readers: Iterable[Stream] = self.readers
        if self.escaped and current is not None and current not in self.readers:
            readers = (*self.readers, current)  # a view escaped: the framework's current stream may read it
        if self.plan is not None or self.previous_sdk:
            fences += plan.reuse_fences(tuple(readers), self.previous_sdk, tuple(self.readers))
        return fences

    def after_run(self, plan: FencePlan, input_shapes: tuple[Any, ...], stats: dict[str, int], default_consumer: Stream) -> int:
        """Record a run that returned: a new output generation written by ``plan``'s streams. Returns it."""
        self.generation += 1
        new_streams = plan is not self.plan or not self.previous_sdk  # (else the same SDK streams, held already)
        self.plan = plan
        self.out_stats = stats
        self.default_consumer = default_consumer
        self.readers = {}
        self.escaped = False
        self.previous_sdk = plan.sdk_streams
        self.input_shapes = input_shapes
        if new_streams:
            self._hold_sdk_streams()
        if len(self.outstanding) > _OUTSTANDING_BOUND:
            self._retire_outstanding()
        return self.generation

    def after_interrupted_run(self, plan: FencePlan, input_shapes: tuple[Any, ...]) -> None:
        """A guarded call left by an exception that is not an error of the SDK (``KeyboardInterrupt``,
        ``SystemExit``: any ``BaseException`` that is not an ``Exception``) after the SDK may have issued its
        work: treated as a run. The output may be overwritten, so every older output is stale; the next
        run and release wait for its SDK streams as for any run's (the readers stay known)."""
        self.generation += 1
        self.plan = plan
        self.escaped = False
        self.previous_sdk = plan.sdk_streams
        self.input_shapes = input_shapes
        self._hold_sdk_streams()

    def after_refused_run(self, plan: FencePlan) -> None:
        """A guarded call the SDK raised an error from: its output is as before, but the next run and
        release also wait for the call's streams, in case it issued work before it raised."""
        extra = tuple(s for s in plan.sdk_streams if s not in self.previous_sdk)
        if extra:
            self.previous_sdk = (*extra, *self.previous_sdk)  # (the previous output's writer stays last)
            self._hold_sdk_streams()

    def _retire_outstanding(self) -> None:
        """Drop the outstanding readers whose reads are known complete: each one that reads no more (not a
        reader of the current output) gets an event recorded once (its reads were issued before the run that
        just returned, which waited for them), and goes once a later query finds the event complete. Bounds
        what a consumer stream made for each frame holds (its object, kept until then) with no host wait."""
        be = self.resolved_backend()
        for stream in list(self.outstanding):
            if stream in self.readers:
                continue
            event = self.retiring.get(stream)
            if event is None:
                event = self.retiring[stream] = be.acquire_event(self.device)
                be.record(event, issuable(stream))
            elif be.query(event):
                del self.retiring[stream]
                be.release_event(event)
                del self.outstanding[stream]
        self._release_holds()

    def _unretire(self, stream: Stream) -> None:
        """``stream`` reads again: an event recorded on it before does not cover its new reads."""
        event = self.retiring.pop(stream, None)
        if event is not None:
            self.resolved_backend().release_event(event)

    def after_unguarded_run(self, sdk_streams: tuple[Stream, ...], input_shapes: tuple[Any, ...]) -> None:
        """A raw ``run()`` outside any guard returned: its output is not ours to hand out, but the
        next guarded run must wait for its streams, and older outputs are stale."""
        self.generation += 1
        self.plan = None
        self.readers = {}
        self.escaped = False
        self.previous_sdk = sdk_streams
        self.input_shapes = input_shapes
        self._hold_sdk_streams()

    def _hold_sdk_streams(self) -> None:
        """Keep the framework objects of the last run's SDK streams alive until a later run has fenced them
        (or a release waited for them): a stream made for one frame (``with cupy.cuda.Stream(): c.run(x)``),
        or declared to a contract dropped without ``close()``, would otherwise be destroyed, and its
        handle freed for reuse, before the next run's wait on it. Lets go of the streams no longer needed."""
        for stream in self.previous_sdk:
            self._hold(stream)
        self._release_holds()

    def declare(self, objects: dict[Stream, Any]) -> Callable[[], None]:
        """A contract's declared streams and their framework objects (torch, CuPy, cuda.core streams): what
        :meth:`_hold` keeps while a stream is still to be fenced, after the contract went. Returns the
        call that forgets them (when the contract goes; a hold taken stays until its stream is fenced)."""
        self.declared.update(objects)

        def forget() -> None:
            for stream, obj in objects.items():
                if self.declared.get(stream) is obj:
                    self.declared.pop(stream, None)

        return forget

    # -- releases ---------------------------------------------------------------------------------------

    def apply(self, fences: Iterable[Fence], stats: dict[str, int]) -> None:
        """Issue ``fences`` through the effect's backend, counted in ``stats`` (device waits do not block
        the host; host waits and device syncs do)."""
        apply_fences(self.resolved_backend(), self.device, fences, stats)

    def wait_for_readers(self, plan: FencePlan | None, strategy: Strategy | None, stats: dict[str, int]) -> None:
        """H6, before the SDK may release or replace its buffers: the host waits for every stream that may
        still touch them (:meth:`release_fences`: the readers, a view's current stream, the last run's
        SDK streams), as ``plan``'s strategy (else ``strategy``, else ``event``) waits. Blocks the host."""
        self.apply(self.release_fences(plan, strategy), stats)

    def release_fences(self, plan: FencePlan | None, strategy: Strategy | None = None, *, sdk_streams: bool = True) -> list[Fence]:
        """H6: the host waits for every stream that may still touch the SDK's buffers: the readers of
        the current output, and (``sdk_streams``) the previous run's SDK streams (the SDK's own work on
        buffers it may keep, e.g. when a size is set and set back; after the wait no later run needs to
        order after them, and a stream the program then destroys is never used again)."""
        streams = [*self.outstanding, *self.readers]
        if self.escaped:  # a view escaped: the framework's current stream may read it too
            streams.append(self.current_stream())
        if sdk_streams:
            streams += [s for s in self.previous_sdk if s not in streams]
        if not streams:
            return []
        if plan is not None:
            return list(plan.release_fences(streams))
        return release_fences(strategy or Strategy.EVENT, streams)

    def released(self) -> None:
        """The host waited for every reader and for the previous run's SDK streams (:meth:`release_fences`),
        and the SDK may have released or replaced its buffers."""
        self.generation += 1
        self.release_generation = self.generation
        self.readers = {}
        self.outstanding = {}
        self._drop_retiring()
        self.escaped = False
        self.previous_sdk = ()
        self.input_shapes = None
        self._release_holds()

    def waited(self) -> None:
        """The host waited for every outstanding stream and the previous run's SDK streams
        (:meth:`StreamContract.synchronize`)."""
        if not self.escaped:
            self.readers = {}
        self.outstanding = {s: None for s in self.readers}
        self._drop_retiring()
        self.previous_sdk = ()
        self._release_holds()

    def _drop_retiring(self) -> None:
        if self.retiring:
            be = self.resolved_backend()
            for event in self.retiring.values():
                be.release_event(event)
            self.retiring = {}

    def closed_effect(self, effect: Any) -> None:
        self.released()
        self.closed = True
        self.drain_keepalive()
        _forget(effect)

    # -- inputs (H12) --------------------------------------------------------------------------------------

    def keep_alive(self, objects: list[Any], run_stream: Stream) -> None:
        """Keep ``objects`` alive until the work issued so far on ``run_stream`` is done. Does not block
        (beyond a bound: past 64 pending entries the host waits for the oldest)."""
        be = self.resolved_backend()
        event = be.acquire_event(self.device)
        be.record(event, issuable(run_stream))
        self.keepalive.append((event, objects))
        self.prune_keepalive()
        while len(self.keepalive) > _MAX_KEEPALIVE:
            old, _ = self.keepalive.popleft()
            be.synchronize_event(old)
            be.release_event(old)

    def prune_keepalive(self) -> None:
        """Drop the inputs kept alive whose runs have ended (their events complete). Does not block;
        on the model it gives the host no ordering (``SimBackend.poll``): the program learns nothing."""
        be = self.resolved_backend()
        poll = getattr(be, "poll", None) or be.query
        while self.keepalive and poll(self.keepalive[0][0]):
            be.release_event(self.keepalive.popleft()[0])

    def drain_keepalive(self) -> None:
        be = self.resolved_backend()
        while self.keepalive:
            event, _ = self.keepalive.popleft()
            be.synchronize_event(event)
            be.release_event(event)

    def torch_stream(self, stream: Stream) -> Any:
        ts = self.torch_streams.get(stream)
        if ts is None:
            import torch

            if stream.ptr == 0:
                ts = torch.cuda.default_stream(self.device)
            else:
                ts = torch.cuda.ExternalStream(stream.ptr, device=self.device)
            self.torch_streams[stream] = ts
        return ts

    # -- consumer stream objects ----------------------------------------------------------------------------

    def known_stream(self, handle: Any) -> Stream | None:
        """The :class:`Stream` for an integer ``handle`` of a stream whose framework object this ledger holds
        (its kind cannot have changed: the handle is not free for reuse), else ``None``.
        Saves the driver queries of :func:`~streamsafe.streams.as_stream` on the hot path."""
        return self.known.get(handle) if type(handle) is int else None

    def _hold(self, consumer: Stream) -> None:
        """Keep the framework's object for ``consumer`` alive: a stream a consumer made for one copy
        (``with cupy.cuda.Stream(): ...``) would otherwise be destroyed before the next run's fence
        is recorded on it, and a destroyed handle cannot be used."""
        if consumer in self.holds:
            return
        if consumer.kind is StreamKind.LEGACY:
            # the legacy stream lives as long as the context: known by every handle that names it
            for handle in (0, LEGACY_HANDLE):
                self.known.setdefault(handle, consumer)
            return
        if consumer.kind is StreamKind.PER_THREAD:
            # lives as long as the context too, but handle 2 names another stream in each thread: never
            # known by its handle (as_stream names it for the thread that asks, with no driver query)
            return
        # a contract's declared stream: its object, whoever's current stream it is; else the framework's
        # current stream object when it is this stream
        obj = self.declared.get(consumer)
        if obj is None:
            obj = self._current_stream_object(consumer.handle)
        if obj is None:
            obj = self.resolved_backend().hold_stream(consumer)  # (the model keeps its own streams so)
        if obj is not None:
            self.holds[consumer] = obj
            self.known[consumer.handle] = consumer

    def _current_stream_object(self, handle: int) -> Any:
        """CuPy's or torch's current stream object on the effect's device when its handle is ``handle``, else
        ``None``. Does not block."""
        cupy = sys.modules.get("cupy")  # (None where a program blocked the import)
        if cupy is not None:
            current = cupy.cuda.get_current_stream()
            if current.ptr == handle:
                return current
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            current = torch.cuda.current_stream(self.device)
            if current.cuda_stream == handle:
                return current
        return None

    def _release_holds(self) -> None:
        if self.holds:
            for consumer in list(self.holds):
                if consumer not in self.readers and consumer not in self.outstanding and consumer not in self.previous_sdk:
                    del self.holds[consumer]
                    if self.known.get(consumer.handle) == consumer:
                        del self.known[consumer.handle]

    def current_stream(self) -> Stream:
        """The framework's current stream on the effect's device (known handles need no driver query)."""
        be = self.resolved_backend()
        if be.framework_streams:
            found = framework_current_stream_handle(self.device)
            if found is not None:
                known = self.known.get(found[0])
                if known is not None:
                    return known
        return be.current_stream(self.device)

    def raw_plan(self, sdk: Stream, conversion: Stream | None, non_blocking: bool = False) -> FencePlan:
        """The ``event`` plan whose fences order a tracked raw call on ``sdk`` (cached). ``non_blocking``:
        the call's own, so the plan counts on the SDK's host wait only when the call makes it."""
        key = (sdk, conversion, non_blocking)
        plan = self.raw_plans.get(key)
        if plan is None:
            if len(self.raw_plans) > 64:
                self.raw_plans.clear()
            plan = plan_fences(Strategy.EVENT, sdk=sdk, conversion=conversion, consumer=sdk, producer=sdk)
            if non_blocking:
                plan = dataclasses.replace(plan, non_blocking=True, _cache={})
            self.raw_plans[key] = plan
        return plan

    def resolved_backend(self) -> Backend:
        """The backend of the effect's fences (the current one until a guard set it)."""
        if self.backend is None:
            self.backend = current_backend()
        return self.backend

    def __repr__(self) -> str:
        return f"<streamsafe Ledger {self.name} cuda:{self.device} output #{self.generation}, {len(self.readers)} reader(s)>"
