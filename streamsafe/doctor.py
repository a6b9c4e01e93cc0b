"""Moved to :mod:`streamsafe.tools.doctor` (the tools live in streamsafe.tools); this name stays so that existing imports keep working."""

import sys

from .tools import doctor as _moved

sys.modules[__name__] = _moved
