"""CudaBackend: the ordering primitives on the real driver, through ``cuda.bindings``.

Events are created with ``CU_EVENT_DISABLE_TIMING`` and come from a bounded pool per
device: a fence borrows one, records it, makes the waiter wait, and returns it at
once (a wait captures the record it saw, so re-recording later is safe). In steady
state no event is created per fence. Registered :mod:`streamsafe.hooks` observers (sanitize
mode) hear of every fence, record and wait before the driver call, and of every host
synchronisation after it; this module knows nothing of the model. Every driver error becomes a
:class:`~streamsafe.errors.CudaDriverError` naming the call and the CUDA error.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import hooks
from ..errors import BackendUnavailableError, CudaDriverError, StreamValueError
from ..frameworks import framework_current_stream_handle
from .._env import env_choice
from ._held import held_calls, stream_handle
from ._pool import EventPool, EventPoolStats
from ..streams import LEGACY_HANDLE, Stream, StreamKind, stream_from_handle

__all__ = ["CudaBackend", "CudaEvent"]

_driver: Any = None


_SUCCESS: Any = None


def _load_driver() -> Any:
    global _driver, _SUCCESS
    if _driver is None:
        from cuda.bindings import driver

        _driver = driver
        _SUCCESS = driver.CUresult.CUDA_SUCCESS
    return _driver


def _check(result: Any, call: str, hint: str = "") -> Any:
    """Unpack a ``cuda.bindings`` result tuple, raising on any error but success."""
    d = _driver
    err = result[0] if isinstance(result, tuple) else result
    if err != d.CUresult.CUDA_SUCCESS:
        code = int(err)
        name_res = d.cuGetErrorName(err)
        desc_res = d.cuGetErrorString(err)
        name = name_res[1].decode() if name_res[0] == d.CUresult.CUDA_SUCCESS else f"CUresult {code}"
        desc = desc_res[1].decode() if desc_res[0] == d.CUresult.CUDA_SUCCESS else "unknown error"
        raise CudaDriverError(call, code, name, desc, hint)
    if isinstance(result, tuple):
        if len(result) == 1:
            return None
        if len(result) == 2:
            return result[1]
        return result[1:]
    return None


class CudaEvent:
    """A pooled driver event (timing disabled) of one device."""

    __slots__ = ("device", "handle", "handle_int", "__weakref__")

    def __init__(self, device: int, handle: Any) -> None:
        self.device = device
        self.handle = handle
        self.handle_int = int(handle)
        """The handle as an integer (for the calls that keep the GIL)."""

    def __repr__(self) -> str:
        return f"CudaEvent(device={self.device}, handle={int(self.handle):#x})"


@dataclass
class _Device:
    ctx: Any
    ctx_int: int = 0

    def __post_init__(self) -> None:
        self.ctx_int = int(self.ctx)


class CudaBackend:
    """Fences and host waits on the real GPU.

    ``max_free_events`` bounds each device's pool: events returned beyond it are destroyed.
    """

    name = "cuda"
    records_accesses = False
    framework_streams = True
    private_handles = False
    array_type = None
    sanitizing = False
    host_array_fix = ""

    def __init__(self, *, max_free_events: int = 64) -> None:
        reason = self.probe()
        if reason is not None:
            raise BackendUnavailableError(
                "CUDA",
                reason,
                "Install the NVIDIA driver and `cuda-python`, or use streamsafe.sim.SimBackend() (the model) to run without a GPU",
            )
        env_choice("STREAMSAFE_FENCE_CALLS")  # (a value it does not read refused now, before any call issues work)
        self._d = _load_driver()
        self._pool: EventPool[CudaEvent] = EventPool(self._create_event, self._destroy_event, max_free_events)
        self._devices: dict[int, _Device] = {}
        self._lock = threading.RLock()  # (re-entrant: a finalizer gives a pooled stream back at any allocation)
        self._cu_streams: dict[int, Any] = {}
        self._local = threading.local()
        self._stream_pool: dict[tuple[int, bool], list[Stream]] = {}
        self._count = int(_check(self._d.cuDeviceGetCount(), "cuDeviceGetCount"))

    @staticmethod
    def probe() -> str | None:
        """``None`` when the driver loads and has a device; else why not. Does not block."""
        try:
            d = _load_driver()
        except ImportError as e:
            return f"cuda.bindings is not importable ({e})"
        try:
            err = d.cuInit(0)[0]
        except Exception as e:  # the driver library itself is missing
            return f"the NVIDIA driver library could not be loaded ({type(e).__name__}: {e})"
        if err != d.CUresult.CUDA_SUCCESS:
            return f"cuInit failed with {d.cuGetErrorName(err)[1].decode()}"
        err, count = d.cuDeviceGetCount()
        if err != d.CUresult.CUDA_SUCCESS or count == 0:
            return "the driver reports no CUDA device"
        return None

    # -- devices and contexts -------------------------------------------------------------

    def device_count(self) -> int:
        """How many CUDA devices the driver sees. Does not block."""
        return self._count

    def current_device(self) -> int:
        """The device of the current context, else 0. Does not block."""
        ctx = _check(self._d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:
            return 0
        return int(_check(self._d.cuCtxGetDevice(), "cuCtxGetDevice"))

    def _device(self, device: int) -> _Device:
        state = self._devices.get(device)
        if state is None:
            if not 0 <= device < self._count:
                raise StreamValueError(
                    device, f"there are {self._count} CUDA device(s), numbered 0 to {self._count - 1}", "Pick one of them."
                )
            with self._lock:
                state = self._devices.get(device)
                if state is None:
                    dev = _check(self._d.cuDeviceGet(device), "cuDeviceGet")
                    ctx = _check(self._d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                    state = self._devices[device] = _Device(ctx)
        return state

    @contextmanager
    def _in_context(self, device: int) -> Iterator[None]:
        """Make the device's primary context current for the block, if it is not already."""
        if self._context_is_current(device):
            yield
            return
        _check(self._d.cuCtxPushCurrent(self._device(device).ctx), "cuCtxPushCurrent")
        try:
            yield
        finally:
            _check(self._d.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def _cu_stream(self, handle: int) -> Any:
        cu = self._cu_streams.get(handle)
        if cu is None:
            cu = self._cu_streams[handle] = self._d.CUstream(handle)
        return cu

    # -- streams ------------------------------------------------------------------------------

    def stream_info(self, handle: int) -> tuple[int, bool]:
        """``(device, non_blocking)`` read with ``cuStreamGetDevice``/``cuStreamGetFlags``. Does not block."""
        cu = self._cu_stream(handle)
        hint = f"Is {handle:#x} a live CUDA stream pointer?"
        flags = int(_check(self._d.cuStreamGetFlags(cu), "cuStreamGetFlags", hint))
        device = int(_check(self._d.cuStreamGetDevice(cu), "cuStreamGetDevice", hint))
        return device, bool(flags & int(self._d.CUstream_flags.CU_STREAM_NON_BLOCKING))

    def create_stream(self, *, non_blocking: bool = False, device: int | None = None) -> Stream:
        """A new stream owned by the caller (``cuStreamCreate``; blocking unless ``non_blocking``)."""
        dev = self.current_device() if device is None else device
        flags = int(self._d.CUstream_flags.CU_STREAM_NON_BLOCKING) if non_blocking else 0
        with self._in_context(dev):
            handle = _check(self._d.cuStreamCreate(flags), "cuStreamCreate")
        return Stream(dev, int(handle), StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING, self)

    def destroy_stream(self, stream: Stream) -> None:
        """Destroy a stream made by :meth:`create_stream` once its work completes. Does not block.

        Only for streams no framework knows: torch's allocator records events on every stream
        passed to ``record_stream`` when the tensor is freed, long after; use
        :meth:`acquire_stream`/:meth:`release_stream` for those."""
        _check(self._d.cuStreamDestroy(self._cu_stream(stream.handle)), "cuStreamDestroy")
        self._cu_streams.pop(stream.handle, None)

    def hold_stream(self, stream: Stream) -> None:
        """Nothing: a stream a program made is kept alive by its framework's object (which the ledger holds
        where it can), and one made by :meth:`create_stream` by :meth:`destroy_stream` not being called."""
        return None

    def acquire_stream(self, device: int, *, non_blocking: bool = False) -> Stream:
        """A stream from this backend's pool (created when none is free); never destroyed."""
        with self._lock:
            free = self._stream_pool.setdefault((device, non_blocking), [])
            if free:
                return free.pop()
        return self.create_stream(non_blocking=non_blocking, device=device)

    def release_stream(self, stream: Stream) -> None:
        """Return a pooled stream; it stays alive for whoever still records on it."""
        with self._lock:
            self._stream_pool.setdefault((stream.device, stream.kind is StreamKind.NON_BLOCKING), []).append(stream)

    def current_stream(self, device: int | None = None) -> Stream:
        """The current stream of the framework in use (torch, then CuPy), else the legacy stream."""
        dev = self.current_device() if device is None else device
        found = framework_current_stream_handle(dev)
        handle = found[0] if found else LEGACY_HANDLE
        return stream_from_handle(handle, dev, self)

    def _stream_arg(self, stream: Stream) -> Any:
        if stream.kind is StreamKind.LEGACY:
            return self._cu_stream(self._d.CU_STREAM_LEGACY)
        if stream.kind is StreamKind.PER_THREAD:
            return self._cu_stream(self._d.CU_STREAM_PER_THREAD)
        return self._cu_stream(stream.handle)

    # -- events -------------------------------------------------------------------------------

    def _create_event(self, device: int) -> CudaEvent:
        with self._in_context(device):
            flags = int(self._d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
            return CudaEvent(device, _check(self._d.cuEventCreate(flags), "cuEventCreate"))

    def _destroy_event(self, event: CudaEvent) -> None:
        _check(self._d.cuEventDestroy(event.handle), "cuEventDestroy")

    def acquire_event(self, device: int) -> CudaEvent:
        """Borrow an event of ``device`` from the pool (created only when none is free). Does not block."""
        self._device(device)
        return self._pool.acquire(device)

    def release_event(self, event: CudaEvent) -> None:
        """Return a borrowed event; the next borrower may record it again. Does not block."""
        self._pool.release(event.device, event)

    def pool_stats(self, device: int = 0) -> EventPoolStats:
        """A copy of the event pool's counters for ``device``."""
        return self._pool.stats(device)

    def record(self, event: CudaEvent, stream: Stream) -> None:
        """Record ``event`` on ``stream`` (``cuEventRecord``). Does not block the host."""
        if hooks.observers:
            for o in hooks.observers:
                o.on_record(event, stream)
        self._record_raw(event, stream)

    def _record_raw(self, event: CudaEvent, stream: Stream) -> None:
        if (stream.kind is StreamKind.LEGACY or stream.kind is StreamKind.PER_THREAD) and not self._context_is_current(stream.device):
            with self._in_context(stream.device):
                _check(self._d.cuEventRecord(event.handle, self._stream_arg(stream)), "cuEventRecord")
            return
        held = held_calls()
        if held is not None:
            err = held.cuEventRecord(event.handle_int, stream_handle(stream))
            if err:
                _check((self._d.CUresult(err),), "cuEventRecord")
            return
        err = self._d.cuEventRecord(event.handle, self._stream_arg(stream))[0]
        if err != _SUCCESS:
            _check((err,), "cuEventRecord")

    def _context_is_current(self, device: int) -> bool:
        """Whether ``device``'s primary context is current on this thread (one ``cuCtxGetCurrent``, with
        the GIL kept where :func:`~streamsafe.backend._held.held_calls` found the driver's entry points,
        as the bound fence programs ask: an event record on the legacy stream then lets no other thread in)."""
        held = held_calls()
        if held is not None:
            box = ctypes.c_void_p()
            err = held.cuCtxGetCurrent(ctypes.byref(box))
            if err:
                _check((self._d.CUresult(err),), "cuCtxGetCurrent")
            return box.value is not None and box.value == self._device(device).ctx_int
        current = _check(self._d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        return current is not None and int(current) == self._device(device).ctx_int

    def wait(self, stream: Stream, event: CudaEvent) -> None:
        """Make later work on ``stream`` wait for ``event``'s latest record. Does not block the host."""
        if hooks.observers:
            for o in hooks.observers:
                o.on_wait(stream, event)
        self._wait_raw(stream, event)

    def _wait_raw(self, stream: Stream, event: CudaEvent) -> None:
        if (stream.kind is StreamKind.LEGACY or stream.kind is StreamKind.PER_THREAD) and not self._context_is_current(stream.device):
            with self._in_context(stream.device):
                _check(self._d.cuStreamWaitEvent(self._stream_arg(stream), event.handle, 0), "cuStreamWaitEvent")
            return
        held = held_calls()
        if held is not None:
            err = held.cuStreamWaitEvent(stream_handle(stream), event.handle_int, 0)
            if err:
                _check((self._d.CUresult(err),), "cuStreamWaitEvent")
            return
        err = self._d.cuStreamWaitEvent(self._stream_arg(stream), event.handle, 0)[0]
        if err != _SUCCESS:
            _check((err,), "cuStreamWaitEvent")

    def query(self, event: CudaEvent) -> bool:
        """True when the work before ``event``'s latest record is complete. Does not block."""
        err = self._d.cuEventQuery(event.handle)[0]
        if err == self._d.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuEventQuery")
        if hooks.observers:
            for o in hooks.observers:
                o.on_event_complete(event)
        return True

    def synchronize_event(self, event: CudaEvent) -> None:
        """Block the host until ``event``'s latest record has completed."""
        _check(self._d.cuEventSynchronize(event.handle), "cuEventSynchronize")
        if hooks.observers:
            for o in hooks.observers:
                o.on_event_complete(event)

    def synchronize_stream(self, stream: Stream) -> None:
        """Block the host until all work issued to ``stream`` has completed."""
        with self._in_context(stream.device):
            _check(self._d.cuStreamSynchronize(self._stream_arg(stream)), "cuStreamSynchronize")
        if hooks.observers:
            for o in hooks.observers:
                o.on_stream_synchronize(stream)

    def synchronize_device(self, device: int) -> None:
        """Block the host until all work on ``device`` has completed (``cuCtxSynchronize``)."""
        with self._in_context(device):
            _check(self._d.cuCtxSynchronize(), "cuCtxSynchronize")
        if hooks.observers:
            for o in hooks.observers:
                o.on_device_synchronize(device)

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        """Order later work on ``waiter`` after work issued so far on ``signaller``.

        A device-side fence: an event recorded on ``signaller`` and waited on by ``waiter``.
        The wait captures the record, so each thread reuses one event per device from the
        pool for every fence. Does not block the host.
        """
        if hooks.observers:
            for o in hooks.observers:
                o.on_fence(waiter, signaller)
        events = getattr(self._local, "fence_events", None)
        if events is None:
            events = self._local.fence_events = {}
        event = events.get(signaller.device)
        if event is None:
            event = events[signaller.device] = self.acquire_event(signaller.device)
        self._record_raw(event, signaller)  # mirrored once, as a fence, above
        self._wait_raw(waiter, event)

    def bind_fences(self, pairs: list[tuple[Stream, Stream]], owner: Any) -> Callable[[], None]:
        """Bind device-side fences (``waiter`` after ``signaller``, in order) to prebuilt driver calls.

        The program owns its events (from the pool, returned when ``owner`` goes): a signaller is
        recorded once and its event waited on by each later waiter, until the signaller itself
        waits (a later record must then carry that wait). Running it issues one
        ``cuEventRecord`` per distinct record and one ``cuStreamWaitEvent`` per fence, and never
        blocks the host. Legacy and per-thread streams are named in the device's primary context,
        made current for the call when it is not. Not for concurrent use (a contract runs it
        under its effect's thread rule); observers are not told (the caller uses
        :meth:`fence` while any is registered).
        """
        d = self._d
        held = held_calls()
        # with the GIL held (ctypes on the driver's own entry points) when they could be found: a fence
        # is a few microseconds of host work, and releasing the GIL for it lets every other Python
        # thread of a video server cut in before the fence's second call
        record, wait = (held.cuEventRecord, held.cuStreamWaitEvent) if held else (d.cuEventRecord, d.cuStreamWaitEvent)
        stream_arg = stream_handle if held else self._stream_arg
        steps: list[tuple[Any, tuple[Any, ...], str]] = []
        events: list[CudaEvent] = []
        recorded: dict[Stream, CudaEvent] = {}
        contexts: set[int] = set()
        for waiter, signaller in pairs:
            for stream in (waiter, signaller):
                if stream.kind is StreamKind.LEGACY or stream.kind is StreamKind.PER_THREAD:
                    contexts.add(stream.device)
            event = recorded.get(signaller)
            if event is None:
                event = self.acquire_event(signaller.device)
                events.append(event)
                recorded[signaller] = event
                steps.append((record, (event.handle_int if held else event.handle, stream_arg(signaller)), "cuEventRecord"))
            steps.append((wait, (stream_arg(waiter), event.handle_int if held else event.handle, 0), "cuStreamWaitEvent"))
            recorded.pop(waiter, None)
        weakref.finalize(owner, _release_events, self._pool, events)
        program = tuple(steps)

        if held:

            def run() -> None:
                for call, args, name in program:
                    err = call(*args)
                    if err:
                        _check((d.CUresult(err),), name)
        else:

            def run() -> None:
                for call, args, name in program:
                    err = call(*args)[0]
                    if err != _SUCCESS:
                        _check((err,), name)

        if not contexts:
            return run
        if len(contexts) > 1:  # legacy streams of several devices: each fence in its own context

            def run_one_by_one() -> None:
                for waiter, signaller in pairs:
                    self.fence(waiter, signaller)

            return run_one_by_one
        ctx = self._device(contexts.pop()).ctx
        ctx_int = int(ctx)

        def run_pushed() -> None:
            _check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            try:
                run()
            finally:
                _check(d.cuCtxPopCurrent(), "cuCtxPopCurrent")

        if held:
            box = ctypes.c_void_p()  # one per program: a program runs under its effect's thread rule
            ref, get_raw = ctypes.byref(box), held.cuCtxGetCurrent

            def run_in_context() -> None:  # (the context asked for inline: this runs on every steady frame)
                if get_raw(ref) == 0 and box.value == ctx_int:
                    run()
                else:
                    run_pushed()

            return run_in_context
        get_current = d.cuCtxGetCurrent

        def run_in_context_bindings() -> None:
            current = get_current()[1]
            if current is not None and int(current) == ctx_int:
                run()
            else:
                run_pushed()

        return run_in_context_bindings

    def __repr__(self) -> str:
        return f"CudaBackend(devices={self._count})"


def _release_events(pool: EventPool[CudaEvent], events: list[CudaEvent]) -> None:
    for event in events:
        pool.release(event.device, event)

