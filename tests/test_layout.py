"""The package's layout shows its layers, and the old module paths still import (as aliases)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_model_and_the_tools_each_live_together() -> None:
    for name in ("backend", "schedule", "clocks", "races", "mirror"):
        assert (ROOT / "streamsafe" / "sim" / f"{name}.py").is_file(), name
    for name in ("cli", "doctor", "hazards", "runner"):
        assert (ROOT / "streamsafe" / "tools" / f"{name}.py").is_file(), name


def test_old_paths_are_the_same_modules() -> None:
    pairs = {
        "streamsafe.sim.backend": "streamsafe.sim.backend",
        "streamsafe.sim.schedule": "streamsafe.sim.schedule",
        "streamsafe.sim.clocks": "streamsafe.sim.clocks",
        "streamsafe.sim.races": "streamsafe.sim.races",
        "streamsafe.tools.cli": "streamsafe.tools.cli",
        "streamsafe.tools.doctor": "streamsafe.tools.doctor",
        "streamsafe.tools.hazards": "streamsafe.tools.hazards",
        "streamsafe.tools.runner": "streamsafe.tools.runner",
    }
    for old, new in pairs.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


def test_the_core_imports_nothing_of_the_tools() -> None:
    for name in ("contract", "ledger", "guarding", "outputs", "plan", "streams", "hooks", "class_guard"):
        text = (ROOT / "streamsafe" / f"{name}.py").read_text()
        assert "tools" not in [part for line in text.splitlines() if line.startswith(("from", "import")) for part in line.replace(".", " ").split()], name


def test_one_meaning_for_shadow() -> None:
    """'shadow' names the async strategy's stream only; the sanitizer's model is the mirror."""
    import streamsafe.sim.mirror as mirror

    assert hasattr(mirror, "Mirror") and not hasattr(mirror, "Shadow")


def test_the_license_is_an_spdx_string() -> None:
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert project["license"] == "Apache-2.0"
