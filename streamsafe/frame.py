"""A guarded call as a value: what the engine does around one SDK call, decided before it is made.

A :class:`Frame` holds the call's plan, the fences before and after it, the keywords the SDK gets (its stream
and whether it may return early), which arguments are inputs and what wrote them, the input shapes, the
default consumer of the output and what the call adds to the counters. :class:`EffectPlanner` makes one from
a guard's streams and strategy, the call's arguments and the ledger's state, changing nothing (a pure
planner: it issues no GPU work and writes no state); :func:`pool_frame` and :func:`raw_frame` make a
decoder's and a tracked raw call's. The engine (:mod:`streamsafe.engine`) runs any of them the same way. A
steady frame (:mod:`streamsafe.steady`) is a frame kept with its fences bound once; it equals the frame the
planner makes for the same call in the same state (``STREAMSAFE_CHECK_REPLAY=1`` compares them).
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import hooks
from .backend import Backend
from .backend.naming import as_stream, stream_on_device
from .errors import ArgumentError
from .inputs import Inputs, argument, call_keywords
from .ledger import EffectLedger, PoolLedger
from .plan import Fence, FencePlan, plan_fences, raw_plan, waited_streams
from .profile import EffectProfile, PoolProfile, Profile
from .program import FenceProgram
from .strategy import Strategy
from .streams import LEGACY_HANDLE, Stream, on_this_thread

__all__ = ["Frame", "EffectPlanner", "pool_frame", "raw_frame", "run_counts", "shape_of"]

_NO_ARRAYS: tuple[Any, ...] = ()


def shape_of(arr: Any) -> Any:
    """An input's shape as a tuple (``None`` when it has none)."""
    shape = getattr(arr, "shape", None)
    return tuple(shape) if shape is not None else None


def run_counts(plan: FencePlan) -> tuple[tuple[str, int], ...]:
    """What one call under ``plan`` adds to a guard's counters besides its fences: the call, and the SDK's own
    host wait when the plan lets it make one."""
    return (("runs", 1),) if plan.non_blocking else (("runs", 1), ("sdk_waits", 1))


@dataclass(frozen=True, eq=True)
class Frame:
    """One guarded call, decided (see the module docstring). Frames compare equal when they do the same."""

    call: str
    """The SDK method called."""
    plan: FencePlan
    before: tuple[Fence, ...]
    """Fences issued before the call (reuse and release waits, H1, D5)."""
    after: tuple[Fence, ...] = ()
    """Device waits issued after the call (H12), when :attr:`protect`."""
    protect: bool = False
    """Whether the inputs are kept from reuse after the call (H12: the host does not wait for the SDK's read)."""
    keywords: dict[str, Any] = field(default_factory=dict)
    """The keywords streamsafe passes the SDK (its stream, whether it may return early), replacing the caller's."""
    inputs: tuple[int | str, ...] = ()
    """Where the input arrays are among the call's arguments (positions, keywords)."""
    arrays_are_args: bool = False
    """Whether the inputs are the positional arguments, all of them, and nothing else."""
    producers: tuple[Stream | None, ...] = ()
    """The stream that wrote each input (``None``: unknown; its ``__dlpack__`` is asked for the run stream)."""
    shapes: tuple[Any, ...] = ()
    default_consumer: Stream | None = None
    """The stream an import that names none reads on."""
    counts: tuple[tuple[str, int], ...] = ()
    """What the call adds to the counters besides its fences."""
    guarded: bool = True
    """False for a tracked raw call: its output is the SDK's own, not handed out by streamsafe."""
    forward: bool = False
    """Whether an input's producer is unknown (it is wrapped to forward the run stream: H1)."""
    record: bool = False
    """Whether inputs kept alive are wrapped to note the memory the SDK imports (on a model)."""
    waited: frozenset[Stream] = frozenset()
    """The streams :attr:`before` waits for as a whole (a pool's captured readers need no wait of their own)."""
    copy_stream: Stream | None = None
    """The stream the inputs are copied on before the call (the SDK reads the copies), else ``None``."""
    after_copy: tuple[Fence, ...] = ()
    """Fences issued once the copies are issued (the run stream waits for them)."""
    profile: Profile | None = field(default=None, compare=False)
    check_device: bool = field(default=True, compare=False)
    """Whether the framework's current device is made the object's for the call (a planned effect call: a
    steady frame's facts say it is already)."""
    keyword_names: frozenset[str] = field(init=False, compare=False, repr=False)
    """The names of :attr:`keywords` (the caller's values under them are replaced)."""
    before_program: FenceProgram | None = field(default=None, compare=False, repr=False)
    """:attr:`before`, ready to issue (bound once for a steady frame)."""
    after_program: FenceProgram | None = field(default=None, compare=False, repr=False)
    after_copy_program: FenceProgram | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keyword_names", frozenset(self.keywords))

    def arrays(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The input arrays among a call's arguments."""
        inputs = self.inputs
        if not inputs:
            return _NO_ARRAYS
        return tuple(args[k] if type(k) is int else kwargs[k] for k in inputs)  # type: ignore[index]

    def ready(self, backend: Backend, device: int, *, bind: bool = False) -> Frame:
        """This frame with its fences ready to issue: applied one by one, or (``bind``) bound once into the
        backend's calls for a frame that repeats (:mod:`streamsafe.steady`: its facts say the device is current)."""
        return dataclasses.replace(
            self,
            before_program=FenceProgram(backend, device, self.before, bind=bind),
            after_program=FenceProgram(backend, device, self.after, bind=bind),
            after_copy_program=FenceProgram(backend, device, self.after_copy, bind=bind) if self.after_copy else None,
            check_device=self.check_device and not bind,
        )


class EffectPlanner:
    """Plans an effect's calls for one guard: its profile, strategy, device, backend and declared streams (see
    the module docstring). Made by :class:`~streamsafe.StreamContract`; plans are cached by their streams. It
    holds the blocking stream ``async`` runs the SDK on (made when first wanted, given back when the planner
    goes or :meth:`release_shadow` is called)."""

    def __init__(
        self, profile: EffectProfile, strategy: Strategy, device: int, backend: Backend, cls: type, *,
        sdk: Stream | None, producer: Stream | None, consumer: Stream | None, conversion: Stream,
    ) -> None:
        self.profile = profile
        self.strategy = strategy
        self.device = device
        self.backend = backend
        self.cls = cls
        self.sdk = sdk
        """The declared SDK stream (``None``: each call's stream keyword, else the current stream)."""
        self.producer = producer
        """The declared input stream, or ``None``."""
        self.consumer = consumer
        self.conversion = conversion
        """The declared conversion stream (the legacy stream unless declared)."""
        self.shared = False
        """Whether other threads drive guarded effects on the device (``auto`` then runs no shadow stream:
        :mod:`streamsafe.occupancy`)."""
        self._own: dict[str, tuple[Stream, Any]] = {}
        """The streams of streamsafe's own this planner made (the shadow, the input-copy stream), each with the
        finalizer that gives it back."""
        self._plans: dict[tuple[Any, ...], FencePlan] = {}

    # -- streams and plans -----------------------------------------------------------------------------------

    def sdk_stream(self) -> Stream:
        """The SDK stream as the calling thread names it: the declared one, else the current stream."""
        if self.sdk is not None:
            return on_this_thread(self.sdk)
        return as_stream(None, device=self.device, backend=self.backend)

    def conversion_stream(self, effect: Any) -> Stream | None:
        """The conversion stream (the legacy stream unless declared), or ``None`` when ``effect`` converts nothing."""
        return on_this_thread(self.conversion) if self.profile.converts(effect) else None

    def shadow_stream(self) -> Stream | None:
        """The blocking stream ``async`` (and ``auto`` while the device is not shared) runs the SDK on, made when
        first wanted; ``None`` when not wanted, or when the SDK takes no stream keyword."""
        if self.strategy is not Strategy.ASYNC and (self.strategy is not Strategy.AUTO or self.shared):
            return None
        if self.profile.stream_keyword is None:  # (the SDK cannot be told to run on another stream)
            return None
        return self._own_stream("shadow", False, "streamsafe's shadow stream (async runs the SDK there)")

    def copy_stream(self) -> Stream | None:
        """The non-blocking stream ``auto`` copies the inputs on when no ``input_stream`` is declared (made when first
        wanted); ``None`` for any other strategy, or with ``input_stream`` declared."""
        if self.strategy is not Strategy.AUTO or self.producer is not None:
            return None
        return self._own_stream("copy", True, "streamsafe's input-copy stream (auto copies undeclared inputs there)")

    def _own_stream(self, role: str, non_blocking: bool, label: str) -> Stream:
        """The pooled stream of streamsafe's own for ``role``, made when first wanted. A guard that is never closed
        (a `with` block per frame, a decorator) gives it back when it goes."""
        owned = self._own.get(role)
        if owned is None:
            stream = self.backend.acquire_stream(self.device, non_blocking=non_blocking)  # type: ignore[attr-defined]
            hooks.label(stream, label)
            owned = self._own[role] = (stream, weakref.finalize(self, self.backend.release_stream, stream))  # type: ignore[attr-defined]
        return owned[0]

    def release_shadow(self) -> None:
        """Give the shadow and input-copy streams back (pooled, never destroyed: torch records events on them later
        for inputs given ``record_stream()``)."""
        for _, give_back in self._own.values():
            give_back()
        self._own.clear()

    def plan(
        self, effect: Any, *, producer: Stream | None, sdk: Stream | None = None, consumer: Stream | None = None,
        non_blocking: bool = False, input_writers: tuple[Stream, ...] = (), copy: Stream | None = None,
    ) -> FencePlan:
        """The plan for given streams (``producer=None``: unknown, forwarded; ``input_writers``: more streams that
        may write an input after the call; ``copy``: the stream the inputs can be copied on). Cached; issues nothing."""
        sdk = sdk or self.sdk_stream()
        consumer = consumer or self.consumer or sdk
        conversion = self.conversion_stream(effect)
        shadow = self.shadow_stream()
        fixed = self.fixed_non_blocking()
        key = (producer, sdk, consumer, conversion, shadow, non_blocking, input_writers, copy)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 256:
                self._plans.clear()
            plan = self._plans[key] = plan_fences(
                self.strategy, sdk=sdk, conversion=conversion, consumer=consumer, producer=producer,
                shadow=shadow, user_non_blocking=non_blocking, input_writers=input_writers,
                writers_known=self.producer is not None, fixed_non_blocking=fixed, copy_stream=copy,
            )
        return plan

    def fixed_non_blocking(self) -> bool | None:
        """Whether the SDK's calls return before their work is done, when it takes no blocking keyword (its
        profile says); ``None`` when the plan chooses."""
        profile = self.profile
        if profile.blocking_keyword is not None:
            return None
        return not profile.host_waits

    # -- a call ------------------------------------------------------------------------------------------

    def call_streams(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Stream, bool]:
        """The SDK stream of a call and the caller's blocking keyword, checked. Issues nothing."""
        stream_ptr, user_nb = call_keywords(self.profile, self.cls, name, args, kwargs)
        if stream_ptr is None:
            sdk = self.sdk_stream()
            if self.sdk is not None and self.profile.stream_keyword is None:
                current = as_stream(None, device=self.device, backend=self.backend)
                if current != sdk:  # (the SDK runs on the current stream: the fences would order another one)
                    raise ArgumentError(
                        f"{self.cls.__name__}.{name}() takes no stream: it runs on the current stream, {current}, but this "
                        f"contract runs it on {sdk}. Make the contract's stream current around the call (with torch.cuda.stream(s): "
                        "..., on the model with sim.use_stream(s)), or make the contract without a stream "
                        "(ss.stream_contract(sdk)): the current stream at each call is then the SDK stream"
                    )
            return sdk, user_nb
        sdk = on_this_thread(stream_on_device(stream_ptr, self.device, self.backend, "sdk"))
        if self.sdk is not None and sdk != on_this_thread(self.sdk):
            kw = self.profile.stream_keyword
            raise ArgumentError(
                f"{kw}={stream_ptr!r} names {sdk}, but this contract runs {self.cls.__name__} on its stream, "
                f"{on_this_thread(self.sdk)}. Leave {kw} out (the contract passes its own), "
                "or make a contract for that stream: ss.stream_contract(effect, stream)"
            )
        return sdk, user_nb

    def frame(self, effect: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], ledger: EffectLedger,
              inputs: Inputs) -> Frame:
        """The frame of a call in the ledger's state now: every input checked, the plan, the fences. Raises for a
        call streamsafe cannot order (nothing is issued then). Changes nothing."""
        sdk, user_nb = self.call_streams(name, args, kwargs)
        arrays, keys, producers = inputs.of_call(args, kwargs)
        first = producers[0] if producers else sdk
        extra: tuple[Stream, ...] = ()
        others = producers[1:]  # the other streams whose input writes the run must follow
        current: Stream | None = None
        if self.producer is not None or first is None or len(producers) > 1:
            current = ledger.current_stream()  # held streams need no driver query
            extra = tuple(dict.fromkeys(p for p in (*producers[1:], current) if p is not None))
            if self.producer is not None and current != self.producer:
                others.append(current)  # with input_stream declared, an input may still come from the current stream
        copy = self.copy_stream() if arrays and None not in producers and inputs.copyable(arrays) else None
        plan = self.plan(effect, producer=first, sdk=sdk, non_blocking=user_nb, input_writers=extra, copy=copy)
        copy = plan.copy_stream
        shapes = tuple(shape_of(a) for a in arrays)
        escaped_current = (current or ledger.current_stream()) if ledger.escaped else None
        fences = ledger.reuse_fences(plan, shapes, escaped_current)
        fences += plan.at("before run")
        after_copy = list(plan.at("after input copy"))
        for producer in others:
            if producer != first:
                other = self.plan(effect, producer=producer, sdk=sdk, non_blocking=user_nb, input_writers=extra, copy=copy)
                fences += other.at("before run")
                after_copy += other.at("after input copy")
        fences = [f for f in fences if f.action != "copy-input"]
        after = plan.at("after run")
        profile = self.profile
        keywords = {k: v for k, v in ((profile.stream_keyword, plan.run_stream.ptr), (profile.blocking_keyword, plan.non_blocking))
                    if k is not None}
        active = plan.strategy is not Strategy.NONE
        return Frame(
            call=name, plan=plan, before=plan.before_run(fences),
            after=tuple(f for f in after if f.action in ("device-wait", "host-wait")),
            copy_stream=copy, after_copy=plan.before_run(after_copy),
            protect=bool(after), keywords=keywords, inputs=keys, arrays_are_args=keys == tuple(range(len(args))),
            producers=tuple(producers), shapes=shapes,
            default_consumer=self.consumer or sdk, counts=run_counts(plan) + ((("input_copies", len(keys)),) if copy else ()),
            forward=active and None in producers, record=active and self.backend.records_accesses, profile=profile,
        )


def pool_frame(name: str, plan: FencePlan, ledger: PoolLedger, default_consumer: Stream, profile: PoolProfile, *,
               guarded: bool = True) -> Frame:
    """The frame of a pooled SDK's call under ``plan``: before it, the SDK's stream waits for every reader of the
    pool (D5); the call counts once, with the SDK's own host wait (``guarded``; a tracked raw call counts only its
    fences). Changes nothing."""
    before = tuple(ledger.reuse_fences(plan))
    return Frame(
        call=name, plan=plan, before=before, default_consumer=default_consumer,
        counts=(("runs", 1), ("sdk_waits", 1)) if guarded else (), guarded=guarded,
        waited=frozenset(waited_streams(before)), profile=profile, check_device=False,
    )


def raw_frame(name: str, ledger: EffectLedger, profile: EffectProfile, effect: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Frame:
    """The frame of a tracked raw call: a plain call of an effect no guard holds now, but which has a ledger. The
    SDK's own output comes back; before the call its streams wait for the readers streamsafe knows of (H5), and
    the host for them when an input's size changed; later outputs are stale. Changes nothing."""
    be, dev = ledger.resolved_backend(), ledger.device
    cls = type(effect)  # (the stream and the blocking flag as the SDK gets them: by keyword, by position, or its defaults)
    stream_ptr = argument(cls, name, profile.stream_keyword, args, kwargs, 0) if profile.stream_keyword is not None else None
    sdk = as_stream(stream_ptr, device=dev, backend=be)
    conversion = as_stream(LEGACY_HANDLE, device=dev, backend=be) if profile.converts(effect) else None
    non_blocking = (bool(argument(cls, name, profile.blocking_keyword, args, kwargs, False)) if profile.blocking_keyword is not None
                    else not profile.host_waits)
    plan = raw_plan(sdk, conversion, non_blocking)
    arrays = [a for a in args if hasattr(a, "__dlpack__")] + [kwargs[k] for k in profile.input_keywords(kwargs)]
    shapes = tuple(shape_of(a) for a in arrays)
    current = ledger.current_stream() if ledger.escaped else None
    return Frame(call=name, plan=plan, before=tuple(ledger.reuse_fences(plan, shapes, current)), shapes=shapes,
                 guarded=False, profile=profile, check_device=False)
