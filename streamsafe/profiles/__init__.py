"""The SDK profiles streamsafe ships (:mod:`streamsafe.profile` says what a profile is).

* :mod:`~streamsafe.profiles.nvvfx`: NVIDIA's video effects, ``VideoSuperRes``,
  ``VideoFrameGeneration`` and ``TrueHDR`` (and any class duck-typed on their API).

Importing a profile module registers its profiles; ``import streamsafe`` imports these.
"""

from . import nvvfx as nvvfx

__all__ = ["nvvfx"]
