"""pytest plugin (entry point ``pytest11``): fixtures for testing pipelines without a GPU.

* ``fake_nvvfx``: ``import nvvfx`` resolves to the emulated effects during the test.
* ``sim_backend``: a fresh :class:`~streamsafe.SimBackend` (race-directed adversarial
  scheduler) made current for the test, so effects created without ``backend=`` use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest


@pytest.fixture
def fake_nvvfx() -> Iterator[ModuleType]:
    from .fake_nvvfx import fake_nvvfx as _ctx

    with _ctx() as mod:
        yield mod


@pytest.fixture
def sim_backend() -> Iterator[object]:
    from ..backend import SimBackend, use_backend

    backend = SimBackend(scheduler="adversarial")
    with use_backend(backend):
        yield backend
