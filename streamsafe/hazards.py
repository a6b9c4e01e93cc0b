"""Moved to :mod:`streamsafe.tools.hazards` (the tools live in streamsafe.tools); this name stays so that existing imports keep working."""

import sys

from .tools import hazards as _moved

sys.modules[__name__] = _moved
