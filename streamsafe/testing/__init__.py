"""streamsafe.testing: nvvfx-compatible effects that reproduce the SDK's stream behaviour.

On a GPU the stages are real CuPy kernels on the real streams; without one they run on
the :class:`~streamsafe.sim.SimBackend` model, with the same ordering, so every hazard can be
tested in CI. ``install_fake_nvvfx()`` lets ``from nvvfx import VideoSuperRes`` run here (and
``import nvvfx.effects``, ``from nvvfx.effects.base import Effect``), and ``install_fake_pynvvideocodec()`` lets ``import PyNvVideoCodec`` load an emulated video decoder (on the
model; it decodes real files with PyAV), and ``install_fake_pyav_hw()`` makes PyAV's
``av.open(path, hwaccel=...)`` hand out emulated NVDEC frames on the model.
"""

from __future__ import annotations

from .effects import (
    INPUT_LIMITS,
    SAME_RESOLUTION_QUALITIES,
    SDK_VERSION,
    STAGES,
    Effect,
    EffectOutput,
    ImageEncoding,
    Mode,
    NvVFXConfigError,
    NvVFXError,
    NvVFXStateError,
    QualityLevel,
    TrueHDR,
    TrueHDROutput,
    VideoFrameGeneration,
    VideoFrameGenerationOutput,
    VideoSuperRes,
    VideoSuperResOutput,
    get_sdk_version,
)
from .fake_nvvfx import build_fake_nvvfx, fake_nvvfx, install_fake_nvvfx, is_fake_nvvfx, uninstall_fake_nvvfx
from .fake_pyav import fake_pyav_hw, install_fake_pyav_hw, is_fake_pyav_hw, uninstall_fake_pyav_hw
from .fake_pynvvideocodec import (
    fake_pynvvideocodec,
    install_fake_pynvvideocodec,
    is_fake_pynvvideocodec,
    make_test_clip,
    sample_clip,
    uninstall_fake_pynvvideocodec,
)

__all__ = [
    "INPUT_LIMITS",
    "SAME_RESOLUTION_QUALITIES",
    "SDK_VERSION",
    "STAGES",
    "Effect",
    "EffectOutput",
    "ImageEncoding",
    "Mode",
    "NvVFXConfigError",
    "NvVFXError",
    "NvVFXStateError",
    "QualityLevel",
    "TrueHDR",
    "TrueHDROutput",
    "VideoFrameGeneration",
    "VideoFrameGenerationOutput",
    "VideoSuperRes",
    "VideoSuperResOutput",
    "build_fake_nvvfx",
    "fake_nvvfx",
    "fake_pyav_hw",
    "fake_pynvvideocodec",
    "get_sdk_version",
    "install_fake_nvvfx",
    "install_fake_pyav_hw",
    "install_fake_pynvvideocodec",
    "is_fake_nvvfx",
    "is_fake_pyav_hw",
    "is_fake_pynvvideocodec",
    "make_test_clip",
    "sample_clip",
    "uninstall_fake_nvvfx",
    "uninstall_fake_pyav_hw",
    "uninstall_fake_pynvvideocodec",
]
