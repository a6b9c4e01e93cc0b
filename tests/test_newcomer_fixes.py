"""What a newcomer's first hour found: each a test (sanitize on a program's own model, `run -m` from
the current directory, configure on read-only settings, not-an-effect errors)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes

RACY = """
import numpy as np, streamsafe as ss
from streamsafe.testing import VideoSuperRes
sim = ss.sim.SimBackend(scheduler="adversarial")            # the program's own model, not the default one
sr = VideoSuperRes(backend=sim); sr.output_width = sr.output_height = 32; sr.load()
s, c = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
out = sr.run(sim.array(np.zeros((3, 16, 16), np.float32)), stream_ptr=s.ptr, non_blocking=True)   # unguarded
sim.copy(sim.from_dlpack(out.image, stream=c), c)
"""


def _racy_effect() -> tuple[ss.sim.SimBackend, VideoSuperRes]:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sim, sr


def test_sanitize_without_a_backend_checks_a_model_the_program_made() -> None:
    sim, sr = _racy_effect()
    s, c = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with ss.sanitize(), pytest.raises(ss.errors.RaceError):
        out = sr.run(sim.array(np.zeros((3, 16, 16), np.float32)), stream_ptr=s.ptr, non_blocking=True)
        sim.copy(sim.from_dlpack(out.image, stream=c), c)
    assert sim.on_race == "record"  # the model's own setting is untouched after the block


def test_streamsafe_sanitize_environment_variable_makes_every_model_raise() -> None:
    env = {**os.environ, "STREAMSAFE_SANITIZE": "1"}
    done = subprocess.run([sys.executable, "-c", RACY], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0 and "RaceError" in done.stderr
    env.pop("STREAMSAFE_SANITIZE")
    assert subprocess.run([sys.executable, "-c", RACY], capture_output=True, env=env, timeout=60).returncode == 0


def test_run_dash_m_imports_modules_of_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "main.py").write_text("import nvvfx\nprint('ran', nvvfx.__name__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "-m", "pkg.main"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert done.returncode == 0 and "ran nvvfx" in done.stdout, done.stderr


def test_configure_refuses_read_only_settings_clearly() -> None:
    sim, sr = _racy_effect()
    c = ss.StreamContract(sr)
    for attr, value in (("closed", True), ("is_loaded", False), ("device", 1)):
        with pytest.raises(ss.errors.EffectConfigError, match=f"'{attr}' is read-only; its settings are"):
            c.configure(**{attr: value})
    with pytest.raises(ss.errors.EffectConfigError, match="has no attribute 'output_widht'") as e:
        c.configure(output_widht=256)
    assert "output_width" in str(e.value) and "is_loaded" not in str(e.value)


def test_not_an_effect_is_a_streamsafe_error_and_a_type_error() -> None:
    for bad in (None, 42, object(), VideoSuperRes):
        with pytest.raises(ss.errors.NotAnEffectError, match="needs an effect instance"):
            ss.StreamContract(bad)
    assert issubclass(ss.errors.NotAnEffectError, ss.StreamsafeError) and issubclass(ss.errors.NotAnEffectError, TypeError)
    with pytest.raises(ss.errors.NotAnEffectError, match="pass an effect class, a module"):
        ss.guard(42)


def test_the_guides_testing_snippet_runs(tmp_path: Path) -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    start = guide.index("## Testing your own pipeline without a GPU")
    block = guide[guide.index("```python", start) + len("```python"):guide.index("```", guide.index("```python", start) + 9)]
    (tmp_path / "test_snippet.py").write_text(textwrap.dedent(block))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_snippet.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_host_array_on_the_model_gets_the_models_fix_too() -> None:
    sim, sr = _racy_effect()
    with pytest.raises(ss.errors.HostArrayError, match=r"On the simulated backend .*sim\.array\(x\)") as e:
        ss.StreamContract(sr).run(np.zeros((3, 16, 16), np.float32))
    assert "0., 0." not in str(e.value)  # the data is never printed


def test_run_fake_nvvfx_model_is_every_threads_default(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(textwrap.dedent("""
        import threading, streamsafe as ss
        seen = []
        t = threading.Thread(target=lambda: seen.append(type(ss.current_backend().scheduler).__name__))
        t.start(); t.join()
        print("worker:", seen[0], "main:", type(ss.current_backend().scheduler).__name__)
    """))
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", str(script)],
                          capture_output=True, text=True, timeout=60)
    assert "worker: AdversarialScheduler main: AdversarialScheduler" in done.stdout, done.stdout + done.stderr
