"""The guide's "Guarding your own SDK" runs as written, and the docs list every profile field and error.

* The section's Python blocks are the files they name in their first line (``# sharpener.py: ...``): written to a
  folder as they are, their pytest test passes there (the race without the guard, none with each way in), and its
  shell lines do what their comments say (``streamsafe run`` guards the SDK once its profile is registered first).
* The mistakes the guide and the errors page show raise the messages they quote.
* ``docs/api.md`` has a row for every field of ``Profile``, ``EffectProfile`` and ``PoolProfile`` (in the table of
  the class that declares it), with its default; every ``file.md#anchor`` link in the docs names a heading.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import streamsafe as ss
from streamsafe import profile as P
from streamsafe.sim import SimBackend

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
SECTION = "## Guarding your own SDK"
MODULES = ("sharpener", "sharpener_profile", "my_pipeline", "run_guarded", "test_sharpener")


def _section() -> str:
    text = GUIDE.read_text()
    start = text.index(SECTION + "\n")
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", _section(), re.S | re.M)


def _files() -> dict[str, str]:
    """The section's Python blocks by the file each names in its first line."""
    files = {}
    for block in _blocks("python"):
        first = block.splitlines()[0]
        match = re.match(r"# (\w+\.py): ", first)
        assert match, f"a Python block of the guide's section does not name its file in its first line: {first!r}"
        files[match.group(1)] = block
    return files


def _write_files(folder: Path) -> None:
    for name, text in _files().items():
        (folder / name).write_text(text)
    (folder / "pytest.ini").write_text("[pytest]\n")  # (its own rootdir: none of this repository's options)


def _env() -> dict[str, str]:
    """This environment without a GPU (the stand-in runs on the model) and without sanitize mode forced on."""
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMSAFE_SANITIZE", "PYTHONPATH")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_the_section_names_its_files_and_shows_a_profile_that_is_not_nvvfx() -> None:
    files = _files()
    assert list(files) == [
        "sharpener.py", "sharpener_profile.py", "my_pipeline.py", "test_sharpener.py", "run_guarded.py",
    ]
    profile = files["sharpener_profile.py"]
    for shown in ('calls=("process",)', 'releases=("reset",)', 'inputs=("image",)', "blocking_keyword=None"):
        assert shown in profile
    for block in files.values():  # (built from public names only: no streamsafe internals, no private names)
        assert not re.search(r"streamsafe\.\w*\._|\bss\._|from streamsafe\.\w+ import _", block)


def test_the_guides_example_test_passes_as_written(tmp_path: Path) -> None:
    """pytest on the guide's test file, in a fresh process: the unguarded run races and the four guarded ones do not."""
    _write_files(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--rootdir", str(tmp_path), "test_sharpener.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b5 passed\b", summary) and "failed" not in summary, proc.stdout
    assert "`pytest test_sharpener.py` passes 5 tests" in _section()


def _command(line: str) -> tuple[list[str], dict[str, str], str]:
    """A shell line of the section: its words (``python``/``streamsafe``: this interpreter's), its environment and
    its comment."""
    command, _, comment = line.partition("  #")
    words = shlex.split(command)
    env = _env()
    while "=" in words[0]:
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "streamsafe":
        words[:1] = [sys.executable, "-m", "streamsafe"]
    return words, env, comment.strip()


def test_the_guides_streamsafe_run_lines_do_what_their_comments_say(tmp_path: Path) -> None:
    _write_files(tmp_path)
    (block,) = _blocks("sh")
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2
    results = []
    for line in lines:
        words, env, comment = _command(line)
        proc = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        results.append((proc, comment))
    (registered, said), (plain, said_plain) = results
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert "1 effect(s) guarded" in registered.stderr and "sanitize: no race found" in registered.stderr
    assert "1 effect(s) guarded" in said and "no race" in said
    assert "sharpened: [2.0, 4.0, 6.0]" in registered.stdout
    assert plain.returncode == 3, plain.stdout + plain.stderr
    assert "0 effect(s) guarded" in plain.stderr and "race(s) found" in plain.stderr
    assert "0 effect(s) guarded" in said_plain and "exit 3" in said_plain


# -- what the guide says of the fields, on its own example ---------------------------------------------------------


@pytest.fixture
def guide_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The section's modules, imported from a folder as it writes them (and forgotten after the test)."""
    import importlib

    _write_files(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        yield {name: importlib.import_module(name) for name in ("sharpener", "sharpener_profile", "my_pipeline")}
    finally:
        for name in MODULES:
            sys.modules.pop(name, None)


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


def _registered(profile: Any) -> Any:
    class Registered:
        def __enter__(self) -> Any:
            return P.register(profile)

        def __exit__(self, *exc: object) -> None:
            P.unregister(profile)

    return Registered()


def test_the_profile_matches_the_stand_in_by_its_qualified_name(guide_modules: dict[str, ModuleType]) -> None:
    Sharpener = guide_modules["sharpener"].Sharpener
    SHARPENER = guide_modules["sharpener_profile"].SHARPENER
    assert P.qualified_name(Sharpener) == "sharpener.Sharpener" and SHARPENER.classes == ("sharpener.Sharpener",)
    with _registered(SHARPENER):
        assert P.profile_of(Sharpener) is SHARPENER
        assert P.profile_of(type("Mine", (Sharpener,), {})) is SHARPENER  # (its subclasses too)
    with pytest.raises(ss.errors.NotAnEffectError, match="Guarding your own SDK"):
        P.profile_of(Sharpener)


def test_the_nvvfx_defaults_left_in_a_profile_fail_as_the_guide_says(
    guide_modules: dict[str, ModuleType], sim: SimBackend
) -> None:
    """A keyword left at nvvfx's is refused when the contract is made (the SDK's signature says it takes none); an
    ``output`` the result lacks at the first call; the errors page quotes both messages."""
    Sharpener = guide_modules["sharpener"].Sharpener
    SHARPENER = guide_modules["sharpener_profile"].SHARPENER
    S = sim.create_stream(non_blocking=True)
    text = " ".join(_section().split()) + " ".join((ROOT / "docs" / "errors.md").read_text().split())
    mistakes = [({"blocking_keyword": "non_blocking"}, True), ({"stream_keyword": "stream_ptr"}, True),
                ({"output": "image", "wrap": None}, False)]
    for change, when_made in mistakes:
        with _registered(dataclasses.replace(SHARPENER, **change)):
            x = sim.empty((3, 8, 8))
            sim.fill(x, 1.0, S)
            sharpener = Sharpener()
            with pytest.raises(ss.errors.ProfileError) as e:
                ss.StreamContract(sharpener, S, input_stream=S).process(image=x)
            assert (sharpener.output is None) is when_made  # (refused before the call, or after it)
        if "blocking_keyword" in change or "output" in change:
            assert " ".join(f"{type(e.value).__name__}: {e.value}".split()) in text, f"the docs do not quote {e.value}"


def test_without_wrap_out_image_and_out_frame_are_the_guarded_output(
    guide_modules: dict[str, ModuleType], sim: SimBackend
) -> None:
    """What the guide says of a SafeOutput when ``output`` names another attribute than ``image``."""
    Sharpener = guide_modules["sharpener"].Sharpener
    SHARPENER = guide_modules["sharpener_profile"].SHARPENER
    S = sim.create_stream(non_blocking=True)
    with _registered(dataclasses.replace(SHARPENER, wrap=None)):
        x = sim.empty((3, 8, 8))
        sim.fill(x, 1.0, S)
        out = ss.StreamContract(Sharpener(), S).process(image=x)
    assert isinstance(out, ss.SafeOutput) and isinstance(out.image, ss.SafeImage)
    assert out.frame is out.image  # (the attribute the profile's output names: guarded too)
    with _registered(SHARPENER):
        x = sim.empty((3, 8, 8))
        sim.fill(x, 1.0, S)
        result = ss.StreamContract(Sharpener(), S).process(image=x)
    assert type(result).__name__ == "Sharpened" and isinstance(result.frame, ss.SafeImage)
    assert "`out.frame` is `out.image`" in " ".join(_section().split())


def test_the_guide_describes_every_field() -> None:
    text = _section()
    for cls in (P.Profile, P.EffectProfile, P.PoolProfile):
        missing = [f.name for f in dataclasses.fields(cls) if f.init and f"| `{f.name}` |" not in text]
        assert missing == [], f"the guide's section has no row for {cls.__name__}'s {missing}"


# -- the errors page ---------------------------------------------------------------------------------------------


def _profile_error_examples() -> list[tuple[str, str]]:
    """The errors page's examples whose message is a ProfileError: (the code, the message as quoted)."""
    text = (ROOT / "docs" / "errors.md").read_text().split("## Examples", 1)[1]
    found = re.findall(r"```python\n([^`]*)```\n`(ProfileError: [^`]*)`", text)
    return [(code, " ".join(message.split())) for code, message in found]


def test_the_errors_page_shows_the_common_profile_mistakes() -> None:
    codes = " ".join(code for code, _ in _profile_error_examples())
    assert 'calls="process"' in codes  # a string for a tuple
    assert 'classes=("Sharpener",)' in codes  # a bare class name
    assert "register({" in codes  # register() of a dict


def _example_id(value: str) -> str:
    """The field and value a quoted message names (``calls='process'``); the code gets none."""
    return re.split(r" is | holds ", value.split("': ", 1)[1])[0][:30] if value.startswith("ProfileError") else ""


@pytest.mark.parametrize(("code", "message"), _profile_error_examples(), ids=_example_id)
def test_each_profile_error_example_raises_the_message_the_errors_page_quotes(code: str, message: str) -> None:
    import streamsafe.profile

    before = P.profiles()
    with pytest.raises(ss.errors.ProfileError) as e:
        exec(code, {"streamsafe": streamsafe})
    assert " ".join(f"ProfileError: {e.value}".split()) == message
    assert P.profiles() == before


# -- the API reference -------------------------------------------------------------------------------------------

_TABLES = {
    "Profile": "`Profile`:", "EffectProfile": "`EffectProfile(Profile)`:", "PoolProfile": "`PoolProfile(Profile)`:",
}


def _api_rows() -> dict[str, dict[str, str]]:
    """The rows of docs/api.md's field tables, by class and field: the default column."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("## SDK profiles: `streamsafe.profile`"):]
    rows: dict[str, dict[str, str]] = {}
    current = None
    for line in section.splitlines():
        for cls, intro in _TABLES.items():
            if line.startswith(intro):
                current = cls
                rows[cls] = {}
        match = re.match(r"\| `(\w+)` \| ([^|]*) \|", line)
        if current and match:
            rows[current][match.group(1)] = match.group(2).strip()
        if line.startswith("`streamsafe.profiles`"):
            current = None
    return rows


def _declared_by(cls: type, name: str) -> str:
    """The class among Profile, EffectProfile and PoolProfile that declares (or declares again) ``cls``'s field."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return klass.__name__
    raise AssertionError(name)


def _shown(default: Any) -> str | None:
    """How the table shows a plain default (``None`` for a function's: described in words)."""
    if default is dataclasses.MISSING:
        return "required"
    if default is None or isinstance(default, (bool, str, tuple)):
        return "`" + repr(default).replace("'", '"') + "`"
    return None


def test_api_md_has_a_row_for_every_profile_field_with_its_default() -> None:
    rows = _api_rows()
    assert set(rows) == set(_TABLES), "docs/api.md lacks a field table of a profile class"
    for cls in (P.Profile, P.EffectProfile, P.PoolProfile):
        for f in dataclasses.fields(cls):
            if not f.init:  # (derived, not given: EffectProfile.input_names)
                continue
            owner = _declared_by(cls, f.name)
            assert f.name in rows[owner], f"docs/api.md: the {owner} table has no row for {f.name}"
            if owner == cls.__name__ and _shown(f.default) is not None:
                assert rows[owner][f.name] == _shown(f.default), f"docs/api.md: {owner}.{f.name}'s default"
    for cls_name, fields in rows.items():  # (and no row for a field that is gone)
        own = vars(getattr(P, cls_name)).get("__annotations__", {})
        assert [n for n in fields if n not in own] == [], f"docs/api.md: {cls_name}'s table names a field it lacks"


def test_api_md_lists_every_name_of_streamsafe_profile() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("## SDK profiles: `streamsafe.profile`"):]
    assert [n for n in P.__all__ if f"`{n}" not in section] == []


# -- links ---------------------------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_a_doc_links_to_is_a_heading() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
    broken = []
    for doc in docs:
        for target, anchor in re.findall(r"\]\(([^)#:]*)#([^)]+)\)", doc.read_text()):
            path = doc.parent / target if target else doc
            headings = {_slug(h) for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}
            if anchor not in headings:
                broken.append(f"{doc.relative_to(ROOT)} -> {target}#{anchor}")
    assert broken == []


def test_the_readme_links_the_section() -> None:
    docs_list = (ROOT / "README.md").read_text().split("## Documentation", 1)[1].split("\n## ", 1)[0]
    assert "docs/guide.md#guarding-your-own-sdk" in docs_list
