"""Whether an exception that left an SDK's call may have come after the call wrote its outputs.

A guarded call that raises is either *refused* (the SDK checked its arguments or its state and wrote
nothing: the outputs before it stay valid) or *interrupted* (its work may have been issued: it counts as
a run, every older output is stale, and the next run and release wait for its streams). The rule, in one
place for every guard:

* an exception that is no ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, ...) interrupts;
* so does any exception a Python signal handler raised (``signal.alarm``'s ``TimeoutError`` for a frame
  deadline): CPython runs the handler when the SDK's C call returns, after its writes;
* so does one of the SDK's own errors that its profile says may come after writes (a decoder's);
* so does any exception from a method of the user's own subclass once its ``super().run()`` returned
  (the SDK class's dispatcher sees that return);
* and any exception once the SDK's call has returned (the guard knows: it is raised in its own
  bookkeeping, by a signal that landed there).

Everything else is a refusal. Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import signal
from typing import Any

__all__ = ["after_writes", "raised_by_signal_handler"]


def after_writes(error: BaseException, error_names: tuple[str, ...] = (), *, sdk_returned: bool = False) -> bool:
    """Whether ``error``, raised by an SDK's call before it returned, may have come after the call wrote its
    outputs (see the module docstring). ``error_names``: the SDK's error classes that may (its profile's
    ``errors_after_writes``); ``sdk_returned``: the method called was a user's subclass's, and the SDK's own
    had returned inside it (:func:`streamsafe.guarding.raised_after_sdk`)."""
    if sdk_returned or not isinstance(error, Exception):
        return True
    if type(error).__name__ in error_names:
        return True
    return raised_by_signal_handler(error)


def raised_by_signal_handler(error: BaseException) -> bool:
    """Whether ``error`` was raised by one of this process's Python signal handlers (its traceback passes
    through one)."""
    codes = set()
    for signum in signal.valid_signals():
        try:
            handler: Any = signal.getsignal(signum)
        except (ValueError, OSError):  # (a signal this platform names but does not let Python read)
            continue
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        if code is not None:
            codes.add(code)
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False
