"""The ``STREAMSAFE_*`` switches: every value streamsafe does not read is refused (or, for a speed or test
switch, warned about at the user's line), a name it does not know is warned about once with the closest
known name, ``streamsafe doctor`` lists both, and the other commands say a refused value in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from streamsafe import _env
from streamsafe.backend import _held
from streamsafe.errors import EnvironmentSettingError, EnvironmentSettingWarning
from streamsafe.tools.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _python(code_or_path: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSAFE_")}
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args, code_or_path], capture_output=True, text=True, env=full, timeout=120)


@pytest.mark.parametrize(("value", "read"), [("held", "held"), ("bindings", "bindings"), ("BINDINGS", "bindings"),
                                             (" Held ", "held"), ("", "held")])
def test_fence_calls_reads_its_two_values_in_any_case(monkeypatch: pytest.MonkeyPatch, value: str, read: str) -> None:
    monkeypatch.setenv("STREAMSAFE_FENCE_CALLS", value)
    assert _env.env_choice("STREAMSAFE_FENCE_CALLS") == read


def test_fence_calls_with_another_value_is_refused_where_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSAFE_FENCE_CALLS", "foo")
    monkeypatch.setattr(_held, "_HELD", False)  # (not looked up yet in this process)
    with pytest.raises(EnvironmentSettingError,
                       match=r"STREAMSAFE_FENCE_CALLS='foo' is not a switch .*set it to held or bindings, in any case, or unset it"):
        _held.held_calls()
    assert _held._HELD is False  # nothing was decided: the next call reads the switch again
    monkeypatch.setenv("STREAMSAFE_FENCE_CALLS", "BINDINGS")
    assert _held.held_calls() is None  # cuda.bindings' own calls


def test_an_unknown_name_warns_once_naming_the_closest_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_env, "_warned", set())
    env = {"STREAMSAFE_SANITISE": "1", "STREAMSAFE_FUZZ_FRAMES": "10", "STREAMSAFE_SANITIZE": "0", "OTHER": "x"}
    with pytest.warns(EnvironmentSettingWarning) as record:
        _env.warn_unknown_names(env)
    assert len(record) == 1  # the switch and the test suite's own name are known
    message = str(record[0].message)
    assert "STREAMSAFE_SANITISE is not an environment variable streamsafe reads" in message
    assert "did you mean STREAMSAFE_SANITIZE?" in message and "unset it" in message
    assert record[0].filename == __file__  # the caller's line, not streamsafe's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _env.warn_unknown_names(env)  # once per name


def test_importing_streamsafe_warns_at_the_users_import_line(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("import os\n\nimport streamsafe\n")
    result = _python(str(script), {"STREAMSAFE_REPLAY": "2", "STREAMSAFE_SANITISE": "1"})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "EnvironmentSettingWarning" in line]
    assert len(lines) == 2, result.stderr
    for line in lines:  # not streamsafe/steady.py, contract.py or __init__.py
        assert line.startswith(f"{script}:3: EnvironmentSettingWarning: "), result.stderr
    assert any("STREAMSAFE_REPLAY='2'" in line and "keeping the default (on)" in line for line in lines)
    assert any("did you mean STREAMSAFE_SANITIZE?" in line for line in lines)


def test_doctor_flags_bad_values_and_unknown_names(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith("STREAMSAFE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STREAMSAFE_FENCE_CALLS", "foo")
    monkeypatch.setenv("STREAMSAFE_REPLAY", "2")
    monkeypatch.setenv("STREAMSAFE_SANITISE", "1")
    assert main(["doctor"]) == 0  # doctor reports; it refuses nothing
    out = " ".join(capsys.readouterr().out.split())
    assert "! STREAMSAFE_FENCE_CALLS='foo' is not a switch streamsafe reads" in out
    assert "! STREAMSAFE_REPLAY='2' is not a switch" in out and "the default (on) is kept" in out
    assert "! STREAMSAFE_SANITISE is not an environment variable streamsafe reads" in out
    assert main(["doctor", "--json"]) == 0
    assert len(__import__("json").loads(capsys.readouterr().out)["switch_problems"]) == 3


def test_doctor_flags_nothing_when_every_setting_is_read(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    for name in [n for n in os.environ if n.startswith("STREAMSAFE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STREAMSAFE_FENCE_CALLS", "Bindings")
    monkeypatch.setenv("STREAMSAFE_FUZZ_FRAMES", "10")
    assert main(["doctor"]) == 0
    assert "!" not in capsys.readouterr().out.split("switches:")[1].split("CUDA:")[0]


def test_every_streamsafe_name_the_project_reads_is_known() -> None:
    names: set[str] = set()
    for folder in ("streamsafe", "tests", "scripts", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and path.is_file():
                names |= set(re.findall(r"STREAMSAFE_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    names -= {"STREAMSAFE_SANITISE", "STREAMSAFE_NATIVE"}  # (this file's misspelling; a removed switch)
    assert names - set(_env.SWITCHES) - set(_env.SUITE_NAMES) == set()


@pytest.mark.parametrize("command", [["hazards", "--only", "H1"], ["bench", "--scenario", "a"]])
@pytest.mark.parametrize(("name", "value"), [("STREAMSAFE_SANITIZE", "maybe"), ("STREAMSAFE_FENCE_CALLS", "foo")])
def test_a_refused_value_ends_a_command_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                    command: list[str], name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert main(command) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"streamsafe {command[0]}: {name}={value!r} is not a switch streamsafe reads")
    assert captured.err.count("\n") == 1 and "or unset it" in captured.err


def test_streamsafe_run_with_a_refused_value_says_it_in_one_line_with_status_2(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text("print('ran')\n")
    result = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", str(program)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("STREAMSAFE_")},
                                 "STREAMSAFE_SANITIZE": "maybe"})
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "streamsafe run: STREAMSAFE_SANITIZE='maybe' is not a switch streamsafe reads (raise RaceError on the first race "
        "instead of recording it): set it to 1 (also true, yes, on) or 0 (also false, no, off), in any case, or unset it"
    ]

