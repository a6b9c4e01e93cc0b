"""Strategies: how a contract restores the order the SDK leaves out."""

from __future__ import annotations

import enum
from typing import Any, Literal

from .errors import StrategyError

__all__ = ["Strategy", "StrategyName", "as_strategy"]


StrategyName = Literal["auto", "event", "async", "stream", "device", "none"]
"""The strategies' names, for type checkers: ``strategy="event"`` type-checks, ``strategy="fastest"``
does not. Parameters that take a strategy accept ``Strategy | StrategyName``; at run time the names are also
accepted in any case, and anything else raises :class:`~streamsafe.StrategyError`."""
StrategyName.__doc__ = "The strategies' names (a Literal), for type checkers: Strategy | StrategyName."


class Strategy(str, enum.Enum):
    """How fences are placed. Strings with the same values are accepted everywhere; for type
    checkers they are :data:`StrategyName`, so parameters take ``Strategy | StrategyName``.

    * ``auto``: the cheapest sound plan for the streams at hand; the plan says why.
    * ``event``: device-side event fences; the SDK runs with ``non_blocking=False``.
    * ``async``: the SDK runs on a blocking shadow stream owned by the contract with
      ``non_blocking=True``; the host never waits for inference. Sound only when the
      RGB8 conversion runs on the legacy stream.
    * ``stream``: host-synchronise the streams involved.
    * ``device``: the device-wide synchronisation of the vendor's documented recipe (its fallback).
    * ``none``: no fences at all; for benchmarks, needs ``allow_none=True``.
    """

    AUTO = "auto"
    EVENT = "event"
    ASYNC = "async"
    STREAM = "stream"
    DEVICE = "device"
    NONE = "none"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Strategy:
        """``Strategy("fast")``: a :class:`~streamsafe.errors.StrategyError` naming the strategies. A name is read in
        any case and with surrounding spaces stripped (``"Auto"``, ``" EVENT "``)."""
        if isinstance(value, str):
            name = value.strip().lower()
            for member in cls:
                if member.value == name:
                    return member
        names = ", ".join(repr(s.value) for s in cls)
        raise StrategyError(value, f"it is not one of {names} (in any case, spaces around it ignored)",
                            "Pass a streamsafe.Strategy or one of those strings.")


def as_strategy(value: Any, *, allow_none: bool = False) -> Strategy:
    """``value`` as a :class:`Strategy`; a clear error for anything else."""
    strategy = Strategy(value)  # (anything else: StrategyError, from Strategy._missing_)
    if strategy is Strategy.NONE and not allow_none:
        raise StrategyError(
            value,
            "'none' places no fences, so every hazard stays open",
            "It exists for benchmarks: pass allow_none=True to opt in.",
        )
    return strategy
