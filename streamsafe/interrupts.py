"""Whether an exception that left an SDK's call may have come after the call wrote its outputs.

A guarded call that raises is either *refused* (the SDK checked its arguments or its state and wrote
nothing: the outputs before it stay valid) or *interrupted* (its work may have been issued: it counts as
a run, every older output is stale, and the next run and release wait for its streams). The rule, in one
place for every guard:

* an exception that is no ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, ...) interrupts;
* so does any exception a Python signal handler raised (``signal.alarm``'s ``TimeoutError`` for a frame
  deadline): CPython runs the handler when the SDK's C call returns, after its writes. A handler is known
  by its frame in the traceback: called in the main thread with a signal number and the interrupted frame;
* so does one of the SDK's own errors that its profile says may come after writes (a decoder's);
* and any exception once the SDK's call has returned (the guard knows: it is raised in its own
  bookkeeping, by a signal that landed there).

Everything else is a refusal, an exception from a user's subclass too (one raised after its
``super().run()`` returned reads as a refusal: streamsafe cannot see that return). Nothing here blocks or
issues GPU work.
"""

from __future__ import annotations

import signal
import threading
import types
from typing import Any

__all__ = ["after_writes", "raised_by_signal_handler"]


def after_writes(error: BaseException, error_names: tuple[str, ...] = ()) -> bool:
    """Whether ``error``, raised by an SDK's call before it returned, may have come after the call wrote its
    outputs (see the module docstring). ``error_names``: the SDK's error classes that may (its profile's
    ``errors_after_writes``)."""
    if not isinstance(error, Exception) or type(error).__name__ in error_names:
        return True
    return raised_by_signal_handler(error)


_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


def raised_by_signal_handler(error: BaseException) -> bool:
    """Whether ``error`` came through a Python signal handler: a frame of its traceback, in the main thread,
    called with a signal number and the interrupted frame as its last two positional arguments (a plain
    function, a bound method, a ``functools.partial``, a callable object, installed still or not)."""
    if threading.current_thread() is not threading.main_thread():
        return False  # (Python runs signal handlers in the main thread only)
    tb = error.__traceback__
    while tb is not None:
        if _handler_frame(tb.tb_frame):
            return True
        tb = tb.tb_next
    return False


def _handler_frame(frame: types.FrameType) -> bool:
    code = frame.f_code
    if code.co_argcount < 2:
        return False
    names = code.co_varnames[code.co_argcount - 2:code.co_argcount]
    local: Any = frame.f_locals
    signum, interrupted = local.get(names[0]), local.get(names[1])
    return (type(signum) is int or isinstance(signum, signal.Signals)) and int(signum) in _SIGNALS and (
        isinstance(interrupted, types.FrameType) or interrupted is None) and frame.f_back is interrupted
