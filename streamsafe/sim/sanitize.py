"""Sanitize mode: report every race among calls made through streamsafe, not just the visible ones.

    with ss.sanitize():
        ...   # a missing fence raises streamsafe.errors.RaceError naming both accesses

It lives with the model (:mod:`streamsafe.sim`): the core knows only :mod:`streamsafe.hooks`.
On the GPU, a happens-before model (a :class:`streamsafe.hooks.Observer`, registered for
the block) mirrors every fence, event, synchronisation, emulated-effect stage and release
issued through streamsafe, the input writes a contract sees and every import of a
contract's output; a read of released memory is reported too (H7); where torch runs on CUDA,
the torch ops of the thread that entered the block on that memory, on whichever stream they run
(:mod:`streamsafe.sim.torch_observer`); and the program's own host synchronisations and event
records and waits made through torch, CuPy and ``cuda.bindings`` (:mod:`streamsafe.sim.sync_hooks`:
``stream.synchronize()`` before a ``run()`` orders the producer's writes before it). On the simulated
backend, the model itself raises instead of recording. ``STREAMSAFE_SANITIZE=1`` turns it
on for the whole process.
The mirror costs host time; it is for tests and debugging.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import hooks
from ..backend import Backend, current_backend, require_backend
from . import mirror, sync_hooks
from .backend import SimBackend
from .engine import sanitize_everywhere
from .torch_observer import observing_torch

__all__ = ["sanitize"]


@contextlib.contextmanager
def sanitize(backend: Backend | None = None) -> Iterator[mirror.Mirror | SimBackend]:
    """Turn sanitize mode on inside the block; yields the model that checks (to read ``.races``):
    ``backend`` when it is a :class:`SimBackend`, else the current backend when that is one, else the
    mirror of the real GPU calls. Without ``backend``, every :class:`SimBackend` raises at a race in the
    block (also one made by the program itself), and real GPU calls are checked by the mirror.

    Does not block the host itself; the mirror runs on the host, in Python.
    """
    if backend is not None:
        require_backend(backend, "sanitize()")
    if backend is None:
        model = mirror.Mirror()
        with sanitize_everywhere(), observing_torch(model), sync_hooks.observing():
            hooks.register(model)
            try:
                current = current_backend()
                yield current if isinstance(current, SimBackend) else model
            finally:
                hooks.unregister(model)
        return
    be = backend
    if isinstance(be, SimBackend):
        with be.sanitized():
            yield be
        return
    model = mirror.Mirror()
    with observing_torch(model), sync_hooks.observing():
        hooks.register(model)
        try:
            yield model
        finally:
            hooks.unregister(model)
