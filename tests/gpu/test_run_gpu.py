"""``streamsafe run --sanitize`` on a real GPU sees torch's own ops: a program that copies each output's view on a
second stream nothing ordered is reported (exit status 3, the copy named), and the same program with the order written
runs clean. The same wiring on the model: tests/test_run_command.py.

Run: ``PYTHONPATH=. python3 -m pytest -m gpu -v tests/gpu/test_run_gpu.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import sys, torch, nvvfx

    mode = sys.argv[1]
    sr = nvvfx.VideoSuperRes(quality=nvvfx.QualityLevel.HIGH)
    sr.output_width, sr.output_height = 64, 64
    sr.load()
    x = torch.rand(3, 32, 32, device="cuda")
    side = torch.cuda.Stream()
    copies = []
    for i in range(8):
        out = sr.run(x)
        view = torch.from_dlpack(out.image)         # imported on the current stream: ordered by streamsafe
        if mode == "ordered":
            side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):               # a copy on a second stream, which streamsafe does not see
            torch.cuda._sleep(100_000)
            copies.append(view.clone())
        if mode == "ordered":
            torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    """
)


@pytest.mark.parametrize("mode,status", [("racy", 3), ("ordered", 0)])
def test_run_sanitize_sees_a_copy_of_a_view_on_another_stream(torch_cuda, tmp_path: Path, mode: str, status: int) -> None:  # type: ignore[no-untyped-def]
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "--sanitize", "--report", str(report),
                           str(program), mode], capture_output=True, text=True, env=env, timeout=300)
    races = json.loads(report.read_text())["race_details"]
    print(f"{mode}: exit {done.returncode}, {len(races)} race(s); {[r['second']['op'] for r in races][:3]}")
    assert done.returncode == status, done.stderr[-3000:]
    if mode == "racy":
        assert races and any("clone" in (r["first"]["op"] + r["second"]["op"]) for r in races), races
    else:
        assert races == []
