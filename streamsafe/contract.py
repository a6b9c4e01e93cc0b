"""Contracts: the guard of one SDK object, its streams, and the ways a program reaches it.

Three ways in::

    with ss.stream_contract(sr, stream, strategy="auto") as c:   # sr.run is guarded in the block
        out = sr.run(frame)                                      # or c.run(frame)
        y = torch.from_dlpack(out.image).clone()                 # ordered on torch's current stream

    @ss.stream_safe(sr)                                          # stream taken at each call
    def upscale(frame): ...

    c = ss.StreamContract(sr, stream)                            # used directly: c.run(...), c.close()

A :class:`StreamContract` guards an effect (one output buffer every call rewrites); a :class:`PoolContract`
guards an object whose calls hand out frames in buffers of a pool (a video decoder); :func:`new_contract` picks
the one the object's profile asks for. A contract holds the streams (docs/design.md, "The four streams"): **P**
the input's producer (declared ``input_stream``, else the producer framework's current stream at call time,
else forwarded through ``__dlpack__(stream=S)``), **S** the SDK stream (the contract's ``stream``, a stream
keyword passed to the call, else the current stream at call time), **L** the conversion stream (the legacy
stream; none for RGB10A2), **C** the consumer's stream (what the consumer passes to ``__dlpack__``, else
``consumer_stream``, else S). Each call is planned (:mod:`streamsafe.frame`), or reused while it repeats
(:mod:`streamsafe.steady`), and made by the engine (:mod:`streamsafe.engine`); the contract itself configures,
synchronizes, closes and opens blocks.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from . import engine, guarding, hooks, lazy, occupancy, steady
from ._env import SANITIZE_MEANING, env_flag
from .backend import Backend, current_backend, require_backend
from .backend.naming import as_stream, stream_on_device
from .buffers import new_stats
from .calls import call_raw, raw_method
from .errors import ArgumentError, DeviceMismatchError, EffectConfigError, EffectStateError, HostWaitWarning, MissingCallError, \
    NotAnEffectError, StreamsafeError, UnguardedChangeError
from .frame import EffectPlanner, Frame, pool_frame
from .frameworks import TORCH, is_framework_stream
from .guarding import GuardBlock, GuardedBlocks, config_reader, settable, snapshot
from .identity import same_value
from .inputs import Inputs, own_by_keyword, positional_capacity
from .ledger import EffectLedger, PoolLedger, adopt_ledger, forget_ledger, held_reason, ledger_of, pool_of
from .plan import FencePlan, pool_plan
from .profile import EffectProfile, PoolProfile, check_class, constructor_parameters, output_maker, profile_of
from .sharing import Unshareable
from .steady import UNREADABLE, SteadyFrames
from .strategy import Strategy, StrategyName, as_strategy
from .streams import LEGACY_HANDLE, Stream

if TYPE_CHECKING:  # (the type of what an effect's call hands out; the contracts never import the outputs)
    from .outputs import SafeOutput

__all__ = ["StreamContract", "PoolContract", "new_contract", "GuardBlock", "contract_sinks", "OPTIONS"]

OPTIONS = ("input_stream", "consumer_stream", "conversion_stream", "backend", "allow_none")
"""The keyword options a contract takes (a decoder's refuses an input and a conversion stream)."""

contract_sinks: list[Any] = []
"""Objects told of every contract made (``add(contract)``: ``streamsafe run``'s report); empty almost always."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised here that points at the first frame outside streamsafe."""
    import sys

    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def new_contract(obj: Any, stream: Any = None, *, strategy: Strategy | StrategyName = "auto", **options: Any) -> Any:
    """The contract ``obj``'s profile asks for: a :class:`PoolContract` for a pooled SDK (a decoder), else a
    :class:`StreamContract`. An unknown option raises :class:`~streamsafe.errors.ArgumentError`. Does not block."""
    check_options(options)
    profile = _profile_or_error(obj)[0]
    if profile is not None and profile.pool:
        return PoolContract(obj, stream, strategy=strategy, **options)
    return StreamContract(obj, stream, strategy=strategy, **options)


def check_options(options: Any) -> None:
    """Raise :class:`~streamsafe.errors.ArgumentError` for a keyword among ``options`` (names) that is no contract
    option (:data:`OPTIONS`, and ``strategy``). What :func:`new_contract` and the contracts' constructors check."""
    unknown = sorted(set(options) - {"strategy", *OPTIONS})
    if unknown:
        raise ArgumentError(f"a contract has no option {unknown[0]!r}: its options are strategy= and {', '.join(OPTIONS)}")


def check_allow_none(allow_none: Any) -> None:
    """Raise :class:`~streamsafe.errors.ArgumentError` unless ``allow_none`` is a bool (``'yes'`` is no opt-in)."""
    if type(allow_none) is not bool:
        raise ArgumentError(
            f"allow_none={allow_none!r}: it must be True or False. allow_none=True opts in to strategy 'none' (no fences "
            "at all, for benchmarks); leave it out otherwise"
        )


def _profile_or_error(obj: Any) -> tuple[Any, NotAnEffectError | None]:
    """``obj``'s profile and ``None``, or ``None`` and :func:`~streamsafe.profile.profile_of`'s error (which says what
    streamsafe guards, and how to register a profile) for an instance no profile describes; ``(None, None)`` for
    ``None`` and a class (not an instance: the effect is yet to be made)."""
    if obj is None or isinstance(obj, type):
        return None, None
    try:
        return profile_of(obj), None
    except NotAnEffectError as e:
        return None, e


class _Contract(GuardedBlocks, Unshareable):
    """What every contract has: the guarded object (held weakly for a class guard's contract), its calls by name,
    blocks (``with``, ``guarded()``), and the engine's caller protocol."""

    effect_name: str
    profile: Any
    ledger: Any
    stats: dict[str, int]
    closed: bool
    guard_owner: Any
    last_plan: FencePlan | None
    undeclared: Any = None
    """:class:`UndeclaredInputs` of an effect's contract (a decoder's takes no inputs: ``None``)."""
    _effect: Any
    _effect_ref: Any

    def __new__(cls, *args: Any, **options: Any) -> Any:
        # An option the constructor does not take is the ArgumentError stream_contract() gives, not Python's bare
        # TypeError (checked here: the constructors' signatures, which type checkers read, stay as they are)
        if options:
            params = constructor_parameters(cls)
            # (a subclass whose constructor takes **kwargs reads its own keywords: none is refused here)
            if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params):
                check_options(k for k in options if all(k != p.name for p in params))
        return super().__new__(cls)

    @property
    def effect(self) -> Any:
        """The guarded object (for a class guard's contract, held weakly: the object may be collected)."""
        if self._effect is not None:
            return self._effect
        effect = self._effect_ref()
        if effect is None:
            raise EffectStateError(self.effect_name, "use", "gone (garbage-collected)", "Keep a reference to it.")
        return effect

    def hold_effect_weakly(self) -> None:
        """For a class guard: the guard keeps this contract, so holding the object strongly would keep every object
        a program made alive. Objects that cannot be weakly referenced stay held."""
        try:
            self._effect_ref = weakref.ref(self._effect)
        except TypeError:
            return
        weakref.finalize(self._effect, self._object_gone)
        self._effect = None

    def _object_gone(self) -> None:
        """The object went without close(): give back what the contract held for it."""
        self.closed = True

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``obj.name(*args, **kwargs)`` through the contract: a guarded call of the profile (ordered as
        :meth:`run` is), or a releasing one (the host first waits for every reader). See :meth:`guarded_call`."""
        return self.guarded_call(name, args, kwargs)

    def guarded_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any = None) -> Any:
        """A call of the object's ``name`` through the contract (what a dispatcher in a block does): a guarded call
        through the engine, a release, or :class:`~streamsafe.errors.ArgumentError` for a name the profile does not
        give. ``method``: the SDK's method to run (default: the object's own ``name``). Blocks as the call does."""
        profile = self.profile
        if name in profile.calls:
            if self.closed:
                self._refuse_closed(name)
            effect = self.effect
            if args and method is None and len(args) > self._positional.get(name, -1):
                # (a stream by position, as the SDK's signature allows; a base class's method reached by super() keeps its
                # arguments as given: the signature read is the object's class's)
                args, kwargs = self._own_by_keyword(effect, name, args, kwargs)
            return engine.call(self, effect, method or raw_method(type(effect), name), name, args, kwargs)  # type: ignore[arg-type]
        if name in profile.releases:
            return self._release(name, args, kwargs, method)
        raise ArgumentError(
            f"{name!r} is not a call of {profile.name}: its guarded calls are {', '.join(profile.calls)}"
            + (f" and its releases {', '.join(profile.releases)}" if profile.releases else "")
        )

    _positional: dict[str, int] = {}
    """Per guarded call: how many positional arguments never need :meth:`_own_by_keyword` (made per contract at its
    first call with arguments)."""

    def _own_by_keyword(self, effect: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """``args`` and ``kwargs`` with a stream or blocking flag given by position passed by keyword
        (:func:`~streamsafe.inputs.own_by_keyword`); learns how many positional arguments need no look."""
        profile = self.profile
        if not isinstance(profile, EffectProfile):
            capacity: int | None = None
        else:
            own = (profile.stream_keyword, profile.blocking_keyword)
            capacity = positional_capacity(type(effect), name, own)
            args, kwargs = own_by_keyword(type(effect), name, own, args, kwargs)
        if "_positional" not in self.__dict__:
            self._positional = {}
        self._positional[name] = 1 << 30 if capacity is None else capacity
        return args, kwargs

    def _name_calls(self) -> None:
        """Each call and release of the profile that the contract has no method for (``c.process(x)``,
        ``c.get_batch_frames(8)``), as a method that calls it through :meth:`call`: the contract's class becomes a
        subclass that has them (one per class and profile, made once)."""
        cls = type(self)
        key = (cls, self.profile)
        found = _NAMED.get(key)
        if found is None:
            names = [n for n in (*self.profile.calls, *self.profile.releases) if not n.startswith("__")]
            missing = [n for n in names if not hasattr(cls, n)]
            named = type(cls.__name__, (cls,), {n: _named_call(n) for n in missing}) if missing else cls
            named.__qualname__, named.__module__ = cls.__qualname__, cls.__module__
            found = _NAMED[key] = (named, tuple(n for n in names if n not in missing and n not in _OWN_CALLS))
        named, shadowed = found
        if shadowed and not _FOR_A_GUARD.get():
            warnings.warn(
                f"{self.profile.name}'s call(s) {', '.join(shadowed)}: c.{shadowed[0]} is the contract's own "
                f"{'attribute' if len(shadowed) == 1 else 'attributes'}, not the SDK's call; call the SDK's through the "
                f"contract as c.call({shadowed[0]!r}, ...)", UserWarning, stacklevel=_user_stacklevel())
        if named is not cls:
            self.__class__ = named

    def _release(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any) -> Any:
        raise NotImplementedError

    def _refuse_closed(self, call: str) -> NoReturn:
        raise NotImplementedError

    # -- the engine's caller protocol (a pool's calls have no inputs: these do nothing for it) ------------------

    def sdk_arguments(self, frame: Frame, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The engine's question: the arguments as the SDK gets them (as given: a decoder takes no inputs)."""
        return args, kwargs, None

    def copy_inputs(self, frame: Frame, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The engine's question: the inputs copied (a decoder takes none: its frames never copy)."""
        return args, kwargs, None

    def protect(self, arrays: Any, frame: Frame, seen: Any) -> None:
        """The engine's question: keep the inputs from reuse (a decoder takes no inputs)."""


def _gone() -> None:
    """What a contract that let go of its object holds instead of a weak reference to it."""
    return None


_OWN_CALLS = ("run", "run_at_timestep", "close")
"""The SDK calls a contract has a method of its own for (the call through the contract)."""

_NAMED: dict[tuple[type, Any], tuple[type, tuple[str, ...]]] = {}
"""Contract classes with the named calls of a profile (:meth:`_Contract._name_calls`), and the calls the contract's
own attributes shadow."""

_FOR_A_GUARD: contextvars.ContextVar[bool] = contextvars.ContextVar("streamsafe_contract_for_a_guard", default=False)


@contextlib.contextmanager
def made_for_plain_calls() -> Iterator[None]:
    """Contracts made inside the block take the program's plain calls (a class guard's): they do not warn of calls
    their own attributes shadow, which the program never makes on them. Does not block."""
    token = _FOR_A_GUARD.set(True)
    try:
        yield
    finally:
        _FOR_A_GUARD.reset(token)


def _named_call(name: str) -> Any:
    def named(self: _Contract, *args: Any, **kwargs: Any) -> Any:
        return self.guarded_call(name, args, kwargs)

    named.__name__ = name
    named.__doc__ = f"``obj.{name}(...)`` through the contract (see :meth:`call`)."
    return named


class UndeclaredInputs:
    """What a contract with no ``input_stream`` saw of its inputs: the streams they were found on (their framework's
    current stream at each call planned, in order) and the seconds the host waited for ``auto``'s copies of them;
    what ``streamsafe run --advise`` reports. Noting does not block."""

    __slots__ = ("streams", "wait_s")

    def __init__(self) -> None:
        self.streams: dict[Stream, None] = {}
        self.wait_s = 0.0

    def note(self, producers: Any) -> None:
        for producer in producers:
            if producer is not None:
                self.streams[producer] = None

    def waited(self, seconds: float) -> None:
        self.wait_s += seconds


class StreamContract(_Contract):
    """Fences one effect's calls. See the module docstring for the streams and the three ways in.

    ``strategy`` is a :class:`~streamsafe.Strategy` or its name; ``"none"`` also needs ``allow_none=True`` (a bool:
    anything else, like an unknown option, raises :class:`~streamsafe.errors.ArgumentError`).
    ``backend`` defaults to the effect's own (emulated effects) or the current backend. Every contract, decorator
    and guard on one effect shares the effect's :class:`~streamsafe.ledger.EffectLedger`, so their fences see each
    other's readers and outputs. Constructing a contract does not block and issues no GPU work."""

    _no_copy = "a StreamContract cannot be copied: it orders one effect's streams; make another for another effect"
    _no_pickle = "a StreamContract cannot be pickled: it holds live CUDA streams and a GPU effect"

    def __init__(
        self,
        effect: Any,
        stream: Any = None,
        strategy: Strategy | StrategyName = "auto",
        *,
        input_stream: Any = None,
        consumer_stream: Any = None,
        conversion_stream: Any = None,
        backend: Backend | None = None,
        allow_none: bool = False,
    ) -> None:
        check_allow_none(allow_none)
        self.profile: EffectProfile = _effect_profile(effect)
        """The SDK profile of the effect (:mod:`streamsafe.profile`): its calls, settings and outputs."""
        check_class(self.profile, type(effect))  # (a profile its SDK contradicts: ProfileError, before anything is made)
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        if getattr(effect, "closed", False) is True:
            raise EffectStateError(type(effect).__name__, "stream_contract", "closed", "Create a new effect.")
        self._effect: Any = effect
        self._effect_ref: Any = None
        self.effect_name = type(effect).__name__
        self._cls = type(effect)
        self.device = self.profile.device_index(effect)
        if backend is not None:
            require_backend(backend, "StreamContract(backend=...)")
        # (the environment first: a contract refused for it leaves no ledger behind on the effect)
        sanitize = env_flag("STREAMSAFE_SANITIZE", False, SANITIZE_MEANING)
        existing = adopt_ledger(effect)
        self.backend: Backend = backend or _effect_backend(effect) or (existing.backend if existing else None) or current_backend()
        dev, be = self.device, self.backend
        # the streams first: a refused contract leaves no ledger behind on the effect
        self._declared_sdk = None if stream is None else stream_on_device(stream, dev, be, "sdk")
        # (a declared input or consumer stream keeps the thread it was named in: a per-thread stream 2 of a producer
        # or consumer thread is that thread's, whichever thread runs the effect)
        self._input = None if input_stream is None else stream_on_device(input_stream, dev, be, "input")
        self._consumer = None if consumer_stream is None else stream_on_device(consumer_stream, dev, be, "consumer")
        self._declared_conversion = (
            stream_on_device(conversion_stream, dev, be, "conversion") if conversion_stream is not None
            else as_stream(LEGACY_HANDLE, device=dev, backend=be)
        )
        self.ledger: EffectLedger = existing or ledger_of(effect, self.backend, device=dev)  # type: ignore[assignment]
        if self.ledger.backend is None:
            self.ledger.backend = self.backend
        # The framework objects of the declared streams live as long as the contract: a stream the contract fences
        # must not be destroyed (and its handle reused) under it; the ledger may fence an SDK or consumer stream
        # after the contract went (dropped without close(), a contract per clip): it holds their objects until then.
        self._stream_objects = (stream, input_stream, consumer_stream, conversion_stream)
        declared = {s: obj for s, obj in ((self._declared_sdk, stream), (self._consumer, consumer_stream),
                                          (self._declared_conversion, conversion_stream))
                    if s is not None and is_framework_stream(obj)}
        if declared:
            weakref.finalize(self, self.ledger.holds.declare(declared))
        self.closed = False
        self.guard_owner: Any = None
        """The class-level guard that made this contract, if any."""
        self.steady = SteadyFrames(dev, be, self._input, self.profile, copies=self.strategy is Strategy.AUTO and self._input is None)
        """The contract's kept frames (:mod:`streamsafe.steady`)."""
        self._config_getter = config_reader(effect, self.profile)
        self._run = raw_method(self._cls, "run") if "run" in self.profile.calls else None
        """The SDK's own ``run`` (called by :meth:`run`), if its profile guards one."""
        self._auto = self.strategy is Strategy.AUTO
        self._host_wait_warned = False
        self.warn_host_wait = True
        """Whether ``auto`` warns (:class:`~streamsafe.errors.HostWaitWarning`, once) of the host wait an ``input_stream``
        declaration would drop. ``streamsafe run``'s guard turns it off: its report and ``--advise`` say it, and the
        program's own warning filters (``-W error``) are not streamsafe's to trip."""
        self.undeclared = UndeclaredInputs()
        """With no ``input_stream`` declared: where the inputs came from, and what the host waited for them."""
        self.last_plan: FencePlan | None = None
        """The plan of the contract's last call."""
        self._patched_instance = False
        self._tracked = guarding.install(self._cls)
        if self.ledger.config is None:
            self.ledger.config = snapshot(effect, self.profile)
        self.stats = new_stats()
        """Counters: runs; device-side fences; host waits and device syncs streamsafe made; and runs in which the
        SDK itself made the host wait (``non_blocking=False``)."""
        if sanitize:
            hooks.observe_from_environment()
        self._inputs = Inputs(be, dev, self.ledger, self._input, self.profile)
        self.output = output_maker("effect")(self.profile.output, self.profile.wrap, self.ledger.output, dev, self.profile.name)
        """The engine's question: the guarded result of the SDK's result (a :class:`~streamsafe.SafeOutput`)."""
        self._planner = EffectPlanner(
            self.profile, self.strategy, dev, be, self._cls, sdk=self._declared_sdk, producer=self._input,
            consumer=self._consumer, conversion=self._declared_conversion,
        )
        try:
            _ = self.plan  # validates the strategy for these streams now (e.g. async where unsound)
        except BaseException:
            if existing is None:
                forget_ledger(effect, self.ledger)  # (refused: the effect is as it was)
            raise
        self._name_calls()
        for sink in contract_sinks:
            sink.add(self)

    def _object_gone(self) -> None:
        self._planner.release_shadow()
        self.closed = True
        self.ledger.keepalive.drain()  # inputs it may still read: released once the reads are done

    @property
    def generation(self) -> int:
        """The effect's output generation (shared by every guard on the effect)."""
        return self.ledger.generation

    # -- plans --------------------------------------------------------------------------------------------------

    @property
    def conversion_stream(self) -> Stream | None:
        """The RGB8 conversion stream (legacy unless declared), or ``None`` for RGB10A2 output."""
        return self._planner.conversion_stream(self.effect)

    @property
    def plan(self) -> FencePlan:
        """The plan for the declared streams (else the current ones) and the default consumer, for inputs streamsafe
        can copy (torch's, CuPy's): under ``auto`` with no ``input_stream``, its copy stream. Does not block."""
        planner = self._planner
        sdk = planner.sdk_stream()
        return planner.plan(self.effect, producer=self._input or sdk, sdk=sdk, copy=planner.copy_stream())

    def plan_for(
        self, *, producer: Stream | None, sdk: Stream | None = None, consumer: Stream | None = None,
        non_blocking: bool = False, input_writers: tuple[Stream, ...] = (),
    ) -> FencePlan:
        """The plan for given streams (``producer=None``: unknown, forwarded; ``input_writers``: more streams that
        may write an input after the call). Cached; does not block."""
        return self._planner.plan(self.effect, producer=producer, sdk=sdk, consumer=consumer, non_blocking=non_blocking,
                                  input_writers=input_writers)

    # -- calls --------------------------------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run(...)`` with the plan's fences. Blocks the host only where the plan says (the SDK's own wait
        under ``event``/``stream``/``device``, host waits under ``stream``/``device``, and a wait for outstanding
        copies when an input's size changes, since the SDK may then reallocate its buffers).

        The stream keyword (``stream_ptr=``) names the SDK stream for this call. The plan decides
        ``non_blocking``; a caller's ``non_blocking`` is used only by strategy ``none``."""
        if self._run is None:
            self._missing_call("run")
        effect = self._effect if self._effect is not None else self.effect
        if len(args) > self._positional.get("run", -1):  # (a stream by position, as the SDK allows)
            args, kwargs = self._own_by_keyword(effect, "run", args, kwargs)
        return engine.call(self, effect, self._run, "run", args, kwargs)  # type: ignore[no-any-return]

    def run_at_timestep(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run_at_timestep(...)`` with the plan's fences (see :meth:`run`). An effect without the method
        (only ``VideoFrameGeneration`` interpolates at a timestep) raises
        :class:`~streamsafe.errors.MissingCallError` (an ``AttributeError``) before anything is issued."""
        effect = self.effect
        if not callable(getattr(effect, "run_at_timestep", None)) or "run_at_timestep" not in self.profile.calls:
            self._missing_call("run_at_timestep")
        if len(args) > self._positional.get("run_at_timestep", -1):
            args, kwargs = self._own_by_keyword(effect, "run_at_timestep", args, kwargs)
        return engine.call(self, effect, raw_method(type(effect), "run_at_timestep"), "run_at_timestep", args, kwargs)  # type: ignore[no-any-return]

    def _missing_call(self, name: str) -> NoReturn:
        """Raise :class:`~streamsafe.errors.MissingCallError` for ``c.<name>()``, a call the object's profile does not
        guard (or the object lacks), naming the calls it guards."""
        calls = [n for n in self.profile.calls if callable(getattr(self.effect, n, None))] or list(self.profile.calls)
        why = "only VideoFrameGeneration interpolates at a timestep" if name == "run_at_timestep" and "run" in calls else (
            f"its profile ({self.profile.name}) guards {', '.join(n + '()' for n in calls)}")
        raise MissingCallError(f"{self.effect_name} has no {name}(): {why}; call "
                               + " or ".join(f"c.{n}(...)" for n in calls) + f" for {self.effect_name}")

    def _refuse_closed(self, call: str) -> NoReturn:
        raise EffectStateError(self.effect_name, call, "closed", "Create a new effect and contract.")

    def frame_for(self, name: str, args: Any, kwargs: dict[str, Any]) -> Frame:
        """The engine's question, under the effect's turn: this call's frame, kept (a steady frame) or planned."""
        ledger = self.ledger
        if self.closed or ledger.closed:
            self._refuse_closed(name)
        # several threads' pipelines interleaving on the device: auto picks event, not async
        planner = self._planner
        shared = planner.shared = occupancy.note_run(self.device) and self._auto
        effect = self._effect if self._effect is not None else self.effect
        kept = self.steady
        if kept.kept and steady.enabled and not hooks.observers:
            frame = kept.find(name, args, kwargs, shared, ledger, self._config_getter, effect)
            if frame is not None:
                if steady.check_replay:
                    self._check_kept(frame, name, args, kwargs)
                return frame
        TORCH.refresh()
        facts = kept.facts(name, args, kwargs, shared) if not hooks.observers else None
        self._check_unguarded_change()
        frame = planner.frame(effect, name, args, kwargs, ledger, self._inputs)
        if self._input is None:
            self.undeclared.note(frame.producers)
            if self._auto and not self._host_wait_warned and self.warn_host_wait:
                self._warn_host_wait(frame)
        config = self._config(effect) if facts is not None else UNREADABLE
        if (config is not UNREADABLE and facts is not None and None not in frame.producers
                and (ledger.input_shapes is None or ledger.input_shapes == frame.shapes)):
            # (an input-size change waits for every outstanding reader: nothing kept for that)
            kept.keep(facts, ledger.state(), config, frame)
        return frame.ready(self.backend, self.device)

    def _warn_host_wait(self, frame: Frame) -> None:
        """:class:`~streamsafe.errors.HostWaitWarning`, once: ``auto`` waits on the host every call for something an
        ``input_stream`` declaration would order on the device."""
        kept = frame.plan.undeclared_wait
        if kept is None:
            return
        if kept == "copies":
            cost = "copies each input on a stream of its own and makes the host wait for the copies"
        else:
            cost = f"keeps the SDK's own host wait ({self.profile.blocking_keyword or 'its blocking call'}=False: the host waits for its work)"
        self._host_wait_warned = True
        fix = ("ss.stream_contract(effect, S, input_stream=P), or input_stream=P on @ss.stream_safe or ss.guard, "
               "P being the stream that writes the inputs")
        warnings.warn(HostWaitWarning(self.effect_name, cost, fix), stacklevel=_user_stacklevel())

    def _check_kept(self, frame: Frame, name: str, args: Any, kwargs: dict[str, Any]) -> None:
        """``STREAMSAFE_CHECK_REPLAY=1``: plan the call again; the kept frame must be the same."""
        planned = self._planner.frame(self.effect, name, args, kwargs, self.ledger, self._inputs)
        if planned != frame:
            raise AssertionError(f"streamsafe reused a frame that differs from the plan: {frame} != {planned}")

    def _config(self, effect: Any) -> Any:
        """The effect's output-size and encoding attributes it had when the contract was made, now."""
        try:
            return self._config_getter(effect)
        except AttributeError:  # an attribute went: the planner copes
            return UNREADABLE

    def sdk_arguments(self, frame: Frame, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The engine's question: the arguments as the SDK gets them (inputs of unknown producers forwarding the
        run stream: H1; on a model, inputs kept alive noting what the SDK imports). Issues nothing."""
        return self._inputs.for_sdk(args, kwargs, frame.inputs, frame.producers, frame.plan.run_stream,
                                    forward=frame.forward, record=frame.record)

    def copy_inputs(self, frame: Frame, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The engine's question when ``auto`` copies undeclared inputs: the arguments with copies issued on the
        frame's copy stream in place of the inputs, and the copies. Does not block."""
        assert frame.copy_stream is not None
        return self._inputs.copy_inputs(args, kwargs, frame.inputs, frame.copy_stream)

    def protect(self, arrays: Any, frame: Frame, seen: Any) -> None:
        """The engine's question: keep the inputs (or the copies the SDK read instead) from reuse while the SDK may
        still read them (H12). Does not block."""
        if frame.copy_stream is not None:
            if seen:
                self._inputs.protect(seen, frame.plan.run_stream)
            return
        self._inputs.protect(arrays, frame.plan.run_stream, seen)

    # -- configuration and life cycle -----------------------------------------------------------------------------

    def _check_unguarded_change(self) -> None:
        """A change of output size or encoding made behind every guard's back (e.g. a property's ``fset`` called
        directly): the buffer may have gone while copies read it."""
        now = snapshot(self.effect, self.profile)
        ledger = self.ledger
        before = ledger.config
        if before is None or same_value(now, before):
            ledger.config = now
            return
        ledger.config = now
        changed = [(name, old, new) for name, old, new in zip(self.profile.settings, before, now) if not same_value(old, new)]
        if not (ledger.outstanding or ledger.readers) or not any(self.profile.releases_output(self.effect, name) for name, _, _ in changed):
            return
        changes = ", ".join(f"{name} {old} -> {new}" for name, old, new in changed)
        consumers = ", ".join(str(c) for c in {**ledger.outstanding, **ledger.readers})
        error = UnguardedChangeError(self.effect_name, changes, consumers)
        # too late for the readers (the buffer may be gone), but the next call still comes after the SDK's own work
        ledger.wait_for_readers(self.last_plan, self.strategy, self.stats)
        ledger.released()
        if hooks.strict() or self.backend.sanitizing:
            raise error
        warnings.warn(str(error), RuntimeWarning, stacklevel=_user_stacklevel())

    def configure(self, **attrs: Any) -> None:
        """Set effect attributes. A change that may release the output buffer (output size, encoding) first makes
        the host wait for every stream that may still read it (H6); the output stays valid if the effect rejects
        the value. All or nothing: when the effect refuses one value, the values of this call it had already taken
        are set back and the counters are as before (an output the effect released on the way stays released:
        importing it raises :class:`~streamsafe.errors.StaleOutputError`). Unknown attributes and a closed effect
        are refused before anything happens."""
        name = self.effect_name
        if self.closed or self.ledger.closed:
            raise EffectStateError(name, "configure", "closed", "Create a new effect and contract.")
        effect = self.effect
        names = settable(self._cls, effect)
        for attr, value in attrs.items():
            if attr not in names:
                rule = f"{name} has no attribute {attr!r}" if not hasattr(effect, attr) else f"{attr!r} is read-only"
                raise EffectConfigError(name, attr, value, f"{rule}; its settings are {', '.join(sorted(names))}")
        self.ledger.turns.run("configure", self._configure, effect, attrs)

    def _configure(self, effect: Any, attrs: dict[str, Any]) -> None:
        ledger = self.ledger
        setattr_ = raw_method(type(effect), "__setattr__")
        before = {k: getattr(effect, k, None) for k in attrs}
        changes = {k: v for k, v in attrs.items() if not same_value(before[k], v)}
        # a size first set (None before) has released nothing: no output was made for it
        releasing = [k for k in changes if self.profile.releases_output(effect, k) and before[k] is not None]
        counted = dict(self.stats)
        if releasing:
            ledger.wait_for_readers(self.last_plan, self.strategy, self.stats)
        done = []
        try:
            for attr, value in attrs.items():
                call_raw(effect, setattr_, (attr, value), {})
                done.append(attr)
        except BaseException:  # all or nothing: the values already set go back (the effect took them before)
            for attr in reversed(done):
                try:
                    call_raw(effect, setattr_, (attr, before[attr]), {})
                except Exception:  # noqa: S110  (a value the effect cannot take back: the snapshot below says what it has)
                    pass
            engine.restore_counters(self.stats, counted)
            raise
        finally:
            if any(k in releasing for k in done):
                ledger.released()
            ledger.config = snapshot(effect, self.profile)

    def synchronize(self) -> None:
        """Block the host until every copy of the current output that streamsafe knows of, and the SDK's own work,
        is done. Outputs stay valid."""
        self._synchronize(False)

    def _synchronize(self, wait_for_other_threads: bool) -> None:
        """:meth:`synchronize`; ``wait_for_other_threads``: a block's closing wait, which waits for another thread's
        call instead of raising."""
        self.ledger.turns.run("synchronize", self._waited, wait=wait_for_other_threads)

    def _waited(self) -> None:
        ledger = self.ledger
        ledger.wait_for_readers(self.last_plan, self.strategy, self.stats)
        ledger.waited()
        ledger.keepalive.drain()

    def _release(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any) -> Any:
        """A releasing call of the profile: a closing one closes the contract too (:meth:`close`); another (a reset)
        makes the host wait for every reader first, and leaves the effect usable. Blocks the host for the readers."""
        if name in self.profile.closes:
            if self.closed or self.ledger.closed:
                return None
            result = self._close_with(name, args, kwargs, method)
            self._closed()
            return result
        if self.closed or self.ledger.closed:
            self._refuse_closed(name)
        effect = self.effect
        self.steady.forget()
        return engine.release(self.ledger, effect, method or raw_method(type(effect), name), args, kwargs,
                              plan=self.last_plan, strategy=self.strategy, stats=self.stats, closes=False, call=name)

    def _close_with(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any) -> Any:
        effect = self.effect
        return engine.release(self.ledger, effect, method or raw_method(type(effect), name), args, kwargs,
                              plan=self.last_plan, strategy=self.strategy, stats=self.stats, closes=True, call=name)

    def close(self) -> None:
        """Close the effect once every copy is done (H6): its profile's closing call (``close()``). Blocks the host for
        those copies. Idempotent."""
        if self.closed:
            return
        if not self.ledger.closed:
            closing = [n for n in self.profile.closes if callable(getattr(self._cls, n, None))]
            if closing:
                self._close_with(closing[0], (), {}, None)
            else:  # (an SDK with no closing call: the readers are waited for, and the contract ends)
                self._synchronize(False)
        self._closed()

    def _closed(self) -> None:
        self.closed = True
        self.steady.forget()
        self._planner.release_shadow()

    # -- the guard (``with`` and the decorator) ---------------------------------------------------------------------

    def enter_block(self, stack_frame: Any = None, **deprecated: Any) -> None:
        """Route the plain calls made by the code of ``stack_frame`` (a Python stack frame: the guarded code's)
        through this contract (what a guard block does on entry: :meth:`guarded`, ``with``, the decorator). The
        keyword ``frame=`` is deprecated (a frame is a video frame in streamsafe). Does not block."""
        stack_frame = guarding.stack_frame_argument(stack_frame, deprecated, "enter_block")
        if self.closed:
            self._refuse_closed("stream_contract")
        if self._tracked:
            guarding.push(self.effect, self, stack_frame)
            return
        # A class that refuses new attributes: patch the instance, if it has a __dict__.
        instance_dict = getattr(self.effect, "__dict__", None)
        names = self.profile.calls_of(self._cls)
        if instance_dict is None:
            raise StreamsafeError(
                f"cannot guard plain {self.effect_name}.{names[0] if names else 'run'}(): its class refuses new attributes "
                "and its instances have no __dict__. Call the contract instead: c.run(...), c.close()."
            )
        if any(n in instance_dict for n in names):
            raise StreamsafeError(f"{self.effect_name} is already guarded by another StreamContract; use that one")
        for name in names:
            instance_dict[name] = functools.partial(self.call, name) if name not in ("run", "run_at_timestep", "close") \
                else getattr(self, name)
        self._patched_instance = True

    def leave_block(self, stack_frame: Any = None, *, host_wait: bool, **deprecated: Any) -> None:
        """End :meth:`enter_block` for ``stack_frame``; with ``host_wait``, block the host as :meth:`synchronize`."""
        stack_frame = guarding.stack_frame_argument(stack_frame, deprecated, "leave_block")
        if self._tracked:
            guarding.pop(self.effect, self, stack_frame)
        elif self._patched_instance:
            for name in self.profile.calls_of(self._cls):
                self.effect.__dict__.pop(name, None)
            self._patched_instance = False
        if host_wait and not self.closed and not self.ledger.closed and self.strategy is not Strategy.NONE:
            # The copies made in the block are complete when it ends, as the vendor's recipe ends with a wait for the
            # copy stream (and untracked later use may run on any stream).
            self._synchronize(True)

    def __repr__(self) -> str:
        return f"StreamContract({self.effect_name}, strategy={self.strategy.value}, backend={self.backend.name})"


def _effect_profile(effect: Any) -> EffectProfile:
    """``effect``'s profile, refusing anything that is not an effect instance."""
    profile, unknown = _profile_or_error(effect)
    if isinstance(profile, PoolProfile):
        raise NotAnEffectError(
            f"StreamContract needs an effect instance, got {type(effect).__name__}, an SDK object whose calls hand out frames "
            f"of a pool ({profile.name}): guard it with ss.stream_contract({type(effect).__name__.lower()}, stream), "
            "which makes a PoolContract"
        )
    if unknown is not None:  # (an instance no profile describes: profile_of says what is guarded, and how to add an SDK)
        raise NotAnEffectError(f"StreamContract needs an effect instance, got {effect!r} ({type(effect).__name__}): {unknown}") from None
    if profile is None:
        what = "a class" if isinstance(effect, type) else f"{type(effect).__name__}"
        raise NotAnEffectError(
            f"StreamContract needs an effect instance with a run() method (nvvfx.VideoSuperRes, VideoFrameGeneration, "
            f"TrueHDR, or streamsafe.testing's; or an object of a class a registered profile names), got {effect!r} "
            f"({what}). Create the effect first, e.g. sr = VideoSuperRes(); sr.load(); then StreamContract(sr)."
        )
    return profile  # type: ignore[no-any-return]


def _effect_backend(effect: Any) -> Backend | None:
    engine_attr = getattr(type(effect), "engine", None)
    if isinstance(engine_attr, property):
        return effect.engine.backend  # type: ignore[no-any-return]
    return None


class PoolContract(_Contract):
    """Fences one pooled SDK object's calls (a video decoder's): before a call that writes buffers, the SDK's stream
    waits on the device for every stream that imported a frame (D5); the decoder's own host wait then covers them, so
    streamsafe adds no host wait. A frame whose buffer the decoder has written since raises
    :class:`~streamsafe.errors.StaleOutputError` on import.

    ``strategy``: ``auto``, ``event`` and ``async`` fence on the device; ``stream`` host-waits each reader, ``device``
    the whole device, before a decode; ``none`` (with ``allow_none=True``) fences nothing. ``consumer_stream``: the
    stream an import that names none (``stream=-1``) reads on (default: the decoder's). An unknown option, or an
    ``allow_none`` that is not a bool, raises :class:`~streamsafe.errors.ArgumentError`. Constructing one does not
    block."""

    _no_copy = "a PoolContract cannot be copied: it orders one decoder's buffers; make another for another decoder"
    _no_pickle = "a PoolContract cannot be pickled: it holds live CUDA streams and a decoder"

    def __init__(
        self,
        sdk: Any,
        stream: Any = None,
        strategy: Strategy | StrategyName = "auto",
        *,
        consumer_stream: Any = None,
        backend: Backend | None = None,
        allow_none: bool = False,
        input_stream: Any = None,
        conversion_stream: Any = None,
    ) -> None:
        check_allow_none(allow_none)
        profile, unknown = _profile_or_error(sdk)
        if not isinstance(profile, PoolProfile):
            what = f"the class {sdk.__qualname__}" if isinstance(sdk, type) else f"{sdk!r} ({type(sdk).__name__})"
            raise NotAnEffectError(
                f"PoolContract needs an SDK object whose calls write a pool of buffers (a PyNvVideoCodec SimpleDecoder or "
                f"ThreadedDecoder instance, or an object of a class a registered PoolProfile names), got {what}"
                + (f": {unknown}" if unknown is not None else ". Make the decoder first; for an nvvfx effect use "
                   "ss.StreamContract (ss.stream_contract picks the right one)")
            ) from None
        check_class(profile, type(sdk))
        self.profile: PoolProfile = profile
        """The SDK profile of the object (a pool profile)."""
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        self.effect_name = type(sdk).__name__
        for name, value in (("input_stream", input_stream), ("conversion_stream", conversion_stream)):
            if value is not None:
                raise ArgumentError(
                    f"{name}={value!r}: a {self.effect_name} takes no input and converts nothing on another stream; "
                    "declare only its stream (the cuda_stream it was created with) and, if you like, consumer_stream="
                )
        self._effect: Any = sdk
        self._effect_ref: Any = None
        self._cls = type(sdk)
        self.device = profile.device_index(sdk)
        if backend is not None:
            require_backend(backend, "PoolContract(backend=...)")
        existing = pool_of(sdk, create=False)
        own_backend = getattr(sdk, "backend", None) or (existing.backend if existing else None)
        if backend is not None and own_backend is not None and backend is not own_backend:
            raise ArgumentError(
                f"backend={backend!r}: {self.effect_name} decodes on {own_backend!r}, and its frames are that backend's "
                "memory. Leave backend= out (the decoder's is used), or make the decoder on that backend"
            )
        self.backend: Backend = backend or own_backend or current_backend()
        dev, be = self.device, self.backend
        own = profile.stream_of(sdk)  # (what the decoder says, or was made with)
        said = None if own is None else as_stream(own or LEGACY_HANDLE, device=dev, backend=be)
        self.stream_known = True
        """:attr:`stream` is the decoder's stream (declared, said by the decoder, recorded when it was made, or
        declared to an earlier guard), rather than assumed to be its default (then ``auto`` waits on the host)."""
        if stream is not None:
            self.stream: Stream = stream_on_device(stream, dev, be, "decoder")
            if said is not None and said != self.stream:
                raise ArgumentError(
                    f"stream {self.stream} is not {self.effect_name}'s stream ({said}): the decoder writes its frames on "
                    "the cuda_stream it was created with. Pass that stream, or none"
                )
        elif said is not None:
            self.stream = said
        elif existing is not None and existing.writer is not None and existing.writer_known:
            self.stream = existing.writer  # (a guard declared the decoder's stream before; it has not changed)
        else:
            self.stream = as_stream(LEGACY_HANDLE, device=dev, backend=be)  # the SDK's default, cuda_stream=0
            self.stream_known = False
        self._consumer = None if consumer_stream is None else stream_on_device(consumer_stream, dev, be, "frame consumer")
        self._stream_objects = (stream, consumer_stream)  # (the streams the contract fences live as long as it)
        self.pool: PoolLedger = existing or pool_of(sdk, self.backend, device=dev)
        """The decoder's ledger: a buffer per pool buffer."""
        self.ledger = self.pool
        if self.pool.backend is None:
            self.pool.backend = self.backend
        if self.stream_known or self.pool.writer is None:
            self.pool.writer, self.pool.writer_known = self.stream, self.stream_known
        self.plan: FencePlan = pool_plan(self.strategy, self.stream, writer_known=self.stream_known or profile.frames_hold_buffers,
                                         releases=profile.releases, consumer=self._consumer)
        if profile.frames_hold_buffers:  # (no call is fenced: a dropped frame goes back once its readers are done, D7)
            self.plan = dataclasses.replace(self.plan, reason=held_reason(self.plan.strategy), _cache={})
        """The plan of every call (a value you can print)."""
        self.stats = new_stats()
        """Counters: calls, device-side fences, host waits and device syncs streamsafe made, and calls in which the
        decoder made the host wait for its own stream (every call)."""
        self.last_plan: FencePlan | None = None
        self.closed = False
        self.guard_owner: Any = None
        self._device_checked = False
        self._tracked = guarding.install(self._cls)
        self._name_calls()
        for sink in contract_sinks:
            sink.add(self)

    @property
    def generation(self) -> int:
        """The number of calls that wrote the pool's buffers (through any guard)."""
        return self.pool.calls

    def __getitem__(self, key: Any) -> Any:
        """``decoder[key]`` through the contract (see :meth:`call`)."""
        return self.call("__getitem__", key)

    def _refuse_closed(self, call: str) -> NoReturn:
        raise EffectStateError(self.effect_name, call, "closed", "Make a new contract for the decoder.")

    def guarded_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any = None) -> Any:
        """As for any contract; a lazy call of the profile (``container.decode()``) returns a generator whose every
        step is a guarded call (:mod:`streamsafe.lazy`). Blocks as the call (or each step) does."""
        if name in self.profile.lazy:
            if self.closed:
                self._refuse_closed(name)
            sdk = self.effect
            return lazy.steps(self, sdk, call_raw(sdk, method or raw_method(type(sdk), name), args, kwargs), name)
        return super().guarded_call(name, args, kwargs, method)

    def frame_for(self, name: str, args: Any, kwargs: dict[str, Any]) -> Frame:
        """The engine's question, under the decoder's turn: this call's frame. Changes the pool's stream, where the
        contract knows it better."""
        if self.closed:
            self._refuse_closed(name)
        pool = self.pool
        pool.plan = self.plan
        if self.stream_known or not pool.writer_known:
            pool.writer, pool.writer_known = self.stream, self.stream_known
        return pool_frame(name, self.plan, pool, self._consumer or self.stream, self.profile).ready(self.backend, self.device)

    def output(self, raw: Any, made: Any, frame: Frame, obj: Any) -> Any:
        """The SDK's result with each frame a :class:`~streamsafe.SafeFrame` (a list stays a list)."""
        profile = self.profile
        frames = profile.frames_of(raw)
        if not self._device_checked and frames:
            self._check_device(frames[0])
        result = output_maker("pool")(raw, frames, made, self.device, frame.default_consumer, obj, self.pool)
        return result if profile.wrap is None else profile.wrap(raw, result)

    def _check_device(self, frame: Any) -> None:
        """The first frame's device is the one the pool's ledger and fences use: else refuse, loudly (once)."""
        self._device_checked = True
        try:
            kind, device = frame.__dlpack_device__()
        except Exception:  # noqa: BLE001  (a frame that does not say: nothing to compare)
            return
        if int(device) != self.device:
            self.closed = True  # (its ledger speaks of the wrong device: a new contract, once the decoder says its GPU)
            raise DeviceMismatchError(
                f"{self.effect_name}'s frames (buffers of its pool)", frame, int(device), self.device,
                f"streamsafe took {self.effect_name} to be on device {self.device}: it has no device attribute, and its "
                f"gpu_id was not recorded (it was made before streamsafe was imported, or with gpu_id passed by position "
                f"to a C++ constructor). Make the decoder after `import streamsafe`, passing gpu_id={int(device)} by keyword "
                f"(or run the program under `streamsafe run`)")

    def _release(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: Any) -> Any:
        if self.closed:
            self._refuse_closed(name)
        sdk = self.effect
        closes = name in self.profile.closes
        result = engine.release(self.pool, sdk, method or raw_method(type(sdk), name), args, kwargs, plan=self.plan,
                                strategy=self.strategy, stats=self.stats, closes=closes, call=name)
        if closes:  # closed for good: so is the contract; a class guard's keeps no object it could not hold weakly
            self.closed = True
            if self.guard_owner is not None and self._effect is not None:
                self._effect, self._effect_ref = None, _gone
        return result

    def synchronize(self) -> None:
        """Block the host until every read of a frame streamsafe knows of is done. Frames stay valid."""
        self.pool.turns.run("synchronize", self._waited, wait=True)

    def _waited(self) -> None:
        pool = self.pool
        pool.wait_for_readers(self.plan, self.strategy, self.stats)
        pool.waited()

    def close(self) -> None:
        """End the contract once every known read is done (blocks the host for them). The decoder itself stays usable
        (it has no close; a closing call of its profile, ``ThreadedDecoder.end()``, is guarded as a release).
        Idempotent."""
        if not self.closed:
            self.synchronize()
            self.closed = True

    # -- the guard (``with`` and the decorator), as an effect's contract ----------------------------------------

    def enter_block(self, stack_frame: Any = None, **deprecated: Any) -> None:
        """Route the plain calls made by the code of ``stack_frame`` (a Python stack frame: the guarded code's)
        through this contract (what a guard block does on entry: :meth:`guarded`, ``with``, the decorator). The
        keyword ``frame=`` is deprecated (a frame is a video frame in streamsafe). Does not block."""
        stack_frame = guarding.stack_frame_argument(stack_frame, deprecated, "enter_block")
        if self.closed:
            self._refuse_closed("stream_contract")
        if not self._tracked:
            raise StreamsafeError(
                f"cannot guard plain {self.effect_name} calls: its class refuses new attributes. "
                "Call the contract instead: c.get_batch_frames(...), c[i]."
            )
        guarding.push(self.effect, self, stack_frame)

    def leave_block(self, stack_frame: Any = None, *, host_wait: bool, **deprecated: Any) -> None:
        """End :meth:`enter_block` for ``stack_frame``; with ``host_wait``, block the host as :meth:`synchronize`."""
        stack_frame = guarding.stack_frame_argument(stack_frame, deprecated, "leave_block")
        guarding.pop(self.effect, self, stack_frame)
        if host_wait and not self.closed and self.strategy is not Strategy.NONE:
            self.synchronize()

    def __repr__(self) -> str:
        return f"PoolContract({self.effect_name}, strategy={self.strategy.value}, stream={self.stream}, backend={self.backend.name})"
