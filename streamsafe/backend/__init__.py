"""Backends: where fences go. The driver (:class:`~streamsafe.backend.cuda.CudaBackend`) or the model
(:class:`streamsafe.sim.SimBackend`).

:func:`current_backend` is the backend used when a call names none: the one made
active with :func:`use_backend`, else the driver when a CUDA device is present,
else the process-wide fallback (the model registers itself as that with
:func:`register_fallback` when :mod:`streamsafe.sim` is imported, as ``import streamsafe`` does).
``CudaBackend`` is imported lazily, so this package imports on a machine with no NVIDIA driver,
and nothing here imports the model.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from collections.abc import Callable

from ._protocol import Backend, Event
from ..errors import ArgumentError, BackendUnavailableError

if TYPE_CHECKING:
    from .cuda import CudaBackend

__all__ = [
    "Backend",
    "Event",
    "CudaBackend",
    "current_backend",
    "use_backend",
    "cuda_available",
    "default_backend",
    "process_default",
    "register_fallback",
    "require_backend",
    "thread_uses_default",
]

_active: contextvars.ContextVar[Backend | None] = contextvars.ContextVar("streamsafe_backend", default=None)
_default: Backend | None = None
_default_lock = threading.Lock()
_fallback: Callable[[], Backend] | None = None
"""What :func:`default_backend` makes when no GPU is present (set by :func:`register_fallback`)."""


def __getattr__(name: str) -> Any:
    if name == "CudaBackend":
        from .cuda import CudaBackend

        return CudaBackend
    raise AttributeError(name)


def cuda_available() -> bool:
    """True when the NVIDIA driver loads and reports at least one device. Does not block."""
    from .cuda import CudaBackend

    return CudaBackend.probe() is None


def register_fallback(factory: Callable[[], Backend]) -> None:
    """Make ``factory()`` the backend :func:`default_backend` uses when no GPU is present (the model
    registers itself so; a later registration replaces an earlier one). Does not block."""
    global _fallback
    _fallback = factory


def default_backend() -> Backend:
    """The process-wide backend: the driver if a GPU is present, else the registered fallback (the model)."""
    global _default
    with _default_lock:
        if _default is None:
            if cuda_available():
                from .cuda import CudaBackend

                _default = CudaBackend()
            elif _fallback is not None:
                _default = _fallback()
            else:
                from .cuda import CudaBackend

                raise BackendUnavailableError(
                    "CUDA", CudaBackend.probe() or "no GPU",
                    "Import streamsafe (its model registers itself as the fallback backend), or pass backend=...",
                )
        return _default


def current_backend() -> Backend:
    """The backend made active by :func:`use_backend` in this context, else :func:`default_backend`."""
    active = _active.get()
    return active if active is not None else default_backend()


def thread_uses_default(backend: Backend) -> bool:
    """Whether this thread (and task) set no backend with :func:`use_backend` and ``backend`` is the process's
    default: what a thread started without its own ``use_backend`` gets. Does not block."""
    return _active.get() is None and backend is _default


def require_backend(obj: Any, call: str) -> Backend:
    """``obj`` when it is a backend (it has the ordering calls of :class:`Backend`), else a
    :class:`~streamsafe.errors.ArgumentError` (a ``TypeError``) naming it, the rule and the fix. Does not block."""
    if not all(callable(getattr(obj, name, None)) for name in _BACKEND_CALLS) or isinstance(obj, type):
        raise ArgumentError(
            f"{call} needs a backend object, not {obj!r} ({type(obj).__name__}): a backend makes the CUDA ordering calls "
            "(record, wait, fence, ...). Pass streamsafe.sim.SimBackend() (the model) or streamsafe.CudaBackend() (the driver), "
            "or leave it out for the current one"
        )
    return obj  # type: ignore[no-any-return]


_BACKEND_CALLS = ("current_stream", "record", "wait", "fence", "synchronize_stream", "acquire_event")


@contextlib.contextmanager
def use_backend(backend: Backend) -> Iterator[Backend]:
    """Make ``backend`` the current one inside the block, in this thread (and asyncio task) only: a thread started
    inside the block does not inherit it, and gets the process's default backend (the driver with a GPU, else a
    model of its own) unless it calls ``use_backend`` itself; :func:`process_default` sets it for every thread. Raises
    :class:`~streamsafe.errors.ArgumentError` (a ``TypeError``) for anything that is not a backend,
    before the block runs."""
    require_backend(backend, "use_backend()")
    token = _active.set(backend)
    try:
        yield backend
    finally:
        _active.reset(token)


_scopes: list[tuple[object, Backend]] = []
"""The :func:`process_default` blocks open, oldest first; the newest one's backend is the default."""
_base: list[Backend | None] = []
"""The default before the first of them."""


@contextlib.contextmanager
def process_default(backend: Backend) -> Iterator[Backend]:
    """Make ``backend`` the process-wide default inside the block: the current backend of every thread
    that has not chosen one with :func:`use_backend`, threads started in the block included. Blocks may
    end in any order: the default is always the newest open block's, and the one before them all when
    none is open. (Tests that use it cannot run in parallel threads: there is one default.)"""
    global _default
    require_backend(backend, "process_default()")
    scope = object()
    with _default_lock:
        if not _scopes:
            _base[:] = [_default]
        _scopes.append((scope, backend))
        _default = backend
    try:
        yield backend
    finally:
        with _default_lock:
            _scopes[:] = [s for s in _scopes if s[0] is not scope]
            _default = _scopes[-1][1] if _scopes else _base[0]
