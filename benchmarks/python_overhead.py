"""streamsafe's own Python cost per guarded frame, on any machine: a null effect on a stub backend
whose fences do nothing, so what is left is the contract's, the ledger's and the import's Python.

    python3 benchmarks/python_overhead.py [event|auto] [--general] [-p]     (-p: also a cProfile of 5,000 frames)

Two inputs: a stand-in for a torch CUDA tensor (a minimal ``torch`` module is put in
``sys.modules``; the real one is never imported), which
takes the steady-state replay (:mod:`streamsafe.steady`), and a plain DLPack object with a
declared input stream, which takes the general path every frame.

It leaves out the driver calls (see ``profile_contract.py`` on a GPU for those); use it to compare
two trees' Python overhead side by side on one machine.
"""

from __future__ import annotations

import cProfile
import ctypes
import pstats
import sys
import time
import types
from typing import Any

import streamsafe as ss
from streamsafe.streams import Stream, StreamKind


class StubBackend:
    """The backend protocol with no work behind it: fences and waits are counted, nothing else."""

    name = "stub"

    def __init__(self) -> None:
        self.sdk = Stream(0, 0x1000, StreamKind.NON_BLOCKING, self)  # type: ignore[arg-type]
        self.fences = 0

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def stream_info(self, handle: int) -> tuple[int, bool]:
        return (0, handle != 0x2000)

    def current_stream(self, device: int | None = None) -> Stream:
        return self.sdk

    def acquire_event(self, device: int) -> Any:
        return object()

    def release_event(self, event: Any) -> None:
        pass

    def record(self, event: Any, stream: Stream) -> None:
        pass

    def wait(self, stream: Stream, event: Any) -> None:
        pass

    def query(self, event: Any) -> bool:
        return True

    def synchronize_event(self, event: Any) -> None:
        pass

    def synchronize_stream(self, stream: Stream) -> None:
        pass

    def synchronize_device(self, device: int) -> None:
        pass

    def fence(self, waiter: Stream, signaller: Stream) -> None:
        self.fences += 1

    def bind_fences(self, pairs: list[tuple[Stream, Stream]], owner: Any) -> Any:
        n = len(pairs)

        def run() -> None:  # what CudaBackend binds costs its driver calls only
            self.fences += n

        return run

    def acquire_stream(self, device: int, non_blocking: bool = False) -> Stream:
        return Stream(0, 0x2000, StreamKind.BLOCKING, self)  # type: ignore[arg-type]

    def release_stream(self, stream: Stream) -> None:
        pass


_DATA = (ctypes.c_uint64 * 8)(0xABC000, 0, 0, 0, 0, 0, 0, 0)
_NEW = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))


class _Out:
    __slots__ = ("image",)

    def __init__(self, image: Any) -> None:
        self.image = image


class NullSuperRes:
    """nvvfx.VideoSuperRes's run() signature; returns a fresh plain capsule, does nothing else."""

    device = 0
    image_encoding = "RGB8"

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:
        return _Out(_NEW(ctypes.addressof(_DATA), b"dltensor", None))

    def close(self) -> None:
        pass


class RawNullSuperRes:
    """The same, in a class that is never guarded (it gets no dispatchers): the floor."""

    device = 0
    image_encoding = "RGB8"
    run = NullSuperRes.run  # the plain function, taken before any guard exists


class FakeInput:
    shape = (3, 16, 16)

    def __dlpack__(self, stream: Any = None) -> Any:
        return None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


class FakeTensor:
    """What the contract reads of a torch CUDA tensor: device, shape, data pointer, record_stream."""

    shape = (3, 16, 16)

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return 0xDEF000

    def record_stream(self, stream: Any) -> None:
        pass

    def __dlpack__(self, stream: Any = None) -> Any:
        return None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


FakeTensor.__module__ = "torch"


def _install_fake_torch() -> bool:
    """A minimal ``torch`` module in ``sys.modules`` (current stream 0x1000, tensors :class:`FakeTensor`),
    also where torch is installed (this process never imports the real one); False if it was imported."""
    if "torch" in sys.modules:
        return False
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        current_stream=lambda device=None: types.SimpleNamespace(cuda_stream=0x1000),
        ExternalStream=lambda ptr, device=None: types.SimpleNamespace(cuda_stream=ptr),
        default_stream=lambda device=None: types.SimpleNamespace(cuda_stream=0),
    )
    torch.cuda = cuda  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0x1000, _cuda_getDevice=lambda: 0)  # type: ignore[attr-defined]
    torch.Tensor = FakeTensor  # type: ignore[attr-defined]
    sys.modules["torch"] = torch
    return True


def main() -> None:
    strategy = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "event"
    be = StubBackend()
    fx, raw_fx = NullSuperRes(), RawNullSuperRes()
    if "--general" in sys.argv or not _install_fake_torch():
        x: Any = FakeInput()
        c = ss.StreamContract(fx, be.sdk, strategy=strategy, input_stream=be.sdk, backend=be)  # type: ignore[arg-type]
        path = "general path (a plain DLPack input, declared input stream)"
    else:
        x = FakeTensor()
        c = ss.StreamContract(fx, be.sdk, strategy=strategy, backend=be)  # type: ignore[arg-type]
        path = "steady-state replay (a torch-like input)"

    def frame() -> None:
        c.run(x).image.__dlpack__(stream=0x1000)

    for _ in range(2000):
        frame()
    n = 20000
    start = time.perf_counter()
    for _ in range(n):
        frame()
    per_frame = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        raw_fx.run(x, stream_ptr=0x1000)  # type: ignore[misc]
    raw = (time.perf_counter() - start) / n * 1e6
    print(f"strategy {strategy}, {path}: {per_frame:.2f} us per guarded frame (run + import), raw run {raw:.2f} us, "
          f"streamsafe's Python {per_frame - raw:.2f} us")
    if "-p" in sys.argv:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(5000):
            frame()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
