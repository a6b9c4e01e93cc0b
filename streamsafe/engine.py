"""The engine: every guarded SDK call, made one way.

An effect's ``run()`` and ``run_at_timestep()`` (or any call its profile names), a decoder's call, a tracked
raw call, a class-guarded call and a replayed steady frame all go through :func:`call`: it takes the object's
turn (:mod:`streamsafe.turns`), has the caller decide the call's :class:`~streamsafe.frame.Frame` under it,
checks inputs that are views of other outputs, issues the fences before the call, makes the SDK's call (its
own method, marked: :mod:`streamsafe.calls`), records what it wrote in the ledger, issues the fences after it
and protects the inputs (H12), counts, and gives the turn back. An exception that leaves the SDK's call is a
refusal or an interruption after writes (:mod:`streamsafe.interrupts`, with the profile's
``errors_after_writes``): a refused call leaves the ledger and the counters as they were; an interrupted one
counts as a call. Arguments the SDK's signature does not take are refused when the call is planned
(:func:`~streamsafe.inputs.unbound_call`); a call that reuses a kept frame learns it from the SDK's own
``TypeError`` and raises the same :class:`~streamsafe.errors.ArgumentError`. Releases (``close()``, a resize, a new source) go through :func:`release`.

The caller (a contract, or the guard of a tracked raw call) is anything with the :class:`Caller` attributes.
Blocks the host only where the frame's fences do, and in the SDK's own call.
"""

from __future__ import annotations

from time import perf_counter

from collections.abc import Sequence
from typing import Any, Protocol

from . import hooks
from ._dlpack import array_key
from .buffers import new_stats
from .calls import call_raw
from .frame import Frame
from .frameworks import on_torch_device
from .inputs import unbound_call
from .interrupts import after_writes
from .ledger import Ledger
from .plan import FencePlan
from .strategy import Strategy
from . import views

__all__ = ["Caller", "call", "release", "restore_counters"]

_NOTHING: dict[str, int] = {}


class Caller(Protocol):
    """What the engine asks of the guard a call goes through."""

    @property
    def ledger(self) -> Ledger:
        """The guarded object's ledger."""

    stats: dict[str, int]
    """The counters the call's fences and the call itself go to."""
    last_plan: FencePlan | None
    """The plan of the guard's last call (set by the engine)."""

    def frame_for(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Frame:
        """The call's frame, decided under the turn (raises for a call that cannot be made: nothing issued)."""

    def sdk_arguments(self, frame: Frame, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The arguments as the SDK gets them when the frame forwards or records inputs, and what was wrapped."""

    def copy_inputs(self, frame: Frame, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The inputs copied on the frame's copy stream: the arguments with the copies in their place, and the
        copies (what :meth:`protect` keeps from reuse)."""

    undeclared: Any
    """What a frame that copies its inputs notes: the host's wait for the copies (``waited(seconds)``)."""

    def protect(self, arrays: Sequence[Any], frame: Frame, seen: Any) -> None:
        """H12: keep the inputs from reuse while the SDK may still read them."""

    def output(self, raw: Any, made: Any, frame: Frame, obj: Any) -> Any:
        """The guarded result of the SDK's ``raw`` result (``made``: what the ledger recorded)."""


def call(caller: Caller, obj: Any, method: Any, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``method(obj, *args, **kwargs)`` (the SDK's own method ``name``) as a guarded call of ``caller``: see the
    module docstring. Returns the caller's output. Blocks as the frame and the SDK do."""
    ledger = caller.ledger
    turns = ledger.turns
    outer = None  # (the hold this one is inside, this thread's, when nested: given back at the end)
    try:
        outer = turns.take(name)
        frame = caller.frame_for(name, args, kwargs)
        stats = caller.stats
        arrays = args if frame.arrays_are_args else frame.arrays(args, kwargs)
        if arrays:
            if views.registry:  # (first: a stale view is refused before anything is issued or counted)
                views.read_inputs(arrays, ledger, frame.plan.run_stream)
            if hooks.observers:
                _inputs_written(ledger, frame, arrays)
        before = frame.before_program
        assert before is not None
        copying = frame.after_copy_program
        counted = None if before.counts_exactly and not ledger.captured and (copying is None or copying.counts_exactly) else dict(stats)
        if before.fences:
            before(stats)
        if ledger.captured:
            ledger.wait_captured(frame.plan, stats, frame.waited)
        seen = None
        returned = recorded = copied = False
        try:
            if frame.copy_stream is not None:  # (the SDK reads copies of the inputs: the run stream waits for them)
                args, kwargs, seen = caller.copy_inputs(frame, args, kwargs)
                if copying is not None:
                    copying(stats)
                    copied = True
            elif frame.forward or frame.record:
                args, kwargs, seen = caller.sdk_arguments(frame, args, kwargs)
            keywords = frame.keywords
            if keywords:
                # (the SDK's method gets a dict of its own from the ** of the call: the frame's is never changed)
                kwargs = {**{k: v for k, v in kwargs.items() if k not in frame.keyword_names}, **keywords} if kwargs else keywords
            if frame.check_device:
                with on_torch_device(ledger.device):
                    raw = call_raw(obj, method, args, kwargs)
            else:
                raw = call_raw(obj, method, args, kwargs)
            returned = True
            # only now: an input the SDK rejects leaves the previous output valid and its readers known
            made = ledger.record_write(frame, raw, stats)
            recorded = True
            if frame.protect:
                after = frame.after_program
                if after is not None and after.fences:
                    if frame.copy_stream is not None:  # (the host waits for the copies: the time a declaration saves)
                        began = perf_counter()
                        after(stats)
                        caller.undeclared.waited(perf_counter() - began)
                    else:
                        after(stats)
                caller.protect(arrays, frame, seen)
        except BaseException as e:
            _unwound(caller, frame, e, returned, recorded, counted, arrays, seen, copied)
            if type(e) is TypeError and not returned:
                _refuse_unbound(e, obj, method, name, args, kwargs)
            raise
        if ledger.keepalive.entries:
            ledger.keepalive.prune()
        for counter, n in frame.counts:
            stats[counter] += n
        caller.last_plan = frame.plan
    finally:  # (the lock first: an interrupt cannot come between this finally's start and the release)
        if outer is not None:
            turns.owner, turns.closing_wait = outer
            turns.lock.release()
    return caller.output(raw, made, frame, obj)


def _refuse_unbound(error: TypeError, obj: Any, method: Any, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """The SDK's call raised ``error`` where Python binds its arguments (the last frame is :func:`call_raw`'s: the
    SDK's own method never ran) and they do not bind to its signature: raise the
    :class:`~streamsafe.errors.ArgumentError` a planned call gets (a kept frame's facts leave out keywords that are
    not the stream's, the blocking flag's or an input's). A refusal: the ledger and counters were put back."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code is not _CALL_RAW:
        return
    unbound = unbound_call(type(obj), name, args, kwargs)
    if unbound is not None:
        raise unbound from error


_CALL_RAW = call_raw.__code__


def _inputs_written(ledger: Ledger, frame: Frame, arrays: Sequence[Any]) -> None:
    """With an observer on a GPU: each input's write on its producer (before the fences that order it)."""
    if not ledger.resolved_backend().records_accesses:
        for arr, producer in zip(arrays, frame.producers):
            if producer is not None:
                for o in hooks.observers:
                    o.on_input_write(array_key(arr), producer, ledger.device)


def _unwound(caller: Caller, frame: Frame, error: BaseException, returned: bool, recorded: bool,
             counted: dict[str, int] | None, arrays: Sequence[Any], seen: Any, copied: bool) -> None:
    """An exception left the SDK's call, or the records right after it: an interruption after writes, or a
    refusal (see the module docstring). Brings the ledger and the counters to what the call made."""
    ledger, stats = caller.ledger, caller.stats
    profile = frame.profile
    if returned or after_writes(error, profile.errors_after_writes if profile is not None else ()):
        # Interrupted after the SDK may have issued its work: a call. Its outputs before are stale, the next call and
        # release wait for its streams, its inputs are protected as after any call.
        if not recorded:
            ledger.record_interrupted(frame, stats)
        if frame.protect:
            if frame.after_program is not None:
                frame.after_program(stats)
            caller.protect(arrays, frame, seen)
        for counter, n in frame.counts:
            stats[counter] = stats.get(counter, 0) + n
        caller.last_plan = frame.plan
        return
    # The SDK refused the call (an input's dtype, layout or size; the object's state): the counters go back to what
    # they were. The device waits already issued stay queued (they order work and change no data), a host wait
    # already made is not undone, and the ledger is as before: the previous output stays valid, its readers known.
    # (In case the SDK issued work before it raised, its streams are waited for by the next call, and its inputs
    # protected.)
    if counted is not None:
        restore_counters(stats, counted)
    else:
        if frame.before_program is not None:
            frame.before_program.uncount(stats)
        if copied and frame.after_copy_program is not None:
            frame.after_copy_program.uncount(stats)
    ledger.record_refused(frame)
    if frame.protect:
        if frame.after_program is not None:
            frame.after_program(new_stats())
        caller.protect(arrays, frame, seen)


def release(ledger: Ledger, obj: Any, method: Any, args: Sequence[Any], kwargs: dict[str, Any], *, plan: FencePlan | None,
            strategy: Strategy | None, stats: dict[str, int], closes: bool, call: str) -> Any:
    """A releasing call (``close()``, a reset, a new source): the host waits for every stream that may still
    read the object's buffers (H6, D6), then the SDK's own method runs. Its buffers are released whether it
    returns or raises (it may have freed them on the way); with ``closes``, once it returns, the object is
    closed. Takes the turn; blocks the host for the readers."""

    def released() -> Any:
        ledger.wait_for_readers(plan, strategy, stats)
        if closes:
            ledger.keepalive.drain()
            result = call_raw(obj, method, args, kwargs)
            ledger.closed_object(obj)  # (a close the SDK refused leaves the object open, and its ledger as it was)
            return result
        try:
            return call_raw(obj, method, args, kwargs)
        finally:
            ledger.released()  # (refused or not, the SDK may have freed its buffers on the way)

    return ledger.turns.run(call, released)


def restore_counters(stats: dict[str, int], counted: dict[str, int]) -> None:
    """Put ``stats`` back to ``counted`` in place (a guard and its run report hold the same dict), never empty for
    a moment: another thread may read it meanwhile."""
    stats.update(counted)
    for key in [k for k in stats if k not in counted]:
        stats.pop(key, None)
