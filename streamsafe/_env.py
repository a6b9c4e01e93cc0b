"""streamsafe's environment switches (``STREAMSAFE_*``), read one way everywhere.

Every switch streamsafe reads is in :data:`SWITCHES`; a value it does not read raises
:class:`~streamsafe.errors.EnvironmentSettingError` (or, for a switch that changes no result, warns and keeps
the default). A ``STREAMSAFE_*`` name that is neither a switch nor one of the test suite's
(:data:`SUITE_NAMES`) is warned about once, at import, naming the closest known name. Warnings point at the
user's line: the first frame outside streamsafe.
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType

from .errors import EnvironmentSettingError, EnvironmentSettingWarning

__all__ = [
    "env_flag",
    "env_choice",
    "SANITIZE_MEANING",
    "SWITCHES",
    "SUITE_NAMES",
    "Switch",
    "check_switches",
    "setting_problems",
    "warn_unknown_names",
    "warn_at_user",
]

SANITIZE_MEANING = "raise RaceError on the first race instead of recording it"
FENCE_CALLS_MEANING = "how fences call the driver: held keeps the GIL for each call, bindings releases it"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Switch:
    """A ``STREAMSAFE_*`` switch: its values (``None``: on/off), default, meaning, and whether a value it does
    not read raises (``strict``) or warns and keeps the default (a switch that changes no result)."""

    name: str
    meaning: str
    default: str
    choices: tuple[str, ...] | None = None
    strict: bool = True

    def accepted(self) -> str:
        """The values it reads, for a message."""
        if self.choices is None:
            return "1 (also true, yes, on) or 0 (also false, no, off), in any case"
        *first, last = self.choices
        return f"{', '.join(first)} or {last}, in any case"

    def problem(self, raw: str) -> EnvironmentSettingError | None:
        """The error for the value ``raw``, or ``None`` when the switch reads it."""
        value = raw.strip().lower()
        if not value or value in (self.choices if self.choices is not None else _TRUE + _FALSE):
            return None
        return EnvironmentSettingError(self.name, raw, self.meaning, self.accepted())


SWITCHES: dict[str, Switch] = {
    s.name: s
    for s in (
        Switch("STREAMSAFE_SANITIZE", SANITIZE_MEANING, "0"),
        Switch("STREAMSAFE_FENCE_CALLS", FENCE_CALLS_MEANING, "held", ("held", "bindings")),
        Switch("STREAMSAFE_REPLAY", "replay steady-state frames from recipes", "1", strict=False),
        Switch("STREAMSAFE_CHECK_REPLAY", "plan every replayed call again and compare", "0", strict=False),
    )
}
"""Every switch the library reads, by name."""

SUITE_NAMES = (
    "STREAMSAFE_BENCH_CLIP", "STREAMSAFE_DECODER_FRAMES", "STREAMSAFE_DECODER_MACHINE_EXAMPLES", "STREAMSAFE_FUZZ_CONTROL_FRAMES",
    "STREAMSAFE_FUZZ_FRAMES", "STREAMSAFE_FUZZ_LATE_US", "STREAMSAFE_FUZZ_MAX_DELAY_US", "STREAMSAFE_FUZZ_MODEL_FRAMES",
    "STREAMSAFE_FUZZ_MODEL_PROGRAMS", "STREAMSAFE_FUZZ_PRODUCERS", "STREAMSAFE_FUZZ_PROGRAM_FRAMES",
    "STREAMSAFE_FUZZ_SEED", "STREAMSAFE_FUZZ_STRATEGIES", "STREAMSAFE_GPU_OUT", "STREAMSAFE_IDIOM_FRAMES",
    "STREAMSAFE_INVARIANT_PROGRAMS", "STREAMSAFE_MACHINE_EXAMPLES", "STREAMSAFE_MULTI_GPU_JITTER_US",
    "STREAMSAFE_MULTI_GPU_MATRIX_FRAMES", "STREAMSAFE_MULTI_GPU_SOAK_FRAMES", "STREAMSAFE_MULTI_GPU_STRATEGIES",
    "STREAMSAFE_PYAV_CLIP", "STREAMSAFE_PYAV_FRAMES", "STREAMSAFE_SANITIZE_SYNC_FRAMES", "STREAMSAFE_SOAK_FRAMES",
    "STREAMSAFE_TEST_CLIP",
)
"""Names streamsafe's own test suite and GPU lane read (lengths, seeds, paths): known, so not warned about."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside(frame: FrameType) -> bool:
    return not os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE)


def _internal(frame: FrameType) -> bool:
    """A frame of the import machinery, which ``warnings`` skips when it counts a stacklevel."""
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def warn_at_user(message: str, category: type[Warning] = EnvironmentSettingWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside streamsafe (the user's line,
    an ``import streamsafe`` included), the stacklevel counted as ``warnings`` counts it."""
    frame: FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None and not _outside(frame):
        back = frame.f_back
        while back is not None and _internal(back):
            back = back.f_back
        if back is None:
            break
        frame, level = back, level + 1
    warnings.warn(message, category, stacklevel=level)


def env_flag(name: str, default: bool, meaning: str, *, strict: bool = True) -> bool:
    """Whether the switch ``name`` is on (``default`` when unset). For another value it raises
    :class:`EnvironmentSettingError` rather than guess (a misspelt ``STREAMSAFE_SANITIZE=ture`` must
    not quietly leave sanitize mode off); with ``strict=False`` (a switch that changes no result: speed,
    a test check) it warns (:class:`~streamsafe.errors.EnvironmentSettingWarning`, at the user's line) with
    the same message and keeps ``default``, so importing streamsafe works."""
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
    warn_at_user(f"{error}; keeping the default ({'on' if default else 'off'})")
    return default


def env_choice(name: str) -> str:
    """The value of the switch ``name`` of :data:`SWITCHES` that has choices, lowercased (its default when
    unset or empty); another value raises :class:`EnvironmentSettingError` naming the choices. Does not block."""
    switch = SWITCHES[name]
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return switch.default
    error = switch.problem(raw)
    if error is not None:
        raise error
    return raw.strip().lower()


def setting_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line for each ``STREAMSAFE_*`` variable of ``environ`` (default: the process's) that streamsafe would
    refuse or ignore: a switch's value it does not read, a name it does not know (with the closest known one)."""
    env = os.environ if environ is None else environ
    problems = []
    for name in sorted(env):
        if not name.startswith("STREAMSAFE_"):
            continue
        switch = SWITCHES.get(name)
        if switch is not None:
            error = switch.problem(env[name])
            if error is not None:
                default = switch.default if switch.choices else {"1": "on", "0": "off"}[switch.default]
                problems.append(str(error) + ("" if switch.strict else f"; the default ({default}) is kept"))
        elif name not in SUITE_NAMES:
            problems.append(_unknown(name))
    return problems


def check_switches(environ: Mapping[str, str] | None = None) -> None:
    """Raise the :class:`EnvironmentSettingError` of the first strict switch of ``environ`` (default: the
    process's) set to a value streamsafe does not read; nothing else. Does not block."""
    env = os.environ if environ is None else environ
    for switch in SWITCHES.values():
        raw = env.get(switch.name)
        error = None if raw is None or not switch.strict else switch.problem(raw)
        if error is not None:
            raise error


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, [*SWITCHES, *SUITE_NAMES], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"{name} is not an environment variable streamsafe reads, so it changes nothing: {hint}"
            f"streamsafe's switches are {', '.join(SWITCHES)}. Rename it, or unset it")


_warned: set[str] = set()


def warn_unknown_names(environ: Mapping[str, str] | None = None) -> None:
    """Warn (:class:`~streamsafe.errors.EnvironmentSettingWarning`, at the user's line) once per name about each
    ``STREAMSAFE_*`` variable that is neither a switch nor one of the test suite's: a misspelt switch
    (``STREAMSAFE_SANITISE=1``) would otherwise be silently ignored. Does not block."""
    env = os.environ if environ is None else environ
    for name in sorted(env):
        if name.startswith("STREAMSAFE_") and name not in SWITCHES and name not in SUITE_NAMES and name not in _warned:
            _warned.add(name)
            warn_at_user(_unknown(name))
