"""The GPU runner: a program on real kernels, with torch, CuPy, JAX and NumPy around them (:class:`GpuRunner`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import streamsafe as ss
from streamsafe.frameworks import cupy_external_stream

from .executor import _execute, _make_effect, _World
from .frames import frame_data
from .program import BANK, Program
from .results import Result

__all__ = ["GpuRunner"]

_SPIN_SOURCE = r"""
extern "C" __global__ void streamsafe_fuzz_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


@dataclass
class _GpuStream:
    kind: str
    torch: Any
    cupy: Any
    ss: Any
    ptr: int


class GpuRunner:
    """Runs programs on a GPU: torch and CuPy produce inputs from their allocators, the emulated
    effects run real CuPy kernels, consumers are torch, CuPy, JAX (``out.jax()`` or the vendor's
    documented recipe) and NumPy; random spin delays on P, the SDK stages, the conversion and C.

    ``scale`` multiplies the programs' sizes (4: 64x64 inputs). ``max_delay_us`` bounds the
    per-stage delays, ``late_us`` the other work a late consumer enqueues on C. Copies are checked
    every ``check_every`` frames (a device synchronisation) and at the end of each program.
    ``producers`` limits which frameworks write inputs (torch, CuPy).
    """

    def __init__(
        self,
        device: int = 0,
        *,
        scale: int = 4,
        max_delay_us: float = 200.0,
        late_us: float = 500.0,
        check_every: int = 25,
        producers: Sequence[str] = ("torch", "cupy"),
    ) -> None:
        import cupy
        import torch

        from streamsafe.testing._engines import spin_cycles_per_us

        self.torch, self.cupy = torch, cupy
        self.device = device
        self.scale = scale
        self.max_delay_us = max_delay_us
        self.late_us = late_us
        self.check_every = check_every
        self.producers = tuple(producers)
        """The frameworks allowed to write inputs; a program drawing another uses the first of these."""
        self.backend = ss.CudaBackend()
        torch.cuda.init()
        torch.cuda.set_device(device)
        self.cycles_per_us = spin_cycles_per_us(device)
        with cupy.cuda.Device(device):
            self._spin_kernel = cupy.RawKernel(_SPIN_SOURCE, "streamsafe_fuzz_spin")
        self._pools: dict[str, list[_GpuStream]] = {}
        self._singletons: dict[str, _GpuStream] = {}
        self._upload = torch.cuda.Stream(device)
        self._bank: dict[tuple[str, int, int, str], list[Any]] = {}
        self._jax: Any = None
        self.torch_uint32 = self._probe_torch_uint32()

    def _probe_torch_uint32(self) -> bool:
        """Whether torch can hand a uint32 tensor to the SDK by DLPack (else CuPy writes RGB10A2 inputs)."""
        torch, cupy = self.torch, self.cupy
        try:
            t = torch.zeros(4, dtype=torch.int32, device=f"cuda:{self.device}").view(torch.uint32)
            with cupy.cuda.Device(self.device):
                ok = cupy.from_dlpack(t).dtype == np.uint32
                back = torch.from_dlpack(cupy.zeros(4, dtype=np.uint32)).clone()
            ok = ok and back.dtype == torch.uint32
            torch.cuda.synchronize(self.device)
            return bool(ok)
        except Exception:
            return False

    def jax(self) -> Any:
        if self._jax is None:
            import jax
            import jax.numpy as jnp

            self._jax = (jax, jnp)
        return self._jax

    # streams: one pool per kind, a distinct stream per role; shared by all programs
    def stream(self, role: str, kind: str) -> _GpuStream:
        torch, cupy = self.torch, self.cupy
        if kind in ("legacy", "per-thread"):
            s = self._singletons.get(kind)
            if s is None:
                with torch.cuda.device(self.device), cupy.cuda.Device(self.device):
                    if kind == "legacy":
                        ts, cs = torch.cuda.default_stream(self.device), cupy.cuda.Stream.null
                    else:
                        ts, cs = torch.cuda.ExternalStream(2, device=self.device), cupy.cuda.Stream.ptds
                s = self._singletons[kind] = _GpuStream(kind, ts, cs, ss.as_stream(ts, backend=self.backend), int(ts.cuda_stream))
            return s
        pool = self._pools.setdefault(kind, [])
        roles = ("S", "P", "C", "C2", "S2")
        i = roles.index(role)
        while len(pool) <= i:
            with torch.cuda.device(self.device), cupy.cuda.Device(self.device):
                if kind == "non-blocking":
                    ts = torch.cuda.Stream(self.device)
                    cs = cupy_external_stream(cupy, ss.as_stream(ts, backend=self.backend))  # (the device is current)
                else:
                    cs = cupy.cuda.Stream(non_blocking=False)
                    ts = torch.cuda.ExternalStream(int(cs.ptr), device=self.device)
            pool.append(_GpuStream(kind, ts, cs, ss.as_stream(ts, backend=self.backend), int(ts.cuda_stream)))
        return pool[i]

    def bank(self, framework: str, encoding: str, h: int, w: int) -> list[Any]:
        """``BANK`` device copies of the input frames of this size, written once (never again)."""
        key = (framework, h, w, encoding)
        frames = self._bank.get(key)
        if frames is None:
            torch, cupy = self.torch, self.cupy
            frames = []
            for i in range(BANK):
                host = frame_data(i, h, w, encoding)
                if framework == "torch":
                    with torch.cuda.stream(self._upload):
                        src = torch.from_numpy(np.array(host.view(np.int32) if encoding == "RGB10A2" else host))
                        frames.append(src.to(f"cuda:{self.device}"))
                else:
                    with cupy.cuda.Device(self.device):
                        frames.append(cupy.asarray(host))
            self._upload.synchronize()
            cupy.cuda.runtime.deviceSynchronize()
            self._bank[key] = frames
        return frames

    def spin(self, stream: _GpuStream, us: float) -> None:
        if us <= 0:
            return
        with self.cupy.cuda.Device(self.device), stream.cupy:
            self._spin_kernel((1,), (1,), (np.int64(us * self.cycles_per_us),))

    def run(self, program: Program, strategy: str) -> Result:
        """Run ``program`` under ``strategy`` once on the GPU."""
        world = _GpuWorld(self, program)
        return _execute(program, strategy, world, "cuda", self.max_delay_us, self.late_us)


class _GpuWorld(_World):
    name = "cuda"
    exact = False

    def __init__(self, runner: GpuRunner, program: Program) -> None:
        self.r = runner
        self.scale = runner.scale
        self.check_every = runner.check_every
        self.program = program
        fw = program.producer_framework
        self.producer_framework = fw if fw in runner.producers else runner.producers[0]
        self._surfaces: dict[tuple[Any, ...], Any] = {}
        self._dev = f"cuda:{runner.device}"
        self._rgb10a2 = program.effect in ("truehdr", "vsr-rgb10a2") or any(
            s.state.encoding == "RGB10A2" for s in program.steps
        )

    def stream(self, role: str, kind: str) -> Any:
        return self.r.stream(role, kind)

    def sdk_value(self, stream: Any) -> Any:
        return stream.torch

    def ptr(self, stream: Any) -> int:
        return int(stream.ptr)

    @contextlib.contextmanager
    def context(self, stream: Any) -> Iterator[None]:
        with self.r.torch.cuda.stream(stream.torch), stream.cupy:
            yield

    def make_effect(self, program: Program) -> Any:
        return _make_effect(program, self.r.backend, self.scale)

    def set_delays(self, effect: Any, delays: dict[str, float]) -> None:
        effect.latency_us = delays

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        fw = self.producer_framework
        if encoding == "RGB10A2" and not self.r.torch_uint32:
            fw = "cupy"
        key = (slot, h, w, encoding, fw)
        torch, cupy = self.r.torch, self.r.cupy
        if slot is not None and delay < 0:  # the surface as it is: no write
            arr = self._surfaces[key]
            return arr.view(torch.uint32) if fw == "torch" and encoding == "RGB10A2" else arr
        src = self.r.bank(fw, encoding, h, w)[index % BANK]
        if fw == "torch":
            with torch.cuda.stream(stream.torch):
                self.r.spin(stream, delay)
                if slot is None:  # from torch's caching allocator, on P
                    dst = torch.empty(src.shape, dtype=src.dtype, device=self._dev)
                else:
                    dst = self._surfaces.get(key)
                    if dst is None:
                        dst = self._surfaces[key] = torch.empty(src.shape, dtype=src.dtype, device=self._dev)
                dst.copy_(src)
            if encoding == "RGB10A2":  # written as int32 bits; the SDK takes uint32
                return dst.view(torch.uint32)
            return dst
        with cupy.cuda.Device(self.r.device), stream.cupy:  # from CuPy's pool, on P
            self.r.spin(stream, delay)
            if slot is None:
                arr = cupy.empty(src.shape, dtype=src.dtype)
            else:
                arr = self._surfaces.get(key)
                if arr is None:
                    arr = self._surfaces[key] = cupy.empty(src.shape, dtype=src.dtype)
            cupy.copyto(arr, src)
        return arr

    def spin(self, stream: Any, us: float) -> None:
        self.r.spin(stream, us)

    def other_work(self, stream: Any, us: float) -> None:
        self.r.spin(stream, max(us, 1.0))

    def _fw(self, framework: str) -> str:
        """torch without uint32 DLPack support cannot take RGB10A2 outputs: CuPy copies them instead."""
        if framework == "torch" and not self.r.torch_uint32 and self._rgb10a2:
            return "cupy"
        return framework

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            return out.torch(stream.torch)
        if framework == "cupy":
            return out.cupy(stream.cupy)
        if framework == "jax":
            self.r.jax()
            return out.jax()
        return out.numpy()

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            with self.r.torch.cuda.stream(stream.torch):
                return self.r.torch.from_dlpack(out.image)
        if framework == "cupy":
            with self.r.cupy.cuda.Device(self.r.device), stream.cupy:
                return self.r.cupy.from_dlpack(out.image)
        jax, _ = self.r.jax()
        return jax.dlpack.from_dlpack(out.image, copy=False)  # JAX passes its own stream to __dlpack__

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            with self.r.torch.cuda.stream(stream.torch):
                return view.clone()
        if framework == "cupy":
            with self.r.cupy.cuda.Device(self.r.device), stream.cupy:
                return view.copy()
        _, jnp = self.r.jax()
        out = jnp.array(view, copy=True)  # the vendor's documented recipe: copy after a zero-copy import, then wait
        out.block_until_ready()
        return out

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        waiter.torch.wait_stream(signaller.torch)

    def synchronize(self) -> None:
        self.r.torch.cuda.synchronize(self.r.device)

    def to_numpy(self, copy: Any) -> np.ndarray:
        if isinstance(copy, np.ndarray):
            return copy
        module = type(copy).__module__ or ""
        if module.startswith("torch"):
            torch = self.r.torch
            if copy.dtype == torch.uint32:
                return copy.view(torch.int32).cpu().numpy().view(np.uint32)
            return copy.cpu().numpy()
        if module.startswith("cupy"):
            return self.r.cupy.asnumpy(copy)
        return np.asarray(copy)

    def cleanup(self) -> None:
        self._surfaces.clear()
        with contextlib.suppress(Exception):
            self.r.torch.cuda.synchronize(self.r.device)
