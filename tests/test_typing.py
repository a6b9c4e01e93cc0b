"""A user's script type-checks under ``mypy --strict``; strategy names are a ``Literal``.

The script (tests/typing_user_script.py) uses the public API the way the README does, on the
simulated backend. mypy reads streamsafe as a user's mypy reads an installed, typed package:
its types are used, errors inside it are not the user's (``follow_imports = silent``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import streamsafe as ss

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "typing_user_script.py"

# Each line marked "# rejected" must get a mypy error, and no other line.
MISUSE = """\
from __future__ import annotations

import streamsafe as ss
from streamsafe.testing import VideoSuperRes

sim = ss.sim.SimBackend()
sr = VideoSuperRes(backend=sim)
name: ss.StrategyName = "fastest"  # rejected
ok: ss.StrategyName = "event"
ss.StreamContract(sr, strategy="fastest")  # rejected
ss.StreamContract(sr, strategy=ss.Strategy.EVENT)
ss.stream_contract(sr, strategy="fastest")  # rejected
ss.stream_safe(sr, strategy="fastest")  # rejected
ss.guard(VideoSuperRes, strategy="fastest")  # rejected
out: int = ss.StreamContract(sr).run(None)  # rejected
"""

CONFIG = """\
[mypy]
strict = True
[mypy-streamsafe.*]
follow_imports = silent
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def test_strategy_name_lists_every_strategy() -> None:
    assert typing.get_args(ss.StrategyName) == tuple(s.value for s in ss.Strategy)
    assert "StrategyName" in ss.__all__ and (ss.StrategyName.__doc__ or "").strip()


def test_user_script_runs() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=_env(), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no race" in result.stdout


def test_user_script_type_checks_strictly_and_misuse_is_rejected(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the 'test' extra: pip install -e '.[test]'")
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "--show-error-codes", str(SCRIPT), str(misuse)],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if "typing_user_script.py" in e], result.stdout + result.stderr
    flagged = {int(m.group(1)) for e in errors if (m := re.search(r"misuse\.py:(\d+):", e))}
    expected = {i for i, line in enumerate(MISUSE.splitlines(), 1) if line.endswith("# rejected")}
    assert flagged == expected, result.stdout + result.stderr
