"""Moved to :mod:`streamsafe.sim.races` (the model lives in streamsafe.sim); this name stays so that existing imports keep working."""

import sys

from .sim import races as _moved

sys.modules[__name__] = _moved
