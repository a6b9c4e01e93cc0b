"""Driver calls that keep the GIL: a handful of CUDA driver entry points called through ``ctypes``.

``cuda.bindings`` releases the GIL around every driver call. For a call that blocks (a host wait)
that is what a program needs; for an enqueue of a microsecond (an event record, a stream wait, a
graph launch) it is a chance for every other Python thread to take the GIL before the next call,
and in a process with several pipeline threads (a video server) each such chance costs a thread
switch: on an H200 host, 8 threads fencing through ``cuda.bindings`` paid 13.7 us per fence, and
2.6 us through these calls (``benchmarks/fence_overhead.py --bindings``).
The entry points come from the driver itself (``cuGetProcAddress`` through ``cuda.bindings``), so
no library is loaded twice. This is streamsafe's one driver path besides ``cuda.bindings``.
Nothing here blocks the host; every call returns the driver's ``CUresult`` as an int.

``STREAMSAFE_FENCE_CALLS=bindings`` makes :func:`held_calls` return ``None`` (callers then use
``cuda.bindings``' own calls): the switch the benchmarks compare.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._env import env_choice
from ..streams import Stream, StreamKind

__all__ = ["HeldCalls", "held_calls", "stream_handle"]

_VP, _I32, _U32, _SIZE, _U64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_uint64

_PROTOTYPES: dict[str, Any] = {
    "cuEventRecord": ctypes.PYFUNCTYPE(_I32, _VP, _VP),  # (event, stream)
    "cuStreamWaitEvent": ctypes.PYFUNCTYPE(_I32, _VP, _VP, _U32),  # (stream, event, flags)
    "cuCtxGetCurrent": ctypes.PYFUNCTYPE(_I32, _VP),  # (CUcontext *)
    "cuGraphLaunch": ctypes.PYFUNCTYPE(_I32, _VP, _VP),  # (graph exec, stream)
    "cuMemcpyDtoDAsync": ctypes.PYFUNCTYPE(_I32, _U64, _U64, _SIZE, _VP),  # (dst, src, bytes, stream)
    # (function, grid x y z, block x y z, shared bytes, stream, kernel params, extra)
    "cuLaunchKernel": ctypes.PYFUNCTYPE(_I32, _VP, _U32, _U32, _U32, _U32, _U32, _U32, _U32, _VP, _VP, _VP),
}


class HeldCalls:
    """The entry points of :data:`_PROTOTYPES`, as ``ctypes`` functions of the same names."""

    __slots__ = ("cuEventRecord", "cuStreamWaitEvent", "cuCtxGetCurrent", "cuGraphLaunch", "cuMemcpyDtoDAsync", "cuLaunchKernel")
    cuEventRecord: Any
    cuStreamWaitEvent: Any
    cuCtxGetCurrent: Any
    cuGraphLaunch: Any
    cuMemcpyDtoDAsync: Any
    cuLaunchKernel: Any

    def __init__(self, **calls: Any) -> None:
        for name in _PROTOTYPES:
            setattr(self, name, calls.get(name))


_HELD: Any = False


def held_calls() -> HeldCalls | None:
    """The driver calls that keep the GIL, found once per process; ``None`` when the driver or
    ``cuda.bindings`` cannot give them, or ``STREAMSAFE_FENCE_CALLS=bindings`` (any case). Another value of it
    raises :class:`~streamsafe.errors.EnvironmentSettingError`."""
    global _HELD
    if _HELD is False:
        bindings = env_choice("STREAMSAFE_FENCE_CALLS") == "bindings"  # (raises for a value it does not read)
        _HELD = None
        if not bindings:
            try:
                from cuda.bindings import driver as d

                flags = d.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
                calls = {}
                for name, proto in _PROTOTYPES.items():
                    found = d.cuGetProcAddress(name.encode(), 12000, flags)  # the ABI of CUDA 12.0 on (the _v2 copies)
                    if found[0] != d.CUresult.CUDA_SUCCESS or not int(found[1]):
                        raise LookupError(name)
                    calls[name] = proto(int(found[1]))
                _HELD = HeldCalls(**calls)
            except Exception:  # no driver, or an older cuda.bindings: its own calls do the same work
                _HELD = None
    return _HELD  # type: ignore[no-any-return]


def stream_handle(stream: Stream) -> int:
    """The driver's handle of ``stream`` as these calls take it: ``CU_STREAM_LEGACY`` (1) for the
    legacy stream, ``CU_STREAM_PER_THREAD`` (2) for the per-thread one, else the stream's pointer."""
    if stream.kind is StreamKind.LEGACY:
        return 1
    if stream.kind is StreamKind.PER_THREAD:
        return 2
    return stream.handle
