"""The SDK's errors as the emulated effects raise them, the checks that raise them, and the SDK's version.

:class:`NvVFXError` is ``nvvfx.NvVFXError``. Each error an emulated effect raises for a value or a
state the SDK refuses is an :class:`NvVFXConfigError` or an :class:`NvVFXStateError`: an ``NvVFXError``
and streamsafe's :class:`~streamsafe.errors.EffectConfigError` or :class:`~streamsafe.errors.EffectStateError`
too, so ``except nvvfx.NvVFXError`` and ``except EffectConfigError`` (or ``ValueError``) both catch it.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import EffectConfigError, EffectStateError

__all__ = [
    "NvVFXError", "NvVFXConfigError", "NvVFXStateError", "SDK_VERSION", "get_sdk_version", "positive_int", "members",
    "member_of",
]


SDK_VERSION = "0.0.0+streamsafe"
"""What :func:`get_sdk_version` returns: there is no SDK under the emulation, so no SDK version (chosen)."""


def get_sdk_version() -> str:
    """``nvvfx.get_sdk_version()``: the version of the VFX SDK under the bindings; here :data:`SDK_VERSION`,
    which names the emulation. Does not block."""
    return SDK_VERSION


class NvVFXError(Exception):
    """``nvvfx.NvVFXError``: what the bindings raise when the SDK refuses a call or a setting.

    Every one the emulation raises is an :class:`NvVFXConfigError` (also an
    :class:`~streamsafe.errors.EffectConfigError`, a ``ValueError``) or an :class:`NvVFXStateError` (also an
    :class:`~streamsafe.errors.EffectStateError`, a ``RuntimeError``), so ``except nvvfx.NvVFXError`` and
    the ``except`` clauses written for streamsafe's errors catch the same errors. The emulation's own knobs
    (``latency_us``, ``launch_mode``, ``host_cost_us``), which the SDK does not have, raise plain
    :class:`~streamsafe.errors.EffectConfigError`.
    """


class NvVFXConfigError(NvVFXError, EffectConfigError):
    """A setting, shape or dtype the SDK refuses: an :class:`NvVFXError` and an
    :class:`~streamsafe.errors.EffectConfigError` (the value, the rule, the fix)."""


class NvVFXStateError(NvVFXError, EffectStateError):
    """A call the effect's state refuses (closed, not loaded): an :class:`NvVFXError` and an
    :class:`~streamsafe.errors.EffectStateError`."""


def positive_int(effect: str, name: str, value: Any, lo: int = 1, hi: int = 16384, fix: str = "") -> int:
    """``value`` as an int when it is one in ``[lo, hi]``; else :class:`NvVFXConfigError`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise NvVFXConfigError(effect, name, value, f"must be an integer in [{lo}, {hi}]{fix}")
    return int(value)


def members(enum_type: type[enum.IntEnum]) -> str:
    """The members of ``enum_type`` for a message: ``"NAME (value), ..."``."""
    return ", ".join(f"{m.name} ({int(m)})" for m in enum_type)


def member_of(effect: str, setting: str, enum_type: Any, value: Any, hint: str = "") -> Any:
    """``enum_type(value)``, or an :class:`NvVFXConfigError` naming ``effect``'s ``setting``, the members and
    ``hint`` (how to pass one)."""
    try:
        return enum_type(value)
    except ValueError:
        raise NvVFXConfigError(
            effect, setting, value, f"must be {'an' if enum_type.__name__[0] in 'AEIOU' else 'a'} {enum_type.__name__} value, "
            f"one of {members(enum_type)}" + (f"; {hint}" if hint else ""),
        ) from None
