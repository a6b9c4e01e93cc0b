"""The SDK profiles streamsafe ships (:mod:`streamsafe.profile` says what a profile is).

* :mod:`~streamsafe.profiles.nvvfx`: NVIDIA's video effects, ``VideoSuperRes``,
  ``VideoFrameGeneration`` and ``TrueHDR`` (and any class duck-typed on their API).
* :mod:`~streamsafe.profiles.pynvvideocodec`: NVIDIA's video decoder, PyNvVideoCodec's
  ``SimpleDecoder`` and ``ThreadedDecoder`` (pool profiles: each call writes buffers of a pool).
* :mod:`~streamsafe.profiles.pyav`: PyAV's NVDEC frames, its ``InputContainer`` (a pool profile whose
  ``decode()`` hands out frames lazily, each holding its CUDA surface until it goes).

Importing a profile module registers its profiles; ``import streamsafe`` imports these.
"""

from . import nvvfx as nvvfx
from . import pyav as pyav
from . import pynvvideocodec as pynvvideocodec

__all__ = ["nvvfx", "pyav", "pynvvideocodec"]
