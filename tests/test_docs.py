"""The docs promise things the code must keep true."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import streamsafe as ss

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs" / "api.md").read_text() == mod.render(), "docs/api.md is stale: run python3 docs/gen_api.py"


def test_every_public_name_has_a_docstring() -> None:
    missing = [n for n in ss.__all__ if not n.startswith("__") and not (getattr(ss, n).__doc__ or "").strip()]
    assert missing == []


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first = text[: text.index("## ")]
    assert "make run" in first and "make test" in first
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_docs_link_only_to_files_that_exist() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_pictures_exist_for_every_hazard() -> None:
    for h in ("H1", "H2", "H3", "H4", "H5", "H6", "H12"):
        assert (ROOT / "docs" / "img" / f"{h}.png").exists()


def test_python_version_floor() -> None:
    assert sys.version_info >= (3, 10)
