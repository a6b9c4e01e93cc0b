"""The thread rule: an SDK object, with its ledger and all its guards, is used by one thread at a time.

:class:`Turns` is the rule for one object: a call holds the object for its length; a call another thread
makes meanwhile raises :class:`~streamsafe.errors.ConcurrentUseError`, except that a ``with`` block's closing
host wait is waited for instead (calls a program serialises itself, with a lock or a queue, are fine).

A turn is taken (:meth:`Turns.take`) inside the ``try`` whose ``finally`` gives it back, and that ``finally``
releases the lock before it calls anything else: CPython raises a ``KeyboardInterrupt`` (or any signal handler's
exception) only as a call starts or right after one returns, so no interrupt can leave a turn held. Nothing here
blocks except the wait for a closing wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import ConcurrentUseError

__all__ = ["Turns"]

_get_ident = threading.get_ident
_T = TypeVar("_T")


def _thread_name(ident: int | None) -> str:
    """The name of the thread ``ident`` (for an error message), else "another thread"."""
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return "another thread"


class Turns:
    """Whose turn it is to use one SDK object (named ``name`` in errors)."""

    __slots__ = ("name", "kind", "lock", "owner", "closing_wait", "closing")

    def __init__(self, name: str, kind: str = "effect") -> None:
        self.name = name
        self.kind = kind
        """What the object is, in errors: ``"effect"`` or ``"decoder"``."""
        self.lock = threading.RLock()
        self.owner: int | None = None
        """The thread holding the object now, or ``None``."""
        self.closing_wait = False
        """Whether the holder's call is a ``with`` block's closing host wait."""
        self.closing: list[int] = []
        """The threads whose closing waits are under way (list appends and removes are atomic: no lock needed)."""

    def take(self, call: str, wait: bool = False) -> tuple[int | None, bool]:
        """Hold the object for one call; returns the outer hold to give back (this thread's, when nested).
        Another thread's concurrent call raises :class:`~streamsafe.errors.ConcurrentUseError`, or, with ``wait``
        (a ``with`` block's closing host wait), is waited for. An interrupt while it takes the turn leaves it not
        taken. Give it back in the ``finally`` of a ``try`` that the call to this function opens, before anything
        else is called there::

            outer = None
            try:
                outer = turns.take("run")
                ...
            finally:
                if outer is not None:
                    turns.owner, turns.closing_wait = outer
                    turns.lock.release()

        (CPython raises an interrupt only as a call starts or right after one returns, never between this
        function's return and the assignment, nor between that ``finally``'s start and the release.) Blocks only
        for the wait."""
        lock = self.lock
        me = _get_ident()
        got = False
        try:
            if wait:
                self.closing.append(me)  # announced before it waits: a call meanwhile waits for it, not raises
                got = lock.acquire()
            else:
                got = lock.acquire(False)
                if not got:
                    self.wait_turn(call)
                    got = True
            outer = (self.owner, self.closing_wait)
            self.owner = me
            self.closing_wait = wait
            return outer
        except BaseException:
            if got or lock._is_owned():  # type: ignore[attr-defined]  # (not got: interrupted right as it took the lock)
                lock.release()
            if wait:
                self.closing.remove(me)
            raise

    def run(self, call: str, fn: Callable[..., _T], *args: Any, wait: bool = False) -> _T:
        """``fn(*args)`` holding the object (:meth:`take`, given back however ``fn`` ends). Blocks only for the
        wait of :meth:`take`."""
        outer = None
        try:
            outer = self.take(call, wait)
            return fn(*args)
        finally:
            if outer is not None:
                self.owner, self.closing_wait = outer
                try:
                    self.lock.release()
                finally:
                    if wait:
                        self.closing.remove(_get_ident())

    def wait_turn(self, call: str) -> None:
        """Another thread holds the object: wait if that is a block's closing host wait (not a concurrent
        call), else raise :class:`~streamsafe.errors.ConcurrentUseError`. A holder that has not recorded
        itself yet (or has just let go) is looked at again until it shows. Returns holding the lock."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owner = self.owner
            closing = self.closing_wait or (owner is not None and owner in self.closing)
            if not closing and owner is not None:
                if self.owner != owner:  # (the holder changed while we looked: look again)
                    continue
                raise ConcurrentUseError(self.name, call, _thread_name(owner), threading.current_thread().name,
                                         kind=self.kind)
            # a closing wait holds it, or a holder not recorded yet: wait a little, then look again (a call
            # that takes the lock after the closing wait is a concurrent one, and raises)
            if self.lock.acquire(timeout=0.005 if closing else 0.001):
                return
        raise ConcurrentUseError(self.name, call, _thread_name(self.owner), threading.current_thread().name, kind=self.kind)

    def __repr__(self) -> str:
        return f"<Turns of {self.name}: {'free' if self.owner is None else _thread_name(self.owner)}>"
