"""Emulated nvvfx 0.2 effects: the SDK's API and, exactly, its stream behaviour.

What each ``run()`` does, in order (as the vendor's documentation describes the SDK):

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

The public surface (names, values, ranges) follows nvvfx 0.2 as its documentation and NVIDIA's
sample programs use it; where they say nothing the emulation chooses, and says so:

* ``QualityLevel``: the SDK's ``NVVFX_QUALITY_LEVEL`` values (0-4 upscaling, 8-11 denoise,
  12-15 deblur, 16-19 high bitrate, 21 and 23 streaming). Sources: the README of
  github.com/NVIDIA-Maxine/nvidia-vfx-python-samples (``STREAMING_MEDIUM`` (21),
  ``STREAMING_ULTRA`` (23), the DENOISE_/DEBLUR_ names) and the VFX SDK's VideoSuperRes sample
  (mode table 0-23).
* 1x (output size = input size) only with ``DENOISE_*``/``DEBLUR_*``, and those qualities only
  at 1x ("Upscaling is not supported in Denoise and Deblur"; the samples' ``--scale 1``).
  Every other quality upscales: output from 1x to 4x the input in each dimension, larger than
  the input in at least one.
* Input-size limit per scale, from the VFX SDK's Super Resolution table
  (docs.nvidia.com/maxine/vfx/latest/Filters/SuperResolution.html): up to 2x: 2160p, 3x: 720p,
  4x: 540p. The scale is the larger of the two output/input ratios, rounded up to a whole
  factor. Chosen here: "Np" means the frame fits an N*16/9 x N box in either orientation
  (portrait allowed), 1x (denoise/deblur) allows 2160p like 2x, and the minimum side is 16
  pixels (the SDK's table says 90), so tests on the model stay cheap.
* ``VideoFrameGeneration.frame_multiplier`` in [2, 8] and ``frame_index`` in [1, M - 1]
  (docs.nvidia.com/maxine/vfx/latest/Filters/VideoFrameGeneration.html); the C API's
  ``FrameMultiplier = 0`` (explicit timestep mode) is the Python ``run_at_timestep()``, so 0 is
  refused here with that fix. ``Mode``: LOW 0, MEDIUM 1, HIGH 2 (same page; samples' ``--mode``).
* TrueHDR tunables: contrast and saturation [0, 200], middle_gray [10, 100], luminance
  [400, 2000] nits, debanding_off 0 or 1 (the samples' README).
* Invalid values raise :class:`~streamsafe.errors.EffectConfigError` (a ``ValueError``, as the wheel
  raises for out-of-range tunables); calls in the wrong state raise
  :class:`~streamsafe.errors.EffectStateError` (a ``RuntimeError``). Each message names the value,
  the rule and the fix.

The effects live in their own modules (:mod:`streamsafe.testing.super_res`,
:mod:`streamsafe.testing.frame_generation`, :mod:`streamsafe.testing.true_hdr`, their shared
base in ``streamsafe.testing._effect``); this module gathers their public names.
"""

from __future__ import annotations

from ._effect import STAGES, ImageEncoding
from .frame_generation import Mode, VideoFrameGeneration, VideoFrameGenerationOutput
from .super_res import INPUT_LIMITS, SAME_RESOLUTION_QUALITIES, QualityLevel, VideoSuperRes, VideoSuperResOutput
from .true_hdr import TrueHDR, TrueHDROutput

__all__ = [
    "ImageEncoding",
    "QualityLevel",
    "Mode",
    "SAME_RESOLUTION_QUALITIES",
    "INPUT_LIMITS",
    "VideoSuperRes",
    "VideoFrameGeneration",
    "TrueHDR",
    "VideoSuperResOutput",
    "VideoFrameGenerationOutput",
    "TrueHDROutput",
    "STAGES",
]
