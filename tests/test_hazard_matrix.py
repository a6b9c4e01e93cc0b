"""The hazard matrix on the model: every hazard is reported where the hazard table (docs/design.md) says it exists,
shows as wrong frames, and is absent where the stream kinds make it safe."""

from __future__ import annotations

import json

import pytest

from streamsafe.tools.cli import main
from streamsafe.tools.hazards import SCENARIOS, Scenario, run_matrix, run_scenario
from streamsafe.testing.labs import SimLab

HAZARD_ROWS = [s for s in SCENARIOS if not s.safe]
CONTROL_ROWS = [s for s in SCENARIOS if s.safe]


@pytest.mark.parametrize("scenario", HAZARD_ROWS, ids=lambda s: s.id)
def test_hazard_is_reported_and_corrupts_frames(scenario: Scenario) -> None:
    row = run_scenario(scenario, SimLab(), frames=4)
    assert row.race_reported, row.races
    assert scenario.hazard in row.hazards_reported
    assert row.corrupt_frames >= 3


@pytest.mark.parametrize("scenario", CONTROL_ROWS, ids=lambda s: s.id)
def test_control_configuration_has_no_such_hazard(scenario: Scenario) -> None:
    row = run_scenario(scenario, SimLab(), frames=4)
    assert not row.race_reported
    if not row.hazards_reported:  # nothing at all reported: every frame must be right
        assert row.corrupt_frames == 0


def test_every_design_hazard_h1_to_h6_has_a_row_and_a_control() -> None:
    for h in ("H1", "H2", "H3", "H4", "H5", "H6"):
        assert any(s.hazard == h and not s.safe for s in SCENARIOS)
        assert any(s.hazard == h and s.safe for s in SCENARIOS)


def test_legacy_only_pipeline_reports_nothing() -> None:
    [legacy] = [s for s in SCENARIOS if s.hazard == "-"]
    row = run_scenario(legacy, SimLab(), frames=6)
    assert row.hazards_reported == [] and row.corrupt_frames == 0


def test_non_blocking_sdk_stream_in_blocking_mode_still_reuses_the_8bit_result() -> None:
    # A finding of the model: with a non-blocking SDK stream, non_blocking=False closes H2,
    # but the next run's inference can overwrite the 8-bit result that the previous
    # conversion (on stream 0) still reads. streamsafe attributes it to H5 (buffer reuse).
    [row_sc] = [s for s in SCENARIOS if s.hazard == "H2" and s.safe and not s.non_blocking]
    row = run_scenario(row_sc, SimLab(), frames=3)
    assert row.hazards_reported == ["H5"]


def test_matrix_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--backend", "sim", "--json", "--only", "H3", "--strategy", "none"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2
    for row in rows:
        assert {"hazard", "strategy", "race_reported", "frames", "corrupt_frames", "backend"} <= set(row)
        assert row["backend"] == "sim" and row["strategy"] == "none"


STRATEGIES = ["auto", "event", "async", "stream", "device"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_fixes_every_hazard(strategy: str) -> None:
    rows = run_matrix(backend="sim", strategies=[strategy])
    assert len(rows) == len(SCENARIOS)
    for row in rows:
        assert row.hazards_reported == [], (row.hazard, row.scenario, row.races)
        assert row.corrupt_frames == 0, (row.hazard, row.scenario)


def test_strategy_option_and_trace(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.json"
    assert main(["hazards", "--only", "H2", "--strategy", "none,event", "--trace", str(trace), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["strategy"] for r in rows} == {"none", "event"}
    data = json.loads(trace.read_text())
    names = {e["name"] for e in data["traceEvents"]}
    assert "VideoSuperRes.inference" in names and "event record" in names
    assert any(n.startswith("RACE") for n in names)  # the unfenced scenario's race is marked
    threads = {e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    assert "legacy stream (cuda:0)" in threads and "host" in threads


def test_unknown_strategy_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--strategy", "fast"]) == 2
    assert "unknown strategy 'fast'" in capsys.readouterr().err


def test_matrix_table_says_it_is_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--backend", "sim", "--frames", "2"]) == 0
    out = capsys.readouterr().out
    assert "simulated backend" in out and "H6" in out and "2/2" in out


def test_unknown_hazard_filter_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hazards", "--only", "H99"]) == 2
    assert "known: H1" in capsys.readouterr().err


def test_run_matrix_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend must be 'sim' or 'cuda'"):
        run_matrix(backend="tpu")


def test_the_matrix_advises_no_declaration_of_its_own_scenarios() -> None:
    """The matrix's scenarios are streamsafe's own: ``make run`` shows no HostWaitWarning the user cannot act on."""
    import warnings

    from streamsafe.errors import HostWaitWarning
    from streamsafe.tools.hazards import run_matrix

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_matrix(strategies=("auto",), frames=2)
    assert not [w for w in seen if issubclass(w.category, HostWaitWarning)]
