"""Sanitize mode's view of torch: the reads and writes of torch ops on the memory the mirror tracks.

On a GPU the mirror (:mod:`streamsafe.sim.mirror`) hears of what goes through streamsafe: fences, the
emulated effects' stages, a contract's inputs and its outputs' imports. A program's own torch work on that
memory (a copy of a zero-copy view on a second stream, a producer rewriting an input on a stream it did
not declare) does not go through streamsafe. :class:`TorchAccesses` is a
``torch.utils._python_dispatch.TorchDispatchMode``, as PyTorch's own CUDA sanitizer uses: while sanitize
mode is on, every torch op on a CUDA tensor whose memory the mirror tracks is reported to it as a launch
on torch's current stream, reading its inputs and writing what the op's schema says it writes. torch's
own event records and waits, ``Stream.wait_stream`` and host synchronisations are no ops: they are seen by
:mod:`streamsafe.sim.sync_hooks`, so a fence or a wait the program made itself orders what it orders.
``Tensor.record_stream`` is an op, but bookkeeping: it is not an access (the caching allocator's wait it asks
for is not seen either; streamsafe keeps the inputs it protects that way until a query orders the host).
Nothing is installed outside sanitize mode (no cost then); only the thread that entered sanitize mode is
observed (torch's dispatch modes are per thread).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .. import hooks
from ..backend.naming import as_stream

__all__ = ["TorchAccesses", "TorchWatch", "observe_torch", "observing_torch"]

_BOOKKEEPING = frozenset({"record_stream"})
"""Ops that touch no memory on a stream (their schema marks a tensor written): ``record_stream`` tells the caching
allocator which stream to wait for before reusing the memory; it issues nothing."""


def observe_torch(mirror: Any) -> Any:
    """A context manager that reports torch's work on tracked memory to ``mirror`` inside the block, or
    ``None`` when torch (with CUDA) is not loaded: nothing to observe."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return TorchAccesses(torch, mirror)


class TorchWatch(hooks.Observer):
    """Torch's ops reported to ``mirror`` (:class:`TorchAccesses`) from when torch runs on CUDA: at once if it does, else
    from the first input or output a guarded call tells of (no memory is tracked before), in the thread of that call;
    with ``thread``, only in that thread (torch's dispatch modes are per thread: a scope that ends there ends it).
    While it waits it is an observer (:func:`streamsafe.hooks.register` it); :meth:`close` ends the observation (closed
    from another thread than the one that began it, torch's mode stays there, inert). Nothing here blocks."""

    def __init__(self, mirror: Any, thread: int | None = None) -> None:
        self._mirror = mirror
        self._only = thread
        self._accesses: Any = None
        self._thread: int | None = None
        self._lock = threading.Lock()
        self.start()

    @property
    def started(self) -> bool:
        """Whether torch's ops are observed (in one thread)."""
        return self._accesses is not None

    def start(self) -> None:
        """Observe torch's ops from now on, in this thread, if torch runs on CUDA and they are not observed yet."""
        if self._accesses is not None or (self._only is not None and threading.get_ident() != self._only):
            return
        with self._lock:
            if self._accesses is None:
                accesses = observe_torch(self._mirror)
                if accesses is not None:
                    accesses.__enter__()
                    self._accesses, self._thread = accesses, threading.get_ident()
                    hooks.unregister(self)  # (nothing more to wait for)

    def on_input_write(self, key: Any, producer: Any, device: int) -> None:
        self.start()

    def on_output_read(self, key: Any, consumer: Any, device: int) -> None:
        self.start()

    def close(self) -> None:
        """Stop waiting and observing: torch's mode is left if this thread began it, else it reports nothing more."""
        hooks.unregister(self)
        accesses = self._accesses
        if accesses is not None:
            if self._thread == threading.get_ident():
                accesses.__exit__(None, None, None)
            else:  # (a dispatch mode is left only in its thread: there it stays, reporting to no one)
                accesses.stop()
            self._accesses = None


@contextlib.contextmanager
def observing_torch(mirror: Any) -> Iterator[TorchWatch]:
    """Torch's ops on the memory ``mirror`` tracks, in this thread, reported to it inside the block (:class:`TorchWatch`)."""
    watch = TorchWatch(mirror, threading.get_ident())
    if not watch.started:
        hooks.register(watch)
    try:
        yield watch
    finally:
        watch.close()


class TorchAccesses:
    """Reports torch ops on tracked CUDA memory to a mirror, while entered. See the module docstring."""

    def __init__(self, torch: Any, mirror: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self._torch = torch
        self._mirror = mirror
        self._stopped = False
        observer = self

        class _Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                observer._report(func, args, kwargs)
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._mode.streamsafe_accesses = self  # (what a later exit reads of a mode under it: stopped or not)

    def __enter__(self) -> TorchAccesses:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        """Leave torch's mode where it is the innermost (torch pops the innermost mode, whichever it is), with the
        stopped modes of ours right under it; else stop it, and the mode entered after it (an enclosing sanitize
        block's, whose observation began later) leaves it when it goes."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not self._mode:
            self.stop()
            return
        self._mode.__exit__(*exc)
        below = _get_current_dispatch_mode()
        while below is not None and getattr(getattr(below, "streamsafe_accesses", None), "stopped", False):
            below.__exit__(None, None, None)
            below = _get_current_dispatch_mode()

    # -- torch ops --------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Report nothing more (the mode stays entered: it can be left only in the thread that entered it)."""
        self._stopped = True

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    def _report(self, func: Any, args: Any, kwargs: Any) -> None:
        if self._stopped:
            return
        tracked = self._mirror.tracked_keys()
        if not tracked or getattr(getattr(func, "overloadpacket", None), "__name__", None) in _BOOKKEEPING:
            return
        torch = self._torch
        reads: list[int] = []
        writes: list[int] = []
        device = None
        schema = getattr(func, "_schema", None)
        arguments = list(schema.arguments) if schema is not None else []
        for i, value in enumerate(args):
            argument = arguments[i] if i < len(arguments) else None
            device = self._collect(torch, value, argument, tracked, reads, writes, device)
        for name, value in kwargs.items():
            argument = next((a for a in arguments if a.name == name), None)
            device = self._collect(torch, value, argument, tracked, reads, writes, device)
        if (reads or writes) and device is not None:
            stream = as_stream(torch.cuda.current_stream(device), backend=self._mirror_backend())
            self._mirror.on_launch(stream, f"torch {getattr(func, '__name__', func)}", reads, writes, device)

    @staticmethod
    def _collect(torch: Any, value: Any, argument: Any, tracked: Any, reads: list[int], writes: list[int], device: Any) -> Any:
        values = value if isinstance(value, (list, tuple)) else (value,)
        written = argument is not None and argument.alias_info is not None and argument.alias_info.is_write
        for v in values:
            if isinstance(v, torch.Tensor) and v.is_cuda:
                key = v.untyped_storage().data_ptr()
                if key in tracked:
                    (writes if written else reads).append(key)
                    device = v.device.index
        return device

    def _mirror_backend(self) -> Any:
        from ..backend import current_backend

        return current_backend()
