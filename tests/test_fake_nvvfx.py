from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import install_fake_nvvfx, uninstall_fake_nvvfx
from streamsafe.testing import fake_nvvfx as fake_ctx


def test_install_and_uninstall() -> None:
    assert "nvvfx" not in sys.modules
    mod = install_fake_nvvfx()
    try:
        import nvvfx
        from nvvfx import TrueHDR, VideoFrameGeneration, VideoSuperRes

        assert nvvfx is mod and install_fake_nvvfx() is mod  # idempotent
        assert VideoSuperRes.QualityLevel.HIGH and VideoFrameGeneration.Mode.MEDIUM and TrueHDR
        assert VideoSuperRes.ImageEncoding.RGB10A2 == nvvfx.ImageEncoding.RGB10A2
    finally:
        uninstall_fake_nvvfx()
    assert "nvvfx" not in sys.modules


def test_user_code_written_for_nvvfx_runs_on_the_model() -> None:
    sim = ss.SimBackend(scheduler="in-order")
    with ss.use_backend(sim), fake_ctx():
        from nvvfx import VideoSuperRes

        frame = sim.array(np.random.default_rng(0).random((3, 16, 16), dtype=np.float32))
        with VideoSuperRes() as sr:  # the doc's example, on the model
            sr.output_width = 32
            sr.output_height = 32
            sr.load()
            out = sim.copy(sim.from_dlpack(sr.run(frame).image))
        assert out.numpy().shape == (3, 32, 32)
    assert "nvvfx" not in sys.modules


def test_a_real_module_is_not_shadowed_without_force() -> None:
    real = types.ModuleType("nvvfx")
    sys.modules["nvvfx"] = real
    try:
        with pytest.raises(RuntimeError, match="pass force=True"):
            install_fake_nvvfx()
        install_fake_nvvfx(force=True)
        assert sys.modules["nvvfx"] is not real
        uninstall_fake_nvvfx()
        assert sys.modules["nvvfx"] is real
    finally:
        sys.modules.pop("nvvfx", None)


def test_pytest_plugin_fixture(fake_nvvfx: types.ModuleType) -> None:
    import nvvfx

    assert nvvfx is fake_nvvfx and hasattr(nvvfx, "TrueHDR")


def test_sim_backend_fixture(sim_backend: ss.SimBackend) -> None:
    assert ss.current_backend() is sim_backend
