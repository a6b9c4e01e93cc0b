"""Fence plans: which edge of the hazard table (docs/design.md) needs which fence, and why.

:func:`plan_fences` is a pure function of the strategy, the stream kinds and the
effect's encoding. Its result, a :class:`FencePlan`, is a value you can print and
compare; a :class:`~streamsafe.contract.StreamContract` executes exactly its fences.
Where :func:`~streamsafe.streams.implicitly_ordered` says CUDA already orders an edge,
the plan has no fence for it.

Per-frame fences are in :attr:`FencePlan.fences`; the one wait that only happens when
the SDK releases its buffer (H6: ``close()``, an output-size or encoding change) is in
:attr:`FencePlan.on_release`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import StrategyError
from .strategy import Strategy
from .streams import Stream, StreamKind, implicitly_ordered

__all__ = ["Fence", "FencePlan", "plan_fences", "pool_plan", "raw_plan", "waited_streams", "consumer_fences", "reuse_fences",
           "release_fences", "Action", "When"]

Action = Literal["device-wait", "host-wait", "device-sync", "forward-dlpack", "sdk-blocking", "shadow-stream", "protect-input",
                 "copy-input"]
When = Literal["before run", "after input copy", "inside run", "after run", "at import", "before next run", "before release"]

_HOST_BLOCKING = ("host-wait", "device-sync", "sdk-blocking")


@dataclass(frozen=True)
class Fence:
    """One fence: on ``hazard``'s edge, at ``when``, ``waiter`` (a stream, or the host) waits for ``signaller``."""

    hazard: str
    when: When
    action: Action
    waiter: Stream | None
    signaller: Stream | None
    why: str

    @property
    def blocks_host(self) -> bool:
        """True when the host waits (a host sync here, or the SDK's own wait with ``non_blocking=False``)."""
        return self.action in _HOST_BLOCKING

    def __str__(self) -> str:
        who = {
            "device-wait": f"{self.waiter} waits on an event recorded on {self.signaller}",
            "host-wait": f"host waits for {self.signaller}",
            "device-sync": "host waits for the whole device",
            "forward-dlpack": f"input's producer orders {self.waiter} via __dlpack__(stream=...)",
            "sdk-blocking": (f"the decoder's call makes the host wait for {self.signaller}" if self.hazard == "D1"
                             else f"run(non_blocking=False): the SDK makes the host wait for {self.signaller}"),
            "shadow-stream": f"SDK runs on the shadow stream, {self.waiter}; stream 0 waits for it implicitly",
            "protect-input": f"input kept from reuse until {self.signaller} has read it",
            "copy-input": f"each input copied on {self.waiter}, streamsafe's own stream; the SDK reads the copy",
        }[self.action]
        return f"{self.hazard:<4} {self.when:<16} {who}  ({self.why})"


@dataclass(frozen=True)
class FencePlan:
    """What a contract does around one ``run()``. Printable; equal plans compare equal."""

    requested: Strategy
    strategy: Strategy
    """What ``auto`` resolved to (else the requested strategy)."""
    non_blocking: bool
    """The ``non_blocking`` the SDK is called with."""
    sdk: Stream
    run_stream: Stream
    """Where the SDK runs: ``sdk``, or the contract's blocking shadow stream for ``async``."""
    conversion: Stream | None
    producer: Stream | None
    consumer: Stream
    fences: tuple[Fence, ...]
    on_release: tuple[Fence, ...]
    reason: str
    input_writers: tuple[Stream, ...] = ()
    """The streams that may write or recycle an input next (H12): the producer, the SDK stream, the current one."""
    output_complete: bool = False
    """The SDK's call returns only once its output is written (its own host wait: a decoder's): an import
    needs no fence."""
    copy_stream: Stream | None = None
    """The stream streamsafe copies each input on before the call (``auto`` with no ``input_stream``: the SDK reads
    the copy, and the host waits for the copies, not for the SDK's work), else ``None``."""
    release_calls: tuple[str, ...] = field(default=("reconfigure_decoder", "end"), compare=False)
    """A pool plan's releasing calls (what :attr:`on_release` is placed before: its profile's ``releases``), for
    printing."""
    _cache: dict[Any, tuple[Fence, ...]] = field(default_factory=dict, compare=False, repr=False, hash=False)
    _sdk_streams: tuple[Stream, ...] = field(init=False, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        run, conversion = self.run_stream, self.conversion
        object.__setattr__(self, "_sdk_streams", (run,) if conversion is None or conversion == run else (run, conversion))

    def at(self, when: When) -> tuple[Fence, ...]:
        """The plan's fences placed at ``when`` (``"before run"``, ``"after run"``, ``"at import"``, ...)."""
        return tuple(f for f in self.fences if f.when == when)

    @property
    def output_writer(self) -> Stream:
        """The stream whose work writes the output last: the conversion stream (RGB8), else the run stream."""
        return self.conversion if self.conversion is not None else self.run_stream

    @property
    def sdk_streams(self) -> tuple[Stream, ...]:
        """Every stream on which this plan's ``run()`` issues SDK work (run stream, conversion stream). Cached
        (a ledger reads it after every run)."""
        return self._sdk_streams

    def import_fences(self, consumer: Stream) -> tuple[Fence, ...]:
        """H3/H4: what a consumer importing this plan's output on ``consumer`` waits for (nothing where
        the consumer already waited for the output's writer after the run). Cached."""
        if self.output_complete:
            return ()
        key = ("import", consumer)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = tuple(
                f for f in consumer_fences(self.strategy, run_stream=self.run_stream, conversion=self.conversion, consumer=consumer)
                if f.when == "at import" and not _waited_after_run(self.fences, f)
            )
        return cached

    def before_run(self, fences: Iterable[Fence]) -> tuple[Fence, ...]:
        """One batch of fences placed together before this plan's ``run()`` (reuse fences, then the plan's
        own), without those that others in the batch already give: a repeated wait of one stream on
        another, and the conversion stream's wait for a stream the run stream waits for, when the
        conversion stream implicitly waits for the run stream (``async``: stream 0 waits for the
        blocking shadow stream, and the SDK converts after its inference)."""
        fences = tuple(fences)
        seen: set[tuple[str, object, object]] = set()
        via_run = self.conversion is not None and self.conversion != self.run_stream and implicitly_ordered(self.run_stream, self.conversion)
        run_waits = {f.signaller for f in fences if f.action == "device-wait" and f.waiter == self.run_stream} if via_run else set()
        out: list[Fence] = []
        for f in fences:
            key = (f.action, f.waiter, f.signaller)
            if f.action != "forward-dlpack" and key in seen:
                continue
            seen.add(key)
            if f.action == "device-wait" and f.waiter == self.conversion and f.signaller in run_waits:
                continue
            out.append(f)
        return tuple(out)

    def reuse_fences(
        self, readers: Iterable[Stream], previous_sdk: Iterable[Stream], fenced: Iterable[Stream] = ()
    ) -> tuple[Fence, ...]:
        """H5, before this plan's ``run()``: the SDK streams wait for every stream that may still read the
        previous output (``readers``) and for the previous run's SDK streams (``previous_sdk``: the SDK
        buffers they wrote or read are about to be overwritten, also when the SDK stream changed).

        ``fenced``: the readers that were made to wait for the previous output's writer when they
        imported it. Two fences follow from others and are left out: the conversion stream's wait
        for a reader that is the run stream itself when the SDK makes the host wait for the run stream
        before it converts (``non_blocking=False``), and the run stream's wait for the previous
        output's writer when the run stream imported that output."""
        readers, previous_sdk, fenced = tuple(readers), tuple(previous_sdk), tuple(fenced)
        key = ("reuse", readers, previous_sdk, fenced)
        cached = self._cache.get(key)
        if cached is None:
            fences: list[Fence] = []
            if self.strategy is not Strategy.NONE:
                for consumer in readers:
                    fences += [f for f in consumer_fences(
                        self.strategy, run_stream=self.run_stream, conversion=self.conversion, consumer=consumer,
                        host_waits_run=not self.non_blocking,
                    ) if f.when == "before next run"]
                writer = previous_sdk[-1] if previous_sdk else None
                for previous in previous_sdk:
                    if implicitly_ordered(previous, self.run_stream):
                        continue
                    if previous == writer and self.run_stream in fenced:
                        continue  # the run stream imported the previous output: it waited for the writer then
                    why = (
                        "the next inference overwrites the 8-bit result stream 0 converts"
                        if previous.kind is StreamKind.LEGACY and self.conversion is not None
                        else "the SDK's buffers were last used on another stream"
                    )
                    fences.append(_wait(self.strategy, "H5", "before run", self.run_stream, previous, why))
            cached = tuple(_dedupe(fences))
            if len(self._cache) < 256:
                self._cache[key] = cached
        return cached

    def release_fences(self, streams: Iterable[Stream]) -> tuple[Fence, ...]:
        """H6: before the SDK releases its buffers (close, resize, an input-size change), the host waits
        for every stream that may still read them (``streams``)."""
        return tuple(release_fences(self.strategy, streams))

    @property
    def undeclared_wait(self) -> str | None:
        """The host wait the plan keeps each call only because no ``input_stream`` is declared: ``"copies"`` (the
        host waits for the inputs' copies), ``"sdk"`` (the SDK's own wait covers its read of the inputs), or
        ``None``."""
        if self.copy_stream is not None:
            return "copies"
        if any(f.hazard == "H12" and f.action == "sdk-blocking" for f in self.fences):
            return "sdk"
        return None

    @property
    def host_waits(self) -> tuple[Fence, ...]:
        """Per-frame fences in which streamsafe makes the host wait (the SDK's own wait excluded)."""
        return tuple(f for f in self.fences if f.action in ("host-wait", "device-sync"))

    def __str__(self) -> str:
        strategy = f"FencePlan: strategy={self.requested.value}" + (
            f" -> {self.strategy.value}" if self.requested is not self.strategy else "")
        body = [f"  {f}" for f in self.fences] or ["  (no per-frame fence: the stream kinds already order every edge)"]
        tail = [f"  {f}" for f in self.on_release]
        if self.output_complete:  # (a pool's plan: a decoder's calls, which take no input and convert nothing)
            head = (f"{strategy}\n  streams: decoder={self.sdk}  C={self.consumer} (default: where an import that names "
                    f"no stream reads)\n  why: {self.reason}")
            releases = "/".join(f"{name}()" for name in self.release_calls) or "release"
            return "\n".join([head, *body, f"  on {releases}:", *tail])
        head = (
            strategy
            + f", non_blocking={self.non_blocking}\n"
            f"  streams: P={self.producer or 'framework current stream (forwarded)'}  S={self.sdk}"
            + (f"  run on {self.run_stream}" if self.run_stream != self.sdk else "")
            + f"  L={self.conversion or '- (RGB10A2: no conversion)'}  C={self.consumer} (default; each import is fenced for its own stream)"
            + (f"  Q={self.copy_stream} (the inputs' copies)" if self.copy_stream is not None else "")
            + f"\n  why: {self.reason}"
        )
        return "\n".join([head, *body, "  on close()/resize:", *tail])


def plan_fences(
    strategy: Strategy,
    *,
    sdk: Stream,
    conversion: Stream | None,
    consumer: Stream,
    producer: Stream | None,
    shadow: Stream | None = None,
    user_non_blocking: bool = False,
    input_writers: Iterable[Stream] = (),
    writers_known: bool = True,
    fixed_non_blocking: bool | None = None,
    copy_stream: Stream | None = None,
) -> FencePlan:
    """The plan for one call. ``conversion`` is ``None`` for RGB10A2 output; ``producer`` is
    ``None`` when the input's stream is unknown (then ``__dlpack__(stream=...)`` is forwarded);
    ``shadow`` is the blocking stream ``async`` runs the SDK on; ``input_writers`` are the
    streams that may write or recycle an input after the call (the producer and the SDK stream
    are always among them). ``writers_known``: the contract knows every stream that may write an input
    next (its ``input_stream`` is declared); else a program may write an input on an undeclared stream
    once ``run()`` returns, having synchronised that stream before the call (the vendor's recipe), and
    only the SDK's own host wait (``non_blocking=False``) keeps that write after the SDK's read: ``auto``
    and ``async`` keep it then. ``copy_stream`` (``auto`` only, its inputs copyable): with no ``input_stream``,
    ``auto`` copies each input on that stream of streamsafe's own instead, the SDK reads the copy, and the host waits
    for the copies only (not for the SDK's work), so the SDK runs as if every writer were known. ``fixed_non_blocking``:
    the SDK takes no blocking keyword, and its calls always (``False``) or never (``True``) make the host wait for
    their stream before they return. A pure function: issues nothing, blocks nothing."""
    requested = strategy
    copies = strategy is Strategy.AUTO and not writers_known and copy_stream is not None and producer is not None
    if copies:
        writers_known = True  # (the SDK reads the copy: whoever writes the input once run() returns writes no input of its)
    h2_open = conversion is not None and not implicitly_ordered(sdk, conversion)
    if fixed_non_blocking is not None and strategy is not Strategy.NONE:
        _check_fixed(strategy, fixed_non_blocking, h2_open, shadow)
    if strategy is Strategy.AUTO and fixed_non_blocking is False:
        strategy = Strategy.EVENT
        reason = "the SDK takes no blocking keyword and makes the host wait for its stream in every call"
    elif strategy is Strategy.AUTO and not writers_known:
        strategy = Strategy.EVENT
        reason = (
            "no input_stream is declared, so a stream streamsafe does not know may write an input once run() returns "
            "(the vendor's recipe synchronises it before the call and relies on run() returning after the SDK read "
            "the input): the SDK makes the host wait (non_blocking=False); declare input_stream= to let auto drop that wait"
        )
    elif strategy is Strategy.AUTO:
        if h2_open and conversion is not None and conversion.kind is StreamKind.LEGACY and shadow is not None:
            strategy = Strategy.ASYNC
            reason = (
                f"stream 0 does not wait for the {sdk.kind} SDK stream, so non_blocking=True would race (H2); "
                "running the SDK on a blocking shadow stream lets stream 0 wait on the device, and the host never waits"
            )
        elif h2_open and conversion is not None and conversion.kind is StreamKind.LEGACY:
            strategy = Strategy.EVENT  # (no shadow stream: the contract gives none while other threads run effects)
            reason = (
                f"stream 0 does not wait for the {sdk.kind} SDK stream (H2), and other threads drive effects on this "
                "device: a blocking shadow stream would make every conversion on stream 0 wait for their work too, "
                "so the SDK makes the host wait (non_blocking=False)"
            )
        elif h2_open:
            strategy = Strategy.EVENT
            reason = "the conversion stream is not the legacy stream, so only non_blocking=False closes H2"
        else:
            strategy = Strategy.EVENT
            reason = (
                "RGB10A2 has no conversion stage" if conversion is None
                else f"stream 0 already waits for the {sdk.kind} SDK stream"
            ) + ": non_blocking=True is safe; every other edge gets a device-side event fence where the kinds leave it open"
    else:
        reason = {
            Strategy.EVENT: "device-side event fences; the SDK runs with non_blocking=False",
            Strategy.ASYNC: "the SDK runs on a blocking shadow stream with non_blocking=True; no host wait",
            Strategy.STREAM: "the host synchronises each stream involved",
            Strategy.DEVICE: "the device-wide synchronisation of the vendor's documented recipe",
            Strategy.NONE: "no fences (benchmarks only): every open edge stays open",
        }[strategy]
    if strategy is Strategy.ASYNC:
        if conversion is not None and conversion.kind is not StreamKind.LEGACY:
            raise StrategyError(
                "async",
                f"the RGB8 conversion runs on {conversion}, not the legacy stream, so it would not wait for a blocking "
                "shadow stream (a per-thread default stream build makes stream 0 per-thread)",
                "Use strategy='event' (or 'auto', which picks it).",
            )
        if shadow is None:
            raise StrategyError("async", "no shadow stream was provided to run the SDK on", "Let StreamContract create it.")
    run_stream = shadow if strategy is Strategy.ASYNC and shadow is not None else sdk
    if fixed_non_blocking is not None:
        non_blocking = fixed_non_blocking
    elif strategy is Strategy.NONE:
        non_blocking = user_non_blocking
    elif (strategy is Strategy.ASYNC or (requested is Strategy.AUTO and not h2_open)) and writers_known:
        non_blocking = True
    else:
        non_blocking = False
    if copies and not non_blocking:
        copies = False  # (the SDK's own host wait covers its read of the input: nothing to copy)
    elif copies:
        reason = (
            "no input_stream is declared, so a stream streamsafe does not know may rewrite an input once run() returns "
            "(the vendor's recipe): streamsafe copies each input on a stream of its own, the SDK reads the copy, and the "
            "host waits for the copies only, not for the SDK's work; then "
            + _continued(reason).replace("the host never waits", "the host waits for nothing else")
            + ". Declare input_stream= to drop the copies and their wait"
        )
    copy = copy_stream if copies else None

    fences: list[Fence] = []
    release: list[Fence] = []
    if strategy is not Strategy.NONE and copy is not None:
        fences.append(Fence("H1", "before run", "device-wait", copy, producer, "the copy reads the input after its producer wrote it"))
        if sdk != producer:
            fences.append(Fence("H1", "before run", "device-wait", copy, sdk, "work already issued on the SDK stream comes first"))
        fences.append(Fence("H12", "before run", "copy-input", copy, producer,
                            "a stream streamsafe does not know may rewrite the input once run() returns"))
        fences += [dataclasses.replace(f, when="after input copy") if f.signaller == copy else f
                   for f in _before_run(run_stream, sdk, copy)]
    elif strategy is not Strategy.NONE:
        fences += _before_run(run_stream, sdk, producer)
    if strategy is not Strategy.NONE:
        if conversion is not None and not implicitly_ordered(run_stream, conversion):
            fences.append(Fence("H2", "inside run", "sdk-blocking", None, run_stream, f"stream 0 does not wait for {run_stream.kind} streams"))
        elif strategy is Strategy.ASYNC and conversion is not None:
            fences.append(Fence("H2", "inside run", "shadow-stream", run_stream, sdk,
                                "no host wait for inference" if non_blocking else "stream 0 waits for it on the device"))
        if not non_blocking and not writers_known and strategy is Strategy.ASYNC:
            fences.append(Fence("H12", "inside run", "sdk-blocking", None, run_stream,
                                "no input_stream is declared: an undeclared stream may write an input once run() returns"))
        writers = _unique([w for w in (producer, sdk, *input_writers) if w is not None])
        if copy is not None:
            # the copies are read on the run stream (kept from reuse until then); the inputs only by the copy, which
            # the host waits for before run() returns
            fences.append(Fence("H12", "after run", "protect-input", None, run_stream, "the copy of each input is read later"))
            fences.append(Fence("H12", "after run", "host-wait", None, copy,
                                "run() returns once the inputs are copied: the program may rewrite them then"))
            writers = [copy]
        elif non_blocking:
            open_writers = [w for w in writers if not implicitly_ordered(w, run_stream)]
            # Always: an input's memory goes back to the pool of the stream that allocated it, which no
            # plan knows (a decoder's stream, say), even when every writer above is ordered with the run.
            fences.append(Fence("H12", "after run", "protect-input", None, run_stream, "the host does not wait for the input transfer"))
            for w in open_writers:
                if w == consumer and conversion is not None and conversion != run_stream and implicitly_ordered(run_stream, conversion):
                    # stream 0's conversion follows the run stream's read: one wait covers the input and the import
                    fences.append(Fence("H12", "after run", "device-wait", w, conversion,
                                        "a rewrite or a recycled allocation on it must wait for the SDK's read; "
                                        "waiting for the conversion, which follows it, also orders its import"))
                else:
                    fences.append(Fence("H12", "after run", "device-wait", w, run_stream,
                                        "a rewrite or a recycled allocation on it must wait for the SDK's read"))
        fences += [f for f in consumer_fences(strategy, run_stream=run_stream, conversion=conversion, consumer=consumer,
                                              host_waits_run=not non_blocking) if not _waited_after_run(fences, f)]
        fences += reuse_fences(strategy, run_stream=run_stream, conversion=conversion, imported_on_run_stream=consumer == run_stream)
        release += release_fences(strategy, [consumer])
    else:
        writers = []
    return FencePlan(
        requested, strategy, non_blocking, sdk, run_stream, conversion, producer, consumer, tuple(fences), tuple(release), reason,
        tuple(writers), copy_stream=copy,
    )


def _check_fixed(strategy: Strategy, non_blocking: bool, h2_open: bool, shadow: Stream | None) -> None:
    """Raise :class:`~streamsafe.errors.StrategyError` when ``strategy`` cannot order an SDK whose calls always
    (``non_blocking=False``) or never wait for their stream."""
    if not non_blocking and strategy is Strategy.ASYNC:
        raise StrategyError("async", "the SDK takes no blocking keyword and always makes the host wait for its stream, "
                            "so it cannot run without that wait", "Use strategy='event' (or 'auto', which picks it).")
    if non_blocking and h2_open and (shadow is None or strategy not in (Strategy.AUTO, Strategy.ASYNC)):
        raise StrategyError(strategy.value, "the SDK's calls return before their work is done and its conversion stage "
                            "does not wait for the call's stream, which no fence can order without a stream to run it on",
                            "Give its profile a stream_keyword (async then runs it on a blocking stream), or host_waits=True.")


def _wait(strategy: Strategy, hazard: str, when: When, waiter: Stream, signaller: Stream, why: str) -> Fence:
    if strategy is Strategy.STREAM:
        return Fence(hazard, when, "host-wait", None, signaller, why)
    if strategy is Strategy.DEVICE:
        return Fence(hazard, when, "device-sync", None, None, why)
    return Fence(hazard, when, "device-wait", waiter, signaller, why)


def _before_run(run_stream: Stream, sdk: Stream, producer: Stream | None) -> list[Fence]:
    # The input edge is always ordered on the device (or by the producer, through DLPack),
    # never by a host wait, whatever the strategy: the host need not stall for a producer.
    fences: list[Fence] = []
    if run_stream != sdk and not implicitly_ordered(sdk, run_stream):
        fences.append(Fence("H1", "before run", "device-wait", run_stream, sdk, "work already issued on the SDK stream comes first"))
    if producer is None:
        fences.append(Fence("H1", "before run", "forward-dlpack", run_stream, None, "the input's stream is not known"))
    elif producer != sdk or run_stream != sdk:
        if not implicitly_ordered(producer, run_stream) and not any(f.signaller == producer for f in fences):
            fences.append(Fence("H1", "before run", "device-wait", run_stream, producer, "the SDK takes the input with no stream"))
    return fences


def consumer_fences(
    strategy: Strategy, *, run_stream: Stream, conversion: Stream | None, consumer: Stream, host_waits_run: bool = False
) -> list[Fence]:
    """The fences for one consumer stream: at its import (H3/H4) and before the next run (H5).

    ``host_waits_run``: the SDK makes the host wait for the run stream before it converts
    (``non_blocking=False``); a copy on the run stream itself is then done before the next
    conversion overwrites the output, and needs no fence for it."""
    if strategy is Strategy.NONE:
        return []
    fences: list[Fence] = []
    last_writer = conversion if conversion is not None else run_stream
    if not implicitly_ordered(last_writer, consumer):
        hazard = "H3" if conversion is not None else "H4"
        fences.append(_wait(strategy, hazard, "at import", consumer, last_writer, f"{consumer.kind} consumer streams do not wait for it"))
    for writer in (run_stream, conversion):
        if writer is None or implicitly_ordered(consumer, writer):
            continue
        if writer is conversion and host_waits_run and consumer == run_stream:
            continue
        fences.append(_wait(strategy, "H5", "before next run", writer, consumer, "the next run overwrites the buffer the copy reads"))
    return _dedupe(fences)


def reuse_fences(
    strategy: Strategy, *, run_stream: Stream, conversion: Stream | None, imported_on_run_stream: bool = False
) -> list[Fence]:
    """Before the next run: the next inference must not overwrite the 8-bit result stream 0 still converts.
    ``imported_on_run_stream``: the output is imported on the run stream, which then waits for the
    conversion at the import already."""
    if strategy is Strategy.NONE or conversion is None or implicitly_ordered(conversion, run_stream) or imported_on_run_stream:
        return []
    return [_wait(strategy, "H5", "before next run", run_stream, conversion, "the next inference overwrites the 8-bit result stream 0 converts")]


_RELEASE_WHY = "close()/resize releases the buffer with no stream order"
_POOL_RELEASE_WHY = "the decoder frees or reallocates its buffers with no stream order"


def release_fences(strategy: Strategy, streams: Iterable[Stream], *, hazard: str = "H6", why: str = _RELEASE_WHY) -> list[Fence]:
    """H6 (a pool's: D6, ``hazard``, for the reason ``why``): the host waits for each stream that may still touch a
    buffer the SDK is about to release (one device sync instead under ``device``; nothing under ``none``)."""
    if strategy is Strategy.NONE:
        return []
    if strategy is Strategy.DEVICE:
        return [Fence(hazard, "before release", "device-sync", None, None, why)]
    return [Fence(hazard, "before release", "host-wait", None, s, why) for s in _unique(list(streams))]


def _waited_after_run(fences: Iterable[Fence], f: Fence) -> bool:
    """Whether an import fence ``f`` (its stream waits for the output's writer) is given by a device
    wait of the same pair placed right after the run (the input-reuse fence of ``async``)."""
    return f.when == "at import" and f.action == "device-wait" and any(
        g.when == "after run" and g.action == "device-wait" and g.waiter == f.waiter and g.signaller == f.signaller for g in fences
    )


def _unique(streams: list[Stream]) -> list[Stream]:
    return list(dict.fromkeys(streams))


def _dedupe(fences: list[Fence]) -> list[Fence]:
    """One fence per (when, action, waiter, signaller): device syncs have neither, so one per ``when``."""
    seen: set[tuple[str, str, object, object]] = set()
    out: list[Fence] = []
    for f in fences:
        key = (f.when, f.action, f.waiter, f.signaller)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


# -- the plans of other calls: a pool's, and a raw call's --------------------------------------------------------

_POOL_RESOLVED = {
    Strategy.AUTO: Strategy.EVENT, Strategy.EVENT: Strategy.EVENT, Strategy.ASYNC: Strategy.EVENT,
    Strategy.STREAM: Strategy.STREAM, Strategy.DEVICE: Strategy.DEVICE, Strategy.NONE: Strategy.NONE,
}
_POOL_REASONS = {
    Strategy.EVENT: "the decoder's stream waits on the device for the readers of its buffers; the decoder's own host "
                    "wait then covers them, and no host wait of streamsafe's is needed",
    Strategy.STREAM: "the host synchronises each reader's stream before the decoder writes its buffers again",
    Strategy.DEVICE: "the device-wide synchronisation of the vendor's documented recipe, before each decode",
    Strategy.NONE: "no fences (benchmarks only): the next decode may overwrite a frame still being read",
}


def pool_plan(strategy: Strategy, writer: Stream, *, writer_known: bool = True,
              releases: tuple[str, ...] = ("reconfigure_decoder", "end"), consumer: Stream | None = None) -> FencePlan:
    """The plan of a pooled SDK's calls on ``writer`` (the stream it writes its buffers on) under ``strategy``:
    its frames are complete when a call returns (D1, the SDK's own host wait); before a call, ``writer`` waits for
    the readers (D5). ``auto`` and ``async`` resolve to ``event``: a decoder has no ``non_blocking`` to drop and no
    conversion stage. ``writer_known=False`` (the decoder's stream is only assumed): a device wait might be on the
    wrong stream, so ``auto``, ``event`` and ``async`` make the host wait for the readers instead. ``releases``: the
    decoder's releasing calls (D6: the host waits for the readers before each), as the plan prints them; ``consumer``:
    where an import that names no stream reads (default: ``writer``). A pure function."""
    resolved = _POOL_RESOLVED[strategy]
    if not writer_known and resolved is Strategy.EVENT:
        return dataclasses.replace(
            pool_plan(Strategy.STREAM, writer, releases=releases, consumer=consumer), requested=strategy, _cache={},
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
        producer=writer, consumer=consumer or writer, fences=fences,
        on_release=tuple(release_fences(resolved, [writer], hazard="D6", why=_POOL_RELEASE_WHY)),
        reason=_POOL_REASONS[resolved], output_complete=True, release_calls=releases,
    )


def waited_streams(fences: Iterable[Fence]) -> set[Stream]:
    """The streams ``fences`` wait for as a whole (their later captured events need no wait of their own)."""
    return {f.signaller for f in fences if f.signaller is not None}


_raw_plans: dict[tuple[Any, Stream, Stream | None, bool], FencePlan] = {}


def raw_plan(sdk: Stream, conversion: Stream | None, non_blocking: bool = False) -> FencePlan:
    """The ``event`` plan whose fences order a tracked raw call on ``sdk`` (a plain call outside any guard, on an
    object that has a ledger), cached. ``non_blocking``: the call's own, so the plan counts on the SDK's host wait
    only when the call makes it. A pure function."""
    key = (sdk.backend, sdk, conversion, non_blocking)  # (streams of two models compare equal: their plans differ)
    plan = _raw_plans.get(key)
    if plan is None:
        if len(_raw_plans) > 256:
            _raw_plans.clear()
        plan = plan_fences(Strategy.EVENT, sdk=sdk, conversion=conversion, consumer=sdk, producer=sdk)
        if non_blocking:
            plan = dataclasses.replace(plan, non_blocking=True, _cache={})
        _raw_plans[key] = plan
    return plan


def _continued(sentence: str) -> str:
    """``sentence`` going on after a semicolon: its first letter lower case, unless it starts a name (``RGB10A2``)."""
    if len(sentence) > 1 and sentence[1].isupper():
        return sentence
    return sentence[:1].lower() + sentence[1:]
