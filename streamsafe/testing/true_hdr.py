"""Emulated ``nvvfx.TrueHDR``: its tunables and their ranges, its RGB10A2 output.

The rules, and where they come from, are in :mod:`streamsafe.testing.effects`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..backend import Backend
from . import _kernels as K
from ._effect import Effect, EffectOutput, Encoding, ImageEncoding
from ._errors import NvVFXConfigError, positive_int

__all__ = ["TrueHDR", "TrueHDROutput"]


@dataclass(frozen=True)
class TrueHDROutput(EffectOutput):
    image: Any
    """A raw DLPack capsule of the SDK-owned RGB10A2 output buffer: uint32 ``(H, W)``, each pixel packed R10G10B10A2
    (bits 0-9 red, 10-19 green, 20-29 blue: 10-bit PQ-coded values; bits 30-31 alpha, 3). Unpack a copy with
    ``(x >> 10 * c) & 1023`` for channel c. Valid until the next ``run()``, a size change or ``close()``."""



class TrueHDR(Effect):
    """Emulated ``nvvfx.TrueHDR``: SDR float RGB to PQ-coded RGB10A2; no RGB8 conversion stage.

    Input: float32 ``(3, H, W)`` SDR RGB in [0, 1] (clamped; NaN reads as 0). ``run(x, stream_ptr=s)`` runs
    everything on ``s``; the output (:class:`TrueHDROutput`) is packed uint32 RGB10A2, written on ``s`` only, so
    a consumer on ``s`` needs no fence (H4 is the only consumer edge).
    """

    _has_rgb8_conversion = False
    _SELECTOR = "TrueHDR"
    _RANGES: ClassVar[dict[str, tuple[int, int]]] = {
        "contrast": (0, 200),
        "saturation": (0, 200),
        "middle_gray": (10, 100),
        "luminance": (400, 2000),
        "debanding_off": (0, 1),
    }
    _MEANING: ClassVar[dict[str, str]] = {
        "contrast": "100 is neutral, higher steepens the tone curve",
        "saturation": "100 is neutral, 0 is gray",
        "middle_gray": "where SDR middle gray lands on the HDR curve; 50 is the default",
        "luminance": "the target display's peak in nits, e.g. 1000",
        "debanding_off": "1 skips the debanding pass, 0 keeps it",
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
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=ImageEncoding.RGB10A2, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self.contrast = contrast
        self.saturation = saturation
        self.middle_gray = middle_gray
        self.luminance = luminance
        self.debanding_off = debanding_off

    @property
    def image_encoding(self) -> Encoding:
        """Always RGB10A2: TrueHDR has no RGB8 output path."""
        return ImageEncoding.RGB10A2

    @image_encoding.setter
    def image_encoding(self, value: Encoding) -> None:
        if self._check_encoding(value) is not ImageEncoding.RGB10A2:
            raise NvVFXConfigError(
                "TrueHDR", "image_encoding", value, "TrueHDR output is always RGB10A2 (its input is RGB8 float32); leave it"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TrueHDR._RANGES:
            lo, hi = TrueHDR._RANGES[name]
            if name == "debanding_off" and isinstance(value, bool):
                value = int(value)  # chosen: a bool is taken as 0/1 (the samples pass 0 or 1)
            value = positive_int("TrueHDR", name, value, lo, hi, f"; {TrueHDR._MEANING[name]}")
            if name in self.__dict__:
                self._changed(self.__dict__[name], value)
        super().__setattr__(name, value)

    def run(self, rgb_input: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> TrueHDROutput:
        """Convert one SDR frame (float32 (3, H, W)) to packed RGB10A2 (H, W)."""
        self._check_ready("run")
        arr = self._acquire(rgb_input, "rgb_input")
        h, w = self._check_image("rgb_input", arr, ImageEncoding.RGB8)
        params = dict(contrast=self.contrast, saturation=self.saturation, middle_gray=self.middle_gray, luminance=self.luminance)

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            return K.tone_map_hdr(xp, staged[0], **params)

        return TrueHDROutput(self._run_stages([arr], infer, (h, w), stream_ptr=stream_ptr, non_blocking=non_blocking,
                                              graph_key=("hdr", *params.values())))
