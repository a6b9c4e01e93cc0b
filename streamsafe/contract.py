"""StreamContract: the four streams of an effect call, and the fences that order them.

Three ways in::

    with ss.stream_contract(sr, stream, strategy="auto") as c:   # sr.run is guarded in the block
        out = sr.run(frame)                                      # or c.run(frame)
        y = torch.from_dlpack(out.image).clone()                 # ordered on torch's current stream

    @ss.stream_safe(sr)                                          # stream taken at each call
    def upscale(frame): ...

    c = ss.StreamContract(sr, stream)                            # used directly: c.run(...), c.close()

Streams (docs/design.md, "The four streams"): **P** the input's producer (declared ``input_stream``, else
the producer framework's current stream at call time, else forwarded through
``__dlpack__(stream=S)``), **S** the SDK stream (the contract's ``stream``, a
``stream_ptr`` passed to ``run``, else the current stream at call time), **L** the RGB8
conversion stream (the legacy stream; none for RGB10A2), **C** the consumer's stream
(what the consumer passes to ``__dlpack__``, else ``consumer_stream``, else S).
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import operator
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

from ._env import SANITIZE_MEANING as _SANITIZE_MEANING, env_flag
from . import guarding, hooks, outputs, steady
from ._dlpack import DLPACK_CPU, DLPACK_CUDA, SimCapsule, capsule_data_key, check_input_device, require_cuda_input, stream_on_device
from .backend import Backend, SimBackend, current_backend
from .sim import mirror
from .sim.backend import SimArray, another_models_array
from .errors import EffectConfigError, EffectStateError, HostArrayError, InputArrayError, MissingCallError, NotAnEffectError, StreamsafeError, UnguardedChangeError
from .frameworks import framework_of, torch_current_stream_handle
from .guarding import CONFIG_ATTRS, INPUT_KWARGS, call_raw, is_rgb10a2, releases_output, shape_of, tracked_raw_call, tracked_setattr
from .ledger import _VIEWS, Ledger, _prune_views, adopt_ledger, apply_fences, forget_ledger, ledger_of, new_stats, view_owner, views_exist
from . import occupancy
from .outputs import SafeImage, SafeOutput
from .plan import FencePlan, plan_fences
from .strategy import Strategy, StrategyName, as_strategy
from .streams import LEGACY_HANDLE, Stream, as_stream, on_this_thread, thread_token

__all__ = ["StreamContract", "stream_contract", "stream_safe", "CONFIG_ATTRS", "tracked_raw_call", "tracked_setattr"]

F = TypeVar("F", bound=Callable[..., Any])


class StreamContract:
    """Fences one effect's calls. See the module docstring for the streams and the three ways in.

    ``strategy`` is a :class:`~streamsafe.Strategy` or its name; ``"none"`` also needs
    ``allow_none=True``. ``backend`` defaults to the effect's own (emulated effects) or the
    current backend. Every contract, decorator and guard on one effect shares the effect's
    :class:`~streamsafe.ledger.Ledger`, so their fences see each other's readers and outputs.
    Constructing a contract does not block and issues no GPU work.
    """

    def __init__(
        self,
        effect: Any,
        stream: Any = None,
        *,
        strategy: Strategy | StrategyName = "auto",
        input_stream: Any = None,
        consumer_stream: Any = None,
        conversion_stream: Any = None,
        backend: Backend | None = None,
        allow_none: bool = False,
    ) -> None:
        _check_effect(effect)
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        if getattr(effect, "closed", False):
            raise EffectStateError(type(effect).__name__, "stream_contract", "closed", "Create a new effect.")
        self._effect: Any = effect
        self._effect_ref: Any = None
        self.effect_name = type(effect).__name__
        self._cls = type(effect)
        self.device = int(getattr(effect, "device", 0))
        existing = adopt_ledger(effect)
        self.backend: Backend = backend or _effect_backend(effect) or (existing.backend if existing else None) or current_backend()
        dev, be = self.device, self.backend
        # the streams first: a refused contract leaves no ledger behind on the effect
        self._declared_sdk = None if stream is None else stream_on_device(stream, dev, be, "sdk")
        # (a declared input or consumer stream keeps the thread it was named in: a per-thread stream 2 of a
        # producer or consumer thread is that thread's, whichever thread runs the effect)
        self._input = None if input_stream is None else stream_on_device(input_stream, dev, be, "input")
        self._consumer = None if consumer_stream is None else stream_on_device(consumer_stream, dev, be, "consumer")
        self._declared_conversion = (
            stream_on_device(conversion_stream, dev, be, "conversion")
            if conversion_stream is not None
            else as_stream(LEGACY_HANDLE, device=dev, backend=be)
        )
        self.ledger: Ledger = existing or ledger_of(effect, self.backend)  # type: ignore[assignment]
        if self.ledger.backend is None:
            self.ledger.backend = self.backend
        # The framework objects of the declared streams live as long as the contract: a stream the
        # contract fences must not be destroyed (and its handle reused) under it.
        self._stream_objects = (stream, input_stream, consumer_stream, conversion_stream)
        # The ledger may fence an SDK or consumer stream after this contract went (dropped without close(), a
        # contract per clip): it holds their framework objects until then (only the frameworks' stream
        # objects, which hold no effect: a ledger lives as long as its effect).
        declared = {s: obj for s, obj in ((self._declared_sdk, stream), (self._consumer, consumer_stream),
                                          (self._declared_conversion, conversion_stream))
                    if s is not None and _is_framework_stream(obj)}
        if declared:
            weakref.finalize(self, self.ledger.declare(declared))
        self.closed = False
        self.guard_owner: Any = None
        """The class-level guard that made this contract, if any."""
        self._shadow: Stream | None = None
        self._plans: dict[tuple[Any, ...], FencePlan] = {}
        self._shared = False
        """Whether other threads drove guarded effects on this device lately (``auto`` then picks ``event``;
        :mod:`streamsafe.occupancy`)."""
        self._recipes: list[steady.Recipe] = []
        """Recipes of recent calls, replayed while a call repeats one (:mod:`streamsafe.steady`)."""
        self._config_getter = _config_reader(effect)
        self._last_plan: FencePlan | None = None
        self._patched_instance = False
        self._tracked = guarding.install(self._cls)
        if self.ledger.config is None:
            self.ledger.config = self._snapshot()
        self.stats = new_stats()
        """Counters: runs; device-side fences; host waits and device syncs streamsafe made; and runs in
        which the SDK itself made the host wait (``non_blocking=False``)."""
        if env_flag("STREAMSAFE_SANITIZE", False, _SANITIZE_MEANING):
            mirror.enable_from_environment()
        try:
            _ = self.plan  # validates the strategy for these streams now (e.g. async where unsound)
        except BaseException:
            if existing is None:
                forget_ledger(effect, self.ledger)  # (refused: the effect is as it was)
            raise
        for sink in _CONTRACT_SINKS:
            sink.add(self)

    @property
    def effect(self) -> Any:
        """The guarded effect (for a class guard's contract, held weakly: the effect may be collected)."""
        if self._effect is not None:
            return self._effect
        effect = self._effect_ref()
        if effect is None:
            raise EffectStateError(self.effect_name, "use", "gone (garbage-collected)", "Keep a reference to the effect.")
        return effect

    def _hold_effect_weakly(self) -> None:
        """For a class guard: the ledger keeps this contract, so holding the effect strongly would keep
        every effect a program made alive. Effects that cannot be weakly referenced stay held."""
        try:
            self._effect_ref = weakref.ref(self._effect)
        except TypeError:
            return
        holder = self

        def _return_shadow() -> None:  # the effect went without close(): give back what it held
            if holder._shadow is not None:
                holder._shadow_finalizer()
                holder._shadow = None
            holder.closed = True
            holder.ledger.drain_keepalive()  # inputs it may still read: released once the reads are done

        weakref.finalize(self._effect, _return_shadow)
        self._effect = None

    @property
    def generation(self) -> int:
        """The effect's output generation (shared by every guard on the effect)."""
        return self.ledger.generation

    # -- plans ---------------------------------------------------------------------------------

    # The SDK's streams as the calling thread names them: the SDK issues its work in the thread that
    # calls run(), so a per-thread default stream (2) declared in one thread is, in a call from another,
    # that thread's per-thread stream.

    @property
    def _sdk_fixed(self) -> Stream | None:
        return None if self._declared_sdk is None else on_this_thread(self._declared_sdk)

    @property
    def _conversion_spec(self) -> Stream:
        return on_this_thread(self._declared_conversion)

    @property
    def conversion_stream(self) -> Stream | None:
        """The RGB8 conversion stream (legacy unless declared), or ``None`` for RGB10A2 output."""
        return None if is_rgb10a2(self.effect) else self._conversion_spec

    def _sdk_stream(self) -> Stream:
        return self._sdk_fixed if self._sdk_fixed is not None else as_stream(None, device=self.device, backend=self.backend)

    def _shadow_stream(self) -> Stream | None:
        if self.strategy is not Strategy.ASYNC and (self.strategy is not Strategy.AUTO or self._shared):
            return None
        if self._shadow is None:
            self._shadow = self.backend.acquire_stream(self.device, non_blocking=False)  # type: ignore[attr-defined]
            # A contract that is never closed (a `with` block per frame, a decorator) gives it back when it goes.
            self._shadow_finalizer = weakref.finalize(self, _return_stream, self.backend, self._shadow)
        return self._shadow

    @property
    def plan(self) -> FencePlan:
        """The plan for the declared streams (else the current ones) and the default consumer."""
        sdk = self._sdk_stream()
        return self.plan_for(producer=self._input or sdk, sdk=sdk)

    def plan_for(
        self,
        *,
        producer: Stream | None,
        sdk: Stream | None = None,
        consumer: Stream | None = None,
        non_blocking: bool = False,
        input_writers: tuple[Stream, ...] = (),
    ) -> FencePlan:
        """The plan for given streams (``producer=None``: unknown, forwarded; ``input_writers``: more
        streams that may write an input after the call). Cached; does not block."""
        sdk = sdk or self._sdk_stream()
        consumer = consumer or self._consumer or sdk
        conversion = self.conversion_stream
        shadow = self._shadow_stream()
        key = (producer, sdk, consumer, conversion, shadow, non_blocking, input_writers)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 256:
                self._plans.clear()
            plan = self._plans[key] = plan_fences(
                self.strategy, sdk=sdk, conversion=conversion, consumer=consumer, producer=producer,
                shadow=shadow, user_non_blocking=non_blocking, input_writers=input_writers,
            )
        return plan

    # -- running -------------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run(...)`` with the plan's fences. Blocks the host only where the plan says
        (the SDK's own wait under ``event``/``stream``/``device``, host waits under ``stream``/``device``,
        and a wait for outstanding copies when an input's size changes, since the SDK may then
        reallocate its buffers).

        ``stream_ptr=`` names the SDK stream for this call. The plan decides ``non_blocking``;
        a caller's ``non_blocking`` is used only by strategy ``none``."""
        # several threads' pipelines interleaving on the device: auto picks event, not async (every guarded
        # run counts, whatever its strategy; the flag is set under the effect's lock, in the paths below)
        shared = occupancy.note_run(self.device) and self.strategy is Strategy.AUTO
        return self._call("run", args, kwargs, shared)

    def run_at_timestep(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run_at_timestep(...)`` with the plan's fences (see :meth:`run`). An effect without
        the method (only ``VideoFrameGeneration`` interpolates at a timestep) raises
        :class:`~streamsafe.errors.MissingCallError` (an ``AttributeError``) before anything is issued."""
        if not callable(getattr(self.effect, "run_at_timestep", None)):
            raise MissingCallError(
                f"{self.effect_name} has no run_at_timestep(): only VideoFrameGeneration interpolates at a timestep; "
                f"call c.run(...) for {self.effect_name}"
            )
        return self._call("run_at_timestep", args, kwargs, occupancy.note_run(self.device) and self.strategy is Strategy.AUTO)

    def _refuse_closed(self, call: str) -> NoReturn:
        raise EffectStateError(self.effect_name, call, "closed", "Create a new effect and contract.")

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> SafeOutput:
        """A guarded call: replayed when it repeats a recipe, else planned. ``shared``: other threads drive
        guarded effects on the device (:func:`~streamsafe.occupancy.note_run`, which the caller made)."""
        if self._recipes and not hooks.observers and steady.enabled:
            out = self._replay(name, args, kwargs, shared)
            if out is not None:
                return out
        return self._call_planned(name, args, kwargs, shared)

    # -- steady state (streamsafe.steady) ---------------------------------------------------------

    def _facts(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> tuple[Any, ...] | None:
        """This call's facts for :mod:`streamsafe.steady` (raw handles, shapes), read without a driver
        query; ``None`` when the call must take the general path (inputs passed by keyword, inputs
        other than plain torch tensors and model arrays, an input on another device)."""
        stream_ptr = None
        non_blocking = False
        if kwargs:
            if not _INPUT_KWARG_SET.isdisjoint(kwargs):
                return None
            stream_ptr = kwargs.get("stream_ptr")
            non_blocking = kwargs.get("non_blocking", False)
            if (stream_ptr is not None and type(stream_ptr) is not int) or type(non_blocking) is not bool:
                return None
        dev = self.device
        declared = self._input
        tensor = _TORCH_TENSOR
        facts: list[Any] = [name, stream_ptr, non_blocking, shared]
        sim = None
        current = None  # torch's current stream, read once
        for a in args:
            kind = type(a)
            if kind is tensor:
                if a.get_device() != dev:
                    return None
                facts.append(a.shape)
                if declared is None:
                    if current is None:
                        current = _RAW_STREAM(dev)
                    facts.append(current)
                else:
                    facts.append(declared)
            elif kind is SimArray:
                if a.buffer.device != dev:
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
            if sim is not self.backend:
                return None
            facts.append(sim.current_stream(dev))
        elif isinstance(self.backend, SimBackend) or _TORCH_TENSOR is None:
            return None
        else:
            if _TORCH_DEVICE() != dev:  # the general path makes the effect's device current for the call
                return None
            facts.append(current if current is not None else _RAW_STREAM(dev))  # torch is initialised: it made the inputs
        return tuple(facts)

    def _replay(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> SafeOutput | None:
        """Replay a recorded recipe when this call's facts and the ledger's state match one; else ``None``."""
        if self.closed:
            return None
        facts = self._facts(name, args, kwargs, shared)
        if facts is None:
            return None
        for recipe in self._recipes:
            if recipe.facts == facts:
                break
        else:
            return None
        ledger = self.ledger
        outer = ledger.try_hold()
        if outer is None:  # another thread holds the effect: the general path waits or raises, as the rule says
            return None
        try:
            config = self._config()
            if ledger.closed or config is _UNREADABLE:
                return None
            if not recipe.matches(ledger, config):
                # Another recipe of the same call may fit this state (a pipeline that imports zero-copy on
                # some frames and copies on others has one per state): the newest first, as remembered.
                for recipe in self._recipes:
                    if recipe.facts == facts and recipe.matches(ledger, config):
                        break
                else:
                    return None
            self._shared = shared
            steady.replays += 1
            if steady.check_replay:
                self._check_recipe(recipe, name, args, kwargs)
            stats = self.stats
            before = recipe.before
            counted = None
            if before.fences:  # (an empty program has nothing to issue or count)
                if not before.counts_exactly:
                    counted = dict(stats)  # (host waits or device syncs: counted as planned calls count them)
                before(stats)
            arrays = args if recipe.arrays_only else tuple(a for a in args if type(a) is not int and type(a) is not float)
            run_stream = recipe.run_stream
            if views_exist():
                self._read_views(arrays, run_stream)
            if kwargs:
                kwargs = _sdk_kwargs_removed(kwargs)
            try:
                raw = call_raw(self.effect, name, *args, stream_ptr=recipe.run_ptr, non_blocking=recipe.non_blocking, **kwargs)
            except BaseException:  # refused (a dtype the facts do not hold): the counters as before, as planned calls
                if counted is not None:
                    _restore_counters(stats, counted)
                elif before.fences:
                    before.uncount(stats)
                raise
            plan = recipe.plan
            generation = ledger.after_run(plan, recipe.shapes, stats, recipe.default_consumer)
            if recipe.protect:
                if recipe.after.fences:
                    recipe.after(stats)
                self._protect_inputs(arrays, run_stream)
            if ledger.keepalive:
                ledger.prune_keepalive()
            self._last_plan = plan
            for counter, n in recipe.run_counts:
                stats[counter] += n
        finally:
            ledger.let_go(outer)
        return SafeOutput(raw, SafeImage(ledger, raw.image, generation, self.device, recipe.default_consumer, self.effect))

    def _config(self) -> Any:
        """The effect's output-size and encoding attributes it had when the contract was made, now."""
        try:
            return self._config_getter(self.effect)
        except AttributeError:  # an attribute went: the general path copes
            return _UNREADABLE

    def _check_recipe(self, recipe: steady.Recipe, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``STREAMSAFE_CHECK_REPLAY=1``: plan the call again; the recipe must say the same."""
        sdk, user_nb, arrays, producers = self._call_inputs(args, kwargs)
        frame = self._plan_frame(sdk, arrays, producers, user_nb)
        got = (recipe.plan, recipe.shapes, recipe.before.fences, recipe.after.fences, recipe.default_consumer,
               recipe.run_stream, recipe.run_counts, recipe.arrays_only)
        plan = frame[0]
        want = (plan, frame[1], frame[2], frame[3], self._consumer or sdk, plan.run_stream,
                steady.run_counts(plan),
                not any(isinstance(a, numbers.Number) for a in args))
        if got != want:
            raise AssertionError(f"streamsafe replayed a recipe that differs from the plan: {got} != {want}")

    # -- the general path --------------------------------------------------------------------------

    def _call_inputs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Stream, bool, list[Any], list[Stream | None]]:
        """The SDK stream, the caller's ``non_blocking``, the inputs and their producers' streams
        (``None``: unknown) of a call; validates every input first. Issues nothing."""
        stream_ptr = kwargs.get("stream_ptr")
        user_nb = bool(kwargs.get("non_blocking", False))
        be = self.backend
        sdk = self._sdk_stream() if stream_ptr is None else on_this_thread(stream_on_device(stream_ptr, self.device, be, "sdk"))
        arrays = [a for a in args if not isinstance(a, numbers.Number)]
        for i, a in enumerate(args[1:], 1):
            if a is None or isinstance(a, (str, bytes)):  # (a timestep or a frame index given as text, or left out)
                raise InputArrayError(
                    f"argument {i + 1}", a,
                    f"{'None' if a is None else 'a ' + type(a).__name__} is neither an input array nor a number",
                    "Pass the inputs as CUDA arrays and a timestep or index as a number, "
                    "e.g. c.run_at_timestep(previous, next, 0.5)",
                )
        arrays += [kwargs[k] for k in INPUT_KWARGS if k in kwargs]
        try:
            producers = [self._producer_of(a) for a in arrays]
        except HostArrayError as e:
            if not isinstance(be, SimBackend):
                raise
            raise HostArrayError(e.what, e.value, _describe(e), e.rule, f"{e.fix} On the simulated backend (this effect's): "
                                 "sim.array(x), a device copy, or sim.empty(shape, dtype) and a kernel.") from None
        return sdk, user_nb, arrays, producers

    def _plan_frame(
        self, sdk: Stream, arrays: list[Any], producers: list[Stream | None], user_nb: bool
    ) -> tuple[FencePlan, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        """The plan, input shapes, fences before the run and device waits after it, for a call on
        ``sdk`` with ``arrays`` written on ``producers``, in the ledger's state now. Issues nothing."""
        ledger = self.ledger
        first = producers[0] if producers else sdk
        extra: tuple[Stream, ...] = ()
        others = producers[1:]  # the other streams whose input writes the run must follow
        current: Stream | None = None
        if self._input is not None or first is None or len(producers) > 1:
            current = ledger.current_stream()  # held streams need no driver query
            extra = tuple(dict.fromkeys(p for p in (*producers[1:], current) if p is not None))
            if self._input is not None and current != self._input:
                others.append(current)  # with input_stream declared, an input may still come from the current stream
        plan = self.plan_for(producer=first, sdk=sdk, non_blocking=user_nb, input_writers=extra)
        shapes = tuple(shape_of(a) for a in arrays)
        escaped_current = (current or ledger.current_stream()) if ledger.escaped else None
        fences = ledger.before_run(plan, shapes, escaped_current)
        fences += plan.at("before run")
        for producer in others:
            if producer != first:
                fences += self.plan_for(producer=producer, sdk=sdk, non_blocking=user_nb, input_writers=extra).at("before run")
        after = tuple(f for f in plan.at("after run") if f.action == "device-wait")
        return plan, shapes, plan.before_run(fences), after

    def _call_planned(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool = False) -> SafeOutput:
        ledger = self.ledger
        if self.closed or ledger.closed:
            self._refuse_closed(name)
        _refresh_torch()
        facts = self._facts(name, args, kwargs, shared) if not hooks.observers else None
        be, dev = self.backend, self.device
        sdk, user_nb, arrays, producers = self._call_inputs(args, kwargs)
        with ledger.using(name):
            self._shared = shared
            self._check_unguarded_change()
            plan, shapes, before, after = self._plan_frame(sdk, arrays, producers, user_nb)  # reads the ledger, changes nothing
            config = self._config() if facts is not None else _UNREADABLE
            state = steady.ledger_state(ledger, config) if config is not _UNREADABLE else None
            if ledger.input_shapes is not None and ledger.input_shapes != shapes:
                state = None  # an input-size change waits for every outstanding reader: no recipe for that
            run_stream = plan.run_stream
            if hooks.observers and not isinstance(be, SimBackend):
                for arr, producer in zip(arrays, producers):  # before the fences that order them
                    if producer is not None:
                        for o in hooks.observers:
                            o.on_input_write(mirror.array_key(arr), producer, dev)
            counted = dict(self.stats)  # (restored if the SDK refuses the call: its counters count runs)
            apply_fences(be, dev, before, self.stats)
            if views_exist():
                self._read_views(arrays, run_stream)
            call_args = list(args)
            call_kwargs = _sdk_kwargs_removed(kwargs)
            forward = plan.strategy is not Strategy.NONE and None in producers
            record = plan.strategy is not Strategy.NONE and isinstance(be, SimBackend)
            seen: dict[int, _Forwarding] = {}  # (the model: what the SDK's own import of each kept-alive input held)
            if forward or record:

                def wrap(a: Any) -> Any:
                    """The input as the SDK gets it: forwarding the run stream to an unknown producer (H1), and
                    on the model noting the memory the SDK imports of an input the contract keeps alive."""
                    stream = run_stream if forward and self._producer_is_unknown(a, arrays, producers) else None
                    if stream is None and not (record and _kept_alive_kind(a)):
                        return a
                    wrapper = _Forwarding(a, stream)
                    if record:
                        seen[id(a)] = wrapper
                    return wrapper

                call_args = [a if isinstance(a, numbers.Number) else wrap(a) for a in call_args]
                for k in INPUT_KWARGS:
                    if k in call_kwargs:
                        call_kwargs[k] = wrap(call_kwargs[k])
            try:
                with _on_device(dev):
                    raw = call_raw(self.effect, name, *call_args, stream_ptr=run_stream.ptr, non_blocking=plan.non_blocking, **call_kwargs)
            except BaseException:
                # The SDK refused the call (an input's dtype, layout or size; the effect's state): the
                # counters go back to what they were. The device waits already issued stay queued (they
                # order work and change no data), a host wait already made is not undone, and the
                # ledger is as before: the previous output stays valid, its readers known.
                _restore_counters(self.stats, counted)
                raise
            # only now: an input the SDK rejects leaves the previous output valid and its readers known
            generation = ledger.after_run(plan, shapes, self.stats, self._consumer or sdk)
            protect = bool(plan.at("after run"))
            if protect:
                apply_fences(be, dev, after, self.stats)
                self._protect_inputs(arrays, run_stream, seen)
            ledger.prune_keepalive()
            self._last_plan = plan  # (run() changes no output-size or encoding attribute: the snapshot stays)
            for counter, n in steady.run_counts(plan):
                self.stats[counter] += n
            if state is not None and facts is not None and None not in producers:
                self._remember(facts, state, plan, shapes, before, after, protect, self._consumer or sdk)
        return SafeOutput(raw, SafeImage(ledger, raw.image, generation, dev, self._consumer or sdk, self.effect))

    def _remember(
        self, facts: tuple[Any, ...], state: tuple[Any, ...], plan: FencePlan, shapes: tuple[Any, ...],
        before: tuple[Any, ...], after: tuple[Any, ...], protect: bool, default_consumer: Stream,
    ) -> None:
        """Keep a recipe of this call for the frames that repeat it (the newest first, at most four)."""
        for old in self._recipes:
            if old.facts == facts and old.state == state and old.thread in (None, thread_token()):
                return
        be, dev = self.backend, self.device
        recipe = steady.Recipe(facts, state, plan, shapes, steady.FenceProgram(be, dev, before),
                               steady.FenceProgram(be, dev, after), protect, default_consumer)
        self._recipes = [recipe, *self._recipes[:3]]

    def _read_views(self, arrays: Sequence[Any], run_stream: Stream) -> None:
        """An input that is a zero-copy view of another guarded effect's output (effects chained by
        views): this run reads that output, so its effect's next run must wait for it."""
        for arr in arrays:
            found = view_owner(arr.data_ptr() if type(arr) is _TORCH_TENSOR else mirror.array_key(arr))
            if found is not None and found[0] is not self.ledger:
                owner, generation = found
                owner.add_reader(generation, run_stream)

    @staticmethod
    def _producer_is_unknown(arr: Any, arrays: list[Any], producers: list[Stream | None]) -> bool:
        for a, p in zip(arrays, producers):
            if a is arr:
                return p is None
        return False

    def _producer_of(self, arr: Any) -> Stream | None:
        """Validate an input and find its producer's stream (``None``: unknown, forward instead)."""
        if _TORCH_TENSOR is not None and isinstance(arr, _TORCH_TENSOR):
            return self._torch_producer(arr)
        require_cuda_input("input", arr, self.device)
        if isinstance(arr, SimArray) and arr.backend is not self.backend:
            raise another_models_array(arr, self.backend, "input")
        if self._input is not None:
            return self._input
        if isinstance(arr, SimArray):
            return arr.backend.current_stream(self.device)
        fw = framework_of(arr)
        if fw == "torch":
            import torch

            return as_stream(torch.cuda.current_stream(self.device), backend=self.backend)
        if fw == "cupy":
            import cupy

            with cupy.cuda.Device(self.device):
                return as_stream(cupy.cuda.get_current_stream(), backend=self.backend)
        return None  # JAX and unknown producers: forward __dlpack__(stream=S)

    def _torch_producer(self, arr: Any) -> Stream:
        """The fast path for torch tensors: device from ``get_device()``, stream from torch's raw
        current-stream pointer (no Python stream object), kind from the driver."""
        dev = arr.get_device()  # -1 for a CPU tensor
        check_input_device("input", arr, DLPACK_CPU if dev < 0 else DLPACK_CUDA, dev, self.device)
        if self._input is not None:
            return self._input
        import torch

        handle = torch_current_stream_handle(torch, dev)
        known = self.ledger.known_stream(handle) if dev == self.device else None
        return known if known is not None else as_stream(handle, device=dev, backend=self.backend)

    # -- inputs after an asynchronous run (H12) ------------------------------------------------

    def _protect_inputs(self, inputs: Sequence[Any], run_stream: Stream, seen: dict[int, Any] | None = None) -> None:
        """Keep each input from being recycled while the run stream may still read it: torch's
        ``record_stream`` (the allocator then waits for the run stream), else a keep-alive until
        an event recorded on the run stream completes. Does not block."""
        if run_stream.thread:
            # A per-thread run stream: the allocator records its event in whichever thread frees the input,
            # where 2 names another stream. The legacy stream follows every thread's per-thread stream.
            run_stream = as_stream(LEGACY_HANDLE, device=run_stream.device, backend=self.backend)
        others = []
        for arr in inputs:
            if type(arr) is _TORCH_TENSOR or framework_of(arr) == "torch":
                arr.record_stream(self.ledger.torch_stream(run_stream))
            elif isinstance(arr, SimArray) and hasattr(arr, "record_stream"):
                arr.record_stream(run_stream)
            else:
                others.append(arr)
        if others:
            self.ledger.keep_alive(others, run_stream)
            if seen:
                # On the model the allocator learns what the keep-alive does on a GPU: the memory the SDK
                # imported is not recycled before the run stream's work is done (its accesses then retire
                # with the block). The SDK's own import told which memory that is: no second export.
                for arr in others:
                    wrapper = seen.get(id(arr))
                    inner = wrapper.imported if wrapper is not None else None
                    if inner is not None and inner.backend is self.backend:
                        inner.record_stream(run_stream)

    # -- configuration and life cycle -----------------------------------------------------------

    def _snapshot(self) -> tuple[Any, ...]:
        return tuple(getattr(self.effect, name, None) for name in CONFIG_ATTRS)

    def _check_unguarded_change(self) -> None:
        """A change of output size or encoding made behind every guard's back (e.g. a property's
        ``fset`` called directly): the buffer may have gone while copies read it."""
        now = self._snapshot()
        ledger = self.ledger
        before = ledger.config
        if before is None or now == before:
            ledger.config = now
            return
        ledger.config = now
        changed = [(name, old, new) for name, old, new in zip(CONFIG_ATTRS, before, now) if old != new]
        if not (ledger.outstanding or ledger.readers) or not any(releases_output(self.effect, name) for name, _, _ in changed):
            return
        changes = ", ".join(f"{name} {old} -> {new}" for name, old, new in changed)
        consumers = ", ".join(str(c) for c in {**ledger.outstanding, **ledger.readers})
        error = UnguardedChangeError(type(self.effect).__name__, changes, consumers)
        # too late for the readers (the buffer may be gone), but the next run still comes after the SDK's own work
        apply_fences(self.backend, self.device, ledger.release_fences(self._last_plan, self.strategy), self.stats)
        ledger.released()
        if mirror.active() is not None or mirror.sim_sanitizing(self.backend):
            raise error
        warnings.warn(str(error), RuntimeWarning, stacklevel=5)

    def configure(self, **attrs: Any) -> None:
        """Set effect attributes. A change that may release the output buffer (output size,
        encoding) first makes the host wait for every stream that may still read it (H6); the
        output stays valid if the effect rejects the value. All or nothing: when the effect refuses
        one value, the values of this call it had already taken are set back and the counters are
        as before (an output the effect released on the way stays released: importing it raises
        :class:`~streamsafe.errors.StaleOutputError`). Unknown attributes and a closed effect are
        refused before anything happens."""
        name = type(self.effect).__name__
        if self.closed or self.ledger.closed:
            raise EffectStateError(name, "configure", "closed", "Create a new effect and contract.")
        settable = _settings_of(self._cls, self.effect)
        for attr, value in attrs.items():
            if attr not in settable:
                rule = f"{name} has no attribute {attr!r}" if not hasattr(self.effect, attr) else f"{attr!r} is read-only"
                raise EffectConfigError(name, attr, value, f"{rule}; its settings are {', '.join(sorted(settable))}")
        ledger = self.ledger
        with ledger.using("configure"):
            before = {k: getattr(self.effect, k, None) for k in attrs}
            changes = {k: v for k, v in attrs.items() if before[k] != v}
            # a size first set (None before) has released nothing: no output was made for it
            releasing = [k for k in changes if releases_output(self.effect, k) and before[k] is not None]
            counted = dict(self.stats)
            if releasing:
                apply_fences(self.backend, self.device, ledger.release_fences(self._last_plan, self.strategy), self.stats)
            done = []
            try:
                for attr, value in attrs.items():
                    call_raw(self.effect, "__setattr__", attr, value)
                    done.append(attr)
            except BaseException:  # all or nothing: the values already set go back (the effect took them before)
                for attr in reversed(done):
                    try:
                        call_raw(self.effect, "__setattr__", attr, before[attr])
                    except Exception:  # noqa: S110  (a value the effect cannot take back: the snapshot below says what it has)
                        pass
                _restore_counters(self.stats, counted)
                raise
            finally:
                if any(k in releasing for k in done):
                    ledger.released()
                ledger.config = self._snapshot()

    def synchronize(self, *, _wait_for_other_threads: bool = False) -> None:
        """Block the host until every copy of the current output that streamsafe knows of, and the
        SDK's own work, is done. Outputs stay valid."""
        ledger = self.ledger
        with ledger.using("synchronize", wait=_wait_for_other_threads):
            apply_fences(self.backend, self.device, ledger.release_fences(self._last_plan, self.strategy), self.stats)
            ledger.waited()
            ledger.drain_keepalive()

    def close(self) -> None:
        """Close the effect once every copy is done (H6). Blocks the host for those copies. Idempotent."""
        if self.closed:
            return
        ledger = self.ledger
        if not ledger.closed:
            with ledger.using("close"):
                apply_fences(self.backend, self.device, ledger.release_fences(self._last_plan, self.strategy), self.stats)
                ledger.drain_keepalive()
                call_raw(self.effect, "close")
                ledger.closed_effect(self.effect)
        self.closed = True
        if self._shadow is not None:
            # Pooled, never destroyed: torch records events on it later for inputs given record_stream().
            self._shadow_finalizer()
            self._shadow = None

    # -- the guard (``with`` and the decorator) --------------------------------------------------

    def __enter__(self) -> StreamContract:
        """``with contract:`` as :meth:`guarded` (plain calls of the effect go through the contract).
        Does not block."""
        self._install_guard()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop routing plain calls; blocks the host until the last output's known copies and the
        SDK's own work are done (as :meth:`synchronize`)."""
        self._remove_guard(host_wait=True)

    @contextlib.contextmanager
    def guarded(self, *, host_wait_on_exit: bool = True) -> Iterator[StreamContract]:
        """Route ``effect.run``/``run_at_timestep``/``close`` and configuration changes through
        this contract inside the block. Blocks nest: the innermost guard takes plain calls.
        Leaving the block blocks the host, by default, until the copies of the last output that
        streamsafe knows of and the SDK's own work are done (as :meth:`synchronize`);
        ``host_wait_on_exit=False`` leaves without waiting (the next run still waits for them
        on the device)."""
        self._install_guard()
        try:
            yield self
        finally:
            self._remove_guard(host_wait=host_wait_on_exit)

    def _install_guard(self) -> None:
        if self.closed:
            self._refuse_closed("stream_contract")
        if self._tracked:
            guarding.push(self.effect, self)
            return
        # A class that refuses new attributes: patch the instance, if it has a __dict__.
        instance_dict = getattr(self.effect, "__dict__", None)
        if instance_dict is None:
            raise StreamsafeError(
                f"cannot guard plain {type(self.effect).__name__}.run(): its class refuses new attributes and its "
                "instances have no __dict__. Call the contract instead: c.run(...), c.close()."
            )
        if "run" in instance_dict:
            raise StreamsafeError(f"{type(self.effect).__name__} is already guarded by another StreamContract; use that one")
        for name in ("run", "run_at_timestep", "close"):
            if hasattr(self._cls, name):
                instance_dict[name] = getattr(self, name)
        self._patched_instance = True

    def _remove_guard(self, *, host_wait: bool) -> None:
        if self._tracked:
            guarding.pop(self.effect, self)
        elif self._patched_instance:
            for name in ("run", "run_at_timestep", "close"):
                self.effect.__dict__.pop(name, None)
            self._patched_instance = False
        if host_wait and not self.closed and not self.ledger.closed and self.strategy is not Strategy.NONE:
            # The copies made in the block are complete when it ends, as the vendor's recipe ends
            # with a wait for the copy stream (and untracked later use may run on any stream).
            self.synchronize(_wait_for_other_threads=True)

    def __copy__(self) -> NoReturn:
        raise TypeError("a StreamContract cannot be copied: it orders one effect's streams; make another for another effect")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self.__copy__()

    def __reduce__(self) -> NoReturn:
        raise TypeError("a StreamContract cannot be pickled: it holds live CUDA streams and a GPU effect")

    def __repr__(self) -> str:
        return f"StreamContract({self.effect_name}, strategy={self.strategy.value}, backend={self.backend.name})"


def _kept_alive_kind(a: Any) -> bool:
    """Whether the input ``a`` is one :meth:`StreamContract._protect_inputs` keeps alive (not a model
    array or a torch tensor, which it protects with ``record_stream``)."""
    return not (isinstance(a, SimArray) or type(a) is _TORCH_TENSOR or framework_of(a) == "torch")


def _is_framework_stream(obj: Any) -> bool:
    """A stream object of torch, CuPy or cuda.core (destroyed when it goes; it holds no effect)."""
    return framework_of(obj) in ("torch", "cupy") or (type(obj).__module__ or "").startswith("cuda.")


def _restore_counters(stats: dict[str, int], counted: dict[str, int]) -> None:
    """Put ``stats`` back to ``counted`` in place (the ledger and the run report hold the same dict), never
    empty for a moment: another thread may read it meanwhile."""
    stats.update(counted)
    for key in [k for k in stats if k not in counted]:
        stats.pop(key, None)


_CONTRACT_SINKS: list[Any] = []
"""Objects told of every contract made (``add(contract)``: ``streamsafe run``'s report); empty almost always."""


def _return_stream(backend: Any, stream: Stream) -> None:
    backend.release_stream(stream)


def _describe(error: HostArrayError) -> str:
    """The array's description inside a :class:`HostArrayError`'s message (type and shape, no data)."""
    text = str(error)
    head = f"{error.what} "
    return text[len(head):text.index(" is not on a GPU")] if text.startswith(head) and " is not on a GPU" in text else "the input"


def _settings_of(cls: type, effect: Any) -> set[str]:
    """The public attributes of an effect that can be set: properties with a setter, plain attributes."""
    names: set[str] = set()
    for attr in dir(cls):
        if attr.startswith("_"):
            continue
        value = getattr(cls, attr, None)
        if isinstance(value, property):
            if value.fset is not None:
                names.add(attr)
        elif not callable(value) and not isinstance(value, type):
            names.add(attr)
    names.update(a for a in getattr(effect, "__dict__", {}) if not a.startswith("_") and not callable(getattr(effect, a)))
    return names


def _check_effect(effect: Any) -> None:
    if effect is None or isinstance(effect, type) or not callable(getattr(effect, "run", None)):
        what = "a class" if isinstance(effect, type) else f"{type(effect).__name__}"
        raise NotAnEffectError(
            f"StreamContract needs an effect instance with a run() method (nvvfx.VideoSuperRes, VideoFrameGeneration, "
            f"TrueHDR, or streamsafe.testing's), got {effect!r} ({what}). Create the effect first, e.g. "
            "sr = VideoSuperRes(); sr.load(); then StreamContract(sr)."
        )


class _Forwarding:
    """An input whose ``__dlpack__()`` (called by the SDK with no stream) asks the producer to
    order the SDK stream, as DLPack intends (H1 when the producer's stream is unknown); with no
    stream, a plain pass-through. On the model it notes the array the capsule it hands the SDK holds
    (``imported``: the memory the SDK reads)."""

    __slots__ = ("_arr", "_stream", "imported")

    def __init__(self, arr: Any, stream: Stream | None) -> None:
        self._arr = arr
        self._stream = stream
        self.imported: SimArray | None = None

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        if self._stream is not None:
            kwargs["stream"] = self._stream.dlpack
        capsule = self._arr.__dlpack__(**kwargs)
        if type(capsule) is SimCapsule and not capsule.consumed and isinstance(capsule._array, SimArray):
            self.imported = capsule._array
        return capsule

    def __getattr__(self, name: str) -> Any:
        return getattr(self._arr, name)


def _effect_backend(effect: Any) -> Backend | None:
    engine = getattr(type(effect), "engine", None)
    if isinstance(engine, property):
        return effect.engine.backend  # type: ignore[no-any-return]
    return None


_INPUT_KWARG_SET = frozenset(INPUT_KWARGS)


def _sdk_kwargs_removed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's keywords without ``stream_ptr`` and ``non_blocking`` (the contract passes its own)."""
    return {k: v for k, v in kwargs.items() if k != "stream_ptr" and k != "non_blocking"}


def _config_reader(effect: Any) -> Callable[[Any], Any]:
    """A fast reader of the :data:`CONFIG_ATTRS` the effect has (a replay compares what it reads)."""
    present = [name for name in CONFIG_ATTRS if hasattr(effect, name)]
    return operator.attrgetter(*present) if present else _nothing


def _nothing(effect: Any) -> tuple[()]:
    return ()


_UNREADABLE = object()
"""What :meth:`StreamContract._config` gives when an attribute went (no replay then)."""


_RAW_STREAM: Any = None
"""torch's current stream pointer on a device, as an int (set once torch is loaded: a tensor was seen)."""
_TORCH_DEVICE: Any = None


def _on_device(device: int) -> Any:
    """torch's current device set to ``device`` for the block when it is another, and restored after
    (the SDK takes torch inputs with ``__dlpack__()``, which torch refuses off the tensor's device)."""
    if _TORCH_DEVICE is not None and sys.modules["torch"].cuda.is_initialized() and _TORCH_DEVICE() != device:
        return sys.modules["torch"].cuda.device(device)
    return contextlib.nullcontext()


def _torch_tensor_type() -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


_TORCH_TENSOR: Any = None  # set lazily: importing streamsafe must not import torch


def _refresh_torch() -> None:
    global _TORCH_TENSOR, _RAW_STREAM, _TORCH_DEVICE
    if _TORCH_TENSOR is None:
        _TORCH_TENSOR = _torch_tensor_type()
        if _TORCH_TENSOR is not None:
            torch = sys.modules["torch"]
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, no stream object
            _RAW_STREAM = raw if raw is not None else functools.partial(torch_current_stream_handle, torch)
            _TORCH_DEVICE = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def stream_contract(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto", **kwargs: Any) -> StreamContract:
    """A :class:`StreamContract` to use as ``with stream_contract(sr, stream) as c:``.

    Inside the block, plain ``sr.run(...)``/``sr.run_at_timestep(...)``/``sr.close()`` and
    changes of the output size or encoding go through the contract (blocks nest: the
    innermost takes them). Leaving the block makes the host wait for the copies issued in it
    (like the ``stream.synchronize()`` that ends the vendor's recipe). After the block, plain
    calls return the SDK's raw output again, but streamsafe still orders them after the copies
    it knows of, on the device, and an output made in the block may still be imported after
    it, until the next run.
    """
    return StreamContract(effect, stream, strategy=strategy, **kwargs)


def stream_safe(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto", **kwargs: Any) -> Callable[[F], F]:
    """Decorator: the effect is guarded for each call of the function; the SDK stream is
    ``stream``, else the current stream at each call. The wrapper's ``.contract`` is the contract.
    It shares the effect's ledger with every other guard: the next run, through any of them,
    waits on the device for the copies of this one's outputs. Unlike a ``with`` block, the host
    does not wait for anything when the function returns: a frame per call, at the GPU's pace."""
    contract = StreamContract(effect, stream, strategy=strategy, **kwargs)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            with contract.guarded(host_wait_on_exit=False):
                return fn(*args, **kw)

        wrapper.contract = contract  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
