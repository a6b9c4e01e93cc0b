"""The thread rule: an effect, with its ledger and all its guards, is used by one thread at a time.

:class:`Turns` is the rule for one effect: a call holds the effect for its length (:meth:`Turns.using`,
:meth:`Turns.try_hold` on the hot path); a call another thread makes meanwhile raises
:class:`~streamsafe.errors.ConcurrentUseError`, except that a ``with`` block's closing host wait is waited
for instead (calls a program serialises itself, with a lock or a queue, are fine). Nothing here blocks
except that wait.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .errors import ConcurrentUseError

__all__ = ["Turns"]

_get_ident = threading.get_ident


def _thread_name(ident: int | None) -> str:
    """The name of the thread ``ident`` (for an error message), else "another thread"."""
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return "another thread"


class Turns:
    """Whose turn it is to use one effect (named ``name`` in errors)."""

    __slots__ = ("name", "lock", "owner", "closing_wait", "closing")

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.RLock()
        self.owner: int | None = None
        """The thread holding the effect now, or ``None``."""
        self.closing_wait = False
        """Whether the holder's call is a ``with`` block's closing host wait."""
        self.closing: list[int] = []
        """The threads whose closing waits are under way (list appends and removes are atomic: no lock needed)."""

    def using(self, call: str, wait: bool = False, value: Any = None) -> _Using:
        """Hold the effect for one call (a context manager giving ``value``); another thread's concurrent call
        raises :class:`~streamsafe.errors.ConcurrentUseError`, or, with ``wait``, waits for it to end (the
        implicit host wait that ends a ``with`` block). Does not block otherwise."""
        return _Using(self, call, wait, value)

    def try_hold(self) -> tuple[int | None, bool] | None:
        """Hold the effect for one call if no other thread does, without blocking: the previous holder, to
        give to :meth:`let_go`; ``None`` when another thread holds it (then :meth:`using` waits for its
        closing host wait, or raises)."""
        if not self.lock.acquire(False):
            return None
        return self.took(False)

    def took(self, closing_wait: bool) -> tuple[int | None, bool]:
        """This thread now holds the lock: record it as the holder; returns the previous holder."""
        outer = (self.owner, self.closing_wait)
        self.owner = _get_ident()
        self.closing_wait = closing_wait
        return outer

    def let_go(self, outer: tuple[int | None, bool]) -> None:
        """End a hold taken by :meth:`try_hold` (or :meth:`using`): the previous holder is restored."""
        self.owner, self.closing_wait = outer
        self.lock.release()

    def wait_for_a_closing_wait(self, call: str) -> None:
        """Another thread holds the effect: wait if that is a block's closing host wait (not a concurrent
        call), else raise :class:`~streamsafe.errors.ConcurrentUseError`. A holder that has not recorded
        itself yet (or has just let go) is looked at again until it shows. Returns holding the lock."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owner = self.owner
            closing = self.closing_wait or (owner is not None and owner in self.closing)
            if not closing and owner is not None:
                if self.owner != owner:  # (the holder changed while we looked: look again)
                    continue
                raise ConcurrentUseError(self.name, call, _thread_name(owner), threading.current_thread().name)
            # a closing wait holds it, or a holder not recorded yet: wait a little, then look again (a call
            # that takes the lock after the closing wait is a concurrent one, and raises)
            if self.lock.acquire(timeout=0.005 if closing else 0.001):
                return
        raise ConcurrentUseError(self.name, call, _thread_name(self.owner), threading.current_thread().name)


class _Using:
    """The effect held by one thread for one call (cheaper than a generator-based context manager)."""

    __slots__ = ("_turns", "_call", "_wait", "_value", "_outer")

    def __init__(self, turns: Turns, call: str, wait: bool, value: Any) -> None:
        self._turns = turns
        self._call = call
        self._wait = wait
        self._value = value

    def __enter__(self) -> Any:
        turns = self._turns
        if self._wait:
            # A closing wait is announced from before it waits for the lock until after it lets go: in the
            # moments between taking the lock and recording itself as the holder (and between the two
            # again as it lets go), a call another thread makes waits for it instead of raising.
            turns.closing.append(_get_ident())
            try:
                turns.lock.acquire()
            except BaseException:
                turns.closing.remove(_get_ident())
                raise
        elif not turns.lock.acquire(False):
            turns.wait_for_a_closing_wait(self._call)
        self._outer = turns.took(self._wait)
        return self._value

    def __exit__(self, *exc: object) -> None:
        try:
            self._turns.let_go(self._outer)
        finally:
            if self._wait:
                self._turns.closing.remove(_get_ident())
