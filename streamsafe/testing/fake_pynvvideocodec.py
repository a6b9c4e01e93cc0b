"""An emulated PyNvVideoCodec for CPU CI and the model: ``import PyNvVideoCodec`` loads it.

It decodes real files with PyAV (the ``video`` extra) into a pool of buffers on the CUDA ordering model
(:class:`streamsafe.sim.SimBackend`), with the behaviour measured of PyNvVideoCodec 2.2.4 on an H200:

* ``SimpleDecoder(path, gpu_id=0, cuda_stream=0, use_device_memory=True, output_color_type=...)``: each
  call writes the frames it returns into the next buffers of a ring it reuses, as kernels on the decoder's
  stream (``cuda_stream``; 0 is the legacy stream), then waits on the host for that stream: the frames are
  complete on return. ``get_batch_frames(8)`` reuses the same 8 buffers batch after batch; one frame at a
  time (``decoder[i]``) cycles 2.
* ``ThreadedDecoder(path, buffer_size, ...)``: a ring of ``2 * buffer_size + 1`` buffers; after each
  ``get_batch_frames`` it decodes ahead (kernels on its stream, not waited for) into the buffers no longer
  handed out, as its thread does.
* ``DecodedFrame``: ``__dlpack__(stream=...)`` with DLPack's rule (``stream=0`` raises; the consumer
  stream waits for the decoder's), ``__dlpack_device__()``, ``shape``, ``strides``, ``dtype``,
  ``timestamp``, ``format``.

So a consumer that reads a frame on another stream while the next call decodes races on the model, and
an adversarial scheduler shows it as wrong data, unless the reads are ordered (a host wait, or
streamsafe's guard). Three ways to install it: :func:`install_fake_pynvvideocodec` (process-wide),
``with fake_pynvvideocodec():``, and the pytest fixture ``fake_pynvvideocodec``. :func:`make_test_clip`
writes a short H.264 clip whose frames are all different.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.machinery
import functools
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import current_backend
from ..backend.naming import as_stream
from ..calls import raw_method
from ..errors import ArgumentError, BackendUnavailableError, FrameworkUnavailableError
from ._fake_module import MARK, ModuleFake

__all__ = [
    "install_fake_pynvvideocodec", "uninstall_fake_pynvvideocodec", "fake_pynvvideocodec", "is_fake_pynvvideocodec",
    "build_fake_pynvvideocodec", "make_test_clip", "sample_clip", "decode_reference", "pynvvideocodec_for_test",
    "SimpleDecoder", "ThreadedDecoder", "DecodedFrame", "OutputColorType", "PyNvVCException",
]



class PyNvVCException(Exception):
    """What the SDK raises for its own errors (a bad stream value, an index out of range)."""


class OutputColorType(enum.IntEnum):
    NATIVE = 0
    RGB = 1
    RGBP = 2


@dataclass(frozen=True)
class StreamMetadata:
    width: int
    height: int
    num_frames: int
    average_fps: float
    duration_in_seconds: float
    codec_name: str


# -- decoding on the host (PyAV) ---------------------------------------------------------------------------


def _av() -> Any:
    try:
        import av
    except ImportError as e:
        raise FrameworkUnavailableError("av", "the emulated PyNvVideoCodec", str(e), "video",
                                        "or, on a GPU, use the real decoder (pip install 'streamsafe[pynvvideocodec]')") from e
    return av


def clip_version(path: str) -> tuple[int, int] | None:
    """What tells the file at ``path`` now from one written there before (its modification time and size), ``None``
    when there is none: the emulations' decode caches key on it, so a clip rewritten at a path decodes anew."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _decode(path: str) -> tuple[tuple[np.ndarray, ...], StreamMetadata]:
    """Every frame of the clip at ``path`` now as RGB ``(H, W, 3)`` uint8, and its metadata (cached per file
    version: tests decode a clip often)."""
    return _decode_version(path, clip_version(path))


@functools.lru_cache(maxsize=8)
def _decode_version(path: str, version: tuple[int, int] | None) -> tuple[tuple[np.ndarray, ...], StreamMetadata]:
    av = _av()
    container = av.open(path)  # (the emulation's own, not the program's: PyAV's calls, past a class guard on av)
    try:
        stream = container.streams.video[0]
        frames = tuple(f.to_ndarray(format="rgb24") for f in raw_method(type(container), "decode")(container, stream))
        fps = float(stream.average_rate or 30)
        codec = stream.codec_context.name
    finally:
        raw_method(type(container), "close")(container)
    if not frames:
        raise PyNvVCException(f"{path}: no video frames (elementary streams are not supported by SimpleDecoder)")
    h, w = frames[0].shape[:2]
    return frames, StreamMetadata(w, h, len(frames), fps, len(frames) / fps, codec)


def decode_reference(path: str, color: OutputColorType = OutputColorType.RGBP) -> list[np.ndarray]:
    """What the decoder hands out for each frame of ``path`` in ``color``, as host arrays (a test's truth)."""
    frames, _ = _decode(str(path))
    return [_convert(f, color) for f in frames]


def _convert(rgb: np.ndarray, color: OutputColorType) -> np.ndarray:
    if color is OutputColorType.RGBP:
        return np.ascontiguousarray(rgb.transpose(2, 0, 1))
    if color is OutputColorType.RGB:
        return rgb
    # NATIVE: NV12, full-range BT.601 (a luma plane, then interleaved chroma at half resolution)
    f = rgb.astype(np.float32)
    y = 0.299 * f[..., 0] + 0.587 * f[..., 1] + 0.114 * f[..., 2]
    u = 128 - 0.168736 * f[..., 0] - 0.331264 * f[..., 1] + 0.5 * f[..., 2]
    v = 128 + 0.5 * f[..., 0] - 0.418688 * f[..., 1] - 0.081312 * f[..., 2]
    h, w = y.shape
    uv = np.stack([u[::2, ::2], v[::2, ::2]], axis=-1).reshape(h // 2, w)
    return np.clip(np.concatenate([y, uv]), 0, 255).astype(np.uint8)


def make_test_clip(path: str, frames: int = 48, size: tuple[int, int] = (160, 96), fps: int = 30) -> str:
    """Write an H.264 clip of ``frames`` frames of ``size`` (width, height) to ``path``, each frame different
    (a moving gradient and checkerboard), with PyAV. Returns ``path``. Blocks while it encodes. Raises
    :class:`~streamsafe.errors.ArgumentError` for fewer than 1 frame or an odd or tiny size (H.264's yuv420p halves
    each side)."""
    w, h = size
    if type(frames) is not int or frames < 1:
        raise ArgumentError(f"make_test_clip(frames={frames!r}): a clip has at least 1 frame; give frames=1 or more")
    if not all(type(v) is int and v >= 16 and v % 2 == 0 for v in (w, h)):
        raise ArgumentError(f"make_test_clip(size={size!r}): width and height must be even whole numbers of at least 16 "
                            "(yuv420p halves each side); give e.g. size=(160, 96)")
    av = _av()
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"g": str(fps), "bf": "0", "crf": "18"}
        for i in range(frames):
            img = np.empty((h, w, 3), np.uint8)
            img[..., 0] = (xx * 255 // w + i * 7) % 256
            img[..., 1] = (yy * 255 // h + i * 3) % 256
            img[..., 2] = np.where((xx // 16 + yy // 16 + i) % 2 == 0, (i * 11) % 256, 255 - (i * 11) % 256)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


@functools.lru_cache(maxsize=4)
def sample_clip(frames: int = 48, size: tuple[int, int] = (160, 96)) -> str:
    """A test clip made once per process (:func:`make_test_clip` into the temporary directory); its path."""
    import os
    import tempfile

    folder = tempfile.mkdtemp(prefix="streamsafe-clip-")
    return make_test_clip(os.path.join(folder, f"clip-{frames}-{size[0]}x{size[1]}.mp4"), frames, size)


# -- frames -------------------------------------------------------------------------------------------------


class DecodedFrame:
    """One decoded frame in a buffer of the decoder's pool (valid until the decoder writes that buffer again)."""

    def __init__(self, array: Any, stream: Any, index: int, fps: float, color: OutputColorType) -> None:
        self._array = array
        self._stream = stream
        self.timestamp = int(round(index * 1000 / fps))
        self.format = color
        self.index = index
        """The frame's index in the clip (the emulation's own; the SDK's frames have ``getPTS()``)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape  # type: ignore[no-any-return]

    @property
    def strides(self) -> tuple[int, ...]:
        shape = self.shape
        return tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))

    @property
    def dtype(self) -> str:
        return "|u1"

    @property
    def __streamsafe_key__(self) -> Any:
        """The model's buffer the frame is in."""
        return self._array.buffer

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()  # type: ignore[no-any-return]

    def __dlpack__(self, stream: Any = 0, **ignored: Any) -> Any:
        """A capsule of the frame; ``stream`` (DLPack: 1 legacy, 2 per-thread, a pointer, -1 none) waits for
        the decoder's stream. ``stream=0`` raises, as the SDK does."""
        if stream is None:
            raise RuntimeError("Unable to cast Python instance to C++ type")
        if stream == 0:
            raise PyNvVCException("dlpack : Invalid value for stream parameter. Passed value of 0 which is not allowed")
        from ..sim.memory import SimCapsule

        backend = self._array.backend
        if stream != -1:
            consumer = as_stream(stream, device=self._array.device, backend=backend)
            if consumer != self._stream:
                backend.fence(consumer, self._stream)
        return SimCapsule(self._array)

    def cuda(self) -> Any:
        raise PyNvVCException("the emulated DecodedFrame has no CUDA array interface on the model: import it with DLPack")

    def __repr__(self) -> str:
        return f"<emulated DecodedFrame #{self.index} {self.shape}>"


# -- decoders -----------------------------------------------------------------------------------------------


class _Decoder:
    """What both decoders share: the clip, the model, the decoder's stream and its ring of buffers."""

    _ring_floor = 2

    def __init__(self, enc_file_path: Any, gpu_id: int = 0, cuda_context: int = 0, cuda_stream: Any = 0,
                 use_device_memory: bool = True, max_width: int = 0, max_height: int = 0,
                 need_scanned_stream_metadata: int = 0, decoder_cache_size: int = 4,
                 output_color_type: OutputColorType = OutputColorType.NATIVE, **ignored: Any) -> None:
        backend = current_backend()
        if not getattr(backend, "records_accesses", False):
            raise BackendUnavailableError(
                "emulated PyNvVideoCodec", f"it decodes into the CUDA ordering model, and the current backend is {backend.name}",
                "On a GPU, install the real decoder (pip install 'streamsafe[pynvvideocodec]'); on the model, "
                "make a streamsafe.sim.SimBackend current (streamsafe.use_backend(sim)) first",
            )
        if gpu_id < 0 or gpu_id >= backend.device_count():  # type: ignore[attr-defined]
            raise PyNvVCException(f"ValidateGpuId: GPU ordinal out of range. Should be within [0, {backend.device_count() - 1}]")  # type: ignore[attr-defined]
        if not use_device_memory:
            raise PyNvVCException("the emulated decoder hands out device memory only (use_device_memory=True)")
        self.backend = backend
        self._gpu = int(gpu_id)
        self.cuda_stream = cuda_stream
        """The stream the decoder writes its frames on (what streamsafe's guard reads; the SDK keeps it in C++)."""
        self._stream = as_stream(cuda_stream, device=self._gpu, backend=backend)
        self._color = OutputColorType(output_color_type)
        self._open(enc_file_path)

    @property
    def device(self) -> int:
        """The decoder's GPU (``gpu_id``; what streamsafe's guard reads. The SDK's decoder keeps it in C++: a subclass
        whose ``device`` raises :class:`AttributeError` stands in for it)."""
        return self._gpu

    def _open(self, source: Any) -> None:
        self._source = str(source)
        frames, self._meta = _decode(self._source)
        self._frames = [_convert(f, self._color) for f in frames]
        self._ring: list[Any] = []
        self._cursor = 0
        self._next = 0

    def _free_ring(self) -> None:
        for array in self._ring:
            self.backend.free(array, name=f"{type(self).__name__} frees its buffers")  # type: ignore[attr-defined]
        self._ring = []
        self._cursor = 0

    def _grow(self, size: int) -> None:
        while len(self._ring) < size:
            shape = self._frames[0].shape
            self._ring.append(self.backend.malloc(shape, np.uint8, device=self._gpu, name=f"decoder buffer {len(self._ring)}"))  # type: ignore[attr-defined]

    def _write(self, indices: list[int]) -> list[DecodedFrame]:
        """Decode ``indices`` into the next buffers of the ring (kernels on the decoder's stream)."""
        self._grow(max(self._ring_floor, len(indices)))
        out = []
        for index in indices:
            array = self._ring[self._cursor]
            self._cursor = (self._cursor + 1) % len(self._ring)
            pixels, buf = self._frames[index], array.buffer
            self.backend.launch(self._stream, f"decode frame {index}", functools.partial(np.copyto, buf.data, pixels),  # type: ignore[attr-defined]
                                writes=[array])
            out.append(DecodedFrame(array, self._stream, index, self._meta.average_fps, self._color))
        return out

    def _decode_and_wait(self, indices: list[int]) -> list[DecodedFrame]:
        frames = self._write(indices)
        self.backend.synchronize_stream(self._stream)  # the SDK's own host wait: frames are complete on return
        return frames

    def __len__(self) -> int:
        return self._meta.num_frames

    def get_stream_metadata(self) -> StreamMetadata:
        return self._meta


class SimpleDecoder(_Decoder):
    """The emulated ``PyNvVideoCodec.SimpleDecoder`` (see the module docstring)."""

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            return self.get_batch_frames_by_index(list(range(*key.indices(len(self)))))
        if not isinstance(key, int):
            raise TypeError(f"Unsupported key type: {type(key)}. Supported types are int and slice.")
        self._validate(key)
        frame = self._decode_and_wait([key])[0]
        self._next = key + 1
        return frame

    def _validate(self, index: int) -> None:
        if not 0 <= index < len(self):
            raise IndexError(f"Index {index} is out of range [0, {len(self) - 1}]")

    def get_batch_frames(self, batch_size: int) -> list[DecodedFrame]:
        indices = list(range(self._next, min(self._next + int(batch_size), len(self))))
        self._next += len(indices)
        return self._decode_and_wait(indices) if indices else []

    def get_batch_frames_by_index(self, indices: list[int]) -> list[DecodedFrame]:
        valid = list(dict.fromkeys(i for i in indices if 0 <= i < len(self)))
        frames = self._decode_and_wait(sorted(valid)) if valid else []
        by_index = {f.index: f for f in frames}
        return [by_index[i] for i in valid]

    def seek_to_index(self, index: int) -> None:
        self._validate(index)
        self._next = index

    def reconfigure_decoder(self, new_source: Any) -> None:
        """A new source: the decoder frees its buffers (with no stream order) and decodes the new one."""
        self._free_ring()
        self._open(new_source)


class ThreadedDecoder(_Decoder):
    """The emulated ``PyNvVideoCodec.ThreadedDecoder``: decodes ahead after each call (see the module docstring)."""

    def __init__(self, enc_file_path: Any, buffer_size: int, gpu_id: int = 0, cuda_context: int = 0, cuda_stream: Any = 0,
                 use_device_memory: bool = True, max_width: int = 0, max_height: int = 0,
                 need_scanned_stream_metadata: int = 0, decoder_cache_size: int = 4,
                 output_color_type: OutputColorType = OutputColorType.NATIVE, start_frame: int = 0, **ignored: Any) -> None:
        self.buffer_size = int(buffer_size)
        super().__init__(enc_file_path, gpu_id, cuda_context, cuda_stream, use_device_memory, max_width, max_height,
                         need_scanned_stream_metadata, decoder_cache_size, output_color_type)
        self._start(start_frame)

    def _start(self, start_frame: int) -> None:
        self._grow(2 * self.buffer_size + 1)
        self._next = start_frame
        self._ahead: list[DecodedFrame] = []
        self._prefetch()

    def _prefetch(self) -> None:
        """The decoder's thread: decode up to ``buffer_size`` frames ahead into buffers no longer handed out."""
        want = min(self.buffer_size - len(self._ahead), len(self) - self._next)
        if want > 0:
            self._ahead += self._write(list(range(self._next, self._next + want)))
            self._next += want

    def get_batch_frames(self, batch_size: int) -> list[DecodedFrame]:
        if batch_size > self.buffer_size:
            raise PyNvVCException(f"batch_size cannot be greater than buffer_size. Got batch_size = {batch_size} "
                                  f"whereas buffer_size = {self.buffer_size}")
        self.backend.synchronize_stream(self._stream)  # (the SDK waits for its stream before it hands frames out)
        batch, self._ahead = self._ahead[:batch_size], self._ahead[batch_size:]
        self._prefetch()  # its thread goes on at once, into the buffers of the batches before this one
        return batch

    def end(self) -> None:
        self.backend.synchronize_stream(self._stream)
        self._free_ring()
        self._ahead = []

    def reconfigure_decoder(self, new_source: Any, start_frame: int = 0) -> None:
        self.end()
        self._open(new_source)
        self._start(start_frame)


# -- installing it ------------------------------------------------------------------------------------------

_SDK_NAMES = ("SimpleDecoder", "ThreadedDecoder", "DecodedFrame", "OutputColorType", "PyNvVCException")


def is_fake_pynvvideocodec(module: Any) -> bool:
    """True when ``module`` is streamsafe's emulated ``PyNvVideoCodec``."""
    return _FAKE.is_fake(module)


def build_fake_pynvvideocodec() -> types.ModuleType:
    """A new emulated ``PyNvVideoCodec`` module object, not put in ``sys.modules``."""
    mod = types.ModuleType("PyNvVideoCodec", "streamsafe's emulation of PyNvVideoCodec 2.2 (streamsafe.testing)")
    this = sys.modules[__name__]
    for name in _SDK_NAMES:
        setattr(mod, name, getattr(this, name))
    mod.__version__ = "2.2.4+streamsafe"  # type: ignore[attr-defined]
    mod.__spec__ = importlib.machinery.ModuleSpec("PyNvVideoCodec", None)  # (importlib.util.find_spec finds it)
    setattr(mod, MARK, True)
    mod.__all__ = list(_SDK_NAMES)  # type: ignore[attr-defined]
    return mod


EMULATION = _FAKE = ModuleFake("PyNvVideoCodec", build_fake_pynvvideocodec, "uninstall_fake_pynvvideocodec()")


def install_fake_pynvvideocodec(*, force: bool = False) -> types.ModuleType:
    """Put the emulated ``PyNvVideoCodec`` in ``sys.modules``; returns it. A real one already imported is kept
    unless ``force=True`` (then :func:`uninstall_fake_pynvvideocodec` puts it back). Installing twice is harmless."""
    return _FAKE.install(force=force)


def uninstall_fake_pynvvideocodec() -> None:
    """Remove the emulated ``PyNvVideoCodec`` and restore what was there before (if anything)."""
    _FAKE.uninstall()


def fake_pynvvideocodec(*, force: bool = False) -> contextlib.AbstractContextManager[types.ModuleType]:
    """``with fake_pynvvideocodec() as nvc:``: the emulation inside the block (undone only if the block put it there)."""
    return _FAKE.block(force=force)


def pynvvideocodec_for_test(monkeypatch: Any) -> types.ModuleType:
    """The ``fake_pynvvideocodec`` fixture's module (:meth:`ModuleFake.for_test`)."""
    return _FAKE.for_test(monkeypatch)
