"""The model runner: a program on a fresh :class:`~streamsafe.SimBackend` (:func:`run_model`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from typing import Any

import numpy as np

import streamsafe as ss

from .executor import _execute, _make_effect, _World
from .frames import frame_data
from .program import Program
from .results import Result

__all__ = ["run_model"]


class _SimWorld(_World):
    name = "sim"

    def __init__(self, scheduler: str, seed: int | None) -> None:
        self.sim = ss.sim.SimBackend(scheduler=scheduler, seed=seed)
        self._pool: list[tuple[weakref.ref[Any], Any, Any]] = []
        self._surfaces: dict[tuple[Any, ...], Any] = {}
        self._scratch: dict[Any, Any] = {}
        self._native = "stream" in inspect.signature(self.sim.empty).parameters
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def _alloc(self, shape: tuple[int, ...], dtype: Any, name: str, stream: Any) -> Any:
        if self._native:
            return self.sim.empty(shape, dtype, name=name, stream=stream)
        return self.sim.empty(shape, dtype, name=name)

    def stream(self, role: str, kind: str) -> Any:
        if kind == "legacy":
            return self.sim.legacy_stream()
        if kind == "per-thread":
            return self.sim.per_thread_stream()
        return self.sim.create_stream(non_blocking=kind == "non-blocking")

    def sdk_value(self, stream: Any) -> Any:
        return stream

    def ptr(self, stream: Any) -> int:
        return int(stream.ptr)

    def context(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return self.sim.use_stream(stream)

    def make_effect(self, program: Program) -> Any:
        return _make_effect(program, self.sim, 1)

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        data = frame_data(index, h, w, encoding)
        if slot is not None:
            key = (slot, h, w, encoding)
            arr = self._surfaces.get(key)
            if arr is None:
                arr = self._surfaces[key] = self._alloc(data.shape, data.dtype, f"input surface {slot}", stream)
            if delay < 0:
                return arr
            op = "producer.write"
        else:
            # A caching allocator (as torch's and CuPy's): memory of an input nobody references any
            # more goes back to the pool of the stream that allocated it and is handed to the next
            # allocation there at once, with no regard for other streams still reading it.
            if self._native:  # the model's own caching allocator
                arr = self.sim.empty(data.shape, data.dtype, name="input frame", stream=stream)
                op = "producer.reuse" if arr.buffer in self._seen else "producer.write"
                self._seen.add(arr.buffer)
                buffer = arr.buffer
                self.sim.launch(stream, op, functools.partial(np.copyto, buffer.data, data), writes=[buffer])
                return arr
            # An older model without one: the pool keeps its own handle; the program gets an alias of
            # the same memory, free once the program (and anything streamsafe keeps alive) drops it.
            block = None
            for i, (ref, handle, owner) in enumerate(self._pool):
                if ref() is None and owner == stream and handle.shape == data.shape and handle.dtype == data.dtype:
                    del self._pool[i]
                    block = handle
                    break
            op = "producer.reuse" if block is not None else "producer.write"
            if block is None:
                block = self.sim.empty(data.shape, data.dtype, name="input frame")
            arr = self.sim.from_dlpack(block.__dlpack__(stream=-1))
            self._pool.append((weakref.ref(arr), block, stream))
        buffer = arr.buffer  # the pending write must not keep the array object alive

        def write() -> None:
            np.copyto(buffer.data, data)

        self.sim.launch(stream, op, write, writes=[buffer])
        return arr

    def other_work(self, stream: Any, us: float) -> None:
        scratch = self._scratch.get(stream)
        if scratch is None:
            scratch = self._scratch[stream] = self._alloc((4,), np.float32, "consumer scratch", stream)
        self.sim.launch(stream, "consumer.other", None, writes=[scratch])

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        return out.numpy()

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        return self.sim.from_dlpack(out.image, stream=stream)

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        return self.sim.copy(view, stream, name="consumer.copy")

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        self.sim.fence(waiter, signaller)

    def synchronize(self) -> None:
        self.sim.synchronize_device()

    def to_numpy(self, copy: Any) -> np.ndarray:
        if isinstance(copy, np.ndarray):
            return copy
        return self.sim.download(copy)

    def races(self) -> list[Any]:
        return list(self.sim.races)


def run_model(program: Program, strategy: str, *, scheduler: str = "adversarial", seed: int | None = 0) -> Result:
    """Run ``program`` under ``strategy`` on a fresh :class:`~streamsafe.SimBackend`; count corrupted
    frames and the races the model reports. Deterministic for a given scheduler and seed."""
    label = "sim" if scheduler == "adversarial" else f"sim-{scheduler}:{seed}"
    return _execute(program, strategy, _SimWorld(scheduler, seed), label)
