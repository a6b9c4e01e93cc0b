"""Write the HTML API reference with pdoc:  python3 docs/gen_api.py [OUTPUT_DIR]   (default: docs/api/)

``make docs`` installs pdoc (the ``docs`` extra) and runs this; open ``docs/api/index.html``.
``pdoc streamsafe`` serves the same pages live while you edit docstrings. The HTML is build output
and is not committed; tests/test_docs.py renders it into a temporary folder on every test run and
checks that every public name is documented and that pdoc reported nothing.

pdoc runs in a fresh interpreter: streamsafe puts guard dispatchers (marked
``__streamsafe_dispatch__``) on an effect class's ``run``/``run_at_timestep``/``close``/``__setattr__``
once a contract is made for one of its instances, and a process that had made one would document
the dispatchers instead of the effect's own methods. The fresh interpreter also puts back any
original it finds (``streamsafe.guarding.uninstall_all()``) before rendering.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "docs" / "api"
MODULES = ["streamsafe", "streamsafe.errors", "streamsafe.sim", "streamsafe.profile", "streamsafe.profiles",
           "streamsafe.testing", "streamsafe.testing.pytest_plugin", "streamsafe.bench"]
"""The public modules; pdoc adds the submodules each names in its ``__all__``."""


def _restore_originals() -> int:
    """Put the effects' own methods back where a guard dispatcher stands; returns how many."""
    from streamsafe import guarding

    return guarding.uninstall_all()


def _render_here(output: Path) -> int:
    """Render in this interpreter (the child). Exit status 1 if pdoc warned about anything."""
    import pdoc
    import pdoc.render

    import importlib

    import streamsafe

    for name in MODULES:  # lazy exports (``streamsafe.CudaBackend``) resolved, so pdoc finds them
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            if attr not in vars(module):
                setattr(module, attr, getattr(module, attr))
    _restore_originals()
    pdoc.render.configure(docformat="restructuredtext", search=True, show_source=True,
                          footer_text=f"streamsafe {streamsafe.__version__}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=output)
    problems = [w for w in caught if w.category.__module__.startswith("pdoc") or "pdoc" in w.filename]
    for w in problems:
        print(f"pdoc: {w.message}", file=sys.stderr)
    return 1 if problems else 0


def render(output: Path = DEFAULT_OUTPUT) -> subprocess.CompletedProcess[str]:
    """Run pdoc in a fresh interpreter, writing the reference to ``output``."""
    return subprocess.run([sys.executable, str(Path(__file__).resolve()), "--render", str(output)],
                          capture_output=True, text=True, cwd=ROOT)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--render"]:
        return _render_here(Path(argv[1]))
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    result = render(output)
    sys.stderr.write(result.stdout + result.stderr)
    if result.returncode == 0:
        print(f"wrote {output}/index.html", file=sys.stderr)
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
