"""pytest plugin (entry point ``pytest11``, named after this module): fixtures for testing pipelines without a GPU.

Loaded by itself where pytest loads plugins from entry points; where that is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``),
``-p streamsafe.testing.pytest_plugin`` or ``pytest_plugins = ["streamsafe.testing.pytest_plugin"]`` in a
``conftest.py`` loads it (either works with autoload on too).

* ``fake_nvvfx``: ``import nvvfx`` resolves to the emulated effects during the test. It goes
  through pytest's ``monkeypatch``, so whatever ``sys.modules["nvvfx"]`` held before the test
  is back after it. An emulation installed for the whole session (``install_fake_nvvfx()`` in a
  ``conftest.py``) is used as it is and left in place; a real ``nvvfx`` is shadowed for the
  test only. It brings ``sim_backend`` with it: the effects run on an adversarial model (a race
  shows as wrong frames, and in ``sim_backend.races``), never on the in-order default model, on
  which a racy pipeline would pass with correct frames.
* ``fake_pynvvideocodec``: ``import PyNvVideoCodec`` resolves to the emulated decoder during the test
  (:mod:`streamsafe.testing.fake_pynvvideocodec`), the same way, on ``sim_backend`` too.
* With either, a class guard (``ss.guard(...)``) the test started and left in force ends with the test, with a
  warning: the emulated classes are the same objects in every test, and the guard would guard the next one.
* ``sim_backend``: a fresh :class:`~streamsafe.sim.SimBackend` (race-directed adversarial
  scheduler) made current for the test, in every thread (also threads the test starts), so
  effects created without ``backend=`` use it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from types import ModuleType

import pytest


@pytest.fixture
def fake_nvvfx(monkeypatch: pytest.MonkeyPatch, sim_backend: object) -> Iterator[ModuleType]:
    from .fake_nvvfx import nvvfx_for_test

    with _guards_end_with_the_test():  # (the emulated classes outlive the test: a guard left on them would too)
        yield nvvfx_for_test(monkeypatch)  # (on sim_backend's adversarial model: see the module docstring)


@pytest.fixture
def fake_pynvvideocodec(monkeypatch: pytest.MonkeyPatch, sim_backend: object) -> Iterator[ModuleType]:
    from .fake_pynvvideocodec import pynvvideocodec_for_test

    with _guards_end_with_the_test():
        yield pynvvideocodec_for_test(monkeypatch)  # (on sim_backend's adversarial model, as fake_nvvfx)


@contextlib.contextmanager
def _guards_end_with_the_test() -> Iterator[None]:
    """Class guards the test started and left in force end with it, with a warning: else they would guard the next
    test's plain pipelines (the emulated classes are the same objects in every test)."""
    from ..class_guard import active_guards

    before = {id(g) for g in active_guards()}
    yield
    for g in active_guards():
        if id(g) not in before:
            g.undo()
            names = ", ".join(cls.__qualname__ for cls in g.classes)
            warnings.warn(f"a class guard of {names} the test started was still in force at its end; streamsafe ended it "
                          "so that it does not guard the next test. End it in the test: with ss.guard(...): or g.undo()",
                          stacklevel=1)


@pytest.fixture
def sim_backend() -> Iterator[object]:
    from ..backend import process_default, use_backend
    from ..sim.backend import SimBackend

    backend = SimBackend(scheduler="adversarial")
    with process_default(backend), use_backend(backend):  # (a worker thread the test starts sees it too)
        yield backend
