"""Emulated nvvfx 0.2 effects: the SDK's API and, exactly, its stream behaviour.

What each ``run()`` does, in order (the seed document's description of the SDK):

1. takes each input with ``__dlpack__()`` and **no stream** (H1);
2. copies it into an internal buffer on ``stream_ptr`` (the "transfer" stage);
3. runs inference on ``stream_ptr``; the RGB8 path writes an internal 8-bit result,
   the RGB10A2 path writes the output buffer directly;
4. with ``non_blocking=False`` the host waits for ``stream_ptr`` (H2 is then closed);
5. RGB8 only: converts the 8-bit result to float32 into the output buffer on
   **stream 0** (the legacy stream), because ``get_output()`` gets no ``stream_ptr``;
6. returns a raw DLPack capsule of the **one SDK-owned output buffer**, which the next
   ``run()`` overwrites and ``close()``/an output-size or encoding change releases
   with no stream ordering.

``latency_us`` (per stage: ``transfer``, ``inference``, ``conversion``) spins the
stage's stream on a GPU first, to widen race windows. The arithmetic is simple but
real (see :mod:`streamsafe.testing._kernels`): bilinear resize, blend, a PQ tone curve.

Beyond the SDK's signature, each constructor takes ``backend=`` (default: the current
backend: the GPU if there is one, else the model) and ``latency_us=``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..backend import Backend
from .._dlpack import require_cuda_input
from ..errors import EffectConfigError, EffectStateError
from . import _kernels as K
from ._engines import Engine, engine_for

__all__ = [
    "ImageEncoding",
    "QualityLevel",
    "Mode",
    "VideoSuperRes",
    "VideoFrameGeneration",
    "TrueHDR",
    "VideoSuperResOutput",
    "VideoFrameGenerationOutput",
    "TrueHDROutput",
    "STAGES",
]

STAGES = ("transfer", "inference", "conversion")


class ImageEncoding(enum.IntEnum):
    """RGB8: float32 ``(3, H, W)`` in [0, 1]. RGB10A2: uint32 ``(H, W)`` packed R10G10B10A2."""

    RGB8 = 0
    RGB10A2 = 1


class QualityLevel(enum.IntEnum):
    """Super-resolution quality (accepted and validated; the emulation's arithmetic ignores it)."""

    BICUBIC = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    ULTRA = 4
    DENOISE = 5
    DEBLUR = 6


class Mode(enum.IntEnum):
    """Frame-generation quality mode (accepted; the emulation's arithmetic ignores it)."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2


@dataclass(frozen=True)
class VideoSuperResOutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer."""


@dataclass(frozen=True)
class VideoFrameGenerationOutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer (the same buffer for every generated frame)."""


@dataclass(frozen=True)
class TrueHDROutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned RGB10A2 output buffer."""


def _positive_int(effect: str, name: str, value: Any, lo: int = 1, hi: int = 16384) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise EffectConfigError(effect, name, value, f"must be an integer in [{lo}, {hi}]")
    return int(value)


_Encoding = ImageEncoding  # for annotations inside classes that re-export the enums as attributes
_Quality = QualityLevel
_Mode = Mode


class _Effect:
    """What the three effects share: life cycle, inputs, stages and the output buffer."""

    ImageEncoding: ClassVar[type[ImageEncoding]] = ImageEncoding
    _has_rgb8_conversion: ClassVar[bool] = True

    def __init__(
        self,
        *,
        device: int,
        image_encoding: _Encoding,
        backend: Backend | None,
        latency_us: float | Mapping[str, float] | None,
    ) -> None:
        self._device = _positive_int(self._name, "device", device, 0, 1024)
        self._encoding = self._check_encoding(image_encoding)
        self._backend = backend
        self._engine: Engine | None = None
        self._loaded = False
        self._closed = False
        self._output: Any = None
        self._output_key: tuple[tuple[int, ...], str] | None = None
        self._internal: dict[str, tuple[Any, tuple[int, ...], str]] = {}
        self._own_work: list[Any] = []  # events after the SDK's own last stages
        self.latency_us = latency_us  # type: ignore[assignment]
        self.runs = 0

    @property
    def _name(self) -> str:
        return type(self).__name__

    # -- configuration ---------------------------------------------------------------------------

    @property
    def device(self) -> int:
        return self._device

    @property
    def image_encoding(self) -> _Encoding:
        return self._encoding

    @image_encoding.setter
    def image_encoding(self, value: _Encoding) -> None:
        value = self._check_encoding(value)
        if value != self._encoding:
            self._release_output("encoding change")
        self._encoding = value

    def _check_encoding(self, value: Any) -> _Encoding:
        try:
            return ImageEncoding(value)
        except ValueError:
            raise EffectConfigError(self._name, "image_encoding", value, "must be ImageEncoding.RGB8 or RGB10A2") from None

    @property
    def latency_us(self) -> dict[str, float]:
        """Per-stage spin in microseconds before each stage on the GPU (0 = none)."""
        return dict(self._latency)

    @latency_us.setter
    def latency_us(self, value: float | Mapping[str, float] | None) -> None:
        if value is None:
            value = 0.0
        if isinstance(value, (int, float)):
            value = {stage: float(value) for stage in STAGES}
        unknown = set(value) - set(STAGES)
        if unknown or any(v < 0 for v in value.values()):
            raise EffectConfigError(self._name, "latency_us", value, f"stages are {', '.join(STAGES)}; values >= 0")
        self._latency = {stage: float(value.get(stage, 0.0)) for stage in STAGES}

    @property
    def is_loaded(self) -> bool:
        return self._loaded and not self._closed

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = engine_for(self._backend, self._device)
        return self._engine

    def load(self) -> None:
        """Validate the configuration and get ready to run. Does not block on GPU work."""
        if self._closed:
            raise EffectStateError(self._name, "load", "closed", "Create a new effect.")
        self._validate_config()
        _ = self.engine
        self._loaded = True

    def _validate_config(self) -> None:
        pass

    def close(self) -> None:
        """Release the SDK buffers. Blocks the host until the SDK's own work is done, but orders
        nothing after the consumer's work (as the seed documents). Idempotent."""
        if self._closed:
            return
        self._release_output("close")
        self._wait_own_work()
        for name in list(self._internal):
            buf = self._internal.pop(name)[0]
            self.engine.release(buf, f"{self._name}.release {name}")
        self._closed = True
        self._loaded = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> _Effect:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inputs ------------------------------------------------------------------------------------

    def _check_ready(self, call: str) -> None:
        if self._closed:
            raise EffectStateError(self._name, call, "closed", "Create a new effect; a closed one cannot run.")
        if not self._loaded:
            raise EffectStateError(self._name, call, "not loaded", f"Call {self._name}.load() before {call}().")

    def _acquire(self, obj: Any, what: str) -> Any:
        """Take an input as the SDK does: ``__dlpack__()`` with no stream; then import it zero-copy."""
        require_cuda_input(what, obj, self._device)
        return self.engine.import_capsule(obj.__dlpack__())

    def _check_image(self, what: str, array: Any, encoding: _Encoding) -> tuple[int, int]:
        shape, dtype = self.engine.shape_dtype(array)
        if encoding is ImageEncoding.RGB8:
            if len(shape) != 3 or shape[0] != 3 or dtype != np.float32:
                raise EffectConfigError(
                    self._name, what, f"shape {shape}, dtype {dtype}", "RGB8 input must be float32 (3, H, W) in [0, 1]"
                )
            h, w = shape[1], shape[2]
        else:
            if len(shape) != 2 or dtype != np.uint32:
                raise EffectConfigError(
                    self._name, what, f"shape {shape}, dtype {dtype}", "RGB10A2 input must be uint32 (H, W), packed R10G10B10A2"
                )
            h, w = shape
        if not (16 <= h <= 8192 and 16 <= w <= 8192):
            raise EffectConfigError(self._name, what, f"{w}x{h}", "width and height must be in [16, 8192]")
        return h, w

    # -- stages ------------------------------------------------------------------------------------

    def _internal_buffer(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        key = (tuple(shape), np.dtype(dtype).str)
        held = self._internal.get(name)
        if held is not None and held[1:] == key:
            return held[0]
        if held is not None:
            self._wait_own_work()
            self.engine.release(held[0], f"{self._name}.release {name}")
        buf = self.engine.empty(shape, dtype, f"{self._name} {name}")
        self._internal[name] = (buf, *key)
        return buf

    def _output_buffer(self, shape: tuple[int, ...], dtype: Any) -> Any:
        key = (tuple(shape), np.dtype(dtype).str)
        if self._output is not None and self._output_key == key:
            return self._output
        self._release_output("output-size change")
        self._output = self.engine.empty(shape, dtype, f"{self._name} output")
        self._output_key = key
        return self._output

    def _wait_own_work(self) -> None:
        """Host-wait for the SDK's own last stages (not for anyone else's work), then forget them."""
        be = self.engine.backend
        for event in self._own_work:
            be.synchronize_event(event)
            be.release_event(event)
        self._own_work = []

    def _mark_own_work(self, streams: Sequence[Any]) -> None:
        be = self.engine.backend
        for event in self._own_work:
            be.release_event(event)
        self._own_work = []
        for stream in streams:
            event = be.acquire_event(self._device)
            be.record(event, stream)
            self._own_work.append(event)

    def _release_output(self, why: str) -> None:
        if self._output is not None:
            self._wait_own_work()
            self.engine.release(self._output, f"{self._name}.release output ({why})")
            self._output = None
            self._output_key = None

    def _run_stages(
        self,
        inputs: Sequence[Any],
        infer: Any,
        out_shape: tuple[int, ...],
        *,
        stream_ptr: int,
        non_blocking: bool,
    ) -> Any:
        """Transfer, inference, host wait, conversion; returns the output capsule.

        ``infer(xp, staged_inputs) -> float32 (3, H, W)`` (RGB8 path) or packed uint32 (RGB10A2).
        """
        eng = self.engine
        s = eng.stream(stream_ptr)
        staged = []
        for i, arr in enumerate(inputs):
            shape, dtype = eng.shape_dtype(arr)
            buf = self._internal_buffer(f"input{i}", shape, dtype)
            eng.delay(s, self._latency["transfer"])
            eng.launch(s, f"{self._name}.transfer", _copy, [arr], [buf])
            staged.append(buf)
        eng.delay(s, self._latency["inference"])
        rgb8 = self._has_rgb8_conversion and self._encoding is ImageEncoding.RGB8
        if rgb8:
            result = self._internal_buffer("rgb8 result", out_shape, np.uint8)
            eng.launch(s, f"{self._name}.inference", lambda xp, r, w: _to_rgb8_into(xp, infer(xp, r), w[0]), staged, [result])
            if not non_blocking:
                eng.host_wait(s)
            out = self._output_buffer(out_shape, np.float32)
            legacy = eng.legacy()
            eng.delay(legacy, self._latency["conversion"])
            eng.launch(legacy, f"{self._name}.conversion", lambda xp, r, w: K.from_rgb8(xp, r[0], w[0]), [result], [out])
            self._mark_own_work([s, legacy] if s != legacy else [s])
        else:
            out = self._output_buffer(out_shape, np.uint32)
            eng.launch(s, f"{self._name}.inference", lambda xp, r, w: _assign(w[0], infer(xp, r)), staged, [out])
            if not non_blocking:
                eng.host_wait(s)
            self._mark_own_work([s])
        self.runs += 1
        return eng.export(out)


def _copy(xp: Any, reads: Sequence[Any], writes: Sequence[Any]) -> None:
    writes[0][...] = reads[0]


def _assign(dst: Any, value: Any) -> None:
    dst[...] = value


def _to_rgb8_into(xp: Any, rgb: Any, dst: Any) -> None:
    if getattr(xp, "__name__", "") == "cupy":
        K._cupy_kernel(xp, "to_rgb8")(rgb, dst)  # straight into the internal buffer: one kernel
    else:
        dst[...] = K.to_rgb8(xp, rgb)


class VideoSuperRes(_Effect):
    """Emulated ``nvvfx.VideoSuperRes``: bilinear upscaling with the SDK's stream behaviour."""

    QualityLevel: ClassVar[type[QualityLevel]] = QualityLevel

    def __init__(
        self,
        quality: _Quality = QualityLevel.HIGH,
        device: int = 0,
        strength: float = 1.0,
        image_encoding: _Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us)
        self.quality = quality
        self.strength = strength
        self._in: list[int | None] = [None, None]
        self._out: list[int | None] = [None, None]

    @property
    def quality(self) -> _Quality:
        return self._quality

    @quality.setter
    def quality(self, value: _Quality) -> None:
        try:
            self._quality = QualityLevel(value)
        except ValueError:
            raise EffectConfigError(self._name, "quality", value, f"must be one of {[q.name for q in QualityLevel]}") from None

    @property
    def strength(self) -> float:
        return self._strength

    @strength.setter
    def strength(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise EffectConfigError(self._name, "strength", value, "must be a number in [0.0, 1.0]")
        self._strength = float(value)

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_dim(self._in, 0, "input_width", v))
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_dim(self._in, 1, "input_height", v))
    output_width = property(lambda self: self._out[0], lambda self, v: self._set_dim(self._out, 0, "output_width", v, True))
    output_height = property(lambda self: self._out[1], lambda self, v: self._set_dim(self._out, 1, "output_height", v, True))

    def _set_dim(self, dims: list[int | None], i: int, name: str, value: int, output: bool = False) -> None:
        value = _positive_int(self._name, name, value, 16, 16384)
        if output and dims[i] is not None and dims[i] != value:
            self._release_output("output-size change")
        dims[i] = value

    def _validate_config(self) -> None:
        if self._out[0] is None or self._out[1] is None:
            raise EffectStateError(
                self._name, "load", "missing its output size", "Set output_width and output_height before load()."
            )

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> VideoSuperResOutput:
        """Upscale one frame. Blocks the host only with ``non_blocking=False`` (until inference ends)."""
        self._check_ready("run")
        arr = self._acquire(input_array, "input_array")
        h, w = self._check_image("input_array", arr, self._encoding)
        if (self._in[0] is not None and self._in[0] != w) or (self._in[1] is not None and self._in[1] != h):
            raise EffectConfigError(
                self._name, "input_array", f"{w}x{h}", f"does not match input_width x input_height = {self._in[0]}x{self._in[1]}"
            )
        ow, oh = self._out[0], self._out[1]
        assert ow is not None and oh is not None
        if not (w <= ow <= 4 * w and h <= oh <= 4 * h):
            raise EffectConfigError(
                self._name, "output size", f"{ow}x{oh}", f"must be 1x to 4x the input size {w}x{h} in each dimension"
            )
        rgb10 = self._encoding is ImageEncoding.RGB10A2

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            src = K.unpack_rgb10a2(xp, staged[0]) if rgb10 else staged[0]
            up = K.resize_bilinear(xp, src, oh, ow)
            return K.pack_rgb10a2(xp, up) if rgb10 else up

        shape = (oh, ow) if rgb10 else (3, oh, ow)
        return VideoSuperResOutput(self._run_stages([arr], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking))


class VideoFrameGeneration(_Effect):
    """Emulated ``nvvfx.VideoFrameGeneration``: a blend of two frames at a timestep."""

    Mode: ClassVar[type[Mode]] = Mode

    def __init__(
        self,
        mode: _Mode = Mode.MEDIUM,
        automatic_shot_change_detection_enabled: bool = True,
        device: int = 0,
        image_encoding: _Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us)
        self.mode = mode
        self.automatic_shot_change_detection_enabled = bool(automatic_shot_change_detection_enabled)
        self._in: list[int | None] = [None, None]
        self._multiplier = 2

    @property
    def mode(self) -> _Mode:
        return self._mode

    @mode.setter
    def mode(self, value: _Mode) -> None:
        try:
            self._mode = Mode(value)
        except ValueError:
            raise EffectConfigError(self._name, "mode", value, f"must be one of {[m.name for m in Mode]}") from None

    @property
    def frame_multiplier(self) -> int:
        return self._multiplier

    @frame_multiplier.setter
    def frame_multiplier(self, value: int) -> None:
        self._multiplier = _positive_int(self._name, "frame_multiplier", value, 2, 8)

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_in(0, "input_width", v))
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_in(1, "input_height", v))

    def _set_in(self, i: int, name: str, value: int) -> None:
        value = _positive_int(self._name, name, value, 16, 8192)
        if self._in[i] is not None and self._in[i] != value:
            self._release_output("output-size change")
        self._in[i] = value

    def _validate_config(self) -> None:
        if self._in[0] is None or self._in[1] is None:
            raise EffectStateError(self._name, "load", "missing its frame size", "Set input_width and input_height before load().")

    def run(
        self, previous: Any, current: Any, *, frame_index: int, non_blocking: bool = False, stream_ptr: int = 0
    ) -> VideoFrameGenerationOutput:
        """Generate frame ``frame_index`` of ``frame_multiplier`` between two inputs (t = index / multiplier)."""
        self._check_ready("run")
        if isinstance(frame_index, bool) or not isinstance(frame_index, (int, np.integer)) or not 1 <= frame_index < self._multiplier:
            raise EffectConfigError(
                self._name, "frame_index", frame_index, f"must be an integer in [1, frame_multiplier - 1] = [1, {self._multiplier - 1}]"
            )
        return self._generate(previous, current, frame_index / self._multiplier, stream_ptr, non_blocking)

    def run_at_timestep(
        self, previous: Any, current: Any, timestep: float, *, non_blocking: bool = False, stream_ptr: int = 0
    ) -> VideoFrameGenerationOutput:
        """Generate the frame at ``timestep`` in the open interval (0, 1) between two inputs."""
        self._check_ready("run_at_timestep")
        if isinstance(timestep, bool) or not isinstance(timestep, (int, float)) or not 0.0 < float(timestep) < 1.0:
            raise EffectConfigError(self._name, "timestep", timestep, "must be a number in the open interval (0.0, 1.0)")
        return self._generate(previous, current, float(timestep), stream_ptr, non_blocking)

    def _generate(self, previous: Any, current: Any, t: float, stream_ptr: int, non_blocking: bool) -> VideoFrameGenerationOutput:
        prev = self._acquire(previous, "previous")
        cur = self._acquire(current, "current")
        hw_prev = self._check_image("previous", prev, self._encoding)
        hw_cur = self._check_image("current", cur, self._encoding)
        want = (self._in[1], self._in[0])
        for what, hw in (("previous", hw_prev), ("current", hw_cur)):
            if hw != want:
                raise EffectConfigError(
                    self._name, what, f"{hw[1]}x{hw[0]}", f"does not match input_width x input_height = {want[1]}x{want[0]}"
                )
        rgb10 = self._encoding is ImageEncoding.RGB10A2
        detect = self.automatic_shot_change_detection_enabled

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            a, b = staged
            if rgb10:
                return K.pack_rgb10a2(xp, K.blend(xp, K.unpack_rgb10a2(xp, a), K.unpack_rgb10a2(xp, b), t, detect))
            return K.blend(xp, a, b, t, detect)

        h, w = hw_cur
        shape = (h, w) if rgb10 else (3, h, w)
        capsule = self._run_stages([prev, cur], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking)
        return VideoFrameGenerationOutput(capsule)


class TrueHDR(_Effect):
    """Emulated ``nvvfx.TrueHDR``: SDR float RGB to PQ-coded RGB10A2; no RGB8 conversion stage."""

    _has_rgb8_conversion = False
    _RANGES: ClassVar[dict[str, tuple[int, int]]] = {
        "contrast": (0, 200),
        "saturation": (0, 200),
        "middle_gray": (10, 100),
        "luminance": (400, 2000),
        "debanding_off": (0, 1),
    }

    def __init__(
        self,
        contrast: int = 100,
        saturation: int = 100,
        middle_gray: int = 50,
        luminance: int = 650,
        debanding_off: int = 0,
        device: int = 0,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(device=device, image_encoding=ImageEncoding.RGB10A2, backend=backend, latency_us=latency_us)
        self.contrast = contrast
        self.saturation = saturation
        self.middle_gray = middle_gray
        self.luminance = luminance
        self.debanding_off = debanding_off

    @property
    def image_encoding(self) -> _Encoding:
        """Always RGB10A2: TrueHDR has no RGB8 output path."""
        return ImageEncoding.RGB10A2

    @image_encoding.setter
    def image_encoding(self, value: _Encoding) -> None:
        if self._check_encoding(value) is not ImageEncoding.RGB10A2:
            raise EffectConfigError("TrueHDR", "image_encoding", value, "TrueHDR output is always RGB10A2")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TrueHDR._RANGES:
            lo, hi = TrueHDR._RANGES[name]
            value = _positive_int("TrueHDR", name, value, lo, hi)
        super().__setattr__(name, value)

    def run(self, rgb_input: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> TrueHDROutput:
        """Convert one SDR frame (float32 (3, H, W)) to packed RGB10A2 (H, W)."""
        self._check_ready("run")
        arr = self._acquire(rgb_input, "rgb_input")
        h, w = self._check_image("rgb_input", arr, ImageEncoding.RGB8)
        params = dict(contrast=self.contrast, saturation=self.saturation, middle_gray=self.middle_gray, luminance=self.luminance)

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            return K.tone_map_hdr(xp, staged[0], **params)

        return TrueHDROutput(self._run_stages([arr], infer, (h, w), stream_ptr=stream_ptr, non_blocking=non_blocking))
