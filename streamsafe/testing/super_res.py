"""Emulated ``nvvfx.VideoSuperRes``: its quality levels, its scale rules and input limits, its output.

The rules, and where they come from, are in :mod:`streamsafe.testing.effects`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..backend import Backend
from . import _kernels as K
from ._effect import MIN_SIDE, Effect, EffectOutput, Encoding, ImageEncoding
from ._errors import NvVFXConfigError, NvVFXStateError, member_of, positive_int

__all__ = ["QualityLevel", "SAME_RESOLUTION_QUALITIES", "INPUT_LIMITS", "VideoSuperRes", "VideoSuperResOutput"]

MAX_OUTPUT_SIDE = 16384
"""The largest output side the emulation's setters take (``output_width``, ``output_height``)."""


class QualityLevel(enum.IntEnum):
    """``VideoSuperRes.QualityLevel``: the SDK's ``NVVFX_QUALITY_LEVEL`` values.

    0-4 upscale (``BICUBIC`` is the non-AI baseline), 8-11 denoise and 12-15 deblur (1x only),
    16-19 upscale for high-bitrate sources, 21 and 23 low-latency streaming upscale. Validated
    as the SDK does; the emulation's arithmetic (bilinear resize) ignores the level.
    """

    BICUBIC = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    ULTRA = 4
    DENOISE_LOW = 8
    DENOISE_MEDIUM = 9
    DENOISE_HIGH = 10
    DENOISE_ULTRA = 11
    DEBLUR_LOW = 12
    DEBLUR_MEDIUM = 13
    DEBLUR_HIGH = 14
    DEBLUR_ULTRA = 15
    HIGHBITRATE_LOW = 16
    HIGHBITRATE_MEDIUM = 17
    HIGHBITRATE_HIGH = 18
    HIGHBITRATE_ULTRA = 19
    STREAMING_MEDIUM = 21
    STREAMING_ULTRA = 23


SAME_RESOLUTION_QUALITIES = frozenset(q for q in QualityLevel if q.name.startswith(("DENOISE_", "DEBLUR_")))
"""The qualities that run at 1x only (output size = input size); no other quality runs at 1x."""

INPUT_LIMITS: dict[int, tuple[int, int]] = {1: (3840, 2160), 2: (3840, 2160), 3: (1280, 720), 4: (960, 540)}
"""Largest input per whole scale factor, as a (long side, short side) box: 2160p, 720p, 540p."""


@dataclass(frozen=True)
class VideoSuperResOutput(EffectOutput):
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer: RGB8, float32 ``(3, OH, OW)`` holding k / 255 for 8-bit codes
    k (the SDK converts to 8 bits on stream 0, then hands the codes back as floats); RGB10A2, uint32 ``(OH, OW)`` packed
    R10G10B10A2. Valid until the next ``run()``, an output-size or encoding change, or ``close()``."""



_Quality = QualityLevel  # for annotations inside the class, which re-exports the enum as an attribute


class VideoSuperRes(Effect):
    """Emulated ``nvvfx.VideoSuperRes``: bilinear upscaling with the SDK's stream behaviour.

    Input: float32 ``(3, H, W)`` RGB in [0, 1] on the effect's device (any DLPack producer; taken with
    ``__dlpack__()`` and no stream, as the SDK does). Set ``output_width``/``output_height`` (1x to 4x the input;
    1x only for the ``DENOISE_*``/``DEBLUR_*`` qualities), then ``load()``. ``run(x, stream_ptr=s)`` transfers and
    infers on ``s``; RGB8 output is converted to 8-bit codes on stream 0 and comes back as float32 k / 255
    (:class:`VideoSuperResOutput`); RGB10A2 output is packed uint32. Values outside [0, 1] are clamped and NaN
    reads as 0, as an 8-bit conversion does (the vendor's documentation says nothing of them). ``latency_us``
    spins each stage on the GPU to widen race windows; on the model (``backend=SimBackend(...)``) the stages are
    kernels of the model.
    """

    QualityLevel: ClassVar[type[QualityLevel]] = QualityLevel
    _SELECTOR = "VideoSuperRes"

    def __init__(
        self,
        quality: _Quality = QualityLevel.HIGH,
        device: int = 0,
        strength: float = 1.0,
        image_encoding: Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self.quality = quality
        self.strength = strength
        self._in: list[int | None] = [None, None]
        self._out: list[int | None] = [None, None]
        self._scale_passed: tuple[Any, ...] | None = None
        """The last (w, h, ow, oh, quality) that passed :meth:`_check_scale`."""

    @property
    def quality(self) -> _Quality:
        """The ``QualityLevel``: ``HIGH`` and the other upscaling levels, or a ``DENOISE_*``/``DEBLUR_*`` level (1x only)."""
        return self._quality

    @quality.setter
    def quality(self, value: _Quality) -> None:
        """Changeable between runs; the scale rules are checked at ``load()`` and each ``run()``."""
        quality = member_of(self._name, "quality", QualityLevel, value,
                            "pass a member, e.g. VideoSuperRes.QualityLevel.HIGH or VideoSuperRes.QualityLevel['DENOISE_HIGH']")
        self._changed(getattr(self, "_quality", quality), quality)
        self._quality = quality

    @property
    def strength(self) -> float:
        """How strongly the effect applies, in [0.0, 1.0] (1.0: full); a blend of the upscaled and a plain resize."""
        return self._strength

    @strength.setter
    def strength(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise NvVFXConfigError(
                self._name, "strength", value, "must be a number in [0.0, 1.0]; 1.0 is the full effect, lower values weaken it"
            )
        self._changed(getattr(self, "_strength", float(value)), float(value))
        self._strength = float(value)

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_dim(self._in, 0, "input_width", v),
                           doc="The input's width in pixels (``None``: taken from the first input). Changing it releases nothing.")
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_dim(self._in, 1, "input_height", v),
                            doc="The input's height in pixels (``None``: taken from the first input).")
    output_width = property(lambda self: self._out[0], lambda self, v: self._set_dim(self._out, 0, "output_width", v, True),
                            doc="The output's width in pixels; set before ``load()``. Changing it releases the output buffer.")
    output_height = property(lambda self: self._out[1], lambda self, v: self._set_dim(self._out, 1, "output_height", v, True),
                             doc="The output's height in pixels; set before ``load()``. Changing it releases the output buffer.")

    def _set_dim(self, dims: list[int | None], i: int, name: str, value: int, output: bool = False) -> None:
        value = positive_int(self._name, name, value, MIN_SIDE, MAX_OUTPUT_SIDE, "; pass a pixel count in that range")
        if output and dims[i] is not None and dims[i] != value:
            self._release_output("output-size change")
        self._changed(dims[i], value)
        dims[i] = value

    def _validate_config(self) -> None:
        if self._out[0] is None or self._out[1] is None:
            raise NvVFXStateError(
                self._name, "load", "missing its output size", "Set output_width and output_height before load()."
            )
        if self._in[0] is not None and self._in[1] is not None:  # known early: check the scale rules now
            self._check_scale(self._in[0], self._in[1], self._out[0], self._out[1])

    def _check_scale(self, w: int, h: int, ow: int, oh: int) -> None:
        """The SDK's rules for an input of ``w x h`` and an output of ``ow x oh`` at this quality
        (the last sizes that passed are remembered: a video's frames repeat them)."""
        q = self._quality
        if self._scale_passed == (w, h, ow, oh, q):
            return
        size = f"{ow}x{oh}"
        if q in SAME_RESOLUTION_QUALITIES:
            if (ow, oh) != (w, h):
                raise NvVFXConfigError(
                    self._name,
                    "output size",
                    size,
                    f"{q.name} denoises or deblurs at 1x only, so the output must equal the input size {w}x{h}; "
                    f"set output_width={w} and output_height={h}, or choose an upscaling quality such as HIGH",
                )
        else:
            if not (w <= ow <= 4 * w and h <= oh <= 4 * h):
                top_w, top_h = min(4 * w, MAX_OUTPUT_SIDE), min(4 * h, MAX_OUTPUT_SIDE)
                raise NvVFXConfigError(
                    self._name,
                    "output size",
                    size,
                    f"must be 1x to 4x the input size {w}x{h} in each dimension"
                    + (f", and at most {MAX_OUTPUT_SIDE} a side" if (top_w, top_h) != (4 * w, 4 * h) else "")
                    + f"; set output_width and output_height within [{w}, {top_w}] x [{h}, {top_h}]",
                )
            if (ow, oh) == (w, h):
                level = q.name.split("_")[-1] if q.name.endswith(("LOW", "MEDIUM", "HIGH", "ULTRA")) else "HIGH"
                raise NvVFXConfigError(
                    self._name,
                    "output size",
                    size,
                    f"equals the input size (1x), which only the DENOISE_* and DEBLUR_* qualities allow, not {q.name}; "
                    f"choose e.g. QualityLevel.DENOISE_{level} or QualityLevel.DEBLUR_{level}, "
                    "or set an output larger than the input",
                )
        factor = max(ow / w, oh / h)
        bucket = max(2, math.ceil(factor - 1e-9)) if factor > 1 else 1
        long_max, short_max = INPUT_LIMITS[bucket]
        if max(w, h) > long_max or min(w, h) > short_max:
            larger = [f"{k}x up to {v[0]}x{v[1]}" for k, v in INPUT_LIMITS.items() if k != 1 and v[0] > long_max]
            hint = f" ({', '.join(larger)})" if larger else ""
            raise NvVFXConfigError(
                self._name,
                "input size",
                f"{w}x{h}",
                f"at {factor:g}x (output {size}) the input must fit {long_max}x{short_max} ({short_max}p, either "
                f"orientation); use a smaller input or a lower scale{hint}",
            )
        self._scale_passed = (w, h, ow, oh, q)

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> VideoSuperResOutput:
        """Upscale one frame. Blocks the host only with ``non_blocking=False`` (until inference ends)."""
        self._check_ready("run")
        arr = self._acquire(input_array, "input_array")
        h, w = self._check_image("input_array", arr, self._encoding)
        if (self._in[0] is not None and self._in[0] != w) or (self._in[1] is not None and self._in[1] != h):
            raise NvVFXConfigError(
                self._name,
                "input_array",
                f"{w}x{h}",
                f"does not match input_width x input_height = {self._in[0]}x{self._in[1]}; "
                "pass frames of that size, or set input_width and input_height to the new size",
            )
        ow, oh = self._out[0], self._out[1]
        assert ow is not None and oh is not None
        self._check_scale(w, h, ow, oh)
        rgb10 = self._encoding is ImageEncoding.RGB10A2

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            src = K.unpack_rgb10a2(xp, staged[0]) if rgb10 else staged[0]
            up = K.resize_bilinear(xp, src, oh, ow)
            return K.pack_rgb10a2(xp, up) if rgb10 else up

        shape = (oh, ow) if rgb10 else (3, oh, ow)
        return VideoSuperResOutput(
            self._run_stages([arr], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking, graph_key=("sr", rgb10, oh, ow))
        )
