"""nvvfx's effects as profiles: what the vendor's documentation says of their calls and buffers.

* ``run(...)`` (all three) and ``run_at_timestep(...)`` (``VideoFrameGeneration``) take their
  inputs with ``__dlpack__()`` and no stream, run inference on ``stream_ptr``, convert RGB8 output
  on stream 0 (the legacy stream; not for ``RGB10A2``, nor ``TrueHDR``, whose output is packed
  RGB10A2), and return a dataclass whose ``image`` is a raw DLPack capsule of an output buffer the
  next call reuses; ``non_blocking=False`` makes the host wait for ``stream_ptr`` before the
  conversion.
* ``close()`` releases the buffers; so may a change of the output size or the encoding, and of an
  input size, except for ``VideoSuperRes``, whose output has a size of its own.

An effect class no profile names (duck-typed on this API) gets :data:`GENERIC`.
"""

from __future__ import annotations

from typing import Any

from ..outputs import SafeImage, SafeOutput
from ..profile import Profile, register

__all__ = ["VIDEO_SUPER_RES", "VIDEO_FRAME_GENERATION", "TRUE_HDR", "GENERIC", "EFFECT_CLASSES"]

EFFECT_CLASSES = ("VideoSuperRes", "VideoFrameGeneration", "TrueHDR")
"""The class names of nvvfx's effects (what :func:`streamsafe.guard` looks for in a module)."""

_SETTINGS = ("output_width", "output_height", "image_encoding", "input_width", "input_height")
_INPUTS = ("input_array", "previous", "current", "rgb_input")


def _releases_output(effect: Any, attr: str) -> bool:
    """An output size or the encoding; an input size too (``VideoFrameGeneration``'s output size is its input size)."""
    return attr in _SETTINGS


def _super_res_releases_output(effect: Any, attr: str) -> bool:
    """``VideoSuperRes``'s output has a size of its own: an input-size change releases nothing."""
    return attr in _SETTINGS and attr not in ("input_width", "input_height")


def _converts(effect: Any) -> bool:
    """RGB8 output is converted on stream 0 after inference; RGB10A2 output is not."""
    if getattr(type(effect), "_has_rgb8_conversion", True) is False:
        return False
    encoding = getattr(effect, "image_encoding", None)
    return not getattr(encoding, "name", str(encoding)).upper().endswith("RGB10A2")


def _never_converts(effect: Any) -> bool:
    return False


def _wrap(raw: Any, ledger: Any, generation: int, device: int, default_consumer: Any, effect: Any) -> SafeOutput:
    """The guarded output: the SDK's dataclass with ``image`` a :class:`~streamsafe.SafeImage` producer."""
    return SafeOutput(raw, SafeImage(ledger, raw.image, generation, device, default_consumer, effect))


def _profile(name: str, classes: tuple[str, ...], calls: tuple[str, ...], releases_output: Any = _releases_output,
             converts: Any = _converts) -> Profile:
    return Profile(
        name=name, classes=classes, calls=calls, releases=("close",), input_keywords=_INPUTS,
        stream_keyword="stream_ptr", blocking_keyword="non_blocking", settings=_SETTINGS,
        releases_output=releases_output, converts=converts, wrap=_wrap,
    )


VIDEO_SUPER_RES = register(_profile("nvvfx.VideoSuperRes", ("VideoSuperRes",), ("run",), _super_res_releases_output))
VIDEO_FRAME_GENERATION = register(_profile("nvvfx.VideoFrameGeneration", ("VideoFrameGeneration",), ("run", "run_at_timestep")))
TRUE_HDR = register(_profile("nvvfx.TrueHDR", ("TrueHDR",), ("run",), converts=_never_converts))
GENERIC = register(_profile("an nvvfx-like effect", (), ("run", "run_at_timestep")), fallback=True)
"""The profile of an effect class no other profile names: nvvfx's API, duck-typed."""
