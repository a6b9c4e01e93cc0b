"""Schedulers: which ready operation the SimBackend runs next, and when.

The model keeps every issued operation pending until a scheduler runs it. An
operation is *ready* when everything CUDA orders it after has run. A scheduler
decides (a) how many ready operations run right after each issue (``eager_steps``),
and (b) which ready operation runs next (``pick``). Every choice is one CUDA allows;
so a missing fence can make a reader run before its writer and read stale data.

``pick`` also sees ``urgent``: the ready operations that lead to the *later* side of
an unordered pair whose earlier side has not run yet. Running those first is how the
adversarial scheduler turns every reported race into wrong data.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = [
    "Scheduler",
    "InOrderScheduler",
    "RandomScheduler",
    "AdversarialScheduler",
    "ChoiceScheduler",
    "make_scheduler",
    "SCHEDULERS",
]


class Scheduler(Protocol):
    def eager_steps(self, ready: int) -> int:
        """How many ready operations to run right after an issue (0 to ``ready``)."""
        ...

    def pick(self, ready: Sequence[int], urgent: Sequence[int] = ()) -> int:
        """Index into ``ready`` (operations' issue numbers, ascending) of the one to run next.

        ``urgent`` is a subset of ``ready`` (see the module docstring).
        """
        ...


class InOrderScheduler:
    """Runs everything at once, in issue order: a fast GPU that happens to hide most races."""

    def eager_steps(self, ready: int) -> int:
        """How many ready operations to run before the host goes on (0: none until the host waits)."""
        return ready

    def pick(self, ready: Sequence[int], urgent: Sequence[int] = ()) -> int:
        """Which of ``ready`` runs next, by index (``urgent``: the later sides of unordered pairs)."""
        return 0


class RandomScheduler:
    """Seeded random choices: any amount of eager progress, any ready operation next."""

    def __init__(self, seed: int | None = 0) -> None:
        self._rng = random.Random(seed)

    def eager_steps(self, ready: int) -> int:
        """How many ready operations to run before the host goes on (0: none until the host waits)."""
        return self._rng.randint(0, ready)

    def pick(self, ready: Sequence[int], urgent: Sequence[int] = ()) -> int:
        """Which of ``ready`` runs next, by index (``urgent``: the later sides of unordered pairs)."""
        return self._rng.randrange(len(ready))


class AdversarialScheduler:
    """Lazy and race-directed: work runs only when the host waits; the later side of an
    unordered pair (and what leads to it) runs first, then the newest ready operation.

    An unordered reader issued after a writer then runs before it, and an unordered
    writer issued after a reader overwrites the data before the reader runs.
    """

    def eager_steps(self, ready: int) -> int:
        """How many ready operations to run before the host goes on (0: none until the host waits)."""
        return 0

    def pick(self, ready: Sequence[int], urgent: Sequence[int] = ()) -> int:
        """Which of ``ready`` runs next, by index (``urgent``: the later sides of unordered pairs)."""
        if urgent:
            return list(ready).index(max(urgent))
        return len(ready) - 1


class ChoiceScheduler:
    """Every choice made by ``choose(n) -> int in [0, n)``: lets Hypothesis drive the schedule."""

    def __init__(self, choose: Callable[[int], int]) -> None:
        self._choose = choose

    def eager_steps(self, ready: int) -> int:
        """How many ready operations to run before the host goes on (0: none until the host waits)."""
        return self._choose(ready + 1)

    def pick(self, ready: Sequence[int], urgent: Sequence[int] = ()) -> int:
        """Which of ``ready`` runs next, by index (``urgent``: the later sides of unordered pairs)."""
        return self._choose(len(ready))


SCHEDULERS = ("in-order", "random", "adversarial")


def make_scheduler(name: str, seed: int | None = 0) -> Scheduler:
    """A scheduler by name: ``in-order``, ``random`` (seeded) or ``adversarial``."""
    if name == "in-order":
        return InOrderScheduler()
    if name == "random":
        return RandomScheduler(seed)
    if name == "adversarial":
        return AdversarialScheduler()
    from ..errors import ArgumentError

    raise ArgumentError(
        f"scheduler={name!r} is not a scheduler of the model: pass one of {', '.join(map(repr, SCHEDULERS))}, or a "
        "Scheduler object (streamsafe.sim.AdversarialScheduler(), ChoiceScheduler(...))"
    )
