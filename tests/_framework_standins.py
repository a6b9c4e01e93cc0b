"""Stand-ins for torch's, CuPy's and ``cuda.bindings``' synchronisation calls, for testing sanitize mode's
hooks (:mod:`streamsafe.sim.sync_hooks`) without a GPU: the same names, signatures and return values, each
call logged, no CUDA. Put in ``sys.modules`` with ``monkeypatch``; the streams they name are known to a
:class:`FakeDriver` backend, as the driver knows real ones."""

from __future__ import annotations

import itertools
import types
from types import SimpleNamespace
from typing import Any

from streamsafe.streams import Stream, StreamKind

P, S, C, P1 = 0x1000, 0x2000, 0x3000, 0x4000
"""Stream handles: the producer, the SDK's stream, a consumer (non-blocking, device 0), a stream of device 1."""


class FakeDriver:
    """A backend that names streams as the driver does (device and flags by handle) and makes no ordering call
    (sanitize mode's hooks only name the program's streams with it)."""

    name = "fake-driver"
    records_accesses = False
    private_handles = False
    framework_streams = True
    sanitizing = False

    def __init__(self) -> None:
        self.streams: dict[int, tuple[int, bool]] = {P: (0, True), S: (0, True), C: (0, True), P1: (1, True)}
        self.device = 0

    def stream(self, handle: int) -> Stream:
        """The :class:`Stream` the hooks make of ``handle``."""
        device, non_blocking = self.streams[handle]
        return Stream(device, handle, StreamKind.NON_BLOCKING if non_blocking else StreamKind.BLOCKING, self)

    def stream_info(self, handle: int) -> tuple[int, bool]:
        return self.streams[handle]

    def current_device(self) -> int:
        return self.device

    def _never(self, *args: object) -> None:
        raise AssertionError("sanitize mode's hooks must not order anything through the backend")

    current_stream = record = wait = fence = synchronize_stream = acquire_event = _never


class _Handles:
    """Event handles, as the driver hands them out."""

    def __init__(self) -> None:
        self._next = itertools.count(0xE000, 0x10)

    def __call__(self) -> int:
        return next(self._next)


def make_torch(log: list[str], handles: _Handles | None = None) -> Any:
    """``torch`` with ``torch.cuda``'s streams, events and synchronize, and ``torch.accelerator``."""
    new_handle = handles or _Handles()
    torch: Any = types.ModuleType("torch")
    cuda: Any = types.ModuleType("torch.cuda")
    state = SimpleNamespace(device=0, current=None)

    class Stream:
        def __init__(self, handle: int, device: int = 0) -> None:
            self.cuda_stream = handle
            self.device = SimpleNamespace(type="cuda", index=device)
            self.done = True

        def synchronize(self) -> None:
            log.append(f"torch Stream({self.cuda_stream:#x}).synchronize")

        def query(self) -> bool:
            log.append(f"torch Stream({self.cuda_stream:#x}).query")
            return self.done

        def wait_event(self, event: Any) -> None:
            log.append(f"torch Stream({self.cuda_stream:#x}).wait_event")

        def wait_stream(self, stream: Any) -> None:
            log.append(f"torch Stream({self.cuda_stream:#x}).wait_stream")

    class Event:
        def __init__(self) -> None:
            self.cuda_event = 0  # (made by its first record, as torch's)
            self.done = True

        def record(self, stream: Any = None) -> None:
            if not self.cuda_event:
                self.cuda_event = new_handle()
            log.append("torch Event.record")

        def wait(self, stream: Any = None) -> None:
            log.append("torch Event.wait")

        def synchronize(self) -> None:
            log.append("torch Event.synchronize")

        def query(self) -> bool:
            log.append("torch Event.query")
            return self.done

    Stream.__module__ = Event.__module__ = "torch.cuda.streams"  # (named as torch's own)

    def synchronize(device: Any = None) -> None:
        log.append(f"torch.cuda.synchronize({device!r})")

    def accelerator_synchronize(device: Any = None, /) -> None:
        log.append(f"torch.accelerator.synchronize({device!r})")

    def device(spec: Any) -> Any:
        if not isinstance(spec, str):
            return spec
        index = int(spec.split(":")[1]) if ":" in spec else None
        return SimpleNamespace(type="cuda", index=index)

    cuda.Stream, cuda.Event, cuda.synchronize = Stream, Event, synchronize
    cuda.current_device = lambda: state.device
    cuda.current_stream = lambda device=None: state.current
    cuda.is_available = lambda: False  # (torch's dispatch mode stays off: no torch ops here)
    cuda.is_initialized = lambda: True
    torch.cuda, torch.device, torch.state = cuda, device, state
    torch.accelerator = types.ModuleType("torch.accelerator")
    torch.accelerator.synchronize = accelerator_synchronize
    torch.accelerator.current_accelerator = lambda: SimpleNamespace(type="cuda")
    return torch


class Immutable(type):
    """A class that says ``immutable = True`` in its body refuses ``setattr``, as extension types do (CuPy's
    ``Device``, a Cython ``cdef class``; torch's C base classes); its subclasses do not, unless they say so too."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if cls.__dict__.get("immutable", False):
            raise TypeError(f"cannot set {name!r} attribute of immutable type {cls.__qualname__!r}")
        super().__setattr__(name, value)


def make_cupy(log: list[str], handles: _Handles | None = None) -> Any:
    """``cupy`` with ``cupy.cuda``'s Device, streams, events and ``runtime``; status codes as CuPy's runtime
    returns them (0 success, 600 not ready)."""
    new_handle = handles or _Handles()
    cupy: Any = types.ModuleType("cupy")
    cuda = SimpleNamespace()
    runtime: Any = types.ModuleType("cupy_backends.cuda.api.runtime")
    state = SimpleNamespace(device=0, current=None, status=0)

    class Device(metaclass=Immutable):
        immutable = True

        def __init__(self, device: Any = None) -> None:
            self.id = state.device if device is None else int(device)

        def synchronize(self) -> None:
            log.append(f"cupy Device({self.id}).synchronize")

    class _BaseStream:
        def __init__(self, ptr: int, device_id: int = -1) -> None:
            self.ptr, self.device_id, self._done = ptr, device_id, True

        def synchronize(self) -> None:
            log.append(f"cupy Stream({self.ptr:#x}).synchronize")

        @property
        def done(self) -> bool:
            log.append(f"cupy Stream({self.ptr:#x}).done")
            return self._done

        def record(self, event: Any = None) -> Any:
            event = event if event is not None else Event()
            log.append(f"cupy Stream({self.ptr:#x}).record")
            return event

        def wait_event(self, event: Any) -> None:
            log.append(f"cupy Stream({self.ptr:#x}).wait_event")

    class Stream(_BaseStream):
        pass

    class ExternalStream(_BaseStream):
        pass

    class Event:
        def __init__(self) -> None:
            self.ptr = new_handle()
            self._done = True

        def record(self, stream: Any = None) -> None:
            log.append("cupy Event.record")

        def synchronize(self) -> None:
            log.append("cupy Event.synchronize")

        @property
        def done(self) -> bool:
            log.append("cupy Event.done")
            return self._done

    for cls in (_BaseStream, Stream, ExternalStream, Event):
        cls.__module__ = "cupy.cuda.stream"

    def logged(name: str, result: Any = None) -> Any:
        def call(*args: Any) -> Any:
            log.append(f"cupy runtime.{name}")
            return state.status if result == "status" else result

        call.__name__ = name
        return call

    runtime.getDevice = lambda: state.device
    runtime.deviceSynchronize = logged("deviceSynchronize")
    runtime.streamSynchronize = logged("streamSynchronize")
    runtime.eventSynchronize = logged("eventSynchronize")
    runtime.eventRecord = logged("eventRecord")
    runtime.streamWaitEvent = logged("streamWaitEvent")
    runtime.eventQuery = logged("eventQuery", "status")
    runtime.streamQuery = logged("streamQuery", "status")
    cuda.Device, cuda.Stream, cuda.ExternalStream, cuda.Event, cuda.runtime = Device, Stream, ExternalStream, Event, runtime
    cuda.get_current_stream = lambda: state.current
    cupy.cuda, cupy.state = cuda, state
    return cupy


class CUhandle:
    """A ``cuda.bindings`` handle object (``CUstream``, ``CUevent``): ``int()`` gives the address."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


def make_bindings(log: list[str], which: str, handles: _Handles | None = None) -> Any:
    """``cuda.bindings.driver`` (``which="driver"``) or ``cuda.bindings.runtime``: each call returns its
    result tuple led by the error, 0 on success, or the error set in ``module.fail[name]``."""
    new_handle = handles or _Handles()
    module: Any = types.ModuleType(f"cuda.bindings.{which}")
    module.fail = {}
    module.device = 0
    names = {
        "driver": ["cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuEventRecord", "cuEventRecordWithFlags",
                   "cuStreamWaitEvent", "cuEventQuery", "cuStreamQuery"],
        "runtime": ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaEventRecord",
                    "cudaEventRecordWithFlags", "cudaStreamWaitEvent", "cudaEventQuery", "cudaStreamQuery"],
    }[which]

    def call(name: str) -> Any:
        def driver_call(*args: Any, **kwargs: Any) -> tuple[int]:
            log.append(f"{which} {name}")
            return (module.fail.get(name, 0),)

        driver_call.__name__ = name
        return driver_call

    for name in names:
        setattr(module, name, call(name))
    if which == "driver":
        module.cuCtxGetDevice = lambda: (0, CUhandle(module.device))
        module.cuEventCreate = lambda flags=0: (0, CUhandle(new_handle()))
        module.CUstream = CUhandle
    else:
        module.cudaGetDevice = lambda: (0, module.device)
        module.cudaEventCreate = lambda: (0, CUhandle(new_handle()))
    return module
