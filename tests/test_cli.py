from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from streamsafe.tools.cli import main
from streamsafe.tools.hazards import SCENARIOS, Row, failures, format_summary, format_table, format_verdict, rows_to_json


def test_doctor_runs_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "streamsafe" in out and "packages:" in out and "CUDA:" in out and "SDK profiles" in out
    assert "\n  nvvfx.VideoSuperRes " in out and " nvvfx: " in out  # (whether nvvfx imports: its profiles' module)


def test_doctor_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"python", "packages", "cuda", "stream_defaults", "nvvfx_importable", "backend", "switches"} <= set(report)


def test_console_entry_point_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "doctor"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "backend:" in proc.stdout


def test_import_needs_no_framework() -> None:
    code = "import sys, streamsafe; print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# -- streamsafe --version and help ---------------------------------------------------------------


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from streamsafe._version import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamsafe {__version__}"


def test_hazards_help_explains_the_columns_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["hazards", "--help"])
    out = capsys.readouterr().out
    for word in ("race?", "corrupt", "control", "fence", "P S L C", "nb", "enc", "--full", "Exit status", "JSON array"):
        assert word in out, word


# -- make run: the verdict -----------------------------------------------------------------------


def _row(hazard: str = "H3", strategy: str = "event", *, safe: bool = False, corrupt: int = 0, race: bool = False,
         reported: list[str] | None = None, title: str = "a scenario") -> Row:
    return Row(hazard=hazard, scenario=title, safe=safe, strategy=strategy, effect="VideoSuperRes", encoding="RGB8",
               streams="P=sdk S=non-blocking L=legacy C=sdk", non_blocking=False, race_reported=race,
               hazards_reported=reported if reported is not None else ([hazard] if race else []), frames=4,
               corrupt_frames=corrupt, backend="sim")


def test_hazards_default_output_is_a_verdict_per_hazard(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hazards", "--backend", "sim", "--frames", "2"])
    out = capsys.readouterr().out
    assert code == (1 if "VERDICT: FAIL" in out else 0)
    assert "Hazard matrix" not in out  # the full matrix is behind --full
    assert "Legend" in out and "VERDICT:" in out.strip().splitlines()[-2] + out.strip().splitlines()[-1]
    for hazard in {s.hazard for s in SCENARIOS}:
        assert any(line.startswith(f"{hazard} ") for line in out.splitlines()), hazard
    assert "(control)" not in out and "controls (these stream kinds make H2 impossible)" in out
    assert "fence (auto" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_hazards_full_prints_every_row_and_its_legend(capsys: pytest.CaptureFixture[str]) -> None:
    main(["hazards", "--backend", "sim", "--frames", "2", "--full", "--strategy", "none,auto"])
    out = capsys.readouterr().out
    assert "Hazard matrix" in out and "strategy none" in out and "strategy auto" in out
    assert "P S L C" in out and "  nb  " in out and "  enc  " in out
    matrix = out.split("Verdict per hazard")[0]
    assert sum(" ctl " in line for line in matrix.splitlines()) == 2 * sum(s.safe and s.hazard != "-" for s in SCENARIOS)
    assert max(len(line) for line in out.splitlines()) <= 100


def test_full_matrix_abbreviates_stream_kinds() -> None:
    table = format_table([_row(strategy="none", race=True, corrupt=4)])
    assert "S n 0 S" in table  # P on the SDK stream, S non-blocking, L legacy, C on the SDK stream


def test_fenced_strategy_that_corrupts_or_misses_a_race_fails() -> None:
    rows = [
        _row(strategy="none", race=True, corrupt=4),
        _row(strategy="auto"),
        _row(strategy="event", corrupt=1),
        _row(strategy="stream", race=True),
        _row(strategy="device", reported=["H5"]),  # a race of another hazard is missed too
    ]
    assert [r.strategy for r in failures(rows)] == ["event", "stream", "device"]
    verdict = format_verdict(rows)
    assert verdict.startswith("VERDICT: FAIL. 3 fenced run(s)")
    assert "event" in verdict and "1/4 frames corrupt" in verdict and "race H3 missed" in verdict
    summary = format_summary(rows)
    assert "1/4" in summary and "0/4 H3" in summary and "0/4 H5" in summary


def test_unfenced_races_and_controls_corrupted_by_another_hazard_pass() -> None:
    rows = [
        _row("H2", "none", race=True, corrupt=4, title="racy"),
        _row("H2", "none", safe=True, corrupt=3, reported=["H5"], title="a control"),
        _row("H2", "auto", title="racy"),
        _row("H2", "auto", safe=True, title="a control"),
    ]
    assert failures(rows) == []
    assert format_verdict(rows).startswith("VERDICT: PASS")
    summary = format_summary(rows)
    control = next(line for line in summary.splitlines() if line.strip().startswith("a control"))
    assert "no" in control.split() and "3/4 (H5)" in control and control.split()[-1] == "ok"
    assert "(H5 corrupts these frames without streamsafe; H2 does not race: the control passes)" in summary


def test_only_strategy_none_has_no_verdict_to_give() -> None:
    assert "nothing to judge" in format_verdict([_row(strategy="none", race=True, corrupt=4)])


def test_hazards_exit_status_is_one_when_a_fenced_strategy_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import streamsafe.tools.hazards as hz

    def broken(**kwargs: object) -> list[Row]:
        [sc] = kwargs["scenarios"]  # type: ignore[misc]
        [strategy] = kwargs["strategies"]  # type: ignore[misc]
        return [_row(sc.hazard, strategy, safe=sc.safe, title=sc.title, corrupt=2 if strategy == "event" else 0)]

    monkeypatch.setattr(hz, "run_matrix", broken)
    assert main(["hazards", "--backend", "sim", "--only", "H3", "--strategy", "none,event"]) == 1
    assert "VERDICT: FAIL" in capsys.readouterr().out
    assert main(["hazards", "--backend", "sim", "--only", "H3", "--strategy", "none,auto"]) == 0


def test_hazards_json_is_one_array_of_row_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--backend", "sim", "--json", "--only", "H1,H4", "--strategy", "none,event"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert isinstance(rows, list) and len(rows) == 2 * sum(s.hazard in ("H1", "H4") for s in SCENARIOS)
    assert {r["strategy"] for r in rows} == {"none", "event"}
    assert set(rows[0]) >= {"hazard", "scenario", "safe", "strategy", "race_reported", "corrupt_frames", "frames"}
    assert "VERDICT: PASS" in captured.err and "Legend" not in captured.out
    assert rows_to_json([]) == "[]"


def test_make_run_target_runs_doctor_then_hazards() -> None:
    from pathlib import Path

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "streamsafe doctor" in run and "streamsafe hazards" in run


# -- progress ----------------------------------------------------------------------------------


def test_progress_is_silent_in_a_pipe() -> None:
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "hazards", "--backend", "sim", "--only", "H1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\r" not in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "bench", "--backend", "sim", "--scenario", "a",
                           "--strategy", "none,auto", "--frames", "4"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr


def test_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["hazards", "--backend", "sim", "--only", "H1", "--strategy", "none,auto"]) == 0
    err = capsys.readouterr().err
    assert "\r" in err and "hazards:" in err and "/4 " in err  # 4 runs: H1 and its control, twice


def test_doctor_shows_the_switches_that_are_set(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STREAMSAFE_SANITIZE", "1")
    monkeypatch.delenv("STREAMSAFE_REPLAY", raising=False)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "switches: " in out and "STREAMSAFE_SANITIZE=1" in out and "STREAMSAFE_REPLAY=" not in out


def test_doctor_says_whether_nvidias_decoder_imports(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from streamsafe.testing.fake_pynvvideocodec import build_fake_pynvvideocodec

    monkeypatch.delitem(sys.modules, "PyNvVideoCodec", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "PyNvVideoCodec" else _find_spec(name, *a))
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [r for r in report["profiles"] if r["module"] == "PyNvVideoCodec"]
    assert rows and all(r["importable"] is False and "install_fake_pynvvideocodec" in r["why"] for r in rows)
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", build_fake_pynvvideocodec())
    assert main(["doctor"]) == 0
    assert re.search(r"PyNvVideoCodec: yes \([^)]*\), streamsafe's emulation", capsys.readouterr().out)


def test_doctor_asks_each_profile_what_its_sdk_says_here(capsys: pytest.CaptureFixture[str]) -> None:
    """A registered profile's probe is doctor's line about its SDK (no SDK is named in doctor itself); a probe that
    raises is said, not a crash."""
    import types

    from streamsafe import profile as P

    calls = []

    def probe(gpu: bool) -> dict[str, object]:
        calls.append(gpu)
        return {"line": "engine opens", "engine": "v7"}

    module = types.ModuleType("probed_sdk")
    module.Thing = type("Thing", (), {"process": lambda self, *, image, stream=None: None})  # type: ignore[attr-defined]
    sys.modules["probed_sdk"] = module
    good = P.register(P.EffectProfile(name="probed.Thing", classes=("probed_sdk.Thing",), calls=("process",), inputs=("image",),
                                      stream_keyword="stream", blocking_keyword=None, module="probed_sdk", probe=probe))
    try:
        assert main(["doctor"]) == 0
        assert "probed.Thing" in (out := capsys.readouterr().out) and "probed_sdk: yes; engine opens" in out
        assert calls == [False]
        assert main(["doctor", "--json"]) == 0
        [row] = [r for r in json.loads(capsys.readouterr().out)["profiles"] if r["module"] == "probed_sdk"]
        assert row["probe"] == {"line": "engine opens", "engine": "v7"}
    finally:
        P.unregister(good)
    bad = P.register(P.EffectProfile(name="probed.Thing", classes=("probed_sdk.Thing",), calls=("process",), inputs=("image",),
                                     stream_keyword="stream", blocking_keyword=None, module="probed_sdk",
                                     probe=lambda gpu: 1 / 0))
    try:
        assert main(["doctor"]) == 0
        assert "probed_sdk: yes; its check failed: ZeroDivisionError" in capsys.readouterr().out
    finally:
        P.unregister(bad)
        del sys.modules["probed_sdk"]


_find_spec = importlib.util.find_spec
