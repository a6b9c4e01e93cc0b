"""Labs: drive a producer → effect → consumer pipeline on chosen streams, on the model or a GPU.

A lab makes streams of a given kind, produces input frames on a producer stream,
imports and copies outputs on a consumer stream, and reads the copies back for
checking. :class:`SimLab` runs on a :class:`~streamsafe.sim.SimBackend` (and can report
races); :class:`GpuLab` runs real kernels with torch (producer and consumer) and the
CuPy engine (effects). Operation names follow one convention so races can be mapped
to hazards: ``producer.write``, ``producer.reuse``, ``consumer.copy``, and the
effects' ``<Effect>.transfer|inference|conversion|release``.
"""

from __future__ import annotations

from typing import Any, Protocol

import weakref

import numpy as np

from .. import hooks
from ..backend import Backend
from ..sim.backend import SimBackend
from ..sim.races import Race
from ..streams import Stream
from ..backend.naming import as_stream

__all__ = ["Lab", "SimLab", "GpuLab", "STREAM_KINDS"]

STREAM_KINDS = ("legacy", "per-thread", "blocking", "non-blocking")


class Lab(Protocol):
    name: str
    device: int

    @property
    def backend(self) -> Backend: ...

    def stream(self, kind: str) -> Stream: ...

    def produce(self, data: np.ndarray, stream: Stream, *, delay_us: float = 0.0, recycle: bool = False) -> Any: ...

    def consume(self, image: Any, stream: Stream, *, delay_us: float = 0.0) -> Any: ...

    def fence(self, waiter: Stream, signaller: Stream) -> None: ...

    def host_wait(self, stream: Stream) -> None: ...

    def synchronize(self) -> None: ...

    def read(self, copy: Any) -> np.ndarray: ...

    def races(self) -> list[Race]: ...


class SimLab:
    """A lab on the model: every race is reported, and the adversarial scheduler makes it visible."""

    name = "sim"

    def __init__(self, backend: SimBackend | None = None, *, device: int = 0) -> None:
        self.device = device
        self.backend: SimBackend = backend if backend is not None else SimBackend(scheduler="adversarial", devices=device + 1)
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._keep: list[Any] = []

    def stream(self, kind: str) -> Stream:
        if kind == "legacy":
            return self.backend.legacy_stream(self.device)
        if kind == "per-thread":
            return self.backend.per_thread_stream(self.device)
        if kind in ("blocking", "non-blocking"):
            return self.backend.create_stream(non_blocking=kind == "non-blocking", device=self.device)
        raise ValueError(f"unknown stream kind {kind!r}: one of {', '.join(STREAM_KINDS)}")

    def produce(self, data: np.ndarray, stream: Stream, *, delay_us: float = 0.0, recycle: bool = False) -> Any:
        """Write a new input frame on ``stream``, in memory from the model's caching allocator.

        ``recycle=True``: the lab keeps no reference, so once the caller drops the frame the
        allocator hands its memory to the next frame on this stream (H12), with no regard for
        other streams that may still read it; else the lab keeps every frame alive.
        """
        arr = self.backend.empty(data.shape, data.dtype, stream=stream, name="input frame")
        buffer = arr.buffer  # the pending write must not keep the array object alive
        op = "producer.reuse" if buffer in self._seen else "producer.write"
        self._seen.add(buffer)
        if not recycle:
            self._keep.append(arr)
        self.backend.launch(stream, op, lambda: np.copyto(buffer.data, data), writes=[buffer])
        return arr

    def consume(self, image: Any, stream: Stream, *, delay_us: float = 0.0) -> Any:
        view = self.backend.from_dlpack(image, stream=stream)
        return self.backend.copy(view, stream, name="consumer.copy")

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        self.backend.fence(waiter, signaller)

    def host_wait(self, stream: Stream) -> None:
        self.backend.synchronize_stream(stream)

    def synchronize(self) -> None:
        self.backend.synchronize_device(self.device)

    def read(self, copy: Any) -> np.ndarray:
        return self.backend.download(copy)

    def races(self) -> list[Race]:
        return list(self.backend.races)


class GpuLab:
    """A lab on the GPU: torch produces and consumes, CuPy runs the effects' stages."""

    name = "cuda"

    def __init__(self, device: int = 0) -> None:
        import cupy
        import torch

        from ..backend.cuda import CudaBackend

        self._torch = torch
        self._cupy = cupy
        self.device = device
        self.backend: Backend = CudaBackend()
        torch.cuda.init()
        self._keep: list[Any] = []
        self._recycled: set[int] = set()
        self._torch_streams: dict[int, Any] = {}
        self._upload = torch.cuda.Stream(device)
        from ._engines import spin_cycles_per_us

        self._cycles_per_us = spin_cycles_per_us(device)

    def stream(self, kind: str) -> Stream:
        torch = self._torch
        with torch.cuda.device(self.device):
            if kind == "legacy":
                ts = torch.cuda.default_stream(self.device)
            elif kind == "non-blocking":
                ts = torch.cuda.Stream(self.device)
            elif kind == "blocking":
                cs = self._cupy.cuda.Stream(non_blocking=False)
                self._keep.append(cs)
                ts = torch.cuda.ExternalStream(cs.ptr, device=self.device)
            elif kind == "per-thread":
                ts = torch.cuda.ExternalStream(2, device=self.device)
            else:
                raise ValueError(f"unknown stream kind {kind!r}: one of {', '.join(STREAM_KINDS)}")
        self._keep.append(ts)
        stream = as_stream(ts, backend=self.backend)
        self._torch_streams[stream.handle] = ts
        return stream

    def torch_stream(self, stream: Stream) -> Any:
        return self._torch_streams[stream.handle]

    def _spin(self, us: float) -> None:
        if us > 0:
            self._torch.cuda._sleep(int(us * self._cycles_per_us))

    def produce(self, data: np.ndarray, stream: Stream, *, delay_us: float = 0.0, recycle: bool = False) -> Any:
        """Write a new input frame on ``stream`` with torch. Its memory comes from torch's caching
        allocator: with ``recycle=True`` the lab keeps no reference, so once the caller drops the
        frame, the next frame on this stream gets the same memory (H12)."""
        torch = self._torch
        host = np.ascontiguousarray(data)
        if host.dtype == np.uint32:  # upload the bits; torch's uint32 support is partial
            host = host.view(np.int32)
        with torch.cuda.stream(self._upload):  # its own stream: waiting for it orders nothing else
            src = torch.from_numpy(host).to(f"cuda:{self.device}")
            if data.dtype == np.uint32:
                src = src.view(torch.uint32)
        self._upload.synchronize()
        self._keep.append(src)  # kept: the copy on the producer stream below reads it later (no record_stream)
        with torch.cuda.stream(self.torch_stream(stream)):
            dst = torch.empty_like(src)
            self._spin(delay_us)
            dst.copy_(src)
        if hooks.observers:  # the lab's own kernels, for sanitize mode (the model sees the same accesses)
            ptr = dst.data_ptr()
            name = "producer.reuse" if recycle and ptr in self._recycled else "producer.write"
            if recycle:
                self._recycled.add(ptr)
            for o in hooks.observers:
                o.on_launch(stream, name, [], [ptr], self.device)
        if not recycle:
            self._keep.append(dst)
        return dst

    def consume(self, image: Any, stream: Stream, *, delay_us: float = 0.0) -> Any:
        torch = self._torch
        key = None
        if hooks.observers:
            from .._dlpack import capsule_data_key

            key = capsule_data_key(getattr(image, "_capsule", image))
        with torch.cuda.stream(self.torch_stream(stream)):
            self._spin(delay_us)
            copy = torch.from_dlpack(image).clone()
        if key is not None:
            for o in hooks.observers:
                o.on_launch(stream, "consumer.copy", [key], [], self.device)
        return copy

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        self.backend.fence(waiter, signaller)

    def host_wait(self, stream: Stream) -> None:
        self.backend.synchronize_stream(stream)

    def synchronize(self) -> None:
        self.backend.synchronize_device(self.device)  # through the backend: sanitize mode sees it

    def read(self, copy: Any) -> np.ndarray:
        return copy.cpu().numpy()

    def races(self) -> list[Race]:
        return []
