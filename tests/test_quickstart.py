"""examples/quickstart_cpu.py, the README's CPU quick start, runs on a CPU as a user would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart_cpu.py"


def test_quickstart_cpu_runs_and_every_guarded_frame_is_right() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(QUICKSTART)], capture_output=True, text=True, env=env, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for way in ("1. with ss.stream_contract(...):", "2. @ss.stream_safe(sr):", "3. ss.StreamContract(sr, sdk):"):
        line = next(line for line in out.splitlines() if line.startswith(way))
        assert re.search(r"(\d+)/\1 frames correct, 0 races$", line), line
    assert "FencePlan: strategy=auto" in out  # print(c.plan)
    unguarded = next(line for line in out.splitlines() if line.startswith("without streamsafe"))
    assert not re.search(r" 0 races$", unguarded), unguarded  # the contrast: the hazard is real on the model
    assert out.rstrip().endswith("all guarded frames correct, no race")


def test_readme_points_to_the_cpu_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "python examples/quickstart_cpu.py" in readme


def _readme_cpu_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    [snippet] = [b for b in blocks if "SimBackend(scheduler=" in b]
    return snippet


def _run_snippet(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)


def test_readme_cpu_pipeline_runs_and_fails_without_the_contract(tmp_path: Path) -> None:
    snippet = _readme_cpu_snippet()
    result = _run_snippet(snippet, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FencePlan" in result.stdout
    contract = ", ss.stream_contract(sr, sdk, input_stream=producer) as c"
    assert contract in snippet
    unguarded = snippet.replace(contract, "").replace("print(c.plan)\n", "")
    result = _run_snippet(unguarded, tmp_path)  # "Drop the ss.stream_contract(...) and the assert fails"
    assert result.returncode != 0 and "AssertionError" in result.stderr, result.stdout + result.stderr
