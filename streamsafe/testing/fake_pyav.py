"""An emulated NVDEC for PyAV, on the CUDA ordering model: ``av.open(path, hwaccel=...)`` decodes into model memory.

Once installed (:func:`install_fake_pyav_hw`, ``with fake_pyav_hw():``, or :func:`pyav_hw_for_test` in a test),
``av.open(path, hwaccel=HWAccel(device_type="cuda", ..., is_hw_owned=True))`` returns an
:class:`EmulatedInputContainer`: it decodes real files with PyAV's software decoder and hands out the frames as
PyAV's NVDEC frames behave on an H200 (measured with PyAV 19):

* ``decode(...)`` is a generator; each frame comes out complete (the upload into its surface is a kernel on the
  legacy stream, FFmpeg's, that the host waits for), in a CUDA surface of a pool: ``format.name == "cuda"``,
  ``sw_format.name == "nv12"``, ``planes[0]`` the Y plane ``uint8 (H, W)``, ``planes[1]`` the interleaved UV
  ``(H/2, W/2, 2)`` (dense rows on the model: ``line_size`` is the row's width);
* ``plane.__dlpack__()`` exports a plane with no stream, and ``plane.__dlpack__(stream=...)`` raises
  ``NotImplementedError`` as PyAV's does (so ``sim.from_dlpack(plane)`` fails as ``torch.from_dlpack(plane)`` does);
* the surface goes back to the pool when the last reference to the frame, a capsule of a plane or an array
  imported from one goes (FFmpeg's reference count and the capsule's deleter), with no stream order; the pool is a
  stack that grows only when no surface is free (FFmpeg's buffer pool), so a program that drops each frame before
  the next but one holds 2 surfaces, as measured.

So a consumer that reads a plane on its own stream and drops the view at once races with the decode of the frame
after next into the same surface: the adversarial model shows wrong frames and reports the race. Everything else
of ``av`` (writing, software decoding, ``hwaccel`` with ``is_hw_owned=False``: frames in host memory) is PyAV's own.
:func:`decode_nv12` is a clip's truth.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..backend import current_backend
from ..calls import raw_method
from ..errors import BackendUnavailableError, FrameworkUnavailableError
from .fake_pynvvideocodec import clip_version

__all__ = [
    "install_fake_pyav_hw", "uninstall_fake_pyav_hw", "fake_pyav_hw", "is_fake_pyav_hw", "pyav_hw_for_test",
    "decode_nv12", "EmulatedInputContainer", "HWVideoFrame", "HWVideoPlane", "EMULATION",
]

_DLPACK_STREAM = ("CUDA stream synchronization is not supported. Pass stream=None and synchronize before calling "
                  "__dlpack__.")
"""What PyAV's ``VideoPlane.__dlpack__(stream=...)`` raises for a CUDA frame (``NotImplementedError``)."""


def _av() -> Any:
    try:
        import av
    except ImportError as e:
        raise FrameworkUnavailableError("av", "the emulated NVDEC for PyAV", str(e), "video") from e
    return av


def _decode_nv12(path: str) -> tuple[np.ndarray, ...]:
    return _decode_nv12_version(path, clip_version(path))  # (a clip rewritten at a path decodes anew)


@functools.lru_cache(maxsize=8)
def _decode_nv12_version(path: str, version: tuple[int, int] | None) -> tuple[np.ndarray, ...]:
    av = _av()
    container = av.open(path)  # (the emulation's own, not the program's: PyAV's calls, past a class guard on av)
    try:
        return tuple(f.to_ndarray(format="nv12") for f in _own(container, "decode")(video=0))
    finally:
        _own(container, "close")()


def decode_nv12(path: str) -> list[np.ndarray]:
    """Every video frame of ``path`` as NV12 ``(H * 3 // 2, W)`` ``uint8`` host arrays (Y rows, then the interleaved
    UV rows): what the emulated NVDEC hands out, and what a guarded frame's copy helpers give (a test's truth)."""
    return list(_decode_nv12(str(path)))


# -- surfaces, frames and planes ----------------------------------------------------------------------------------


class _Surface:
    """One CUDA surface of the pool: the Y and the UV plane, each a model buffer (``malloc``: the decoder's own)."""

    __slots__ = ("planes", "number")

    def __init__(self, planes: tuple[Any, Any], number: int) -> None:
        self.planes = planes
        self.number = number


class _SurfacePool:
    """FFmpeg's buffer pool of surfaces: a stack, grown only when no surface is free."""

    def __init__(self, backend: Any, device: int) -> None:
        self.backend = backend
        self.device = device
        self.free: list[_Surface] = []
        self.made = 0

    def get(self, height: int, width: int) -> _Surface:
        while self.free:
            surface = self.free.pop()
            if surface.planes[0].shape == (height, width):
                return surface
        self.made += 1
        be, n = self.backend, self.made
        planes = (be.malloc((height, width), np.uint8, device=self.device, name=f"NVDEC surface {n} Y"),
                  be.malloc((height // 2, width // 2, 2), np.uint8, device=self.device, name=f"NVDEC surface {n} UV"))
        return _Surface(planes, n)

    def put(self, surface: _Surface) -> None:
        """The last reference to the surface's frame went (a finalizer, in any thread): it is free again."""
        self.free.append(surface)


class _Format:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<emulated av.VideoFormat {self.name}>"


class HWVideoPlane:
    """One plane of an emulated NVDEC frame (PyAV's ``VideoPlane`` of a CUDA frame)."""

    def __init__(self, frame: HWVideoFrame, index: int) -> None:
        self.frame = frame
        self.index = index
        array = frame.surface.planes[index]
        self.height = array.shape[0]
        self.width = array.shape[1]
        self.line_size = frame.width
        """Bytes a row (dense on the model; the real decoder's pitch is wider)."""
        self.buffer_size = self.line_size * self.height

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.frame.device)

    def __dlpack__(self, *, stream: int | None = None) -> Any:
        """A capsule of the plane, with no stream order; it holds the frame's surface until it (or the array imported
        from it) goes. ``stream=`` raises ``NotImplementedError``, as PyAV's does."""
        if stream is not None:
            raise NotImplementedError(_DLPACK_STREAM)
        from ..sim.memory import SimArray, SimCapsule

        frame = self.frame
        return SimCapsule(SimArray(frame.backend, frame.surface.planes[self.index].buffer, lease=frame.lease))

    def __repr__(self) -> str:
        return f"<emulated av.VideoPlane {self.index} {self.width}x{self.height} of {self.frame!r}>"


class HWVideoFrame:
    """An emulated NVDEC frame (PyAV's ``VideoFrame`` of format ``cuda``): holds its surface while it lives."""

    def __init__(self, container: EmulatedInputContainer, surface: _Surface, lease: Any, source: Any, index: int) -> None:
        self.backend: Any = container.backend
        self.device = container.device
        self.surface = surface
        self.lease = lease
        """The surface's reference count: this frame, every capsule of a plane and every array imported from one."""
        self.format = _Format("cuda")
        self.sw_format = _Format("nv12")
        self.width, self.height = source.width, source.height
        self.pts, self.time_base, self.time = source.pts, source.time_base, source.time
        self.key_frame = source.key_frame
        self.index = index
        """The frame's index in the clip (the emulation's own)."""

    @property
    def planes(self) -> tuple[HWVideoPlane, HWVideoPlane]:
        return (HWVideoPlane(self, 0), HWVideoPlane(self, 1))

    def to_ndarray(self, format: str | None = None, **kwargs: Any) -> np.ndarray:
        """The frame in host memory (FFmpeg's transfer from the surface: the host waits for it), NV12
        ``(H * 3 // 2, W)``, or converted to ``format`` as PyAV converts. Blocks the host."""
        be, legacy = self.backend, self.backend.legacy_stream(self.device)
        y, uv = (be.download(p, legacy) for p in self.surface.planes)
        nv12 = np.concatenate([y, uv.reshape(self.height // 2, self.width)])
        if format in (None, "nv12"):
            return nv12
        av = _av()
        return av.VideoFrame.from_ndarray(nv12, format="nv12").to_ndarray(format=format, **kwargs)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<emulated av.VideoFrame #{self.index}, pts={self.pts} cuda (nv12) {self.width}x{self.height}>"


# -- the container ------------------------------------------------------------------------------------------------


def _own(container: Any, name: str) -> Any:
    """PyAV's own ``container.name`` method, past streamsafe's dispatchers: the software container underneath is the
    emulated decoder's inside, not a container of the program's (a class guard on ``av`` leaves it alone)."""
    return functools.partial(raw_method(type(container), name), container)


class EmulatedInputContainer:
    """What ``av.open(path, hwaccel=...)`` returns with the emulation installed (see the module docstring): PyAV's
    software container underneath, its video frames uploaded into the surfaces of a pool on the model."""

    def __init__(self, file: Any, hwaccel: Any = None, **kwargs: Any) -> None:
        backend = current_backend()
        if not getattr(backend, "records_accesses", False):
            raise BackendUnavailableError(
                "emulated NVDEC for PyAV", f"it decodes into the CUDA ordering model, and the current backend is {backend.name}",
                "On a GPU, use PyAV's own NVDEC (uninstall the emulation: streamsafe.testing.uninstall_fake_pyav_hw()); on "
                "the model, make a streamsafe.sim.SimBackend current (streamsafe.use_backend(sim)) first",
            )
        self.backend: Any = backend  # (the model: a SimBackend)
        self.device = int(getattr(hwaccel, "device_id", 0) or 0)
        self.hwaccel = hwaccel
        self.container = _real_open()(file, "r", **kwargs)
        """PyAV's own container (software decoding)."""
        self.pool = _SurfacePool(backend, self.device)
        """The surfaces (``pool.made``: how many were ever allocated)."""
        self.frames_decoded = 0

    @property
    def streams(self) -> Any:
        return self.container.streams

    def decode(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """A generator of the frames of the streams asked for (as PyAV's ``decode``): video frames as emulated NVDEC
        frames, complete when they come out; others as PyAV gives them. Each step blocks the host for its decode."""
        return self._frames(_own(self.container, "decode")(*args, **kwargs))

    def _frames(self, source: Iterator[Any]) -> Iterator[Any]:
        av = _av()
        for frame in source:
            yield self._upload(frame) if isinstance(frame, av.VideoFrame) else frame

    def _upload(self, frame: Any) -> HWVideoFrame:
        """Decode ``frame`` into a free surface: a kernel on the legacy stream that the host waits for (D1)."""
        from ..sim.memory import Lease

        nv12 = frame.to_ndarray(format="nv12")
        h, w = frame.height, frame.width
        surface = self.pool.get(h, w)
        y, uv = surface.planes
        pixels_y, pixels_uv = nv12[:h], nv12[h:].reshape(h // 2, w // 2, 2)
        be = self.backend
        legacy = be.legacy_stream(self.device)
        index = self.frames_decoded
        dst_y, dst_uv = y.buffer, uv.buffer

        def write() -> None:
            np.copyto(dst_y.data, pixels_y)
            np.copyto(dst_uv.data, pixels_uv)

        be.launch(legacy, f"decode frame {index}", write, writes=[y, uv])  # (into surface {surface.number})
        be.synchronize_stream(legacy)
        lease = Lease(dst_y, legacy)
        done = weakref.finalize(lease, self.pool.put, surface)  # the last reference went: the surface is free again
        done.atexit = False
        self.frames_decoded += 1
        return HWVideoFrame(self, surface, lease, frame, index)

    def demux(self, *args: Any, **kwargs: Any) -> Any:
        return self.container.demux(*args, **kwargs)

    def seek(self, *args: Any, **kwargs: Any) -> Any:
        return self.container.seek(*args, **kwargs)

    def close(self) -> None:
        """Close the container (frames handed out keep their surfaces)."""
        _own(self.container, "close")()

    def __enter__(self) -> EmulatedInputContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<emulated NVDEC av.InputContainer of {self.container.name!r} on {self.backend!r}>"


# -- installing it ------------------------------------------------------------------------------------------------

_REAL_OPEN: list[Any] = []
"""PyAV's own ``av.open`` (kept while the emulation is installed)."""


def _real_open() -> Any:
    """PyAV's own ``av.open``."""
    return _REAL_OPEN[0] if _REAL_OPEN else _av().open


def _emulated_open(file: Any, mode: str | None = None, **kwargs: Any) -> Any:
    """``av.open`` with the emulation installed: a container of device frames where ``hwaccel`` asks PyAV to keep
    the frames on the device (``is_hw_owned=True``); PyAV's own ``open`` otherwise (without ``hwaccel``, frames in
    host memory, as PyAV's are when it copies them out of the device)."""
    hwaccel = kwargs.pop("hwaccel", None)
    real = _real_open()
    if hwaccel is not None and (mode or "r") == "r" and getattr(hwaccel, "is_hw_owned", False):
        return EmulatedInputContainer(file, hwaccel, **kwargs)
    return real(file, mode, **kwargs) if mode is not None else real(file, **kwargs)


class PyAVHardwareFake:
    """The emulation's switch (the profile's ``emulation``): puts :func:`_emulated_open` in ``av.open`` (and the
    emulated container's class in ``av``, where ``ss.guard(av)`` finds it), and takes it out again."""

    install_call = "streamsafe.testing.install_fake_pyav_hw()"
    uninstall_call = "uninstall_fake_pyav_hw()"

    @staticmethod
    def is_fake(module: Any) -> bool:
        """Whether ``module`` (PyAV) opens containers through the emulation now."""
        return module is not None and getattr(module, "open", None) is _emulated_open

    @staticmethod
    def stands_in() -> bool:
        """Whether the emulation should stand in for PyAV's NVDEC here (``streamsafe run --fake-nvvfx``): no CUDA
        device."""
        from ..backend import cuda_available

        return not cuda_available()

    def install(self, *, force: bool = False) -> Any:
        """Route ``av.open(..., hwaccel=...)`` to the emulation; returns ``av``. Installing twice is harmless
        (``force`` is accepted for the emulation protocol: PyAV itself stays)."""
        av = _av()
        if self.is_fake(av):
            return av
        _REAL_OPEN[:] = [av.open]
        av.open = _emulated_open
        av.EmulatedInputContainer = EmulatedInputContainer
        return av

    def uninstall(self) -> None:
        """Give ``av.open`` back to PyAV."""
        av = _av()
        if not self.is_fake(av):
            return
        av.open = _REAL_OPEN[0]
        with contextlib.suppress(AttributeError):
            del av.EmulatedInputContainer

    @contextlib.contextmanager
    def block(self) -> Iterator[Any]:
        """The emulation inside the block (undone after it only if the block installed it)."""
        av = _av()
        already = self.is_fake(av)
        self.install()
        try:
            yield av
        finally:
            if not already:
                self.uninstall()

    def for_test(self, monkeypatch: Any) -> Any:
        """For a pytest test: the emulation through ``monkeypatch`` (PyAV is as it was after the test); ``av``."""
        av = _av()
        if not self.is_fake(av):
            if not _REAL_OPEN or _REAL_OPEN[0] is not av.open:
                _REAL_OPEN[:] = [av.open]
            monkeypatch.setattr(av, "open", _emulated_open)
            monkeypatch.setattr(av, "EmulatedInputContainer", EmulatedInputContainer, raising=False)
        return av


EMULATION = PyAVHardwareFake()


def install_fake_pyav_hw(*, force: bool = False) -> Any:
    """Make ``av.open(path, hwaccel=HWAccel(device_type="cuda", ..., is_hw_owned=True))`` decode into the CUDA
    ordering model (a :class:`~streamsafe.sim.SimBackend` must be current when it is called); returns ``av``."""
    return EMULATION.install(force=force)


def uninstall_fake_pyav_hw() -> None:
    """Give ``av.open`` back to PyAV."""
    EMULATION.uninstall()


def fake_pyav_hw() -> contextlib.AbstractContextManager[Any]:
    """``with fake_pyav_hw() as av:``: the emulation inside the block."""
    return EMULATION.block()


def is_fake_pyav_hw(module: Any = None) -> bool:
    """Whether PyAV (``module``, default: ``av``) opens hardware containers through the emulation now."""
    return EMULATION.is_fake(module if module is not None else _av())


def pyav_hw_for_test(monkeypatch: Any) -> Any:
    """The emulation for one pytest test (:meth:`PyAVHardwareFake.for_test`); returns ``av``."""
    return EMULATION.for_test(monkeypatch)
