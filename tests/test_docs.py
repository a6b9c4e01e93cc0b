"""The docs promise things the code must keep true."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import streamsafe as ss
from streamsafe import testing

ROOT = Path(__file__).resolve().parents[1]


def _public_names(module: ModuleType) -> list[str]:
    return [n for n in module.__all__ if not n.startswith("__")]


def test_api_reference_renders_every_public_name(tmp_path: Path) -> None:
    """pdoc renders the reference (docs/gen_api.py, in a fresh interpreter) without a warning, with every
    public name on its page and the effects' own run() documented, even after this process installed
    guard dispatchers on the effect classes."""
    pytest.importorskip("pdoc", reason="pdoc is in the 'test' and 'docs' extras")
    from streamsafe.testing import VideoSuperRes

    ss.StreamContract(VideoSuperRes(backend=ss.sim.SimBackend()))  # puts dispatchers on VideoSuperRes here
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    assert spec and spec.loader
    gen_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_api)
    result = gen_api.render(tmp_path)
    assert result.returncode == 0 and not result.stderr.strip(), result.stdout + result.stderr
    pages = {"streamsafe": ss, "streamsafe/testing": testing}
    for page, module in pages.items():
        html = (tmp_path / f"{page}.html").read_text()
        missing = [n for n in _public_names(module) if f'id="{n}"' not in html]
        assert missing == [], f"{page}.html lacks {missing}"
    html = (tmp_path / "streamsafe" / "testing.html").read_text()
    run = html[html.index('id="VideoSuperRes.run"'):]
    run = run[: run.index("</section>")]
    assert "input_array" in run and "Upscale one frame" in run and "dispatch" not in run
    for page in tmp_path.rglob("*.html"):
        assert "DESIGN.md" not in page.read_text(), f"{page.name} cites DESIGN.md; the design doc is docs/design.md"


def test_api_md_lists_every_public_name() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    missing = [n for m in (ss, testing) for n in _public_names(m) if f"`{n}`" not in text]
    assert missing == [], f"docs/api.md does not list {missing}"


def test_no_docstring_cites_a_missing_design_doc() -> None:
    for path in sorted((ROOT / "streamsafe").rglob("*.py")):
        assert "DESIGN.md" not in path.read_text(), f"{path.relative_to(ROOT)} cites DESIGN.md; the design doc is docs/design.md"


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


def test_every_public_member_has_a_docstring() -> None:
    """Every method and property of the public classes of streamsafe, streamsafe.testing and streamsafe.sim says what it is."""
    import inspect

    missing = []
    for module in (ss, testing, ss.sim):
        for name in module.__all__:
            obj = getattr(module, name, None)
            if not inspect.isclass(obj):
                continue
            for klass in obj.__mro__:
                if not klass.__module__.startswith("streamsafe"):
                    continue
                for attr, value in vars(klass).items():
                    target = value if isinstance(value, property) or inspect.isfunction(value) else None
                    if not attr.startswith("_") and target is not None and not target.__doc__:
                        missing.append(f"{klass.__qualname__}.{attr}")
    assert sorted(set(missing)) == []


def test_user_facing_text_calls_the_vendors_documentation_by_its_name() -> None:
    for path in [*(ROOT / "streamsafe").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "examples").glob("*.py")]:
        text = path.read_text()
        for phrase in ("the seed's", "seed document", "seed's recipe"):
            assert phrase not in text, f"{path.relative_to(ROOT)} says {phrase!r}: say the vendor's documentation"


def test_the_errors_page_lists_every_error_with_an_example() -> None:
    from streamsafe import errors

    text = (ROOT / "docs" / "errors.md").read_text()
    table, examples = text.split("## Examples", 1)
    classes = [n for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    assert [n for n in classes if f"| `{n}` |" not in table] == []
    assert [n for n in classes if n != "StreamsafeError" and f"{n}:" not in examples] == []
    assert "errors.md" in (ROOT / "docs" / "guide.md").read_text()


def test_the_readme_says_which_scheduler_the_fake_nvvfx_gets_and_starts_the_cpu_path_with_make_run() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "install_fake_nvvfx()` loads the emulation on the current backend" in text
    assert 'SimBackend(scheduler="adversarial")' in text and "does the same" not in text
    cpu = text[text.index("### On a CPU"):text.index("### NVIDIA's video decoder")]
    assert "make run" in cpu and "make test" not in cpu.split("examples/quickstart_cpu.py")[0]
    assert "docs/design.md#layers-and-the-module-map" in text
