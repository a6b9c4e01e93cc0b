"""Steady state: a contract's frames replayed from a recipe instead of planned again.

A video pipeline calls ``run()`` with the same streams, the same input shapes and the same
consumers frame after frame. The general path of :meth:`StreamContract.run
<streamsafe.contract.StreamContract.run>` plans each call from scratch (stream objects, plan
lookups, fence lists); what it decides is a pure function of

* the call's **facts**: the method, ``stream_ptr`` and ``non_blocking``, each input's type,
  shape and producer stream, and the current stream (raw handles, read from the framework);
* the effect's **state** in its :class:`~streamsafe.ledger.Ledger`: the readers of the current
  output, whether a view of it escaped, the previous run's plan and SDK streams, the previous
  input shapes, and the output-size and encoding attributes.

A :class:`Recipe` stores what the general path decided for one (facts, state) pair, with its
device-side fences bound into a :class:`FenceProgram` (prebound driver calls and events of
its own, no per-frame lookups). When both match the next call's, the contract replays it:
the same fences, the same ledger updates, the same input protection, in the same order. Any
difference, an observer (sanitize mode), or an input that is not a plain torch tensor or a
model array sends the call down the general path, which then records a recipe for the new
situation. ``STREAMSAFE_CHECK_REPLAY=1`` makes every replay plan the call again and compare
(the test suite runs with it).
"""

from __future__ import annotations

from typing import Any

from ._env import env_flag
from .plan import FencePlan
from .program import FenceProgram
from .streams import PER_THREAD_HANDLE, Stream, thread_token

__all__ = ["Recipe", "ledger_state", "run_counts", "check_replay"]


check_replay = env_flag("STREAMSAFE_CHECK_REPLAY", False, "plan every replayed call again and compare", strict=False)
"""Plan every replayed call again and raise if the recipe differs (a test switch)."""
replays = 0
"""How many calls were replayed (the tests read it)."""
enabled = env_flag("STREAMSAFE_REPLAY", True, "replay steady-state frames from recipes", strict=False)
"""Whether contracts replay recipes (``STREAMSAFE_REPLAY=0``: every call is planned; the tests compare both)."""


class Recipe:
    """What the general path decided for one call in one ledger state; see the module docstring."""

    __slots__ = (
        "facts", "state", "readers", "escaped", "previous_plan", "previous_sdk", "input_shapes", "ledger_config", "config",
        "plan", "shapes", "before", "after", "protect", "default_consumer", "run_stream", "run_ptr", "non_blocking",
        "run_counts", "arrays_only", "thread", "holds",
    )

    def __init__(
        self,
        facts: tuple[Any, ...],
        state: tuple[Any, ...],
        plan: FencePlan,
        shapes: tuple[Any, ...],
        before: FenceProgram,
        after: FenceProgram,
        protect: bool,
        default_consumer: Any,
    ) -> None:
        self.facts = facts
        self.state = state
        """The ledger state it was made in, as :func:`ledger_state` gives it."""
        self.readers, self.escaped, self.previous_plan, self.previous_sdk, self.input_shapes, self.ledger_config, self.config = state
        self.plan = plan
        self.shapes = shapes
        self.before = before
        self.after = after
        self.protect = protect
        self.default_consumer = default_consumer
        self.run_stream = plan.run_stream
        self.run_ptr = plan.run_stream.ptr
        self.non_blocking = plan.non_blocking
        self.run_counts = run_counts(plan)
        """What a replayed run adds to the contract's counters besides its fences."""
        self.arrays_only = int not in facts and float not in facts
        """Whether every positional argument is an input array (no scalar such as a timestep)."""
        self.holds: tuple[Any, ...] = ()
        """The framework objects of the streams its facts name by raw handle, kept alive with it."""
        self.thread = thread_token() if _names_per_thread(facts, state, plan, default_consumer, before, after) else None
        """The thread it was made in, when it names a per-thread default stream (handle 2 is another
        stream in each thread: such a recipe replays only in its own thread)."""

    def matches(self, ledger: Any, config: Any) -> bool:
        """Whether the ledger is in the state this recipe was made in (the caller compared the facts)."""
        return (
            (self.thread is None or self.thread == thread_token())
            and ledger.plan is self.previous_plan
            and ledger.escaped is self.escaped
            and ledger.input_shapes == self.input_shapes
            and tuple(ledger.readers) == self.readers
            and ledger.previous_sdk == self.previous_sdk
            and config == self.config
            and ledger.config == self.ledger_config
        )

    def __repr__(self) -> str:
        return f"<Recipe {self.facts[0]} {self.plan.strategy.value}: {len(self.before.fences)} fence(s) before, {len(self.after.fences)} after>"


def _names_per_thread(facts: tuple[Any, ...], state: tuple[Any, ...], plan: FencePlan, default_consumer: Any,
                      before: FenceProgram, after: FenceProgram) -> bool:
    """Whether a recipe names a per-thread default stream anywhere: a fact (a stream, or a raw handle 2),
    a reader or SDK stream of the ledger's state, a stream of the plan or of its fences."""
    if PER_THREAD_HANDLE in facts:
        return True
    readers, _, _, previous_sdk, _, _, _ = state
    streams: list[Any] = [*facts, *readers, *previous_sdk, default_consumer, plan.sdk, plan.run_stream, plan.conversion,
                          plan.producer, plan.consumer, *plan.input_writers]
    for fence in (*before.fences, *after.fences):
        streams += (fence.waiter, fence.signaller)
    return any(type(s) is Stream and s.thread for s in streams)


def run_counts(plan: FencePlan) -> tuple[tuple[str, int], ...]:
    """What one run under ``plan`` adds to a contract's counters besides its fences: the run, and the
    SDK's own host wait when the plan lets it make one."""
    return (("runs", 1),) if plan.non_blocking else (("runs", 1), ("sdk_waits", 1))


def ledger_state(ledger: Any, config: Any) -> tuple[Any, ...]:
    """The part of a ledger's state that decides a run's fences, with the effect's output-size and
    encoding attributes as read now (``config``; see :meth:`Recipe.matches`)."""
    return (tuple(ledger.readers), ledger.escaped, ledger.plan, ledger.previous_sdk, ledger.input_shapes, ledger.config, config)
