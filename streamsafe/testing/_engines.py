"""Two engines, one behaviour: where the emulated effects' stages run.

* :class:`SimEngine`: on a :class:`~streamsafe.sim.SimBackend`, each stage is a
  modelled kernel over NumPy data; the model orders (or fails to order) it.
* :class:`CupyEngine`: on the GPU, each stage is a real CuPy kernel on the real stream.

Both take the input with ``__dlpack__()`` and no stream, run stages on the stream they
are told, make the host wait only when told to, and release buffers with no stream
ordering, exactly like the SDK (see the vendor's documentation).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .. import hooks
from .._dlpack import DLPACK_CUDA, CapsuleTensor, array_key, check_input_device, read_capsule, require_cuda_input
from ..backend._held import held_calls, stream_handle
from ..backend import Backend, current_backend
from ..sim.backend import SimBackend
from ..frameworks import cupy_external_stream
from ..sim.backend import SimArray, another_models_array
from ..sim.memory import model_capsule
from ..streams import LEGACY_HANDLE, Stream, StreamKind
from ..backend.naming import as_stream

__all__ = ["Engine", "SimEngine", "CupyEngine", "CapturedGraph", "TakenInput", "engine_for", "spin_cycles_per_us"]

KernelFn = Callable[[Any, Sequence[Any], Sequence[Any]], None]
"""``fn(xp, reads, writes)``: reads the arrays in ``reads``, writes into ``writes`` in place."""


class Engine(Protocol):
    backend: Backend
    device: int
    xp: Any
    supports_graphs: bool

    def stream(self, stream_ptr: int) -> Stream: ...

    def legacy(self) -> Stream: ...

    def take(self, obj: Any, what: str) -> Any: ...

    def as_array(self, taken: Any) -> Any: ...

    def shape_dtype(self, array: Any) -> tuple[tuple[int, ...], np.dtype[Any]]: ...

    def empty(self, shape: tuple[int, ...], dtype: Any, name: str) -> Any: ...

    def launch(self, stream: Stream, name: str, fn: KernelFn, reads: Sequence[Any], writes: Sequence[Any]) -> None: ...

    def delay(self, stream: Stream, us: float) -> None: ...

    def host_wait(self, stream: Stream) -> None: ...

    def release(self, array: Any, name: str) -> None: ...

    def export(self, array: Any) -> Any: ...


class SimEngine:
    """Stages as modelled kernels on a SimBackend."""

    xp = np
    supports_graphs = False

    def __init__(self, backend: SimBackend, device: int) -> None:
        self.backend = backend
        self.device = device

    def stream(self, stream_ptr: int) -> Stream:
        return as_stream(stream_ptr, device=self.device, backend=self.backend)

    def legacy(self) -> Stream:
        return self.backend.legacy_stream(self.device)

    def take(self, obj: Any, what: str) -> SimArray:
        """The SDK's way in: ``__dlpack__()`` with no stream, imported zero-copy. Raises the input
        errors of :func:`~streamsafe._dlpack.require_cuda_input` (``what`` names the argument)."""
        require_cuda_input(what, obj, self.device)
        if type(obj) is SimArray and obj.backend is not self.backend:
            raise another_models_array(obj, self.backend, what)
        return self.backend.from_dlpack(model_capsule(obj, obj.__dlpack__(), self.backend, what))  # (not a host capsule)

    def as_array(self, taken: SimArray) -> SimArray:
        return taken

    def shape_dtype(self, array: SimArray) -> tuple[tuple[int, ...], np.dtype[Any]]:
        return array.shape, np.dtype(array.dtype)

    def empty(self, shape: tuple[int, ...], dtype: Any, name: str) -> SimArray:
        """The SDK's own memory: outside the program's stream-ordered pools (``cudaMalloc``)."""
        return self.backend.malloc(shape, dtype, device=self.device, name=name)

    def launch(self, stream: Stream, name: str, fn: KernelFn, reads: Sequence[SimArray], writes: Sequence[SimArray]) -> None:
        read_bufs, write_bufs = [a.buffer for a in reads], [a.buffer for a in writes]

        def body() -> None:  # holds the memory, not the arrays: a pending kernel does not keep an input allocated
            with np.errstate(invalid="ignore"):  # racing reads may see the model's NaN poison
                fn(np, [b.data for b in read_bufs], [b.data for b in write_bufs])

        self.backend.launch(stream, name, body, reads=reads, writes=writes)

    def delay(self, stream: Stream, us: float) -> None:
        """No-op: in the model the scheduler, not time, decides what runs first."""

    def host_wait(self, stream: Stream) -> None:
        self.backend.synchronize_stream(stream)

    def release(self, array: SimArray, name: str) -> None:
        self.backend.free(array, name=name)

    def export(self, array: SimArray) -> Any:
        return array.__dlpack__(stream=-1)  # a raw capsule, no synchronisation


_SPIN_SOURCE = r"""
extern "C" __global__ void streamsafe_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class CupyEngine:
    """Stages as real CuPy kernels on the real streams."""

    def __init__(self, backend: Backend, device: int) -> None:
        import cupy

        self.xp = cupy
        self.backend = backend
        self.device = device
        self._cupy = cupy
        self._streams: dict[int, Any] = {}
        self._cu_streams: dict[int, Any] = {}
        self._by_ptr: dict[int, Stream] = {}
        self._copy_launcher: _CopyLauncher | None = None
        self._get_device = cupy.cuda.runtime.getDevice
        with cupy.cuda.Device(device):
            self._spin = _spin_kernel()
            self._release_stream = cupy.cuda.Stream(non_blocking=True)
        self._cycles_per_us = spin_cycles_per_us(device)

    def stream(self, stream_ptr: int) -> Stream:
        return as_stream(stream_ptr, device=self.device, backend=self.backend)

    def legacy(self) -> Stream:
        return as_stream(LEGACY_HANDLE, device=self.device, backend=self.backend)

    def _cupy_stream(self, stream: Stream) -> Any:
        cs = self._streams.get(stream.handle)
        if cs is None:
            cuda = self._cupy.cuda
            if stream.kind is StreamKind.LEGACY:
                cs = cuda.Stream.null
            elif stream.kind is StreamKind.PER_THREAD:
                cs = cuda.Stream.ptds
            else:
                with cuda.Device(self.device):
                    cs = cupy_external_stream(self._cupy, stream)
            self._streams[stream.handle] = cs
        return cs

    def shape_dtype(self, array: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
        if type(array) is TakenInput:
            return array.shape, array.dtype
        return tuple(array.shape), np.dtype(array.dtype)

    def empty(self, shape: tuple[int, ...], dtype: Any, name: str) -> Any:
        """The SDK's own memory: ``cudaMalloc``'d, outside CuPy's stream-ordered pool (which would hand
        the SDK a block the program freed on its current stream with work still pending on it); freed
        with ``cudaFree``, which waits for the device, when the array goes."""
        cupy = self._cupy
        with cupy.cuda.Device(self.device):
            dt = np.dtype(dtype)
            mem = cupy.cuda.memory.Memory(max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize))
            return cupy.ndarray(shape, dtype=dt, memptr=cupy.cuda.memory.MemoryPointer(mem, 0))

    def launch(self, stream: Stream, name: str, fn: KernelFn, reads: Sequence[Any], writes: Sequence[Any]) -> None:
        with self._cupy.cuda.Device(self.device), self._cupy_stream(stream):
            fn(self._cupy, reads, writes)
        if hooks.observers:
            key = array_key
            read_keys, write_keys = [key(a) for a in reads], [key(a) for a in writes]
            for o in hooks.observers:
                o.on_launch(stream, name, read_keys, write_keys, self.device)

    def delay(self, stream: Stream, us: float) -> None:
        """Spin on ``stream`` for ``us`` microseconds (widens race windows). Does not block the host."""
        if us <= 0:
            return
        with self._cupy.cuda.Device(self.device), self._cupy_stream(stream):
            self._spin((1,), (1,), (np.int64(us * self._cycles_per_us),))

    def host_wait(self, stream: Stream) -> None:
        self.backend.synchronize_stream(stream)

    # -- graph mode (the emulated SDK's small host cost) ----------------------------------------

    supports_graphs = True

    def copy_inputs(self, stream: Stream, srcs: Sequence[Any], dsts: Sequence[Any]) -> None:
        """``dsts[i][...] = srcs[i]`` on ``stream``, for each input of a run: one copy kernel launched with
        the GIL held where the driver's entry points were found (as a C++ SDK's ``run()`` enqueues its
        work; a device-to-device ``cuMemcpyAsync`` costs the host several times as much), one launch for
        two inputs; else one device-to-device copy each; a CuPy kernel for an input that is not
        C-contiguous. Does not block the host."""
        flat: list[int] = []  # (src, dst, nbytes) of each input the copy kernel takes
        for src, dst in zip(srcs, dsts):
            if type(src) is TakenInput:
                if src.contiguous and src.nbytes == dst.nbytes and src.dtype == dst.dtype:
                    flat += (src.ptr, dst.data.ptr, src.nbytes)
                    continue
            elif src.flags.c_contiguous and src.nbytes == dst.nbytes and src.dtype == dst.dtype:
                flat += (src.data.ptr, dst.data.ptr, src.nbytes)
                continue
            self.launch(stream, "copy", lambda xp, r, w: w[0].__setitem__(Ellipsis, r[0]), [self.as_array(src)], [dst])
        if not flat:
            return
        launcher = self._copy_launcher
        if launcher is None:
            held = held_calls()
            if held is None:
                for i in range(0, len(flat), 3):
                    self._cupy.cuda.runtime.memcpyAsync(flat[i + 1], flat[i], flat[i + 2], 3, stream.ptr)  # 3: device to device
                return
            launcher = self._copy_launcher = _CopyLauncher(self._cupy, self.device, held.cuLaunchKernel)
        if self._get_device() == self.device:  # (inline: the check costs more as a call of its own)
            err = launcher(flat, stream_handle(stream))
        else:
            with self._cupy.cuda.Device(self.device):
                err = launcher(flat, stream_handle(stream))
        if err:
            raise RuntimeError(f"cuLaunchKernel (the emulator's input copy) failed with CUresult {err}")

    def capture(self, stages: Callable[[Stream], None]) -> CapturedGraph:
        """Run ``stages(stream)`` under CUDA stream capture on a private stream and return the
        instantiated graph, which ends in a record of its own event (the SDK's own work done, at no
        driver call of its own per launch), with the memory its temporaries took, held as long as the
        graph. Blocks the host only for the capture itself (no GPU work runs)."""
        from cuda.bindings import driver as d

        cupy = self._cupy
        keep: list[Any] = []
        pool = cupy.get_default_memory_pool()

        def hold(size: int) -> Any:  # a temporary the graph writes must never go back to the pool
            mem = pool.malloc(size)
            keep.append(mem)
            return mem

        with cupy.cuda.Device(self.device):
            event = _ok(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
            cap = cupy.cuda.Stream(non_blocking=True)
            stream = Stream(self.device, int(cap.ptr), StreamKind.NON_BLOCKING, self.backend)
            self._streams[stream.handle] = cap
            mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            cu = d.CUstream(cap.ptr)
            _ok(d.cuStreamBeginCapture(cu, mode), "cuStreamBeginCapture")
            graph = None
            try:
                try:
                    with cupy.cuda.using_allocator(hold):
                        stages(stream)
                    # an event record node: each launch records the event when its own work is done
                    _ok(d.cuEventRecordWithFlags(event, cu, int(d.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)), "cuEventRecordWithFlags")
                finally:
                    err, graph = d.cuStreamEndCapture(cu)
                _ok((err,), "cuStreamEndCapture")
                exe = _ok(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            except BaseException:  # nothing was captured: the event and a captured graph go now
                if graph is not None and int(graph):
                    d.cuGraphDestroy(graph)
                d.cuEventDestroy(event)
                raise
            finally:
                self._streams.pop(stream.handle, None)
        return CapturedGraph(exe, graph, event, keep, cap)

    def launch_graph(self, graph: CapturedGraph, stream: Stream) -> None:
        """Launch a captured graph on ``stream`` (one driver call, with the GIL held where the driver's
        entry points were found). Does not block the host."""
        held = held_calls()
        if held is not None:
            if self._get_device() == self.device:
                err = held.cuGraphLaunch(graph.handle, stream_handle(stream))
            else:
                with self._cupy.cuda.Device(self.device):
                    err = held.cuGraphLaunch(graph.handle, stream_handle(stream))
            if err:
                raise RuntimeError(f"cuGraphLaunch failed with CUresult {err}")
            return
        from cuda.bindings import driver as d

        cu = self._cu_streams.get(stream.handle)
        if cu is None:
            cu = self._cu_streams[stream.handle] = d.CUstream(stream_handle(stream))
        _ok(self._on_device(d.cuGraphLaunch, graph.exe, cu), "cuGraphLaunch")

    def stream_cached(self, stream_ptr: int) -> Stream:
        """:meth:`stream`, remembered by pointer (graph mode: no driver query per run; the bench's
        streams live as long as its effects)."""
        stream = self._by_ptr.get(stream_ptr)
        if stream is None:
            stream = self._by_ptr[stream_ptr] = self.stream(stream_ptr)
        return stream

    def take(self, obj: Any, what: str) -> Any:
        """The SDK's way in: ``__dlpack__()`` with no stream, on the effect's device. The capsule is
        read in place (a :class:`TakenInput`: address, shape, dtype), and imported into CuPy, zero-copy,
        only when a stage runs eagerly. Raises the input errors of
        :func:`~streamsafe._dlpack.require_cuda_input` (``what`` names the argument). Does not block."""
        export: Any = getattr(obj, "__dlpack__", None)
        if export is None or not hasattr(obj, "__dlpack_device__"):
            require_cuda_input(what, obj, self.device)  # raises: not a DLPack producer
        try:
            if self._get_device() == self.device:
                capsule = export()
            else:
                with self._cupy.cuda.Device(self.device):
                    capsule = export()
        except Exception:
            require_cuda_input(what, obj, self.device)  # a host array, or another device's: the same error as ever
            raise
        tensor = read_capsule(capsule)
        if tensor is None:  # a capsule that cannot be read in place: CuPy imports it now (or refuses it)
            require_cuda_input(what, obj, self.device)
            return self._on_device(self._import, capsule)
        if tensor[1] != DLPACK_CUDA or tensor[2] != self.device:  # (device_type, device_id)
            require_cuda_input(what, obj, self.device)
            check_input_device(what, obj, tensor.device_type, tensor.device_id, self.device)
        layout = _LAYOUTS.get(tensor[3:])  # (shape, strides, code, bits, lanes)
        if layout is None:
            layout = _layout(tensor)
        if layout[0] is None:  # a dtype NumPy lacks: CuPy imports it now
            return self._on_device(self._import, capsule)
        return TakenInput(capsule, tensor[0], tensor[3], layout)

    def as_array(self, taken: Any) -> Any:
        """The CuPy array of an input :meth:`take` gave (imported once, zero-copy)."""
        if type(taken) is not TakenInput:
            return taken
        if taken.array is None:
            taken.array = self._on_device(self._import, taken.capsule)
        return taken.array

    def _on_device(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` with the effect's device current (it usually is: no context switch then)."""
        if self._get_device() == self.device:
            return call(*args)
        with self._cupy.cuda.Device(self.device):
            return call(*args)

    def _import(self, capsule: Any) -> Any:
        try:
            return self._cupy.from_dlpack(capsule)
        except TypeError:  # older CuPy
            return self._cupy.fromDlpack(capsule)

    def release(self, array: Any, name: str) -> None:
        """Poison the buffer from an unrelated stream, with no ordering, then drop it (like a free)."""
        with self._cupy.cuda.Device(self.device), self._release_stream:
            array.view(self._cupy.uint8).fill(0xDE)
        if hooks.observers:
            released = array_key(array)
            for o in hooks.observers:
                o.on_host_write(released, name, self.device)

    def export(self, array: Any) -> Any:
        """A raw (unversioned) capsule, with no stream synchronisation, like the SDK's."""
        try:
            return array.__dlpack__(stream=-1)
        except TypeError:  # older CuPy
            return array.toDlpack()


class CapturedGraph:
    """An instantiated CUDA graph of the emulated SDK's stages (:meth:`CupyEngine.capture`), ending in a
    record of its own ``event``. The graph, its executable and the event are destroyed when this object
    goes; the driver frees them once launches still in flight complete."""

    __slots__ = ("exe", "graph", "event", "keep", "stream", "handle")

    def __init__(self, exe: Any, graph: Any, event: Any, keep: list[Any], stream: Any) -> None:
        self.exe, self.graph, self.event, self.keep, self.stream = exe, graph, event, keep, stream
        self.handle = int(exe)
        """The executable's handle, as ``cuGraphLaunch`` takes it."""

    def wait(self) -> None:
        """Block the host until this graph's latest launch is done (its last node records ``event``),
        not for anyone else's work. Orders nothing on the device."""
        from cuda.bindings import driver as d

        _ok(d.cuEventSynchronize(self.event), "cuEventSynchronize")

    def __del__(self) -> None:
        try:
            from cuda.bindings import driver as d

            d.cuGraphExecDestroy(self.exe)
            d.cuGraphDestroy(self.graph)
            d.cuEventDestroy(self.event)
        except Exception:  # (at interpreter exit the driver's bindings may be gone: the process frees them)
            pass


class TakenInput:
    """An input the emulated SDK took with ``__dlpack__()``, read from its capsule in place: what graph
    mode needs (address, shape, dtype). The capsule keeps the producer's memory alive; an eager stage
    imports it into CuPy (:meth:`CupyEngine.as_array`)."""

    __slots__ = ("capsule", "ptr", "shape", "dtype", "nbytes", "contiguous", "array")

    def __init__(self, capsule: Any, ptr: int, shape: tuple[int, ...], layout: tuple[Any, int, bool]) -> None:
        self.capsule = capsule
        self.ptr = ptr
        self.shape = shape
        self.dtype, self.nbytes, self.contiguous = layout
        self.array: Any = None


_DL_KINDS = {0: ("i", (8, 16, 32, 64)), 1: ("u", (8, 16, 32, 64)), 2: ("f", (16, 32, 64)), 6: ("b", (8,))}
"""DLPack type codes NumPy shares, with the widths it has for each (its float128 is not IEEE's)."""


def _numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype[Any] | None:
    """The NumPy dtype of a DLPack ``(code, bits, lanes)``; ``None`` for one NumPy lacks (bfloat16, an
    8-bit float, complex, vectors: CuPy's own import decides about those)."""
    kind = _DL_KINDS.get(code)
    if kind is None or lanes != 1 or bits not in kind[1]:
        return None
    return np.dtype(f"{kind[0]}{bits // 8}")


_LAYOUTS: dict[tuple[Any, ...], tuple[Any, int, bool]] = {}
"""``(dtype or None, nbytes, C-contiguous)`` of an input by its capsule's ``(shape, strides, code, bits,
lanes)``, remembered (a video's frames repeat their layout)."""


def _layout(tensor: CapsuleTensor) -> tuple[Any, int, bool]:
    """``(NumPy dtype or None, nbytes, C-contiguous)`` of an input's capsule, remembered in ``_LAYOUTS``."""
    if len(_LAYOUTS) > 256:
        _LAYOUTS.clear()
    dtype = _numpy_dtype(tensor.code, tensor.bits, tensor.lanes)
    count = 1
    for n in tensor.shape:
        count *= n
    found = _LAYOUTS[tensor[3:]] = (dtype, count * dtype.itemsize if dtype is not None else 0, _c_contiguous(tensor.shape, tensor.strides))
    return found


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    """Whether DLPack ``strides`` (in elements; ``None``: compact) lay ``shape`` out row-major without gaps."""
    if strides is None or 0 in shape:
        return True
    expected = 1
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


_COPY_SOURCE = r"""
__device__ void streamsafe_copy_bytes(const unsigned char* src, unsigned char* dst, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    if ((((unsigned long long)src | (unsigned long long)dst | n) & 15ull) == 0) {
        const uint4* s = (const uint4*)src;
        uint4* d = (uint4*)dst;
        for (unsigned long long k = i, m = n >> 4; k < m; k += step) d[k] = s[k];
    } else {
        for (unsigned long long k = i; k < n; k += step) dst[k] = src[k];
    }
}

extern "C" __global__ void streamsafe_copy(const unsigned char* src, unsigned char* dst, unsigned long long n) {
    streamsafe_copy_bytes(src, dst, n);
}

extern "C" __global__ void streamsafe_copy2(const unsigned char* src0, unsigned char* dst0, unsigned long long n0,
                                            const unsigned char* src1, unsigned char* dst1, unsigned long long n1) {
    if (blockIdx.y == 0) streamsafe_copy_bytes(src0, dst0, n0);
    else streamsafe_copy_bytes(src1, dst1, n1);
}
"""


class _CopyLauncher:
    """The inputs' copy kernels launched with ``cuLaunchKernel``: one input with ``streamsafe_copy``, two
    with ``streamsafe_copy2`` (one grid row each), through ``ctypes`` with prebuilt argument slots (the
    driver copies the arguments at the call, so the slots are free again when it returns)."""

    def __init__(self, cupy: Any, device: int, launch: Any) -> None:
        with cupy.cuda.Device(device):
            one, two = cupy.RawKernel(_COPY_SOURCE, "streamsafe_copy"), cupy.RawKernel(_COPY_SOURCE, "streamsafe_copy2")
            self._functions = (int(one.kernel.ptr), int(two.kernel.ptr))
        self._keep = (one, two)
        self._c_functions = (ctypes.c_void_p(self._functions[0]), ctypes.c_void_p(self._functions[1]))
        self._launch_kernel = launch
        self._args = (ctypes.c_uint64 * 6)()
        base = ctypes.addressof(self._args)
        self._params = (ctypes.c_void_p * 6)(*(base + 8 * i for i in range(6)))
        self._one, self._two, self._threads, self._shared = ctypes.c_uint(1), ctypes.c_uint(2), ctypes.c_uint(256), ctypes.c_uint(0)
        self._blocks: dict[int, int] = {}
        """The grid's width for a copy of ``nbytes`` (16-byte words a thread; the kernel's grid-stride
        loops cover any size and alignment with any width)."""

    def _width(self, nbytes: int) -> int:
        blocks = self._blocks.get(nbytes)
        if blocks is None:
            blocks = self._blocks[nbytes] = max(1, min(((nbytes >> 4) + 255) // 256, 2048))
        return blocks

    def __call__(self, flat: Sequence[int], stream: int) -> int:
        """Copy each ``(src, dst, nbytes)`` of ``flat`` (three ints per input) on ``stream``, two inputs a
        launch; the first failing launch's CUresult, else 0."""
        if len(flat) <= 6:  # (the usual one or two inputs: one launch, no slicing)
            return self._launch(flat, stream)
        for at in range(0, len(flat), 6):
            err = self._launch(flat[at:at + 6], stream)
            if err:
                return err
        return 0

    def _launch(self, pair: Sequence[int], stream: int) -> int:
        """One launch: ``pair`` holds one input's three ints, or two inputs' six."""
        two = len(pair) == 6
        blocks = max(self._width(pair[2]), self._width(pair[5])) if two else self._width(pair[2])
        args = self._args
        for i, value in enumerate(pair):
            args[i] = value
        one = self._one
        return int(self._launch_kernel(self._c_functions[two], ctypes.c_uint(blocks), self._two if two else one, one, self._threads,
                                       one, one, self._shared, stream, self._params, None))


def _ok(result: Any, call: str) -> Any:
    """A ``cuda.bindings`` result: its value, or a RuntimeError naming the call and the error."""
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{call} failed: {err!r}")
    return result[1] if len(result) > 1 else None


_CYCLES: dict[int, float] = {}


def _spin_kernel() -> Any:
    import cupy

    return cupy.RawKernel(_SPIN_SOURCE, "streamsafe_spin")


def spin_cycles_per_us(device: int = 0) -> float:
    """SM clock cycles per microsecond, measured once per device by timing a spin kernel.

    (CUDA 13 dropped ``cudaDeviceProp.clockRate``, so the clock is measured, not read.)
    Blocks the host for about a millisecond the first time.
    """
    if device not in _CYCLES:
        import cupy

        with cupy.cuda.Device(device):
            spin = _spin_kernel()
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                spin((1,), (1,), (np.int64(2_000_000),))  # warm up: clocks rise under load
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                spin((1,), (1,), (np.int64(4_000_000),))
                end.record(stream)
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end)
        _CYCLES[device] = 4_000_000 / (ms * 1000.0) if ms > 0 else 1980.0
    return _CYCLES[device]


def engine_for(backend: Backend | None, device: int) -> Engine:
    """The engine for ``backend`` (default: the current one)."""
    be = backend if backend is not None else current_backend()
    engine: Any = SimEngine(be, device) if isinstance(be, SimBackend) else CupyEngine(be, device)
    return engine  # type: ignore[no-any-return]
