from __future__ import annotations

import json
import subprocess
import sys

import pytest

from streamsafe.cli import main


def test_doctor_runs_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "streamsafe" in out and "packages:" in out and "CUDA:" in out and "nvvfx importable" in out


def test_doctor_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"python", "packages", "cuda", "stream_defaults", "nvvfx_importable", "backend"} <= set(report)


def test_console_entry_point_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "streamsafe", "doctor"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "backend:" in proc.stdout


def test_import_needs_no_framework() -> None:
    code = "import sys, streamsafe; print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
