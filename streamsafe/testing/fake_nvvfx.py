"""Make ``import nvvfx`` resolve to the emulated effects, and undo it.

For user code written against the real SDK (``from nvvfx import VideoSuperRes``) that
must run in CI, where the real wheel cannot be installed and there is no GPU.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["install_fake_nvvfx", "uninstall_fake_nvvfx", "fake_nvvfx"]

_MARK = "__streamsafe_fake__"
_saved: list[Any] = []


def _build_module() -> types.ModuleType:
    from . import effects

    mod = types.ModuleType("nvvfx", "streamsafe's emulation of nvvfx 0.2 (streamsafe.testing)")
    for name in effects.__all__:
        setattr(mod, name, getattr(effects, name))
    mod.__version__ = "0.2.0+streamsafe"  # type: ignore[attr-defined]
    setattr(mod, _MARK, True)
    mod.__all__ = list(effects.__all__)  # type: ignore[attr-defined]
    return mod


def install_fake_nvvfx(*, force: bool = False) -> types.ModuleType:
    """Put the emulated ``nvvfx`` in ``sys.modules``; returns it.

    If a real ``nvvfx`` is already imported it is kept unless ``force=True`` (it is
    restored by :func:`uninstall_fake_nvvfx`). Installing twice is harmless.
    """
    current = sys.modules.get("nvvfx")
    if current is not None and getattr(current, _MARK, False):
        return current
    if current is not None and not force:
        raise RuntimeError(
            "a real nvvfx module is already imported; pass force=True to shadow it with the emulation"
        )
    _saved.append(current)
    mod = _build_module()
    sys.modules["nvvfx"] = mod
    return mod


def uninstall_fake_nvvfx() -> None:
    """Remove the emulated ``nvvfx`` and restore what was there before (if anything)."""
    current = sys.modules.get("nvvfx")
    if current is None or not getattr(current, _MARK, False):
        return
    previous = _saved.pop() if _saved else None
    if previous is None:
        del sys.modules["nvvfx"]
    else:
        sys.modules["nvvfx"] = previous


@contextlib.contextmanager
def fake_nvvfx(*, force: bool = False) -> Iterator[types.ModuleType]:
    """``with fake_nvvfx() as nvvfx:``: the emulation inside the block, undone after."""
    mod = install_fake_nvvfx(force=force)
    try:
        yield mod
    finally:
        uninstall_fake_nvvfx()
