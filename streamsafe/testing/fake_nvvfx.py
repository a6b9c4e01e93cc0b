"""Make ``import nvvfx`` resolve to the emulated effects, and undo it.

For user code written against the real SDK (``from nvvfx import VideoSuperRes``) that
must run in CI, where the real wheel cannot be installed and there is no GPU.

Three ways, from widest to narrowest:

* :func:`install_fake_nvvfx` for the whole process (e.g. at the top of a ``conftest.py``);
* ``with fake_nvvfx():`` for a block;
* the pytest fixture ``fake_nvvfx`` (streamsafe's pytest plugin) for one test.

The block and the fixture undo only what they did: inside a process-wide install they leave
it in place.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

from ._fake_module import MARK, ModuleFake

__all__ = ["install_fake_nvvfx", "uninstall_fake_nvvfx", "fake_nvvfx", "is_fake_nvvfx", "build_fake_nvvfx", "nvvfx_for_test"]


# The names the emulated module exports: the SDK's effect classes, their outputs and enums.
_SDK_NAMES = (
    "VideoSuperRes",
    "VideoFrameGeneration",
    "TrueHDR",
    "VideoSuperResOutput",
    "VideoFrameGenerationOutput",
    "TrueHDROutput",
    "ImageEncoding",
    "QualityLevel",
    "Mode",
)


def is_fake_nvvfx(module: Any) -> bool:
    """True when ``module`` is streamsafe's emulated ``nvvfx``."""
    return _FAKE.is_fake(module)


def build_fake_nvvfx() -> types.ModuleType:
    """A new emulated ``nvvfx`` module object, not put in ``sys.modules``."""
    from . import effects

    mod = types.ModuleType("nvvfx", "streamsafe's emulation of nvvfx 0.2 (streamsafe.testing)")
    for name in _SDK_NAMES:
        setattr(mod, name, getattr(effects, name))
    mod.__version__ = "0.2.0+streamsafe"  # type: ignore[attr-defined]
    setattr(mod, MARK, True)
    mod.__all__ = list(_SDK_NAMES)  # type: ignore[attr-defined]
    return mod


EMULATION = _FAKE = ModuleFake("nvvfx", build_fake_nvvfx, "uninstall_fake_nvvfx()")


def install_fake_nvvfx(*, force: bool = False) -> types.ModuleType:
    """Put the emulated ``nvvfx`` in ``sys.modules``; returns it.

    If a real ``nvvfx`` is already imported it is kept unless ``force=True`` (it is
    restored by :func:`uninstall_fake_nvvfx`). Installing twice is harmless: the second call
    returns the module already there.
    """
    return _FAKE.install(force=force)


def uninstall_fake_nvvfx() -> None:
    """Remove the emulated ``nvvfx`` and restore what was there before (if anything)."""
    _FAKE.uninstall()


def fake_nvvfx(*, force: bool = False) -> contextlib.AbstractContextManager[types.ModuleType]:
    """``with fake_nvvfx() as nvvfx:``: the emulation inside the block.

    Undone after the block only if the block installed it: an emulation that was already in
    place (a process-wide :func:`install_fake_nvvfx`) stays.
    """
    return _FAKE.block(force=force)


def nvvfx_for_test(monkeypatch: Any) -> types.ModuleType:
    """The ``fake_nvvfx`` fixture's module (:meth:`ModuleFake.for_test`)."""
    return _FAKE.for_test(monkeypatch)
