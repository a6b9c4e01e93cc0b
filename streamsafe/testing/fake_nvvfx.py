"""Make ``import nvvfx`` resolve to the emulated effects, and undo it.

For user code written against the real SDK (``from nvvfx import VideoSuperRes``,
``from nvvfx.effects import QualityLevel``, ``from nvvfx.effects.base import Effect``) that
must run in CI, where the real wheel cannot be installed and there is no GPU.

The emulated package has nvvfx 0.2's layout: ``nvvfx`` (the effects, their outputs, ``ImageEncoding``,
``QualityLevel``, ``Mode``, ``NvVFXError``, ``get_sdk_version()``, ``__version__``), the package
``nvvfx.effects`` (``QualityLevel``), ``nvvfx.effects.base`` (``Effect``) and
``nvvfx.effects.video_super_res`` (``VideoSuperRes``, ``VideoSuperResOutput``, ``QualityLevel``). Every
name is the object :mod:`streamsafe.testing` exports (``nvvfx.effects.QualityLevel is
nvvfx.VideoSuperRes.QualityLevel``).

Three ways, from widest to narrowest:

* :func:`install_fake_nvvfx` for the whole process (e.g. at the top of a ``conftest.py``);
* ``with fake_nvvfx():`` for a block;
* the pytest fixture ``fake_nvvfx`` (streamsafe's pytest plugin) for one test.

Each puts the package and its submodules in ``sys.modules`` and takes them all out again. The block
and the fixture undo only what they did: inside a process-wide install they leave it in place.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import types
from typing import Any

from ._fake_module import MARK, ModuleFake

__all__ = ["install_fake_nvvfx", "uninstall_fake_nvvfx", "fake_nvvfx", "is_fake_nvvfx", "build_fake_nvvfx", "nvvfx_for_test"]


# The names each emulated module exports, by module: nvvfx 0.2's (its API reference, and the code that uses it).
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
    "NvVFXError",
    "get_sdk_version",
)
_SUBMODULE_NAMES = {
    "nvvfx.effects": ("QualityLevel",),
    "nvvfx.effects.base": ("Effect",),
    "nvvfx.effects.video_super_res": ("VideoSuperRes", "VideoSuperResOutput", "QualityLevel"),
}
_VERSION = "0.2.0+streamsafe"
"""The emulated package's ``__version__``: nvvfx 0.2's surface, emulated by streamsafe."""


def is_fake_nvvfx(module: Any) -> bool:
    """True when ``module`` is streamsafe's emulated ``nvvfx`` (or one of its submodules)."""
    return _FAKE.is_fake(module)


def _module(name: str, names: tuple[str, ...], package: bool) -> types.ModuleType:
    """An emulated module ``name`` holding ``names`` from :mod:`streamsafe.testing.effects` (a package when
    ``package``: it has ``__path__``, so ``import name.sub`` looks for submodules)."""
    from . import effects

    mod = types.ModuleType(name, f"streamsafe's emulation of {name} (nvvfx 0.2; streamsafe.testing)")
    for attr in names:
        setattr(mod, attr, getattr(effects, attr))
    mod.__all__ = list(names)  # type: ignore[attr-defined]
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
    if package:
        mod.__path__ = []  # type: ignore[attr-defined]  # (no files: a submodule not emulated is not found)
    setattr(mod, MARK, True)
    return mod


def build_fake_nvvfx() -> types.ModuleType:
    """A new emulated ``nvvfx`` package, not put in ``sys.modules``; its submodules are its attributes
    (``nvvfx.effects``, ``nvvfx.effects.base``, ``nvvfx.effects.video_super_res``)."""
    mod = _module("nvvfx", _SDK_NAMES, package=True)
    mod.__version__ = _VERSION  # type: ignore[attr-defined]
    fx = _module("nvvfx.effects", _SUBMODULE_NAMES["nvvfx.effects"], package=True)
    for sub in ("base", "video_super_res"):
        setattr(fx, sub, _module(f"nvvfx.effects.{sub}", _SUBMODULE_NAMES[f"nvvfx.effects.{sub}"], package=False))
    mod.effects = fx  # type: ignore[attr-defined]
    return mod


EMULATION = _FAKE = ModuleFake("nvvfx", build_fake_nvvfx, "uninstall_fake_nvvfx()")


def install_fake_nvvfx(*, force: bool = False) -> types.ModuleType:
    """Put the emulated ``nvvfx`` and its submodules in ``sys.modules``; returns the package.

    If a real ``nvvfx`` is already imported it is kept unless ``force=True`` (then it and its
    submodules are restored by :func:`uninstall_fake_nvvfx`). Installing twice is harmless: the second
    call returns the module already there.
    """
    return _FAKE.install(force=force)


def uninstall_fake_nvvfx() -> None:
    """Remove the emulated ``nvvfx`` and its submodules and restore what was there before (if anything)."""
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
