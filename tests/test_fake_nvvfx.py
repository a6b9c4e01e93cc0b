from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import install_fake_nvvfx, is_fake_nvvfx, uninstall_fake_nvvfx
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
    sim = ss.sim.SimBackend(scheduler="in-order")
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
        with pytest.raises(ss.StreamsafeError, match="Pass force=True") as info:
            install_fake_nvvfx()
        assert isinstance(info.value, RuntimeError)  # (it was a plain RuntimeError)
        install_fake_nvvfx(force=True)
        assert sys.modules["nvvfx"] is not real
        uninstall_fake_nvvfx()
        assert sys.modules["nvvfx"] is real
    finally:
        sys.modules.pop("nvvfx", None)


NVVFX_MODULES = ["nvvfx", "nvvfx.effects", "nvvfx.effects.base", "nvvfx.effects.video_super_res"]


def _nvvfx_modules() -> list[str]:
    return sorted(k for k in sys.modules if k == "nvvfx" or k.startswith("nvvfx."))


def test_install_puts_the_submodules_in_and_uninstall_takes_them_out() -> None:
    assert _nvvfx_modules() == []
    mod = install_fake_nvvfx()
    try:
        assert _nvvfx_modules() == NVVFX_MODULES
        import nvvfx.effects
        from nvvfx.effects.base import Effect
        from nvvfx.effects.video_super_res import VideoSuperRes

        assert nvvfx is mod and nvvfx.effects is sys.modules["nvvfx.effects"] and Effect is nvvfx.effects.base.Effect
        assert VideoSuperRes is mod.VideoSuperRes and install_fake_nvvfx() is mod  # a second install: the same package
        assert all(is_fake_nvvfx(sys.modules[name]) for name in NVVFX_MODULES)
        with pytest.raises(ModuleNotFoundError, match="No module named 'nvvfx._ext'"):  # not emulated: not found
            import nvvfx._ext  # noqa: F401
    finally:
        uninstall_fake_nvvfx()
    assert _nvvfx_modules() == []
    with pytest.raises(ModuleNotFoundError):
        import nvvfx.effects  # noqa: F401


def test_force_shadows_a_real_package_with_its_submodules_and_puts_them_back() -> None:
    real = {name: types.ModuleType(name) for name in ("nvvfx", "nvvfx.effects", "nvvfx._ext")}
    sys.modules.update(real)
    try:
        install_fake_nvvfx(force=True)
        assert _nvvfx_modules() == NVVFX_MODULES  # the real nvvfx._ext is out too: the emulation is the whole package
        assert all(sys.modules[name] is not real.get(name) for name in NVVFX_MODULES)
        uninstall_fake_nvvfx()
        assert {k: sys.modules[k] for k in _nvvfx_modules()} == real
    finally:
        for name in _nvvfx_modules():
            del sys.modules[name]


def test_a_block_and_the_fixture_take_the_submodules_out_again(tmp_path: Path) -> None:
    with fake_ctx():
        from nvvfx.effects import QualityLevel

        assert QualityLevel.DENOISE_ULTRA == 11
    assert _nvvfx_modules() == []
    _write(
        tmp_path,
        "test_sub.py",
        """
        import sys, types

        REAL = sys.modules.setdefault("nvvfx._ext", types.ModuleType("nvvfx._ext"))

        def test_fixture(fake_nvvfx):
            from nvvfx.effects.base import Effect
            assert Effect is fake_nvvfx.effects.base.Effect and "nvvfx._ext" not in sys.modules

        def test_after():
            assert sorted(k for k in sys.modules if k.startswith("nvvfx")) == ["nvvfx._ext"]
            assert sys.modules["nvvfx._ext"] is REAL
        """,
    )
    assert _run_pytest(tmp_path) == {"passed": 2}


def test_pytest_plugin_fixture(fake_nvvfx: types.ModuleType) -> None:
    import nvvfx

    assert nvvfx is fake_nvvfx and hasattr(nvvfx, "TrueHDR")


def test_sim_backend_fixture(sim_backend: ss.sim.SimBackend) -> None:
    assert ss.current_backend() is sim_backend


def test_sim_backend_fixture_is_current_in_threads_the_test_starts(fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend) -> None:
    """A worker thread's effect without ``backend=`` ran on the process-wide default model (in-order, shared
    by every test), so its missing fence raced there and the test's check of the fixture's races passed."""
    import threading

    import numpy as np

    seen = []

    def lane() -> None:
        sim = ss.current_backend()
        seen.append(sim)
        producer, sdk, consumer = (sim.create_stream(non_blocking=True) for _ in range(3))
        sr = fake_nvvfx.VideoSuperRes()
        sr.output_width, sr.output_height = 128, 72
        sr.load()
        frame = sim.empty((3, 36, 64), np.float32, stream=producer)
        sim.fill(frame, 0.5, stream=producer)
        with sim.use_stream(sdk):  # no contract: H1 and H3 race
            sim.copy(sim.from_dlpack(sr.run(frame).image, stream=consumer), consumer)
        sim.synchronize_device()

    worker = threading.Thread(target=lane)
    worker.start()
    worker.join()
    assert seen == [sim_backend] and len(sim_backend.races) >= 2


def test_context_manager_leaves_an_existing_install_in_place() -> None:
    mod = install_fake_nvvfx()
    try:
        with fake_ctx() as inner:
            assert inner is mod
        assert sys.modules["nvvfx"] is mod  # the block did not install it, so it does not remove it
    finally:
        uninstall_fake_nvvfx()
    assert "nvvfx" not in sys.modules


def test_fixture_shadows_a_real_module_for_one_test_only(tmp_path: Path) -> None:
    _write(tmp_path, "conftest.py", "import sys, types\nsys.modules['nvvfx'] = types.ModuleType('nvvfx')\n")
    _write(
        tmp_path,
        "test_it.py",
        """
        import sys
        from streamsafe.testing import is_fake_nvvfx

        REAL = sys.modules["nvvfx"]

        def test_fixture(fake_nvvfx):
            import nvvfx
            assert nvvfx is fake_nvvfx and is_fake_nvvfx(nvvfx)

        def test_after():
            import nvvfx
            assert nvvfx is REAL
        """,
    )
    assert _run_pytest(tmp_path) == {"passed": 2}


# -- the fixture and a session-wide install (issue 9): run pytest on a generated test directory ---------

_SESSION_TESTS = """
import pytest

from streamsafe.testing import fake_nvvfx as fake_ctx, is_fake_nvvfx

SESSION = []


def test_before():
    import nvvfx

    assert is_fake_nvvfx(nvvfx)
    SESSION.append(nvvfx)


def test_fixture(fake_nvvfx):
    import nvvfx

    assert nvvfx is fake_nvvfx is SESSION[0]  # the session's module, not a second one


def test_after_the_fixture():
    import nvvfx  # failed with ModuleNotFoundError when the fixture undid the session install

    assert nvvfx is SESSION[0]
    from nvvfx import VideoSuperRes

    assert VideoSuperRes.QualityLevel.DENOISE_HIGH == 10


def test_context_manager_inside():
    with fake_ctx() as mod:
        assert mod is SESSION[0]


def test_after_the_context_manager():
    import nvvfx

    assert nvvfx is SESSION[0]
"""


def _write(root: Path, name: str, text: str) -> None:
    (root / name).write_text(textwrap.dedent(text))


def _run_pytest(root: Path) -> dict[str, int]:
    """Run pytest (with streamsafe's plugin, as installed) on ``root`` in a fresh process; outcome counts."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(root), str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the generated suite failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    summary = proc.stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}


@pytest.mark.parametrize(
    "conftest",
    [
        # at import of conftest.py
        "from streamsafe.testing import install_fake_nvvfx\n\ninstall_fake_nvvfx()\n",
        # in a session-scoped autouse fixture
        """
        import pytest

        from streamsafe.testing import install_fake_nvvfx, is_fake_nvvfx, uninstall_fake_nvvfx

        @pytest.fixture(scope="session", autouse=True)
        def _nvvfx():
            install_fake_nvvfx()
            yield
            uninstall_fake_nvvfx()
        """,
    ],
    ids=["conftest-import", "session-fixture"],
)
def test_fixture_leaves_a_session_wide_install_in_place(tmp_path: Path, conftest: str) -> None:
    _write(tmp_path, "conftest.py", conftest)
    _write(tmp_path, "test_session.py", _SESSION_TESTS)
    assert _run_pytest(tmp_path) == {"passed": 5}


def test_fixture_without_a_session_install_is_undone_after_the_test(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "test_alone.py",
        """
        import sys

        import pytest


        def test_fixture(fake_nvvfx):
            import nvvfx

            assert nvvfx is fake_nvvfx


        def test_after():
            assert "nvvfx" not in sys.modules
            with pytest.raises(ModuleNotFoundError):
                import nvvfx  # noqa: F401
        """,
    )
    assert _run_pytest(tmp_path) == {"passed": 2}


def test_process_default_blocks_may_end_in_any_order() -> None:
    """The default is the newest open block's, and the one before them all when none is open (a block
    that ended first restored the default from before it, under the other, still open, block)."""
    from streamsafe.backend import default_backend, process_default

    base = default_backend()
    a, b = ss.sim.SimBackend(), ss.sim.SimBackend()
    outer, inner = process_default(a), process_default(b)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert default_backend() is b
    inner.__exit__(None, None, None)
    assert default_backend() is base


def test_the_plugin_loads_by_its_module_name_with_autoload_on_or_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CI with plugin autoload off writes (``pytest_plugins`` in a conftest) also runs with autoload on."""
    _write(tmp_path, "conftest.py", 'pytest_plugins = ["streamsafe.testing.pytest_plugin"]\n')
    _write(tmp_path, "test_loaded.py", "def test_fixture(fake_nvvfx):\n    import nvvfx\n    assert nvvfx is fake_nvvfx\n")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    assert _run_pytest(tmp_path) == {"passed": 1}
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert _run_pytest(tmp_path) == {"passed": 1}


def test_the_decoder_fixture_brings_the_adversarial_model(fake_pynvvideocodec: types.ModuleType,
                                                           request: pytest.FixtureRequest) -> None:
    """As ``fake_nvvfx``: a racy decode consumer shows wrong frames, and no test's races reach the next one."""
    from streamsafe.backend import current_backend

    assert "sim_backend" in request.fixturenames and current_backend() is request.getfixturevalue("sim_backend")


def test_a_clip_rewritten_at_a_path_decodes_anew(tmp_path: Path) -> None:
    """The emulated decoders read the file at the path now, as a real decoder does (their caches key on its version)."""
    pytest.importorskip("av")
    from streamsafe.testing import make_test_clip
    from streamsafe.testing.fake_pynvvideocodec import decode_reference
    from streamsafe.testing.fake_pyav import decode_nv12

    path = str(tmp_path / "clip.mp4")
    make_test_clip(path, 2, (64, 32))
    assert decode_reference(path)[0].shape == (3, 32, 64) and decode_nv12(path)[0].shape == (48, 64)
    make_test_clip(path, 3, (96, 48))
    assert decode_reference(path)[0].shape == (3, 48, 96) and len(decode_nv12(path)) == 3


def test_a_class_guard_left_in_force_ends_with_its_test(tmp_path: Path) -> None:
    """The emulated classes are the same objects in every test: a guard a test leaves on one must not guard the next."""
    _write(
        tmp_path,
        "test_leak.py",
        """
        import pytest
        import streamsafe as ss

        def test_a_guard_left_on(fake_nvvfx):
            ss.guard(fake_nvvfx.VideoSuperRes)  # (never undone: the fixture ends it, and warns)

        def test_the_next_is_plain(fake_nvvfx, sim_backend):
            sr = fake_nvvfx.VideoSuperRes()
            sr.output_width, sr.output_height = 32, 32
            sr.load()
            out = sr.run(sim_backend.empty((3, 16, 16), "float32"))
            assert type(out).__name__ != "SafeOutput"
        """,
    )
    assert _run_pytest(tmp_path) == {"passed": 2}
