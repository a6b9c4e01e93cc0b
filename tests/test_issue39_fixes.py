"""Issue 39's smaller items, each a test: a worker thread without a backend, the hazards help, the examples' CPU
twins, the size advice, the deprecated names in the docs, ``bench --png`` on the model, ``run -``, the errors'
list, and two model errors that were not streamsafe's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import errors
from streamsafe.testing import VideoSuperRes
from streamsafe.tools.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSAFE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# -- item 10: use_backend is per thread ----------------------------------------------------------------------------


def _in_a_thread(work: Any) -> BaseException | None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001  (handed to the test)
            caught.append(e)

    t = threading.Thread(target=run, name="worker")
    t.start()
    t.join()
    return caught[0] if caught else None


def test_a_worker_thread_without_a_backend_is_told_to_set_one() -> None:
    sim = ss.sim.SimBackend()
    stream = sim.create_stream(non_blocking=True)
    frame = sim.array(np.zeros((3, 16, 16), np.float32))

    def worker(own_backend: bool) -> None:
        with ss.use_backend(sim) if own_backend else contextlib.nullcontext():
            sr = VideoSuperRes()  # (made on the thread's current backend)
            sr.output_width = sr.output_height = 32
            sr.load()
            with ss.stream_contract(sr, stream.handle) as c:
                c.run(frame).numpy()

    with ss.use_backend(sim):  # the main thread's only
        error = _in_a_thread(lambda: worker(own_backend=False))
        assert isinstance(error, errors.CudaDriverError), error
        message = str(error)
        assert "CUDA_ERROR_INVALID_HANDLE" in message
        assert "This thread ('worker') has no backend set: call ss.use_backend(...) in it, or pass backend=" in message
        assert _in_a_thread(lambda: worker(own_backend=True)) is None  # the fix the message gives works


def test_the_hint_is_only_given_to_a_thread_on_the_default_backend() -> None:
    sim = ss.sim.SimBackend()
    with ss.use_backend(sim), pytest.raises(errors.CudaDriverError) as e:
        ss.as_stream(0x7F12_3456_0000)  # a handle no model made, in a thread that set its backend
    assert "has no backend set" not in str(e.value)


def test_the_docs_say_use_backend_is_per_thread() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    assert "`ss.use_backend` holds in the thread that calls it only" in readme
    assert "`ss.use_backend(sim)` makes a model current in the thread that calls it" in guide
    assert "a thread started inside the block does not inherit it" in " ".join((ss.use_backend.__doc__ or "").split())


# -- item 11: the hazards help describes what the output prints ----------------------------------------------------


def test_the_hazards_help_describes_the_controls_as_the_output_marks_them(capsys: pytest.CaptureFixture[str]) -> None:
    epilog = build_parser()._subparsers._group_actions[0].choices["hazards"].epilog  # type: ignore[union-attr]
    assert '"*"' not in epilog and 'e.g. "3/4 (H5)"' in epilog
    assert main(["hazards", "--only", "H2", "--strategy", "none,auto", "--frames", "4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\d+/\d+ \(H\d+\)", out) and "*" not in out.split("Legend")[0]


# -- item 12: every GPU-only example points to its CPU twin, and the CPU commands run ------------------------------


@pytest.mark.parametrize("program", ["video_super_resolution.py", "video_frame_generation.py", "true_hdr.py"])
def test_a_gpu_program_names_its_cpu_twin_which_exists(program: str) -> None:
    source = (EXAMPLES / program).read_text()
    twin = re.search(r"python (examples/effects_cpu.py[^#\n]*?)\s*# without a GPU", source)
    assert twin is not None, f"{program}'s docstring names no CPU twin"
    result = subprocess.run([sys.executable, str(EXAMPLES / program)], capture_output=True, text=True, env=_env(), timeout=60,
                            cwd=ROOT)
    if result.returncode != 2:
        pytest.skip("this machine runs the GPU program")
    assert f"its twin runs the same loop on streamsafe's model: python {twin.group(1)}" in result.stderr
    args = shlex.split(twin.group(1))
    ran = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(), timeout=60, cwd=ROOT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "corrupt frames 0 of" in ran.stdout and "races 0" in ran.stdout


def test_the_examples_readme_cpu_commands_run_on_a_cpu() -> None:
    text = (EXAMPLES / "README.md").read_text()
    section = text.split("On a CPU (no GPU, no torch)", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in section.strip().splitlines()]
    assert len(commands) == 3
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "python"
        result = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
        unguarded = "--unguarded" in args
        assert result.returncode == (1 if unguarded else 0), command + "\n" + result.stdout + result.stderr
    assert "On a GPU without the SDK, on streamsafe's emulation (real kernels; PyTorch with CUDA needed)" in " ".join(text.split())


def test_the_cpu_twin_shows_every_effects_race_unguarded() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import effects_cpu
    finally:
        sys.path.remove(str(EXAMPLES))
    frames = list(__import__("_video_io").synthesize_frames(3, 32, 18))
    for kind in effects_cpu.EFFECTS:
        checked, corrupt, races = effects_cpu.run_effect(kind, frames, guarded=False, non_blocking=True)
        assert corrupt == checked > 0 and races > 0, kind
        assert effects_cpu.run_effect(kind, frames, guarded=True, non_blocking=True)[1:] == (0, 0), kind


# -- item 13: the size advice stays within what the setters take ---------------------------------------------------


def test_the_output_size_advice_stays_within_the_setters_range() -> None:
    sr = VideoSuperRes(backend=ss.sim.SimBackend())
    sr.input_width, sr.input_height = 8192, 16
    sr.output_width, sr.output_height = 100, 100
    with pytest.raises(errors.EffectConfigError) as e:
        sr.load()
    advised = re.search(r"within \[(\d+), (\d+)\] x \[(\d+), (\d+)\]", str(e.value))
    assert advised is not None and advised.groups() == ("8192", "16384", "16", "64")
    sr.output_width, sr.output_height = int(advised.group(2)), int(advised.group(4))  # the setters take the advice


# -- item 16: no deprecated name in the docs and examples ----------------------------------------------------------


def test_the_docs_and_examples_use_no_deprecated_name() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(EXAMPLES.glob("*.py")), EXAMPLES / "README.md",
             ROOT / "streamsafe" / "__init__.py"]
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in files
             for m in re.finditer(r"(?<![\w.])(?:streamsafe|ss)\.(\w+)", path.read_text()) if m.group(1) in ss._MOVED]
    assert found == []
    assert "0.3" not in (ss.__init__.__doc__ or "") and ss.__version__ == "0.1.0"
    assert "before 0.3" not in (ROOT / "streamsafe" / "__init__.py").read_text()


# -- item 17: bench --png on the model is refused, before anything runs --------------------------------------------


def test_bench_png_on_the_model_is_refused_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "chart.png"
    assert main(["bench", "--backend", "sim", "--scenario", "a", "--png", str(png)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not png.exists()
    assert captured.err.startswith(f"streamsafe bench: --png {png}: this run is on the simulated backend, which measures no time")
    saved = tmp_path / "run.json"
    assert main(["bench", "--backend", "sim", "--scenario", "a", "--strategy", "auto", "--json", str(saved), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["bench", "--from-json", str(saved), "--png", str(png)]) == 2
    assert f"the run in {saved} was made on the simulated backend" in capsys.readouterr().err and not png.exists()


# -- item 18: streamsafe run - --------------------------------------------------------------------------------------


def _run_stdin(program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", *args], input=program,
                          capture_output=True, text=True, env=_env(), timeout=120, cwd=cwd)


def test_run_reads_the_program_from_stdin_as_python_does(tmp_path: Path) -> None:
    program = '''"""doc"""
from __future__ import annotations
import sys, numpy as np, nvvfx
import streamsafe as ss
print(sys.argv, repr(sys.path[0]), __file__, __doc__)
sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
frame = ss.current_backend().array(np.zeros((3, 16, 16), np.float32))
sr.run(frame).numpy()
def f(x: not_defined) -> None: ...
raise ValueError("the program's own")
'''
    report = tmp_path / "r.json"
    result = _run_stdin(program, "--report", str(report), "-", "a", "b", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0] == "['-', 'a', 'b'] '' <stdin> doc"
    assert 'File "<stdin>", line 10, in <module>' in result.stderr and "ValueError: the program's own" in result.stderr
    assert "1 effect(s) guarded" in result.stderr
    assert json.loads(report.read_text())["program"] == ["-", "a", "b"]


def test_run_dash_reports_a_syntax_error_as_python_does(tmp_path: Path) -> None:
    result = _run_stdin("x = (\n", "-", cwd=tmp_path)
    python = subprocess.run([sys.executable, "-"], input="x = (\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == python.returncode == 1
    assert result.stderr.splitlines()[-1] == python.stderr.splitlines()[-1]
    assert 'File "<stdin>", line 1' in result.stderr


# -- item 20: the errors' list -------------------------------------------------------------------------------------


def test_api_md_lists_every_error_and_errors_all_holds_only_them() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    listed = text.split("`streamsafe.errors`:", 1)[1].split("`streamsafe.sim`:", 1)[0]
    assert [n for n in errors.__all__ if f"`{n}`" not in listed] == []
    assert [n for n in errors.__all__ if not isinstance(getattr(errors, n), type)] == []
    from streamsafe.errors import another_models_array  # (still there for streamsafe's own modules)

    assert callable(another_models_array)


# -- item 21: errors of the model that were not streamsafe's --------------------------------------------------------


class _ClaimsCuda:
    """A tensor-like that says it is on CUDA device 0 but hands out a NumPy (host) capsule."""

    def __init__(self) -> None:
        self.host = np.zeros((3, 16, 16), np.float32)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.host.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


def test_a_tensor_like_claiming_cuda_with_a_host_capsule_is_an_input_error() -> None:
    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    fake = _ClaimsCuda()
    for call in (lambda: sim.from_dlpack(fake), lambda: sr.run(fake)):
        with pytest.raises(errors.InputArrayError) as e:
            call()
        assert isinstance(e.value, TypeError)  # (what it raised before: except TypeError still catches it)
        assert "_ClaimsCuda" in str(e.value) and "on device (2, 0)" in str(e.value)
        assert "PyCapsule, not memory of SimBackend" in str(e.value) and "sim.array(x)" in str(e.value)
    with pytest.raises(errors.InputArrayError, match="has no __dlpack__"):
        sim.from_dlpack(object())


def test_an_allocation_larger_than_the_host_is_a_device_memory_error() -> None:
    sim = ss.sim.SimBackend()
    for allocate in (lambda: sim.empty((3, 1 << 22, 1 << 22), np.float32), lambda: sim.malloc((1 << 40,), np.uint8)):
        with pytest.raises(errors.DeviceMemoryError) as e:
            allocate()
        assert isinstance(e.value, MemoryError) and isinstance(e.value, ss.StreamsafeError)
        assert "GiB is more than this host's memory" in str(e.value) and "smaller frames" in str(e.value)
    sim.empty((3, 8, 8), np.float32)  # the model is as it was
