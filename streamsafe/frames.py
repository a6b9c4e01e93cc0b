"""A contract's steady state: frames replayed from a recipe instead of planned again.

:class:`SteadyFrames` is the part of :class:`~streamsafe.contract.StreamContract` that reads a call's
facts, finds a :class:`~streamsafe.steady.Recipe` of the general path for them and the ledger's state,
replays it (the same fences, ledger updates and input protection, in the same order), and keeps the
recipes (:mod:`streamsafe.steady` says what a recipe holds). A replayed frame issues exactly what the
general path would; ``STREAMSAFE_CHECK_REPLAY=1`` plans every replayed call again and compares.
Nothing here blocks the host beyond the fences a recipe holds.
"""

from __future__ import annotations

from typing import Any

import sys

from . import steady
from .frameworks import TORCH
from .guarding import call_raw
from .interrupts import after_writes
from .inputs import Inputs, is_number
from .ledger import Ledger
from .views import views_exist
from .plan import FencePlan
from .program import FenceProgram
from .profile import Profile
from .streams import Stream, stream_from_handle, thread_token

__all__ = ["SteadyFrames", "UNREADABLE", "restore_counters"]

UNREADABLE = object()
"""What :meth:`SteadyFrames._config` gives when an attribute went (no replay then)."""


class SteadyFrames:
    """The steady-state half of :class:`~streamsafe.contract.StreamContract` (a mixin: these methods use
    the contract's own state, declared below)."""

    closed: bool
    device: int
    ledger: Ledger
    profile: Profile
    stats: dict[str, int]
    effect: Any
    backend: Any
    _input: Stream | None
    _inputs: Inputs
    _recipes: list[steady.Recipe]
    _shared: bool
    _last_plan: FencePlan | None
    _config_getter: Any
    _consumer: Stream | None

    def _output(self, raw: Any, generation: int, default_consumer: Stream, effect: Any) -> Any:
        raise NotImplementedError

    def _call_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "run") -> Any:
        raise NotImplementedError

    def _plan_frame(self, sdk: Stream, arrays: list[Any], producers: list[Stream | None], user_nb: bool) -> Any:
        raise NotImplementedError

    def _interrupted(self, plan: FencePlan, shapes: tuple[Any, ...], after: tuple[Any, ...], arrays: Any,
                     run_stream: Stream, seen: Any = None, *, recorded: bool = False) -> None:
        raise NotImplementedError

    def _refused(self, plan: FencePlan, after: tuple[Any, ...], arrays: Any, run_stream: Stream, seen: Any = None) -> None:
        raise NotImplementedError

    def _facts(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> tuple[Any, ...] | None:
        """This call's facts for :mod:`streamsafe.steady` (raw handles, shapes), read without a driver
        query; ``None`` when the call must take the general path (inputs passed by keyword, inputs
        other than plain torch tensors and model arrays, an input on another device)."""
        stream_ptr = None
        non_blocking = False
        if kwargs:
            profile = self.profile
            if not profile.input_keywords_set.isdisjoint(kwargs):
                return None
            stream_ptr = kwargs.get(profile.stream_keyword)
            non_blocking = kwargs.get(profile.blocking_keyword, False)
            if (stream_ptr is not None and type(stream_ptr) is not int) or type(non_blocking) is not bool:
                return None
        dev = self.device
        declared = self._input
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
                if declared is None:
                    if current is None:
                        current = TORCH.raw_stream(dev)
                    facts.append(current)
                else:
                    facts.append(declared)
            elif kind is model_array:
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
            if stream_ptr is not None:  # (on the model a handle is cheap to name: with its kind, a destroyed one's reuse differs)
                try:
                    facts[1] = stream_from_handle(stream_ptr, dev, sim)
                except Exception:  # noqa: BLE001 (not a stream: the general path says why)
                    return None
        elif model_array is not None or TORCH.tensor is None:
            return None
        else:
            if TORCH.current_device() != dev:  # the general path makes the effect's device current for the call
                return None
            facts.append(current if current is not None else TORCH.raw_stream(dev))  # torch is initialised: it made the inputs
        return tuple(facts)

    def _replay(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], shared: bool) -> Any:
        """Replay a recorded recipe when this call's facts and the ledger's state match one; else ``None``."""
        if self.closed:
            return None
        effect = self.effect  # (a property: read once)
        facts = self._facts(name, args, kwargs, shared)
        if facts is None:
            return None
        for recipe in self._recipes:
            if recipe.facts == facts:
                break
        else:
            return None
        ledger = self.ledger
        turns = ledger.turns
        outer = turns.try_hold()
        if outer is None:  # another thread holds the effect: the general path waits or raises, as the rule says
            return None
        try:
            config = self._config(effect)
            if ledger.closed or config is UNREADABLE:
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
            arrays = args if recipe.arrays_only else tuple(a for a in args if type(a) is not int and type(a) is not float)
            run_stream = recipe.run_stream
            if views_exist():  # (first: a stale view is refused before anything is issued or counted)
                self._inputs.read_views(arrays, run_stream)
            stats = self.stats
            before = recipe.before
            counted = None
            if before.fences:  # (an empty program has nothing to issue or count)
                if not before.counts_exactly:
                    counted = dict(stats)  # (host waits or device syncs: counted as planned calls count them)
                before(stats)
            profile = self.profile
            if kwargs:
                kwargs = {k: v for k, v in kwargs.items() if k != profile.stream_keyword and k != profile.blocking_keyword}
            kwargs[profile.stream_keyword] = recipe.run_ptr
            kwargs[profile.blocking_keyword] = recipe.non_blocking
            plan = recipe.plan
            returned = recorded = False
            try:
                raw = call_raw(effect, name, args, kwargs)
                returned = True
                generation = ledger.after_run(plan, recipe.shapes, stats, recipe.default_consumer)
                recorded = True
                if recipe.protect:
                    if recipe.after.fences:
                        recipe.after(stats)
                    self._inputs.protect(arrays, run_stream)
            except BaseException as e:
                if returned or after_writes(e):
                    # interrupted after the SDK may have issued its work (streamsafe.interrupts): a run
                    self._interrupted(plan, recipe.shapes, recipe.after.fences, arrays, run_stream, recorded=recorded)
                else:  # refused (a dtype the facts do not hold): the counters as before, as planned calls
                    if counted is not None:
                        restore_counters(stats, counted)
                    elif before.fences:
                        before.uncount(stats)
                    self._refused(plan, recipe.after.fences, arrays, run_stream)
                raise
            if ledger.keepalive:
                ledger.prune_keepalive()
            self._last_plan = plan
            for counter, n in recipe.run_counts:
                stats[counter] += n
        finally:
            turns.let_go(outer)
        return self._output(raw, generation, recipe.default_consumer, effect)

    def _config(self, effect: Any) -> Any:
        """The effect's output-size and encoding attributes it had when the contract was made, now."""
        try:
            return self._config_getter(effect)
        except AttributeError:  # an attribute went: the general path copes
            return UNREADABLE

    def _check_recipe(self, recipe: steady.Recipe, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``STREAMSAFE_CHECK_REPLAY=1``: plan the call again; the recipe must say the same."""
        sdk, user_nb, arrays, producers = self._call_inputs(args, kwargs, name)
        frame = self._plan_frame(sdk, arrays, producers, user_nb)
        got = (recipe.plan, recipe.shapes, recipe.before.fences, recipe.after.fences, recipe.default_consumer,
               recipe.run_stream, recipe.run_counts, recipe.arrays_only)
        plan = frame[0]
        want = (plan, frame[1], frame[2], frame[3], self._consumer or sdk, plan.run_stream,
                steady.run_counts(plan),
                not any(is_number(a) for a in args))
        if got != want:
            raise AssertionError(f"streamsafe replayed a recipe that differs from the plan: {got} != {want}")

    def _remember(
        self, facts: tuple[Any, ...], state: tuple[Any, ...], plan: FencePlan, shapes: tuple[Any, ...],
        before: tuple[Any, ...], after: tuple[Any, ...], protect: bool, default_consumer: Stream,
    ) -> None:
        """Keep a recipe of this call for the frames that repeat it (the newest first, at most four)."""
        for old in self._recipes:
            if old.facts == facts and old.state == state and old.thread in (None, thread_token()):
                return
        be, dev = self.backend, self.device
        holds = _stream_objects(facts, dev)
        if holds is None:  # a raw handle whose stream no object keeps alive: it could name another stream later
            return
        recipe = steady.Recipe(facts, state, plan, shapes, FenceProgram(be, dev, before),
                               FenceProgram(be, dev, after), protect, default_consumer)
        recipe.holds = holds
        self._recipes = [recipe, *self._recipes[:3]]


def _stream_objects(facts: tuple[Any, ...], device: int) -> tuple[Any, ...] | None:
    """The framework objects of the streams a recipe's facts name by raw handle (torch's current stream),
    kept by the recipe: while it is kept, its handle names that stream, with that stream's kind (the driver
    hands a destroyed stream's handle to the next stream it creates, of either kind). ``None`` when a
    handle is not torch's current stream (nothing to keep alive: the call is planned each time)."""
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

def restore_counters(stats: dict[str, int], counted: dict[str, int]) -> None:
    """Put ``stats`` back to ``counted`` in place (the ledger and the run report hold the same dict), never
    empty for a moment: another thread may read it meanwhile."""
    stats.update(counted)
    for key in [k for k in stats if k not in counted]:
        stats.pop(key, None)
