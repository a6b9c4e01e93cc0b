"""streamsafe's environment switches (``STREAMSAFE_*``), read one way everywhere."""

from __future__ import annotations

import os
import warnings

from .errors import EnvironmentSettingError

__all__ = ["env_flag", "SANITIZE_MEANING"]

SANITIZE_MEANING = "raise RaceError on the first race instead of recording it"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_flag(name: str, default: bool, meaning: str, *, strict: bool = True) -> bool:
    """Whether the switch ``name`` is on (``default`` when unset). For another value it raises
    :class:`EnvironmentSettingError` rather than guess (a misspelt ``STREAMSAFE_SANITIZE=ture`` must
    not quietly leave sanitize mode off); with ``strict=False`` (a switch that changes no result: speed,
    a test check) it warns with the same message and keeps ``default``, so importing streamsafe works."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():  # (unset, or set to nothing: the default)
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    error = EnvironmentSettingError(name, raw, meaning)
    if strict:
        raise error
    warnings.warn(f"{error}; keeping the default ({'on' if default else 'off'})", RuntimeWarning, stacklevel=3)
    return default
