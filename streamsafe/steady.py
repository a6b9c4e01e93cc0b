"""Steady frames: a guard's frames kept with their fences bound once, and reused while a call repeats one.

A video pipeline calls ``run()`` with the same streams, the same input shapes and the same consumers frame
after frame. The planner (:class:`~streamsafe.frame.EffectPlanner`) decides a call's
:class:`~streamsafe.frame.Frame` from scratch; what it decides is a pure function of

* the call's **facts**: the method, the stream and blocking keywords, each input's type, shape and producer
  stream (and, where ``auto`` may copy the inputs, a torch input's strides: only a dense one is copied), the
  current stream (raw handles, read from the framework), and whether the device is shared;
* the ledger's **state** (:meth:`~streamsafe.ledger.EffectLedger.state`): the readers of the current output,
  whether a view of it escaped, the previous call's plan and SDK streams, the previous input shapes, and the
  output-size and encoding attributes.

:class:`SteadyFrames` keeps a guard's four newest frames with the facts and state they were planned in, their
fences bound into :class:`~streamsafe.program.FenceProgram` objects. A call whose facts and state match one
gets that frame, and the engine runs it as it runs any frame. Any difference, an observer (sanitize mode),
inputs by keyword or that are not plain torch tensors or model arrays send the call to the planner, which
then keeps a frame for the new situation. ``STREAMSAFE_CHECK_REPLAY=1`` (the test suite sets it) plans every
reused call again and requires an equal frame. Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import sys
from typing import Any

from ._env import env_flag
from .frame import Frame
from .frameworks import TORCH
from .streams import PER_THREAD_HANDLE, Stream, stream_from_handle, thread_token

__all__ = ["SteadyFrames", "check_replay", "enabled", "replays", "UNREADABLE"]


check_replay = env_flag("STREAMSAFE_CHECK_REPLAY", False, "plan every replayed call again and compare", strict=False)
"""Plan every reused call again and raise if the kept frame differs (a test switch)."""
replays = 0
"""How many calls reused a kept frame (the tests read it)."""
enabled = env_flag("STREAMSAFE_REPLAY", True, "replay steady-state frames from recipes", strict=False)
"""Whether guards reuse kept frames (``STREAMSAFE_REPLAY=0``: every call is planned; the tests compare both)."""

UNREADABLE = object()
"""What a guard's config reader gives when an attribute went (no reuse then)."""


class Kept:
    """A frame kept with the facts and the ledger state it was planned in."""

    __slots__ = ("facts", "state", "config", "frame", "thread", "holds")

    def __init__(self, facts: tuple[Any, ...], state: tuple[Any, ...], config: Any, frame: Frame, holds: tuple[Any, ...]) -> None:
        self.facts = facts
        self.state = state
        self.config = config
        """The effect's output-size and encoding attributes it was planned with (compared with ``==``: a value
        unequal to itself never matches)."""
        self.frame = frame
        self.holds = holds
        """The framework objects of the streams its facts name by raw handle, kept alive with it."""
        self.thread = thread_token() if _names_per_thread(facts, state, frame) else None
        """The thread it was planned in, when it names a per-thread default stream (handle 2 is another stream
        in each thread: such a frame is reused only in its own thread)."""

    def __repr__(self) -> str:
        return f"<Kept {self.frame.call} {self.frame.plan.strategy.value}: {len(self.frame.before)} fence(s) before>"


class SteadyFrames:
    """One guard's kept frames (see the module docstring): the newest first, at most four."""

    __slots__ = ("kept", "device", "backend", "declared", "profile", "copies")

    def __init__(self, device: int, backend: Any, declared: Stream | None, profile: Any, copies: bool = False) -> None:
        self.kept: list[Kept] = []
        self.device = device
        self.backend = backend
        self.declared = declared
        """The guard's declared input stream (the producer of every input), or ``None``."""
        self.profile = profile
        self.copies = copies
        """Whether a frame may copy the inputs (``auto`` with no input stream declared): then a torch input's
        strides are a fact (only an input whose elements fill their memory is copied)."""

    def facts(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> tuple[Any, ...] | None:
        """This call's facts (raw handles, shapes), read without a driver query; ``None`` when the call must be
        planned (inputs passed by keyword, inputs other than plain torch tensors and model arrays, an input on
        another device)."""
        if not kwargs and len(args) == 1:  # (the common call on the model: one input by position)
            a = args[0]
            kind = type(a)
            dev = self.device
            if kind is self.backend.array_type and kind is not None:
                if a.buffer.device != dev or a.backend is not self.backend:
                    return None
                current = a.backend.current_stream(dev)
                return (name, None, False, shared, a.shape, current if self.declared is None else self.declared, current)
        stream_ptr = None
        non_blocking = False
        if kwargs:
            profile = self.profile
            if profile.input_keywords(kwargs):
                return None
            if profile.stream_keyword is not None:
                stream_ptr = kwargs.get(profile.stream_keyword)
            if profile.blocking_keyword is not None:
                non_blocking = kwargs.get(profile.blocking_keyword, False)
            if (stream_ptr is not None and type(stream_ptr) is not int) or type(non_blocking) is not bool:
                return None
        dev = self.device
        declared = self.declared
        tensor = TORCH.tensor
        model_array = self.backend.array_type
        facts: list[Any] = [name, stream_ptr, non_blocking, shared]
        sim = None
        current = None  # torch's current stream, read once
        for a in args:
            kind = type(a)
            if kind is tensor:
                if a.get_device() != dev:
                    return None
                facts.append(a.shape)
                if self.copies:
                    strides = _strides(a)
                    if strides is None:
                        return None
                    facts.append(strides)
                if declared is None:
                    if current is None:
                        current = TORCH.raw_stream(dev)
                    facts.append(current)
                else:
                    facts.append(declared)
            elif kind is model_array:
                if a.buffer.device != dev or a.backend is not self.backend:
                    return None
                sim = a.backend
                facts.append(a.shape)
                facts.append(declared if declared is not None else sim.current_stream(dev))
            elif kind is int or kind is float:
                facts.append(kind)
            else:
                return None
        if len(facts) == 4:
            return None
        if sim is not None:
            facts.append(sim.current_stream(dev))
            if stream_ptr is not None:  # (on the model a handle is cheap to name: with its kind, a destroyed one's reuse differs)
                try:
                    facts[1] = stream_from_handle(stream_ptr, dev, sim)
                except Exception:  # noqa: BLE001 (not a stream: the planner says why)
                    return None
        elif model_array is not None or TORCH.tensor is None:
            return None
        else:
            if TORCH.current_device() != dev:  # the planner makes the effect's device current for the call
                return None
            facts.append(current if current is not None else TORCH.raw_stream(dev))  # torch is initialised: it made the inputs
        return tuple(facts)

    def find(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool, ledger: Any,
             config_of: Any, effect: Any) -> Frame | None:
        """The kept frame for this call (its facts) in the ledger's state now (``ledger.state()``) with the effect's
        output-size and encoding attributes now (``config_of(effect)``), the newest first; else ``None``."""
        a: Any = args[0] if len(args) == 1 and not kwargs else None
        kind = type(a)
        dev = self.device
        if kind is TORCH.tensor:  # (the common call: one torch tensor by position; the same facts as facts() gives)
            if a.get_device() != dev or TORCH.current_device() != dev:
                return None
            current = TORCH.raw_stream(dev)
            producer = current if self.declared is None else self.declared
            if self.copies:
                strides = _strides(a)
                if strides is None:
                    return None
                facts: tuple[Any, ...] | None = (name, None, False, shared, a.shape, strides, producer, current)
            else:
                facts = (name, None, False, shared, a.shape, producer, current)
        else:
            facts = self.facts(name, args, kwargs, shared)
            if facts is None:
                return None
        state = None
        for kept in self.kept:
            if kept.facts != facts:
                continue
            if state is None:
                try:
                    config = config_of(effect)
                except AttributeError:  # an attribute went: the planner copes
                    return None
                state = ledger.state()
            try:
                same = kept.state == state and bool(kept.config == config)
            except Exception:  # noqa: BLE001 (a setting whose == is elementwise, an array, changed: plan the call)
                return None
            if same and (kept.thread is None or kept.thread == thread_token()):
                global replays
                replays += 1
                return kept.frame
        return None

    def keep(self, facts: tuple[Any, ...], state: tuple[Any, ...], config: Any, frame: Frame) -> None:
        """Keep ``frame`` (planned for ``facts`` in ``state`` with ``config``) for the calls that repeat it, its fences
        bound."""
        for old in self.kept:
            try:
                same = old.facts == facts and old.state == state and bool(old.config == config)
            except Exception:  # noqa: BLE001 (a setting's array changed: not the same situation)
                same = False
            if same and old.thread in (None, thread_token()):
                return
        holds = _stream_objects(facts, self.device)
        if holds is None:  # a raw handle whose stream no object keeps alive: it could name another stream later
            return
        kept = Kept(facts, state, config, frame.ready(self.backend, self.device, bind=True), holds)
        self.kept = [kept, *self.kept[:3]]

    def forget(self) -> None:
        """Drop every kept frame."""
        self.kept = []


def _strides(a: Any) -> tuple[int, ...] | None:
    """A torch input's strides, ``None`` for a layout without them (a sparse tensor: the planner decides)."""
    try:
        return tuple(a.stride())
    except Exception:  # noqa: BLE001 (no strides: sparse, or another layout)
        return None


def _stream_objects(facts: tuple[Any, ...], device: int) -> tuple[Any, ...] | None:
    """The framework objects of the streams a frame's facts name by raw handle (torch's current stream), kept with
    it: while it is kept, its handle names that stream, with that stream's kind (the driver hands a destroyed
    stream's handle to the next stream it creates, of either kind). ``None`` when a handle is not torch's current
    stream (nothing to keep alive: the call is planned each time)."""
    handles = {f for f in facts[1:] if type(f) is int and f != 0}
    if not handles:
        return ()
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    current = torch.cuda.current_stream(device)
    if handles != {int(current.cuda_stream)}:
        return None
    return (current,)


def _names_per_thread(facts: tuple[Any, ...], state: tuple[Any, ...], frame: Frame) -> bool:
    """Whether a kept frame names a per-thread default stream anywhere: a fact (a stream, or a raw handle 2), a
    reader or SDK stream of the ledger's state, a stream of the plan or of its fences."""
    if PER_THREAD_HANDLE in facts:
        return True
    readers, _, _, previous_sdk, _, _ = state
    plan = frame.plan
    streams: list[Any] = [*facts, *readers, *previous_sdk, frame.default_consumer, plan.sdk, plan.run_stream, plan.conversion,
                          plan.producer, plan.consumer, *plan.input_writers]
    for fence in (*frame.before, *frame.after):
        streams += (fence.waiter, fence.signaller)
    return any(type(s) is Stream and s.thread for s in streams)
