"""The package's layout: the model and the tools each live together, the old module paths are gone,
and the names streamsafe exported before warn with the module they live in now."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

import streamsafe as ss

ROOT = Path(__file__).resolve().parents[1]


def test_the_model_and_the_tools_each_live_together() -> None:
    for name in ("backend", "schedule", "clocks", "races", "mirror", "sanitize"):
        assert (ROOT / "streamsafe" / "sim" / f"{name}.py").is_file(), name
    for name in ("cli", "doctor", "hazards", "runner"):
        assert (ROOT / "streamsafe" / "tools" / f"{name}.py").is_file(), name


@pytest.mark.parametrize("old", ["streamsafe.backend.sim", "streamsafe.backend.schedule", "streamsafe.clocks", "streamsafe.races",
                                 "streamsafe.cli", "streamsafe.doctor", "streamsafe.hazards", "streamsafe.runner",
                                 "streamsafe._native", "streamsafe._accel", "streamsafe.sanitize"])
def test_old_module_paths_are_gone(old: str) -> None:
    if old == "streamsafe.sanitize":  # the name is the function now, not a module
        assert callable(ss.sanitize) and "streamsafe.sanitize" not in sys.modules
        return
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_public_api_is_small_and_every_name_is_there() -> None:
    assert len(ss.__all__) <= 25
    for name in ss.__all__:
        assert getattr(ss, name) is not None, name


@pytest.mark.parametrize(("name", "where"), [("SimBackend", "streamsafe.sim"), ("StaleOutputError", "streamsafe.errors"),
                                             ("AdversarialScheduler", "streamsafe.sim"), ("plan_fences", "streamsafe.plan"),
                                             ("implicitly_ordered", "streamsafe.streams"), ("Ledger", "streamsafe.ledger")])
def test_a_name_that_moved_warns_with_its_new_module_and_still_works(name: str, where: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"streamsafe\.{name} is deprecated: it lives in {where}"):
        value = getattr(ss, name)
    assert value is getattr(importlib.import_module(where), name)
    assert name not in ss.__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
            ss.nothing_here  # noqa: B018


def test_one_meaning_for_shadow() -> None:
    """'shadow' names the async strategy's stream only; the sanitizer's model is the mirror."""
    import streamsafe.sim.mirror as mirror

    assert hasattr(mirror, "Mirror") and not hasattr(mirror, "Shadow")


def test_the_license_is_an_spdx_string() -> None:
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert project["license"] == "Apache-2.0"


def test_the_changelog_says_what_changed_for_users_in_at_most_100_lines() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    assert len(unreleased.strip("\n").splitlines()) <= 100
    assert "docs/runs" not in unreleased.replace("`docs/runs/` (raw GPU run output) is no longer", "")
