"""Sanitize mode's scopes: ``ss.sanitize(model)`` blocks of several threads on one model, and ``streamsafe run
--sanitize``, which sees the program's own host waits and event calls as ``ss.sanitize()`` does."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import streamsafe as ss
from streamsafe.errors import RaceError
from streamsafe.sim import SimBackend

TESTS = Path(__file__).resolve().parent


def test_sanitize_blocks_of_two_threads_on_one_model_overlap_in_any_order() -> None:
    """Thread A's block ends while this thread's is open: a missing fence in this one still raises, and once both
    have ended the model records again (before, A's end put back "record" at once, and this block's end "raise")."""
    sim = SimBackend()
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    entered, leave, left = threading.Event(), threading.Event(), threading.Event()

    def other_thread() -> None:
        with ss.sanitize(sim):
            entered.set()
            leave.wait(5)
        left.set()

    t = threading.Thread(target=other_thread)
    t.start()
    entered.wait(5)
    raised = False
    with ss.sanitize(sim):
        leave.set()
        left.wait(5)
        x = sim.empty(4, stream=a)
        sim.fill(x, 1, stream=a)
        try:
            sim.copy(x, b)  # (no fence: b reads what a writes)
        except RaceError:
            raised = True
    t.join(5)
    assert raised and sim.on_race == "record" and not sim.sanitizing


RECIPE = '''
import os, sys, contextlib
sys.path.insert(0, {tests!r})
from _framework_standins import make_torch, FakeDriver, P, S
import streamsafe as ss
from streamsafe import hooks
from streamsafe.backend import use_backend
sys.modules["torch"] = torch = make_torch([])  # (the program uses torch: a stand-in)
be = FakeDriver()
def tell(name, *a):  # (what the CUDA backend and the effects tell the observers on a GPU)
    for o in hooks.observers:
        getattr(o, name)(*a)
with use_backend(be), (ss.sanitize(be) if os.environ.get("OWN_BLOCK") else contextlib.nullcontext()):
    tp = torch.cuda.Stream(P)
    for i in range(2):
        tell("on_launch", be.stream(P), "torch copy_", [], [0xA000], 0)  # the producer writes on P
        tp.synchronize()  # the vendor's recipe: the host waits for P
        tell("on_launch", be.stream(S), "VideoSuperRes.transfer", [0xA000], [0xB000], 0)
        tell("on_stream_synchronize", be.stream(S))  # non_blocking=False
'''


def test_run_sanitize_sees_the_programs_host_waits(tmp_path: Path) -> None:
    """The vendor's input recipe (a host wait for the producer's stream before run()) is clean in sanitize mode, in
    the program's own ``ss.sanitize()`` block and under ``streamsafe run --sanitize`` (which reported a race, exit 3)."""
    program = tmp_path / "recipe.py"
    program.write_text(RECIPE.format(tests=str(TESTS)))
    own = subprocess.run([sys.executable, str(program)], env={**os.environ, "OWN_BLOCK": "1"}, capture_output=True,
                         text=True, timeout=120)
    assert own.returncode == 0, own.stderr
    run = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--sanitize", "--fake-nvvfx", str(program)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
