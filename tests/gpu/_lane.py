"""Where GPU tests write artefacts for the lane script."""

from __future__ import annotations

import os
from pathlib import Path


def lane_output(name: str) -> Path | None:
    """The path for artefact ``name`` under ``STREAMSAFE_GPU_OUT``, or ``None`` when it is unset."""
    folder = os.environ.get("STREAMSAFE_GPU_OUT")
    return Path(folder) / name if folder else None
