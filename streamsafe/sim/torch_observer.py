"""Sanitize mode's view of torch: the reads and writes of torch ops on the memory the mirror tracks.

On a GPU the mirror (:mod:`streamsafe.sim.mirror`) hears of what goes through streamsafe: fences, the
emulated effects' stages, a contract's inputs and its outputs' imports. A program's own torch work on that
memory (a copy of a zero-copy view on a second stream, a producer rewriting an input on a stream it did
not declare) does not go through streamsafe. :class:`TorchAccesses` is a
``torch.utils._python_dispatch.TorchDispatchMode``, as PyTorch's own CUDA sanitizer uses: while sanitize
mode is on, every torch op on a CUDA tensor whose memory the mirror tracks is reported to it as a launch
on torch's current stream, reading its inputs and writing what the op's schema says it writes; torch's
own event records and waits and ``Stream.wait_stream`` are reported too, so a fence the program made
itself orders what it orders. Nothing is installed outside sanitize mode (no cost then); only the thread
that entered sanitize mode is observed (torch's dispatch modes are per thread).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from ..backend.naming import as_stream

__all__ = ["TorchAccesses", "observe_torch"]


def observe_torch(mirror: Any) -> Any:
    """A context manager that reports torch's work on tracked memory to ``mirror`` inside the block, or
    ``None`` when torch (with CUDA) is not loaded: nothing to observe."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return TorchAccesses(torch, mirror)


class TorchAccesses:
    """Reports torch ops on tracked CUDA memory, and torch's event records, waits and stream waits, to a
    mirror, while entered. See the module docstring."""

    def __init__(self, torch: Any, mirror: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self._torch = torch
        self._mirror = mirror
        observer = self

        class _Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                observer._report(func, args, kwargs)
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> TorchAccesses:
        self._patch_events()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._mode.__exit__(*exc)
        finally:
            for owner, name, original in reversed(self._saved):
                setattr(owner, name, original)
            self._saved.clear()

    # -- torch ops --------------------------------------------------------------------------------------

    def _report(self, func: Any, args: Any, kwargs: Any) -> None:
        tracked = self._mirror.tracked_keys()
        if not tracked:
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

    # -- torch's own fences -----------------------------------------------------------------------------

    def _patch_events(self) -> None:
        torch = self._torch
        mirror = self._mirror
        Event, Stream = torch.cuda.Event, torch.cuda.Stream
        observer = self

        def stream_of(s: Any) -> Any:
            return as_stream(s if s is not None else torch.cuda.current_stream(), backend=observer._mirror_backend())

        def record(event: Any, stream: Any = None) -> Any:
            mirror.on_record(_Key(event), stream_of(stream))
            return original_record(event, stream)

        def wait(event: Any, stream: Any = None) -> Any:
            mirror.on_wait(stream_of(stream), _Key(event))
            return original_wait(event, stream)

        def synchronize(event: Any) -> Any:
            result = original_sync(event)
            mirror.on_event_complete(_Key(event))
            return result

        def wait_stream(stream: Any, other: Any) -> Any:
            mirror.on_fence(stream_of(stream), stream_of(other))
            return original_wait_stream(stream, other)

        def wait_event(stream: Any, event: Any) -> Any:
            mirror.on_wait(stream_of(stream), _Key(event))
            return original_wait_event(stream, event)

        original_record, original_wait, original_sync = Event.record, Event.wait, Event.synchronize
        original_wait_stream, original_wait_event = Stream.wait_stream, Stream.wait_event
        for owner, name, new in ((Event, "record", record), (Event, "wait", wait), (Event, "synchronize", synchronize),
                                 (Stream, "wait_stream", wait_stream), (Stream, "wait_event", wait_event)):
            self._saved.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
            setattr(owner, name, new)


_KEYS: dict[int, Any] = {}


class _Key:
    """A torch event as the mirror knows events (one mirrored event per torch event, on its device)."""

    __slots__ = ("device", "__weakref__")
    device: int

    def __new__(cls, event: Any) -> Any:
        found = _KEYS.get(id(event))
        if found is not None and found[0]() is event:
            return found[1]
        key = super().__new__(cls)
        key.device = getattr(getattr(event, "device", None), "index", None) or 0
        if len(_KEYS) > 4096:
            for k, (ref, _) in list(_KEYS.items()):
                if ref() is None:
                    del _KEYS[k]
        try:
            _KEYS[id(event)] = (weakref.ref(event), key)
        except TypeError:  # (not weakly referenceable: one mirrored event per call, still ordered as recorded)
            pass
        return key
