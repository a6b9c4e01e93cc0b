"""pytest plugin (entry point ``pytest11``): fixtures for testing pipelines without a GPU.

* ``fake_nvvfx``: ``import nvvfx`` resolves to the emulated effects during the test. It goes
  through pytest's ``monkeypatch``, so whatever ``sys.modules["nvvfx"]`` held before the test
  is back after it. An emulation installed for the whole session (``install_fake_nvvfx()`` in a
  ``conftest.py``) is used as it is and left in place; a real ``nvvfx`` is shadowed for the
  test only.
* ``fake_pynvvideocodec``: ``import PyNvVideoCodec`` resolves to the emulated decoder during the test
  (:mod:`streamsafe.testing.fake_pynvvideocodec`), the same way.
* ``sim_backend``: a fresh :class:`~streamsafe.sim.SimBackend` (race-directed adversarial
  scheduler) made current for the test, in every thread (also threads the test starts), so
  effects created without ``backend=`` use it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest


@pytest.fixture
def fake_nvvfx(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    from .fake_nvvfx import build_fake_nvvfx, is_fake_nvvfx

    current = sys.modules.get("nvvfx")
    if is_fake_nvvfx(current):
        assert current is not None
        return current  # a session-wide install: use it, leave it
    mod = build_fake_nvvfx()
    monkeypatch.setitem(sys.modules, "nvvfx", mod)  # undone (restored or removed) after the test
    return mod


@pytest.fixture
def fake_pynvvideocodec(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    from .fake_pynvvideocodec import build_fake_pynvvideocodec, is_fake_pynvvideocodec

    current = sys.modules.get("PyNvVideoCodec")
    if is_fake_pynvvideocodec(current):
        assert current is not None
        return current  # a session-wide install: use it, leave it
    mod = build_fake_pynvvideocodec()
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", mod)
    return mod


@pytest.fixture
def sim_backend() -> Iterator[object]:
    from ..backend import process_default, use_backend
    from ..sim.backend import SimBackend

    backend = SimBackend(scheduler="adversarial")
    with process_default(backend), use_backend(backend):  # (a worker thread the test starts sees it too)
        yield backend
