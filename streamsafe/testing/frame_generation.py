"""Emulated ``nvvfx.VideoFrameGeneration``: its mode, the frame multiplier and timesteps, its output.

The rules, and where they come from, are in :mod:`streamsafe.testing.effects`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..backend import Backend
from . import _kernels as K
from ._effect import MIN_SIDE, Effect, EffectOutput, Encoding, ImageEncoding
from ._errors import NvVFXConfigError, NvVFXStateError, member_of, positive_int

__all__ = ["Mode", "VideoFrameGeneration", "VideoFrameGenerationOutput"]


class Mode(enum.IntEnum):
    """``VideoFrameGeneration.Mode``: the model mode (accepted; the emulation's arithmetic ignores it)."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2



@dataclass(frozen=True)
class VideoFrameGenerationOutput(EffectOutput):
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer (the same buffer for every generated frame): RGB8, float32
    ``(3, H, W)`` holding k / 255; RGB10A2, packed uint32 ``(H, W)``. Valid until the next ``run()``/``run_at_timestep()``,
    a size or encoding change, or ``close()``."""



_Mode = Mode  # for annotations inside the class, which re-exports the enum as an attribute


class VideoFrameGeneration(Effect):
    """Emulated ``nvvfx.VideoFrameGeneration``: a blend of two frames at a timestep.

    Inputs: two float32 ``(3, H, W)`` RGB frames in [0, 1] (``previous``, ``current``; clamped, NaN reads as 0).
    ``run(previous, current, frame_index=i)`` makes the frame at i / ``frame_multiplier``;
    ``run_at_timestep(previous, current, t)`` the one at ``t`` in (0, 1). The output has the inputs' size; RGB8 is
    converted on stream 0 and comes back as float32 k / 255 (:class:`VideoFrameGenerationOutput`).
    """

    Mode: ClassVar[type[Mode]] = Mode
    _SELECTOR = "VideoFrameGeneration"

    def __init__(
        self,
        mode: _Mode = Mode.MEDIUM,
        automatic_shot_change_detection_enabled: bool = True,
        device: int = 0,
        image_encoding: Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self._in: list[int | None] = [None, None]
        self._multiplier = 2
        self.mode = mode
        self.automatic_shot_change_detection_enabled = automatic_shot_change_detection_enabled

    @property
    def mode(self) -> _Mode:
        """The ``Mode`` (quality/speed trade-off of the interpolation); changeable between runs."""
        return self._mode

    @mode.setter
    def mode(self, value: _Mode) -> None:
        mode = member_of(self._name, "mode", Mode, value, "pass a member, e.g. VideoFrameGeneration.Mode.MEDIUM")
        self._changed(getattr(self, "_mode", mode), mode)
        self._mode = mode

    @property
    def automatic_shot_change_detection_enabled(self) -> bool:
        """Whether the SDK looks for a cut between the two inputs itself (then repeats the nearer frame rather than
        interpolating across it); changeable between runs. ``shot_change=True`` on a run says there is one."""
        return self._detect

    @automatic_shot_change_detection_enabled.setter
    def automatic_shot_change_detection_enabled(self, value: bool) -> None:
        detect = bool(value)
        self._changed(getattr(self, "_detect", detect), detect)
        self._detect = detect

    @property
    def frame_multiplier(self) -> int:
        """M in [2, 8]: ``run(frame_index=i)`` makes the frame at i / M between the two inputs, for i in [1, M - 1]."""
        return self._multiplier

    @frame_multiplier.setter
    def frame_multiplier(self, value: int) -> None:
        """M in [2, 8]: ``run(frame_index=i)`` makes the frame at i / M, for i in [1, M - 1]."""
        self._multiplier = positive_int(
            self._name,
            "frame_multiplier",
            value,
            2,
            8,
            "; M - 1 frames are generated between two inputs, at i / M. "
            "For other positions (the C API's FrameMultiplier = 0) call run_at_timestep() instead",
        )

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_in(0, "input_width", v),
                           doc="The frames' width in pixels (the output's too). Changing it releases the output buffer.")
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_in(1, "input_height", v),
                            doc="The frames' height in pixels (the output's too). Changing it releases the output buffer.")

    def _set_in(self, i: int, name: str, value: int) -> None:
        value = positive_int(self._name, name, value, MIN_SIDE, 8192, "; pass a pixel count in that range")
        if self._in[i] is not None and self._in[i] != value:
            self._release_output("output-size change")
        self._changed(self._in[i], value)
        self._in[i] = value

    def _validate_config(self) -> None:
        if self._in[0] is None or self._in[1] is None:
            raise NvVFXStateError(self._name, "load", "missing its frame size", "Set input_width and input_height before load().")

    def run(  # type: ignore[override]  # (two inputs, as the SDK's VideoFrameGeneration.run takes them)
        self, previous: Any, current: Any, *, frame_index: int, shot_change: bool = False, non_blocking: bool = False,
        stream_ptr: int = 0,
    ) -> VideoFrameGenerationOutput:
        """Generate frame ``frame_index`` of ``frame_multiplier`` between two inputs (t = index / multiplier).
        ``shot_change=True``: there is a cut between them, so the nearer input is repeated (nothing is interpolated
        across a cut). Blocks the host only with ``non_blocking=False`` (until inference ends)."""
        self._check_ready("run")
        if isinstance(frame_index, bool) or not isinstance(frame_index, (int, np.integer)) or not 1 <= frame_index < self._multiplier:
            raise NvVFXConfigError(
                self._name,
                "frame_index",
                frame_index,
                f"must be an integer in [1, frame_multiplier - 1] = [1, {self._multiplier - 1}]; "
                "raise frame_multiplier first, or use run_at_timestep() for an explicit position",
            )
        return self._generate(previous, current, frame_index / self._multiplier, _shot_change(self._name, shot_change), stream_ptr,
                              non_blocking)

    def run_at_timestep(
        self, previous: Any, current: Any, timestep: float, *, shot_change: bool = False, non_blocking: bool = False,
        stream_ptr: int = 0,
    ) -> VideoFrameGenerationOutput:
        """Generate the frame at ``timestep`` in the open interval (0, 1) between two inputs; ``shot_change`` as for
        :meth:`run`. Blocks the host only with ``non_blocking=False`` (until inference ends)."""
        self._check_ready("run_at_timestep")
        if isinstance(timestep, bool) or not isinstance(timestep, (int, float)) or not 0.0 < float(timestep) < 1.0:
            raise NvVFXConfigError(
                self._name,
                "timestep",
                timestep,
                "must be a number in the open interval (0.0, 1.0) (0 is the previous frame, 1 the current one); "
                "pass a position strictly between them, e.g. 0.5",
            )
        return self._generate(previous, current, float(timestep), _shot_change(self._name, shot_change), stream_ptr, non_blocking)

    def _generate(
        self, previous: Any, current: Any, t: float, cut: bool, stream_ptr: int, non_blocking: bool
    ) -> VideoFrameGenerationOutput:
        prev = self._acquire(previous, "previous")
        cur = self._acquire(current, "current")
        hw_prev = self._check_image("previous", prev, self._encoding)
        hw_cur = self._check_image("current", cur, self._encoding)
        want = (self._in[1], self._in[0])
        if hw_prev != want or hw_cur != want:
            what, hw = ("previous", hw_prev) if hw_prev != want else ("current", hw_cur)
            raise NvVFXConfigError(
                self._name,
                what,
                f"{hw[1]}x{hw[0]}",
                f"does not match input_width x input_height = {want[1]}x{want[0]}; frame generation does not "
                "scale: pass two frames of that size, or set input_width and input_height to theirs",
            )
        rgb10 = self._encoding is ImageEncoding.RGB10A2
        detect = self.automatic_shot_change_detection_enabled

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            a, b = staged
            if rgb10:
                return K.pack_rgb10a2(xp, K.blend(xp, K.unpack_rgb10a2(xp, a), K.unpack_rgb10a2(xp, b), t, detect, cut))
            return K.blend(xp, a, b, t, detect, cut)

        h, w = hw_cur
        shape = (h, w) if rgb10 else (3, h, w)
        capsule = self._run_stages([prev, cur], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking,
                                   graph_key=("vfg", rgb10, t, "cut" if cut else detect))
        return VideoFrameGenerationOutput(capsule)


def _shot_change(effect: str, value: Any) -> bool:
    """``shot_change=`` as a bool (``True``/``False``, or 1/0); else :class:`~streamsafe.testing.NvVFXConfigError`."""
    if value is True or value is False:
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) in (0, 1):
        return bool(value)
    raise NvVFXConfigError(
        effect, "shot_change", value,
        "must be True (there is a cut between previous and current: the nearer one is repeated) or False (interpolate); "
        "pass a bool",
    )
