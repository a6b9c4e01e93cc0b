"""The CLI's usage errors: one line on stderr, exit status 2, no traceback, nothing run first."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import streamsafe.tools.hazards as hz
from streamsafe.backend.cuda import CudaBackend
from streamsafe.tools.cli import _check_writable, main

KNOWN = "known: H1, H2, H3, H4, H5, H6, H12"


@pytest.fixture
def no_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the hazard matrix starts: every check must come before it."""

    def refuse(**kwargs: Any) -> Any:
        raise AssertionError("the matrix ran before the command line was checked")

    monkeypatch.setattr(hz, "run_matrix", refuse)


def _one_line_error(capsys: pytest.CaptureFixture[str], command: str = "hazards") -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"streamsafe {command}: ") and "Traceback" not in captured.err
    assert captured.out == ""
    return lines[0]


def _pretend_missing(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name in missing:
            return None
        if name in ("torch", "cupy"):
            return real("json")  # any spec: "installed"
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


# -- --backend cuda ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["hazards", "bench"])
def test_backend_cuda_without_cupy(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_matrix: None
) -> None:
    _pretend_missing(monkeypatch, "cupy")
    _pretend_driver(monkeypatch)
    assert main([command, "--backend", "cuda"]) == 2
    line = _one_line_error(capsys, command)
    assert "--backend cuda needs CuPy" in line and "--backend sim" in line


def test_backend_cuda_without_torch_and_cupy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_matrix: None
) -> None:
    _pretend_missing(monkeypatch, "torch", "cupy")
    _pretend_driver(monkeypatch)
    assert main(["hazards", "--backend", "cuda"]) == 2
    assert "needs PyTorch and CuPy, which are not installed" in _one_line_error(capsys)


def _pretend_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamsafe.backend.cuda import CudaBackend

    monkeypatch.setattr(CudaBackend, "probe", staticmethod(lambda: None))


def test_backend_cuda_without_a_driver_says_so_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_matrix: None
) -> None:
    from streamsafe.backend.cuda import CudaBackend

    _pretend_missing(monkeypatch, "torch", "cupy")
    monkeypatch.setattr(CudaBackend, "probe", staticmethod(lambda: "the NVIDIA driver library could not be loaded"))
    assert main(["hazards", "--backend", "cuda"]) == 2
    line = _one_line_error(capsys)
    assert "needs an NVIDIA GPU and driver" in line and "pip install" not in line


def test_backend_cuda_without_a_driver(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_matrix: None
) -> None:
    _pretend_missing(monkeypatch)
    monkeypatch.setattr(CudaBackend, "probe", staticmethod(lambda: "the driver reports no CUDA device"))
    assert main(["hazards", "--backend", "cuda"]) == 2
    line = _one_line_error(capsys)
    assert "needs an NVIDIA GPU and driver: the driver reports no CUDA device" in line


def test_backend_auto_falls_back_to_the_model(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _pretend_missing(monkeypatch, "cupy")
    assert main(["hazards", "--backend", "auto", "--only", "H1", "--strategy", "none", "--json"]) == 0
    assert '"backend": "sim"' in capsys.readouterr().out


def test_backend_cuda_error_in_a_real_process() -> None:
    if importlib.util.find_spec("cupy") is not None and CudaBackend.probe() is None:
        pytest.skip("this machine has CuPy and a GPU: --backend cuda would run")
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "hazards", "--backend", "cuda"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("streamsafe hazards: --backend cuda needs") and proc.stdout == ""


# -- --trace -----------------------------------------------------------------------------------


def test_trace_in_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_matrix: None
) -> None:
    path = tmp_path / "nonexistent" / "t.json"
    assert main(["hazards", "--backend", "sim", "--trace", str(path)]) == 2
    line = _one_line_error(capsys)
    assert str(path) in line and "does not exist" in line


def test_trace_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    assert main(["hazards", "--backend", "sim", "--trace", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys)


def test_trace_in_an_unwritable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    if sys.platform.startswith("linux"):
        target = Path("/sys/streamsafe-trace.json")  # sysfs refuses new files, even to root
    else:  # pragma: no cover
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "t.json"
    assert main(["hazards", "--backend", "sim", "--trace", str(target)]) == 2
    line = _one_line_error(capsys)
    assert str(target) in line and "cannot write it" in line


def test_trace_error_in_a_real_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "hazards", "--backend", "sim", "--trace", "/nonexistent/t.json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "streamsafe hazards: --trace /nonexistent/t.json: directory /nonexistent does not exist"


def test_the_writability_check_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    _check_writable(str(path), "--trace")
    assert not path.exists()
    path.write_text("old")
    _check_writable(str(path), "--trace")
    assert path.read_text() == "old"


def test_bench_output_paths_are_checked_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--backend", "sim", "--json", str(tmp_path / "no" / "b.json")]) == 2
    assert "--json" in _one_line_error(capsys, "bench")


# -- --only and --strategy ---------------------------------------------------------------------


def test_unknown_hazard_is_named_with_the_valid_ones(capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    assert main(["hazards", "--only", "H1,H99"]) == 2
    line = _one_line_error(capsys)
    assert "unknown hazard 'H99'" in line and KNOWN in line and "'H1'" not in line


def test_several_unknown_hazards(capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    assert main(["hazards", "--only", "H0,x,H3"]) == 2
    assert "unknown hazard 'H0', 'X'" in _one_line_error(capsys)


def test_empty_only(capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    assert main(["hazards", "--only", " , "]) == 2
    assert f"no hazard given; {KNOWN}" in _one_line_error(capsys)


def test_only_accepts_lower_case_and_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--backend", "sim", "--only", "h1, h12", "--strategy", "none", "--json"]) == 0
    assert '"hazard": "H12"' in capsys.readouterr().out


def test_unknown_hazard_in_a_real_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "hazards", "--only", "H1,H99"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"streamsafe hazards: --only 'H1,H99': unknown hazard 'H99'; {KNOWN}"


def test_unknown_strategy(capsys: pytest.CaptureFixture[str], no_matrix: None) -> None:
    assert main(["hazards", "--strategy", "none,fast"]) == 2
    assert "unknown strategy 'fast'; choose from none, auto" in _one_line_error(capsys)


def test_bench_unknown_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--scenario", "zz"]) == 2
    assert "unknown scenario 'zz'" in _one_line_error(capsys, "bench")


def test_bad_frames_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["hazards", "--frames", "0"])
    assert exc.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_run_takes_a_strategy_in_any_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    before = sys.modules.get("nvvfx")
    assert main(["run", "--strategy", "EVENT", "--fake-nvvfx", str(script)]) == 0
    assert "ran" in capsys.readouterr().out
    assert sys.modules.get("nvvfx") is before  # run in-process, it leaves no emulated nvvfx behind


def test_run_says_why_strategy_none_is_not_offered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "ok.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["run", "--strategy", "none", str(script)]) == 2
    line = _one_line_error(capsys, "run")
    assert "strategy 'none' (no fences) is not offered here" in line and "plain python" in line


def test_an_unknown_option_of_a_command_shows_that_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--bogus", "ok.py"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: streamsafe run ") and "streamsafe run: error: unrecognized arguments: --bogus" in err


def test_run_takes_a_glued_module_name_as_python_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hello_mod.py").write_text("import sys\nprint('module args', sys.argv[1:])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--fake-nvvfx", "-mhello_mod", "--help"]) == 0
    assert "module args ['--help']" in capsys.readouterr().out



def test_a_broken_pipe_that_is_not_stdout_is_not_swallowed(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """entry() ends quietly only when standard output's reader went; a broken --report pipe is an error."""
    from streamsafe.tools import cli

    def broken(*args: object, **kwargs: object) -> int:
        raise BrokenPipeError(32, "Broken pipe (the report's reader)")

    monkeypatch.setattr(cli, "main", broken)
    with pytest.raises(BrokenPipeError, match="the report's reader"):
        cli.entry()
