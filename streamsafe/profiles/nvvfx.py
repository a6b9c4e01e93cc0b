"""nvvfx's effects as profiles: what the vendor's documentation says of their calls and buffers.

* ``run(...)`` (all three) and ``run_at_timestep(...)`` (``VideoFrameGeneration``) take their inputs with
  ``__dlpack__()`` and no stream, run inference on ``stream_ptr``, convert RGB8 output on stream 0 (the legacy
  stream; not for ``RGB10A2``, nor ``TrueHDR``, whose output is packed RGB10A2), and return a dataclass whose
  ``image`` is a raw DLPack capsule of an output buffer the next call reuses; ``non_blocking=False`` makes the
  host wait for ``stream_ptr`` before the conversion.
* ``close()`` releases the buffers and closes the effect; so may a change of the output size or the encoding
  release them, and of an input size, except for ``VideoSuperRes``, whose output has a size of its own.

The classes are named by their exact qualified names: nvvfx's own (``nvvfx.effects.*``, and the top-level names
its package gives) and streamsafe's emulation of them (:mod:`streamsafe.testing`). A class no profile names but
that has ``run()`` (an SDK duck-typed on this API) gets :data:`GENERIC`.
"""

from __future__ import annotations

from typing import Any

from ..profile import EffectProfile, register

__all__ = ["VIDEO_SUPER_RES", "VIDEO_FRAME_GENERATION", "TRUE_HDR", "EFFECT", "GENERIC", "EFFECT_CLASSES"]

EFFECT_CLASSES = ("VideoSuperRes", "VideoFrameGeneration", "TrueHDR")
"""The class names of nvvfx's effects (what :func:`streamsafe.guard` looks for in a module)."""

_SETTINGS = ("output_width", "output_height", "image_encoding", "input_width", "input_height")
_INPUTS = ("input_array", "previous", "current", "rgb_input")
"""Every effect's input parameters (the fallback's: an effect duck-typed on nvvfx's API); each profile names its own."""
_EMULATION = "streamsafe.testing.fake_nvvfx:EMULATION"


def _names(cls: str, module: str) -> tuple[str, ...]:
    """The qualified names one of nvvfx's classes goes by: nvvfx's package and its ``effects`` module, and the
    emulation's."""
    return (f"nvvfx.{cls}", f"nvvfx.effects.{module}.{cls}", f"nvvfx.effects.{cls}", f"streamsafe.testing.{module}.{cls}")


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


def _profile(name: str, classes: tuple[str, ...], calls: tuple[str, ...], releases_output: Any = _releases_output,
             converts: Any = _converts, inputs: tuple[str, ...] = ("input_array",)) -> EffectProfile:
    return EffectProfile(
        name=name, classes=classes, calls=calls, releases=("close",), closes=("close",), inputs=inputs,
        stream_keyword="stream_ptr", blocking_keyword="non_blocking", settings=_SETTINGS,
        releases_output=releases_output, converts=converts, output="image", module="nvvfx", emulation=_EMULATION,
    )


EFFECT = register(_profile("nvvfx.effects.base.Effect", ("nvvfx.effects.base.Effect", "streamsafe.testing._effect.Effect"),
                           ("run", "run_at_timestep")))
"""Any subclass of nvvfx's effect base class (third-party code's, with a ``_SELECTOR`` for another filter)."""
VIDEO_SUPER_RES = register(_profile("nvvfx.VideoSuperRes", _names("VideoSuperRes", "super_res")
                                    + ("nvvfx.effects.video_super_res.VideoSuperRes",), ("run",), _super_res_releases_output))
VIDEO_FRAME_GENERATION = register(_profile(
    "nvvfx.VideoFrameGeneration", _names("VideoFrameGeneration", "frame_generation")
    + ("nvvfx.effects.video_frame_generation.VideoFrameGeneration",), ("run", "run_at_timestep"), inputs=("previous", "current")))
TRUE_HDR = register(_profile("nvvfx.TrueHDR", _names("TrueHDR", "true_hdr") + ("nvvfx.effects.true_hdr.TrueHDR",), ("run",),
                             converts=_never_converts, inputs=("rgb_input",)))
GENERIC = register(_profile("an nvvfx-like effect", (), ("run", "run_at_timestep"), inputs=_INPUTS), fallback=True)
"""The profile of an effect class no other profile names: nvvfx's API, duck-typed."""
