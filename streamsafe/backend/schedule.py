"""Moved to :mod:`streamsafe.sim.schedule` (the model lives in streamsafe.sim); this name stays so that existing imports keep working."""

import sys

from ..sim import schedule as _moved

sys.modules[__name__] = _moved
