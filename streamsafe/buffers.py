"""One SDK buffer's ordering state: its generation, the streams that read it, and the plan that wrote it.

An effect has one output buffer that every call rewrites; a decoder has a pool of them. Either way a
:class:`Buffer` knows, for one buffer:

* its **generation**: bumped by every call that writes it and every release; an output of an older
  generation can no longer be imported (:class:`~streamsafe.errors.StaleOutputError`);
* its **readers**: every stream a consumer imported it on, or declared with ``record_stream``, and the
  framework's current stream when a zero-copy view escaped; the SDK's next write waits for them (H5, D5);
* its **outstanding** readers, the host has not waited for since the last release: a release makes the
  host wait for them first (H6, D6);
* the **plan** of the call that wrote it (what an import must wait for: H3, H4) and the counters its
  import fences go to.

Buffers belong to a :class:`~streamsafe.ledger.Ledger` (one per SDK object), whose turn an import takes.
Outputs talk to their buffer: :meth:`Buffer.import_output`, :meth:`Buffer.check_current`,
:meth:`Buffer.add_reader`, :meth:`Buffer.reader_done`. Nothing here blocks the host.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from . import hooks, views
from ._dlpack import backend_own, capsule_data_key
from .errors import StaleOutputError
from .identity import WeakIdentityMap
from .plan import FencePlan
from .streams import Stream, issuable

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["Buffer", "PoolBuffer", "new_stats", "OUTSTANDING_BOUND"]

_NEW_TAGS = threading.Lock()
"""Held while a buffer makes its map of view tags."""

OUTSTANDING_BOUND = 8
"""Past this many outstanding reader streams (a new consumer stream a frame), a write drops those whose reads
are known complete (an event query; no host wait)."""

_EFFECT_FIX = "Copy each output before the next run(), close() or resize (out.torch(), out.cupy(), ...)."


_DECODER_FIX = (
    "The decoder has written this frame's buffer again since (the next batch of the same size, the call after next "
    "for decoder[i], the next call for a ThreadedDecoder, or a new source). Copy a frame you keep (frame.torch(), "
    "frame.copy()) before the decoder's next call.")


def new_stats() -> dict[str, int]:
    """Counters of one guard: runs; device-side fences; host waits and device syncs streamsafe made; runs in
    which the SDK itself made the host wait (``non_blocking=False``); and, under each hazard's name (``"H1"``,
    ``"H3"``, ...), the fences of any kind made for it; and the inputs ``auto`` copied (no ``input_stream``)."""
    return {"runs": 0, "fences": 0, "host_waits": 0, "device_syncs": 0, "sdk_waits": 0, "input_copies": 0}


class Buffer:
    """The ordering state of one buffer of ``ledger``'s SDK object (see the module docstring)."""

    __slots__ = ("ledger", "ref", "generation", "plan", "readers", "outstanding", "escaped", "retiring",
                 "release_generation", "unlisted", "tagged", "stats", "default_consumer", "address", "address_release",
                 "__weakref__")

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.ref = weakref.ref(self)
        """A weak reference to the buffer (what the views registry keeps)."""
        self.generation = 0
        self.plan: FencePlan | None = None
        """The plan of the call that wrote the current contents (``None`` before the first, or after a raw call)."""
        self.readers: dict[Stream, None] = {}
        self.outstanding: dict[Stream, None] = {}
        self.escaped = False
        """Whether a zero-copy view of the current contents left with no stream streamsafe knows."""
        self.retiring: dict[Stream, Any] = {}
        """Events recorded on outstanding readers that no longer read (see :meth:`retire_outstanding`)."""
        self.release_generation = 0
        """The generation the last release started: views of an older one may point at freed memory."""
        self.unlisted = 0
        """The newest generation a call wrote that streamsafe did not hand out (a plain call's, tracked): a view at
        the buffer's memory that no tag names may show it."""
        self.tagged: WeakIdentityMap[int] | None = None
        """Zero-copy views handed out by a copy helper (``out.torch(copy=False)``), with their generation: by
        identity (a torch view's ``==`` is elementwise), each held weakly."""
        self.stats: dict[str, int] = new_stats()
        """The counters of the guard that wrote the current contents (its import fences count there)."""
        self.default_consumer: Stream | None = None
        self.address: Any = None
        """The buffer's memory as a capsule of it says (its data pointer, or the model's buffer), read once per
        allocation: :attr:`address_release` is the :attr:`release_generation` it was read in."""
        self.address_release = -1

    @property
    def name(self) -> str:
        """The SDK object's class name (for messages)."""
        return self.ledger.name

    @property
    def closed(self) -> bool:
        """Whether the SDK object was closed (its buffers are gone)."""
        return self.ledger.closed

    # -- checks --------------------------------------------------------------------------------------------

    stale_what = "this output"
    stale_fix = _EFFECT_FIX
    stale_source = "the effect"
    """What a stale-output message calls the contents, tells the user to do, and calls their writer (an effect's
    words; a decoder's buffer says its own: :class:`PoolBuffer`)."""

    def check_current(self, generation: int, what: str | None = None, fix: str | None = None,
                      source: str | None = None) -> None:
        """Raise :class:`~streamsafe.errors.StaleOutputError` unless ``generation`` is the current contents
        (``what``, ``fix``, ``source``: the message's words, if not the buffer's own)."""
        if generation != self.generation:
            raise StaleOutputError(what or self.stale_what, generation, self.generation, fix or self.stale_fix,
                                   closed=self.closed, source=source or self.stale_source)

    def refuse_stale_view(self, generation: int, what: str) -> None:
        """Raise :class:`~streamsafe.errors.StaleOutputError` for a zero-copy view of ``generation``."""
        how = ("has released its buffer since (close(), a change of output size or encoding): the view points at "
               "freed memory" if generation < self.release_generation else "has run again since and overwrote it")
        raise StaleOutputError(
            f"this {what} (a zero-copy view of {self.name}'s output #{generation})", generation, self.generation,
            f"{self.name} {how}. Copy each output before the next run() "
            "(out.torch(), out.cupy(), ...) and pass the copy down the pipeline.",
            closed=self.closed,
        )

    # -- readers -------------------------------------------------------------------------------------------

    def address_of(self, capsule: Any) -> Any:
        """The memory ``capsule`` (of the current contents) points at: read once per allocation of the buffer (it is
        read again after a release, and after a call whose inputs changed size: the SDK may reallocate its output
        then). Does not block."""
        if self.address_release != self.release_generation:
            self.address = capsule_data_key(capsule)
            self.address_release = self.release_generation
        return self.address

    def import_output(self, generation: int, consumer: Stream, capsule: Any, *, escapes: bool) -> None:
        """A consumer on ``consumer`` imports contents ``generation`` (``capsule``): order it after the SDK's writes
        (H3/H4, on the device, or by a host wait under ``stream``/``device``) and remember it as a reader until the
        next write, and as outstanding until the next release. ``escapes``: the consumer keeps a zero-copy view (not
        one of streamsafe's copy helpers): its memory is remembered (:mod:`streamsafe.views`), and a model's capsule
        learns which output it is (H7). Takes the SDK object's turn; does not block otherwise."""
        ledger = self.ledger
        turns = ledger.turns
        outer = None
        try:
            outer = turns.take("import")
            if generation != self.generation:
                self.check_current(generation)
            plan = self.plan
            programs = ledger.programs
            program = programs.by_consumer.get(consumer)
            if program is None or program.plan is not plan:
                program = programs.get(plan, consumer)
            if program.fences:
                program(self.stats)
            key = self.address_of(capsule) if escapes or hooks.observers else None  # (a copy helper's: no address read)
            if key is not None and hooks.observers and not ledger.resolved_backend().records_accesses:
                for o in hooks.observers:  # after the fences that order it
                    o.on_output_read(key, consumer, ledger.device)
            self.readers[consumer] = None
            self.outstanding[consumer] = None
            if self.retiring:
                self._unretire(consumer)
            if escapes:
                self.escaped = True
                views.add(key, self, generation)
                if backend_own(type(capsule)):  # (the model's capsule learns which output it is: H7)
                    capsule.view_of = (self.ref, generation)
            if consumer not in ledger.holds.held:
                ledger.holds.hold(consumer)
        finally:  # (the lock first: see Turns.take)
            if outer is not None:
                turns.owner, turns.closing_wait = outer
                turns.lock.release()

    def moved(self) -> None:
        """The SDK may have put its output elsewhere (a call whose inputs changed size): its memory is read again."""
        self.address_release = -1

    def _read_on(self, stream: Stream) -> None:
        self.readers[stream] = None
        self.outstanding[stream] = None
        if self.retiring:
            self._unretire(stream)
        self.ledger.holds.hold(stream)

    def add_reader(self, generation: int, stream: Stream) -> None:
        """Declare that ``stream`` reads contents ``generation`` (a view used on another stream): orders it
        after the SDK's writes now, and the next write and release after it. Takes the turn."""
        self.ledger.turns.run("record_stream", self._add_reader, generation, stream)

    def _add_reader(self, generation: int, stream: Stream) -> None:
        self.check_current(generation)
        assert self.plan is not None
        self.ledger.apply(self.plan.import_fences(stream), self.stats)
        self._read_on(stream)

    def view_escaped(self, generation: int) -> None:
        """Contents ``generation`` left as a view streamsafe does not see read (a CUDA array interface): the
        framework's current stream at the next write may read it, as for any escaped view."""
        self.check_current(generation)
        self.escaped = True

    def reader_done(self, generation: int, stream: Stream | None) -> None:
        """The host waited for the copy on ``stream`` (a helper that blocks): it reads no more."""
        if stream is None or generation != self.generation or self.escaped:
            return
        self.readers.pop(stream, None)
        self.outstanding.pop(stream, None)
        self.ledger.release_holds()

    def reader_captured(self, generation: int, stream: Stream) -> None:
        """The reads of contents ``generation`` on ``stream`` are all issued, and an event the caller recorded
        there right after them covers them (a copy helper's copy): ``stream`` is no longer a reader whose later
        work the next write must wait for. It stays outstanding (a release still waits for it)."""
        if generation == self.generation and not self.escaped:
            self.readers.pop(stream, None)

    def tag_view(self, view: Any, generation: int) -> None:
        """Remember that ``view`` (a framework's array object) is a zero-copy view of contents ``generation``."""
        tagged = self.tagged
        if tagged is None:
            with _NEW_TAGS:  # (two threads' first tags: one map, or a tag would go into one nobody keeps)
                tagged = self.tagged
                if tagged is None:
                    tagged = self.tagged = WeakIdentityMap()
        try:
            tagged[view] = generation
        except TypeError:  # (not weakly referenceable: the memory's address still tells, streamsafe.views.read_by)
            pass

    def tagged_generation(self, view: Any) -> int | None:
        """The generation ``view`` was tagged with by :meth:`tag_view`, else ``None``."""
        tagged = self.tagged
        return tagged.get(view) if tagged else None

    # -- writes and releases -------------------------------------------------------------------------------

    def wrote(self, plan: FencePlan | None, stats: dict[str, int], default_consumer: Stream | None, *,
              handed_out: bool = True) -> int:
        """The SDK wrote new contents under ``plan`` (``None``: a raw call's): a new generation with no readers;
        older contents are stale. ``handed_out``: streamsafe hands them out (else the SDK's own result does: a
        plain call's). Returns the generation."""
        self.generation += 1
        if not handed_out:
            self.unlisted = self.generation
        self.plan = plan
        self.stats = stats
        self.default_consumer = default_consumer
        self.readers = {}
        self.escaped = False
        return self.generation

    def overwritten(self, plan: FencePlan) -> None:
        """A call left by an interrupt after it may have written: the contents may be overwritten (older ones
        are stale), the readers stay known."""
        self.generation += 1
        self.plan = plan
        self.escaped = False

    def released(self) -> None:
        """The host waited for every reader, and the SDK may have released or replaced the buffer."""
        self.generation += 1
        self.release_generation = self.generation
        self.readers = {}
        self.outstanding = {}
        self.drop_retiring()
        self.escaped = False

    def waited(self) -> None:
        """The host waited for every outstanding reader (a guard's ``synchronize()``): contents stay valid."""
        if not self.escaped:
            self.readers = {}
        self.outstanding = {s: None for s in self.readers}
        self.drop_retiring()

    def retire_outstanding(self) -> None:
        """Drop the outstanding readers whose reads are known complete: each one that reads no more (not a
        reader of the current contents) gets an event recorded once (its reads were issued before the write
        that just returned, which waited for them), and goes once a later query finds the event complete.
        Bounds what a consumer stream made for each frame holds (its object, kept until then) with no host
        wait."""
        be = self.ledger.resolved_backend()
        for stream in list(self.outstanding):
            if stream in self.readers:
                continue
            event = self.retiring.get(stream)
            if event is None:
                event = self.retiring[stream] = be.acquire_event(self.ledger.device)
                be.record(event, issuable(stream))
            elif be.query(event):
                del self.retiring[stream]
                be.release_event(event)
                del self.outstanding[stream]

    def _unretire(self, stream: Stream) -> None:
        """``stream`` reads again: an event recorded on it before does not cover its new reads."""
        event = self.retiring.pop(stream, None)
        if event is not None:
            self.ledger.resolved_backend().release_event(event)

    def drop_retiring(self) -> None:
        """Give back the events of :meth:`retire_outstanding` (their streams were waited for)."""
        if self.retiring:
            be = self.ledger.resolved_backend()
            for event in self.retiring.values():
                be.release_event(event)
            self.retiring = {}

    def __repr__(self) -> str:
        return f"<streamsafe Buffer of {self.name} #{self.generation}, {len(self.readers)} reader(s)>"


class PoolBuffer(Buffer):
    """A buffer of a decoder's pool: the same state, and its stale-frame messages in the decoder's words."""

    __slots__ = ()

    stale_what = "this decoded frame"
    stale_fix = _DECODER_FIX
    stale_source = "the decoder"

    def address_of(self, capsule: Any) -> Any:
        """The memory ``capsule`` points at, read each time (a frame's planes are capsules of one buffer at
        different addresses). Does not block."""
        return capsule_data_key(capsule)

    def refuse_stale_view(self, generation: int, what: str) -> None:
        how = ("freed or reallocated its buffers since (reconfigure_decoder(), end()): the view points at freed memory"
               if generation < self.release_generation else "has written this buffer again since (a later call)")
        raise StaleOutputError(
            f"this {what} (a zero-copy view of a frame {self.name} handed out at call #{generation})", generation,
            self.generation, f"{self.name} {how}. Copy each frame before the decoder's next call (frame.torch(), "
            "frame.copy()) and pass the copy down the pipeline.", closed=self.closed, source="the decoder",
        )
