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

import warnings
import weakref
from typing import TYPE_CHECKING, Any, NoReturn

from . import guarding, hooks, occupancy, steady
from ._dlpack import array_key
from ._env import SANITIZE_MEANING, env_flag
from .backend import Backend, current_backend, require_backend
from .backend.naming import as_stream, stream_on_device
from .errors import ArgumentError, EffectConfigError, EffectStateError, MissingCallError, StreamsafeError, UnguardedChangeError
from .frameworks import TORCH, is_framework_stream, on_torch_device
from .guarding import GuardBlock, GuardedBlocks, call_raw, check_effect, config_reader, settable, shape_of, snapshot
from .interrupts import after_writes
from .frames import UNREADABLE, SteadyFrames, restore_counters
from .inputs import Inputs, call_keywords
from .ledger import Ledger, adopt_ledger, forget_ledger, ledger_of, new_stats
from .views import views_exist
from .plan import FencePlan, plan_fences
from .profile import profile_of
from .strategy import Strategy, StrategyName, as_strategy
from .sharing import Unshareable
from .streams import LEGACY_HANDLE, Stream, on_this_thread

if TYPE_CHECKING:  # (the type of what nvvfx's profile hands out; the contract never imports the outputs)
    from .outputs import SafeOutput

__all__ = ["StreamContract", "GuardBlock", "restore_counters", "contract_sinks"]  # (GuardBlock: streamsafe.guarding's)


class StreamContract(SteadyFrames, GuardedBlocks, Unshareable):
    """Fences one effect's calls. See the module docstring for the streams and the three ways in.

    ``strategy`` is a :class:`~streamsafe.Strategy` or its name; ``"none"`` also needs
    ``allow_none=True``. ``backend`` defaults to the effect's own (emulated effects) or the
    current backend. Every contract, decorator and guard on one effect shares the effect's
    :class:`~streamsafe.ledger.Ledger`, so their fences see each other's readers and outputs.
    Constructing a contract does not block and issues no GPU work.
    """

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
        check_effect(effect)
        self.profile = profile_of(effect)
        """The SDK profile of the effect (:mod:`streamsafe.profile`): its calls, settings and outputs."""
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        if getattr(effect, "closed", False):
            raise EffectStateError(type(effect).__name__, "stream_contract", "closed", "Create a new effect.")
        self._effect: Any = effect
        self._effect_ref: Any = None
        self.effect_name = type(effect).__name__
        self._cls = type(effect)
        self.device = int(getattr(effect, "device", 0))
        if backend is not None:
            require_backend(backend, "StreamContract(backend=...)")
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
                    if s is not None and is_framework_stream(obj)}
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
        self._config_getter = config_reader(effect, self.profile)
        self._last_plan: FencePlan | None = None
        self._patched_instance = False
        self._tracked = guarding.install(self._cls)
        if self.ledger.config is None:
            self.ledger.config = self._snapshot()
        self.stats = new_stats()
        """Counters: runs; device-side fences; host waits and device syncs streamsafe made; and runs in
        which the SDK itself made the host wait (``non_blocking=False``)."""
        if env_flag("STREAMSAFE_SANITIZE", False, SANITIZE_MEANING):
            hooks.observe_from_environment()
        try:
            _ = self.plan  # validates the strategy for these streams now (e.g. async where unsound)
        except BaseException:
            if existing is None:
                forget_ledger(effect, self.ledger)  # (refused: the effect is as it was)
            raise
        self._inputs = Inputs(self.backend, self.device, self.ledger, self._input, self.profile)
        for sink in contract_sinks:
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
        return self._conversion_spec if self.profile.converts(self.effect) else None

    def _sdk_stream(self) -> Stream:
        return self._sdk_fixed if self._sdk_fixed is not None else as_stream(None, device=self.device, backend=self.backend)

    def _shadow_stream(self) -> Stream | None:
        if self.strategy is not Strategy.ASYNC and (self.strategy is not Strategy.AUTO or self._shared):
            return None
        if self._shadow is None:
            self._shadow = self.backend.acquire_stream(self.device, non_blocking=False)  # type: ignore[attr-defined]
            hooks.label(self._shadow, "streamsafe's shadow stream (async runs the SDK there)")
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
                writers_known=self._input is not None,
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

    def _output(self, raw: Any, generation: int, default_consumer: Stream, effect: Any) -> Any:
        """The guarded output for ``effect``'s ``raw`` result, as the profile hands it out."""
        wrap = self.profile.wrap
        return raw if wrap is None else wrap(raw, self.ledger, generation, self.device, default_consumer, effect)

    # -- the general path --------------------------------------------------------------------------

    def _call_inputs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "run"
    ) -> tuple[Stream, bool, list[Any], list[Stream | None]]:
        """The SDK stream, the caller's ``non_blocking``, the inputs and their producers' streams
        (``None``: unknown) of a call; validates every input first. Issues nothing."""
        stream_ptr, user_nb = call_keywords(self.profile, self._cls, name, args, kwargs)
        if stream_ptr is None:
            sdk = self._sdk_stream()
        else:
            sdk = on_this_thread(stream_on_device(stream_ptr, self.device, self.backend, "sdk"))
            if self._sdk_fixed is not None and sdk != self._sdk_fixed:
                raise ArgumentError(
                    f"{self.profile.stream_keyword}={stream_ptr!r} names {sdk}, but this contract runs {self.effect_name} on "
                    f"its stream, {self._sdk_fixed}. Leave {self.profile.stream_keyword} out (the contract passes its own), "
                    "or make a contract for that stream: ss.stream_contract(effect, stream)"
                )
        arrays, producers = self._inputs.of_call(args, kwargs)
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

    def _call_planned(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool = False) -> Any:
        ledger = self.ledger
        if self.closed or ledger.closed:
            self._refuse_closed(name)
        TORCH.refresh()
        effect = self.effect
        facts = self._facts(name, args, kwargs, shared) if not hooks.observers else None
        be, dev = self.backend, self.device
        sdk, user_nb, arrays, producers = self._call_inputs(args, kwargs, name)
        with ledger.using(name):
            self._shared = shared
            self._check_unguarded_change()
            plan, shapes, before, after = self._plan_frame(sdk, arrays, producers, user_nb)  # reads the ledger, changes nothing
            config = self._config(effect) if facts is not None else UNREADABLE
            state = steady.ledger_state(ledger, config) if config is not UNREADABLE else None
            if ledger.input_shapes is not None and ledger.input_shapes != shapes:
                state = None  # an input-size change waits for every outstanding reader: no recipe for that
            run_stream = plan.run_stream
            if hooks.observers and not be.records_accesses:
                for arr, producer in zip(arrays, producers):  # before the fences that order them
                    if producer is not None:
                        for o in hooks.observers:
                            o.on_input_write(array_key(arr), producer, dev)
            if views_exist():  # (first: a stale view is refused before anything is issued or counted)
                self._inputs.read_views(arrays, run_stream)
            counted = dict(self.stats)  # (restored if the SDK refuses the call: its counters count runs)
            ledger.apply(before, self.stats)
            forward = plan.strategy is not Strategy.NONE and None in producers
            record = plan.strategy is not Strategy.NONE and be.records_accesses
            call_args, call_kwargs, seen = self._inputs.for_sdk(
                args, kwargs, arrays, producers, run_stream, forward=forward, record=record)
            call_kwargs[self.profile.stream_keyword] = run_stream.ptr
            call_kwargs[self.profile.blocking_keyword] = plan.non_blocking
            returned = recorded = False
            try:
                with on_torch_device(dev):
                    raw = call_raw(effect, name, call_args, call_kwargs)
                    returned = True
                # only now: an input the SDK rejects leaves the previous output valid and its readers known
                generation = ledger.after_run(plan, shapes, self.stats, self._consumer or sdk)
                recorded = True
                protect = bool(plan.at("after run"))
                if protect:
                    ledger.apply(after, self.stats)
                    self._inputs.protect(arrays, run_stream, seen)
            except BaseException as e:
                if returned or after_writes(e):
                    # Interrupted after the SDK may have issued its work (streamsafe.interrupts): a run.
                    self._interrupted(plan, shapes, after, arrays, run_stream, seen, recorded=recorded)
                else:
                    # The SDK refused the call (an input's dtype, layout or size; the effect's state): the
                    # counters go back to what they were. The device waits already issued stay queued (they
                    # order work and change no data), a host wait already made is not undone, and the
                    # ledger is as before: the previous output stays valid, its readers known. (In case the
                    # SDK issued work before it raised, its streams are waited for, and its inputs protected.)
                    restore_counters(self.stats, counted)
                    self._refused(plan, after, arrays, run_stream, seen)
                raise
            ledger.prune_keepalive()
            self._last_plan = plan  # (run() changes no output-size or encoding attribute: the snapshot stays)
            for counter, n in steady.run_counts(plan):
                self.stats[counter] += n
            if state is not None and facts is not None and None not in producers:
                self._remember(facts, state, plan, shapes, before, after, protect, self._consumer or sdk)
        return self._output(raw, generation, self._consumer or sdk, effect)

    def _refused(self, plan: FencePlan, after: tuple[Any, ...], arrays: Any, run_stream: Stream, seen: Any = None) -> None:
        """The SDK raised an error from its call: the previous output stays valid (the SDK refuses before it
        writes), but in case it had issued work, the next run and release also wait for this call's
        streams and its inputs are protected as after a run. Counts nothing. Does not block."""
        self.ledger.after_refused_run(plan)
        if plan.at("after run"):
            self.ledger.apply(after, {"fences": 0, "host_waits": 0, "device_syncs": 0})
            self._inputs.protect(arrays, run_stream, seen)

    def _interrupted(self, plan: FencePlan, shapes: tuple[Any, ...], after: tuple[Any, ...], arrays: Any,
                     run_stream: Stream, seen: Any = None, *, recorded: bool = False) -> None:
        """The SDK's call was left by an exception that is no error of the SDK's after its work may have been
        issued: counted as a run (the outputs before it are stale; the next run and release wait for its
        streams), its inputs protected as after any run. ``recorded``: the ledger had recorded the run
        already (the exception came after). Does not block."""
        ledger = self.ledger
        if not recorded:
            ledger.after_interrupted_run(plan, shapes)
        if plan.at("after run"):
            ledger.apply(after, self.stats)
            self._inputs.protect(arrays, run_stream, seen)
        self._last_plan = plan
        for counter, n in steady.run_counts(plan):
            self.stats[counter] += n

    # -- configuration and life cycle -----------------------------------------------------------

    def _snapshot(self) -> tuple[Any, ...]:
        return snapshot(self.effect, self.profile)

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
        changed = [(name, old, new) for name, old, new in zip(self.profile.settings, before, now) if old != new]
        if not (ledger.outstanding or ledger.readers) or not any(self.profile.releases_output(self.effect, name) for name, _, _ in changed):
            return
        changes = ", ".join(f"{name} {old} -> {new}" for name, old, new in changed)
        consumers = ", ".join(str(c) for c in {**ledger.outstanding, **ledger.readers})
        error = UnguardedChangeError(type(self.effect).__name__, changes, consumers)
        # too late for the readers (the buffer may be gone), but the next run still comes after the SDK's own work
        ledger.wait_for_readers(self._last_plan, self.strategy, self.stats)
        ledger.released()
        if hooks.strict() or self.backend.sanitizing:
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
        names = settable(self._cls, self.effect)
        for attr, value in attrs.items():
            if attr not in names:
                rule = f"{name} has no attribute {attr!r}" if not hasattr(self.effect, attr) else f"{attr!r} is read-only"
                raise EffectConfigError(name, attr, value, f"{rule}; its settings are {', '.join(sorted(names))}")
        ledger = self.ledger
        with ledger.using("configure"):
            before = {k: getattr(self.effect, k, None) for k in attrs}
            changes = {k: v for k, v in attrs.items() if before[k] != v}
            # a size first set (None before) has released nothing: no output was made for it
            releasing = [k for k in changes if self.profile.releases_output(self.effect, k) and before[k] is not None]
            counted = dict(self.stats)
            if releasing:
                ledger.wait_for_readers(self._last_plan, self.strategy, self.stats)
            done = []
            try:
                for attr, value in attrs.items():
                    call_raw(self.effect, "__setattr__", (attr, value))
                    done.append(attr)
            except BaseException:  # all or nothing: the values already set go back (the effect took them before)
                for attr in reversed(done):
                    try:
                        call_raw(self.effect, "__setattr__", (attr, before[attr]))
                    except Exception:  # noqa: S110  (a value the effect cannot take back: the snapshot below says what it has)
                        pass
                restore_counters(self.stats, counted)
                raise
            finally:
                if any(k in releasing for k in done):
                    ledger.released()
                ledger.config = self._snapshot()

    def synchronize(self) -> None:
        """Block the host until every copy of the current output that streamsafe knows of, and the
        SDK's own work, is done. Outputs stay valid."""
        self._synchronize(False)

    def _synchronize(self, wait_for_other_threads: bool) -> None:
        """:meth:`synchronize`; ``wait_for_other_threads``: a block's closing wait, which waits for another
        thread's call instead of raising."""
        ledger = self.ledger
        with ledger.using("synchronize", wait=wait_for_other_threads):
            ledger.wait_for_readers(self._last_plan, self.strategy, self.stats)
            ledger.waited()
            ledger.drain_keepalive()

    def close(self) -> None:
        """Close the effect once every copy is done (H6). Blocks the host for those copies. Idempotent."""
        if self.closed:
            return
        ledger = self.ledger
        if not ledger.closed:
            with ledger.using("close"):
                ledger.wait_for_readers(self._last_plan, self.strategy, self.stats)
                ledger.drain_keepalive()
                for name in self.profile.releases:
                    if callable(getattr(self._cls, name, None)):
                        call_raw(self.effect, name, ())
                ledger.closed_effect(self.effect)
        self.closed = True
        if self._shadow is not None:
            # Pooled, never destroyed: torch records events on it later for inputs given record_stream().
            self._shadow_finalizer()
            self._shadow = None

    # -- the guard (``with`` and the decorator) --------------------------------------------------

    def enter_block(self, frame: Any) -> None:
        """Route the plain calls made by ``frame``'s code through this contract (what a guard block does on
        entry: :meth:`guarded`, ``with``, the decorator). Does not block."""
        if self.closed:
            self._refuse_closed("stream_contract")
        if self._tracked:
            guarding.push(self.effect, self, frame)
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
        for name in (*self.profile.calls, *self.profile.releases):
            if hasattr(self._cls, name) and hasattr(self, name):
                instance_dict[name] = getattr(self, name)
        self._patched_instance = True

    def leave_block(self, frame: Any, *, host_wait: bool) -> None:
        """End :meth:`enter_block` for ``frame``; with ``host_wait``, block the host as :meth:`synchronize`."""
        if self._tracked:
            guarding.pop(self.effect, self, frame)
        elif self._patched_instance:
            for name in (*self.profile.calls, *self.profile.releases):
                self.effect.__dict__.pop(name, None)
            self._patched_instance = False
        if host_wait and not self.closed and not self.ledger.closed and self.strategy is not Strategy.NONE:
            # The copies made in the block are complete when it ends, as the vendor's recipe ends
            # with a wait for the copy stream (and untracked later use may run on any stream).
            self._synchronize(True)

    def __repr__(self) -> str:
        return f"StreamContract({self.effect_name}, strategy={self.strategy.value}, backend={self.backend.name})"


contract_sinks: list[Any] = []
"""Objects told of every contract made (``add(contract)``: ``streamsafe run``'s report); empty almost always."""


def _return_stream(backend: Any, stream: Stream) -> None:
    backend.release_stream(stream)


def _effect_backend(effect: Any) -> Backend | None:
    engine = getattr(type(effect), "engine", None)
    if isinstance(engine, property):
        return effect.engine.backend  # type: ignore[no-any-return]
    return None


