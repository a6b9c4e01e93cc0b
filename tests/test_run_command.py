"""``streamsafe run`` and the class-level guard, on the model: unmodified programs made safe."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K

# A program written against nvvfx as a user would, on the model: its current stream is a
# non-blocking stream, it imports each output on that stream and reads it back later.
PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import nvvfx
    import streamsafe as ss
    from streamsafe.testing import _kernels as K

    sim = ss.sim.SimBackend(scheduler="adversarial")
    mode = sys.argv[1] if len(sys.argv) > 1 else "same-stream"
    with ss.use_backend(sim):
        sr = nvvfx.VideoSuperRes(quality=nvvfx.QualityLevel.HIGH)
        sr.output_width = sr.output_height = 32
        sr.load()
        side, other = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        copies = []
        with sim.use_stream(side):                      # the program's current stream
            for i in range(6):
                data = np.random.default_rng(i).random((3, 16, 16), dtype=np.float32)
                x = sim.empty((3, 16, 16), np.float32)
                sim.launch(side, "producer.write", lambda x=x, d=data: np.copyto(x.buffer.data, d), writes=[x])
                out = sr.run(x, stream_ptr=side.ptr)
                view = sim.from_dlpack(out.image)          # torch.from_dlpack(out.image)
                reader = other if mode == "other-stream" else side
                if reader is other:
                    sim.fence(other, side)
                copies.append((sim.copy(view, reader), data))
        sr.close()
        sim.synchronize_device()
        want = lambda d: K.to_rgb8(np, K.resize_bilinear(np, d, 32, 32)).astype(np.float32) / np.float32(255)
        corrupt = sum(not np.array_equal(c.numpy(), want(d)) for c, d in copies)
    print(f"corrupt frames: {corrupt} of {len(copies)}")
    sys.exit(1 if corrupt else 0)
    """
)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.py"
    path.write_text(PROGRAM)
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamsafe", "run", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_program_corrupts_frames_unguarded(program: Path) -> None:
    code = "import runpy, sys, streamsafe.testing as t; t.install_fake_nvvfx(); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code, str(program)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "corrupt frames: 0 of" not in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("strategy", ["auto", "event", "async", "stream", "device"])
def test_streamsafe_run_makes_it_safe_unchanged(program: Path, tmp_path: Path, strategy: str) -> None:
    report = tmp_path / "report.json"
    done = run_cli("--fake-nvvfx", "--sanitize", "--strategy", strategy, "--report", str(report), str(program))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "corrupt frames: 0 of 6" in done.stdout
    assert "1 effect(s) guarded" in done.stderr and "sanitize: no race found" in done.stderr
    data = json.loads(report.read_text())
    [effect] = data["effects"]
    assert (effect["effect"], effect["runs"], effect["requested"]) == ("VideoSuperRes", 6, strategy)
    assert data["races"] == [] and data["exit_status"] == 0
    assert sum(effect["fences_by_hazard"].values()) >= 1


def test_sanitize_reports_a_race_streamsafe_cannot_see_and_exits_3(program: Path) -> None:
    """The copy on a second stream that nothing declared: the model reports it, the exit status says so."""
    done = run_cli("--fake-nvvfx", "--sanitize", str(program), "other-stream")
    assert "race(s) found" in done.stderr, done.stderr
    assert done.returncode in (1, 3)


def test_module_form_and_exit_status_pass_through(tmp_path: Path) -> None:
    pkg = tmp_path / "mypipe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys, nvvfx\nprint('args', sys.argv[1:], nvvfx.__name__)\nsys.exit(4)\n")
    done = run_cli("--fake-nvvfx", "-m", "mypipe", "--frames", "3", cwd=tmp_path)
    assert done.returncode == 4 and "args ['--frames', '3'] nvvfx" in done.stdout, done.stdout + done.stderr
    assert "0 effect(s) guarded" in done.stderr


def test_clear_errors(tmp_path: Path) -> None:
    done = run_cli(str(tmp_path / "missing.py"))
    assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr
    script = tmp_path / "s.py"
    script.write_text("import nvvfx\n")
    done = run_cli(str(script))
    assert done.returncode == 2 and "pass --fake-nvvfx" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("--strategy", "fastest", "--fake-nvvfx", str(script))
    assert done.returncode == 2 and "unknown strategy 'fastest'" in done.stderr


# -- the class-level guard -------------------------------------------------------------------------------


def _frames(sim: ss.sim.SimBackend, sr: Any, n: int, stream: ss.Stream) -> int:
    copies = []
    with sim.use_stream(stream):
        for i in range(n):
            data = np.random.default_rng(i).random((3, 16, 16), dtype=np.float32)
            x = sim.empty((3, 16, 16), np.float32)
            sim.launch(stream, "producer.write", lambda x=x, d=data: np.copyto(x.buffer.data, d), writes=[x])
            copies.append((sim.copy(sim.from_dlpack(sr.run(x).image), stream), data))
    sim.synchronize_device()
    want = [K.to_rgb8(np, K.resize_bilinear(np, d, 32, 32)).astype(np.float32) / np.float32(255) for _, d in copies]
    return sum(not np.array_equal(sim.download(c, stream), w) for (c, _), w in zip(copies, want))


class Slotted(VideoSuperRes):
    __slots__ = ()


@pytest.mark.parametrize("cls", [VideoSuperRes, Slotted])
def test_guard_a_class_guards_every_instance_from_its_first_run(cls: type) -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    made_before = cls(backend=sim)
    with ss.guard(cls, strategy="auto") as g:
        made_after = cls(backend=sim)
        for sr in (made_before, made_after):
            sr.output_width = sr.output_height = 32
            sr.load()
            assert _frames(sim, sr, 3, sim.create_stream(non_blocking=True)) == 0
            assert isinstance(sr.run(sim.array(np.zeros((3, 16, 16), np.float32))), ss.SafeOutput)
    assert [c.stats["runs"] for c in g.contracts] == [4, 4]
    assert sim.races == []
    raw = made_after.run(sim.array(np.zeros((3, 16, 16), np.float32)))  # undone: the raw output again
    assert not isinstance(raw, ss.SafeOutput)


def test_guard_a_module_and_undo() -> None:
    from streamsafe.testing import fake_nvvfx

    with fake_nvvfx() as nvvfx:
        g = ss.guard(nvvfx)
        try:  # (the effects, and the base class a program's own filters subclass)
            assert set(g.classes) == {nvvfx.VideoSuperRes, nvvfx.VideoFrameGeneration, nvvfx.TrueHDR, nvvfx.effects.base.Effect}
        finally:
            ss.unguard(nvvfx)
        assert not g.active
    with pytest.raises(TypeError, match="pass an effect class, a module"):
        ss.guard(42)


def test_unguarded_effects_corrupt_as_the_control() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    s = sim.create_stream(non_blocking=True)
    with sim.use_stream(s):
        pass
    # unguarded, non_blocking=True on a non-blocking stream: H2 corrupts
    copies = []
    for i in range(3):
        data = np.random.default_rng(i).random((3, 16, 16), dtype=np.float32)
        x = sim.array(data)
        out = sr.run(x, stream_ptr=s.ptr, non_blocking=True)
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=s), s), data))
    assert sim.races


# -- found by the seventh session's review -----------------------------------------------------------

WORKER_PROGRAM = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    import nvvfx
    import streamsafe as ss
    from streamsafe.testing import _kernels as K

    sim = ss.current_backend()

    def worker(k):
        sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
        s = sim.create_stream(non_blocking=True)
        copies = []
        with sim.use_stream(s):
            for i in range(6):
                time.sleep(0.01)
                d = np.random.default_rng(10 * k + i).random((3, 16, 16), dtype=np.float32)
                out = sr.run(sim.array(d), stream_ptr=s.ptr)
                copies.append((sim.copy(sim.from_dlpack(out.image)), d))
        sim.synchronize_stream(s)
        want = lambda d: K.to_rgb8(np, K.resize_bilinear(np, d, 32, 32)).astype(np.float32) / np.float32(255)
        bad = sum(not np.array_equal(sim.download(c, s), want(d)) for c, d in copies)
        print(f"worker {k}: corrupt {bad} of 6, {type(out).__name__}", flush=True)

    for k in range(2):
        threading.Thread(target=worker, args=(k,)).start()
    # no join: the interpreter waits for these threads before it exits
    """
)


def test_run_waits_for_the_programs_threads_before_it_unguards_and_reports(tmp_path: Path) -> None:
    """The main module returned while its workers still ran: the guard came off under them (every frame
    corrupt, plain outputs) and the report counted no run."""
    path = tmp_path / "workers.py"
    path.write_text(WORKER_PROGRAM)
    done = run_cli("--fake-nvvfx", "--sanitize", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("corrupt 0 of 6, SafeOutput") == 2, done.stdout
    assert "2 effect(s) guarded" in done.stderr and done.stderr.count("6 run(s)") == 2, done.stderr
    assert "sanitize: no race found" in done.stderr


def test_sanitize_reports_races_on_a_model_the_program_makes(tmp_path: Path) -> None:
    path = tmp_path / "own_model.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np, streamsafe as ss
        sim = ss.sim.SimBackend(scheduler="adversarial")
        a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        x = sim.empty((4,), np.float32, stream=a)
        sim.fill(x, 1.0, stream=a)
        y = sim.copy(x, b)   # not ordered after the fill
        sim.synchronize_device()
        """
    ))
    report = tmp_path / "r.json"
    done = run_cli("--fake-nvvfx", "--sanitize", "--report", str(report), str(path))
    assert done.returncode == 3 and "1 race(s) found" in done.stderr, done.stderr
    [race] = json.loads(report.read_text())["race_details"]
    assert race["kind"] == "unordered" and race["first"]["access"] == "write" and race["second"]["access"] == "read"
    assert race["first"]["op"].startswith("fill") and "non-blocking stream" in race["second"]["where"] and race["fix"]


@pytest.mark.parametrize("body,status", [("import sys; sys.exit(True)", 1), ("raise KeyboardInterrupt", 130)])
def test_exit_status_as_python_gives_it(tmp_path: Path, body: str, status: int) -> None:
    path = tmp_path / "p.py"
    path.write_text(body + "\n")
    report = tmp_path / "r.json"
    done = run_cli("--fake-nvvfx", "--report", str(report), str(path))
    assert done.returncode == status and json.loads(report.read_text())["exit_status"] == status, done.stderr
    assert f"program exit status: {status}" in done.stderr
    if status == 130:  # the program's traceback, without the runner's frames
        assert "KeyboardInterrupt" in done.stderr and "runner.py" not in done.stderr and "runpy" not in done.stderr


def test_a_folder_with_main_runs_as_python_runs_it(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text("VALUE = 7\n")
    (app / "__main__.py").write_text("import sys, nvvfx, helper\nprint('value', helper.VALUE, sys.argv[1:])\n")
    done = run_cli("--fake-nvvfx", str(app), "x")
    assert done.returncode == 0 and "value 7 ['x']" in done.stdout, done.stdout + done.stderr
    (tmp_path / "empty").mkdir()
    done = run_cli("--fake-nvvfx", str(tmp_path / "empty"))
    assert done.returncode == 2 and "a folder without __main__.py" in done.stderr


def test_class_guards_nest(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inner ``ss.guard`` that ends gives the classes back to the outer one (it removed it: plain runs
    then raced, 1 of 1 frames corrupt)."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    with ss.guard(VideoSuperRes) as outer:
        with ss.guard(VideoSuperRes, strategy="event") as inner:
            sr = VideoSuperRes(backend=sim)
            sr.output_width = sr.output_height = 32
            sr.load()
            s = sim.create_stream(non_blocking=True)
            assert _frames(sim, sr, 2, s) == 0
        assert not inner.active and outer.active
        assert _frames(sim, sr, 3, s) == 0  # the outer guard's contract now
        assert [c.stats["runs"] for c in inner.contracts] == [2] and [c.stats["runs"] for c in outer.contracts] == [3]
        inner.undo()  # (idempotent)
        assert sim.races == []
    assert not outer.active and _frames(sim, sr, 2, s) > 0 and sim.races  # no guard: the control races


def test_unguard_leaves_the_guard_streamsafe_run_keeps() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    pinned = ss.guard(VideoSuperRes)
    pinned.pinned = True  # what streamsafe run does
    try:
        mine = ss.guard(VideoSuperRes, strategy="event")
        ss.unguard()
        assert not mine.active and pinned.active
        sr = VideoSuperRes(backend=sim)
        sr.output_width = sr.output_height = 32
        sr.load()
        assert _frames(sim, sr, 3, sim.create_stream(non_blocking=True)) == 0 and sim.races == []
        assert [c.stats["runs"] for c in pinned.contracts] == [3]
    finally:
        pinned.undo()


def test_the_report_counts_the_programs_own_contracts_with_the_guards(tmp_path: Path) -> None:
    """A program that makes its own contract on an effect (for its main loop) while streamsafe run guards the
    class: one effect, every run counted (the report showed only the guard's contract: 2 runs of 6)."""
    path = tmp_path / "own_contract.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np, nvvfx, streamsafe as ss
        sim = ss.current_backend()
        sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
        s = sim.create_stream(non_blocking=True)
        with sim.use_stream(s):
            for i in range(2):                       # warm-up: plain runs, the guard's contract
                sr.run(sim.array(np.zeros((3, 16, 16), np.float32))).numpy()
            c = ss.StreamContract(sr, s, strategy="event")
            for i in range(4):                       # the main loop: the program's own contract
                c.run(sim.array(np.zeros((3, 16, 16), np.float32))).numpy()
        """
    ))
    report = tmp_path / "r.json"
    done = run_cli("--fake-nvvfx", "--report", str(report), str(path))
    assert done.returncode == 0, done.stderr
    [effect] = json.loads(report.read_text())["effects"]
    assert effect["runs"] == 6 and effect["requested"] == "event" and effect["strategy"] == "event", effect
    assert "1 effect(s) guarded" in done.stderr and "6 run(s)" in done.stderr


@pytest.mark.parametrize("body,says", [
    ("from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(2)  # never shut down: the exit does\n"
     "print(list(pool.map(lambda x: 2 * x, range(4))))\n", "[0, 2, 4, 6]"),
    ("import threading, time\n"
     "def flusher():\n    while threading.main_thread().is_alive():\n        time.sleep(0.02)\n    print('flushed')\n"
     "threading.Thread(target=flusher).start()\n", "flushed"),
])
def test_run_ends_programs_whose_threads_end_at_exit(tmp_path: Path, body: str, says: str) -> None:
    """Waiting for the program's threads without the interpreter's own shutdown hung on a thread pool left
    open and on a thread that runs until the main thread has ended (found by a review helper)."""
    path = tmp_path / "p.py"
    path.write_text(body)
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and says in done.stdout and "program exit status: 0" in done.stderr, done.stderr


def test_the_programs_own_unguard_leaves_the_runs_guard(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np, nvvfx, streamsafe as ss
        ss.unguard()                                    # a library tidying up its own guards
        sim = ss.current_backend()
        sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
        out = sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))
        print(type(out).__name__)
        """
    ))
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 0 and "SafeOutput" in done.stdout and "1 run(s)" in done.stderr, done.stdout + done.stderr


def test_the_programs_traceback_keeps_its_frames_whatever_their_paths(tmp_path: Path) -> None:
    tools = tmp_path / "runpy_tools"
    tools.mkdir()
    (tools / "prog.py").write_text("def inner():\n    raise ValueError('boom')\n\ninner()\n")
    done = run_cli("--fake-nvvfx", str(tools / "prog.py"))
    assert done.returncode == 1 and "in inner" in done.stderr and "ValueError: boom" in done.stderr
    assert "runner.py" not in done.stderr


def test_run_called_in_process_leaves_the_process_working(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the streamsafe command itself shuts threads down as the interpreter does at exit: main(["run", ...])
    called in a process that goes on (this test's) left its thread pools and asyncio unable to start threads,
    also with its command line given through sys.argv."""
    from concurrent.futures import ThreadPoolExecutor

    from streamsafe.tools.cli import main

    path = tmp_path / "p.py"
    path.write_text("print('ran')\n")
    assert main(["run", "--fake-nvvfx", str(path)]) == 0
    monkeypatch.setattr(sys, "argv", ["streamsafe", "run", "--fake-nvvfx", str(path)])
    assert main() == 0
    assert threading_main_alive()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(lambda: 7).result() == 7


def threading_main_alive() -> bool:
    import threading

    return threading.main_thread().is_alive()


def test_the_programs_error_shows_before_its_threads_end(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(textwrap.dedent(
        """
        import threading, time
        def worker():
            time.sleep(1.0)
            print("worker done", flush=True)
        threading.Thread(target=worker).start()
        raise ValueError("main failed")
        """
    ))
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", str(path)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    out = done.stdout
    assert done.returncode == 1 and out.index("ValueError: main failed") < out.index("worker done"), out


def test_the_report_keeps_counts_not_contracts() -> None:
    """A with-block per frame makes a contract per frame: the report's tally keeps per-effect totals, not one
    record per contract (it kept every contract's stats and its ledger: memory grew with frames)."""
    import gc

    from streamsafe.tools.runner import ContractTally

    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    with ContractTally() as tally:
        for _ in range(50):
            sr = VideoSuperRes(backend=sim)
            sr.output_width = sr.output_height = 32
            sr.load()
            with sim.use_stream(s):
                for _ in range(4):
                    with ss.stream_contract(sr, s, strategy="event"):
                        sr.run(sim.array(np.zeros((3, 16, 16), np.float32))).numpy()
            sr.close()
        gc.collect()
        kept = [len(t.live) for _, t, _ in [*tally._gone, *tally._effects.values()]]
    reports = tally.reports()
    assert len(reports) == 50 and all(r.runs == 4 and r.requested == "event" for r in reports)
    assert all(r.strategy == "event" and "device-side event fences" in r.why for r in reports)
    assert max(kept) <= 2  # a bounded few an effect (the newest, and the one whose output imports may still count into)


def test_the_report_counts_imports_made_after_the_contract_went() -> None:
    """A contract per frame, each output imported on another stream after its block: the import's fences
    count into the contract's counters after the contract is gone (a first tally folded them too early)."""
    import gc

    from streamsafe.tools.runner import ContractTally

    sim = ss.sim.SimBackend()
    s, reader = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    with ContractTally() as tally:
        for _ in range(3):
            with sim.use_stream(s):
                with ss.stream_contract(sr, s, strategy="event"):
                    out = sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))
            gc.collect()
            sim.copy(sim.from_dlpack(out.image, stream=reader), reader)  # imported on another stream: an H3 fence
    [report] = tally.reports()
    assert report.runs == 3 and report.fences_by_hazard.get("H3") == 3, report


def test_the_programs_atexit_handlers_still_import_the_emulated_nvvfx(tmp_path: Path) -> None:
    """As the process's end, the command leaves the emulated nvvfx in place: the program's atexit
    handlers run after the report and may import it (called in-process, main() takes it out again)."""
    program = tmp_path / "atexit_nvvfx.py"
    program.write_text(
        "import atexit\n"
        "def late():\n"
        "    import nvvfx\n"
        "    print('atexit sees nvvfx:', hasattr(nvvfx, 'VideoSuperRes'))\n"
        "atexit.register(late)\n"
    )
    done = run_cli("--fake-nvvfx", str(program))
    assert done.returncode == 0, done.stderr
    assert "atexit sees nvvfx: True" in done.stdout


def test_the_report_says_when_autos_plan_changed_between_runs() -> None:
    from streamsafe.tools.runner import EffectReport, RunReport, format_report

    def effect(sdk_waits: int) -> EffectReport:
        return EffectReport("VideoSuperRes", 0, 10, 20, {"H1": 10}, 0, 0, sdk_waits, "auto", "async", "the host never waits")

    text = format_report(RunReport(["p.py"], 0, "auto", False, True, [effect(4), effect(0), effect(10)]))
    assert text.count("strategy auto -> async (its last run's plan): the host never waits") == 3
    assert text.count("auto's plan changed between runs") == 1 and "in 4 of 10 the SDK waited on the host" in text


# -- a program that ends with os._exit() ---------------------------------------------------------------

_RUNS_THEN = textwrap.dedent(
    """
    import os, sys, threading
    import numpy as np, nvvfx, streamsafe as ss
    sim = ss.current_backend()
    sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
    for _ in range(3):
        sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))
    print("ran 3")
    """
)


@pytest.mark.parametrize("ending,status", [
    ("os._exit(5)", 5),
    ("threading.Thread(target=os._exit, args=(7,)).start()\nthreading.Event().wait()", 7),  # from another thread
])
def test_a_program_ending_with_os_exit_gets_its_report_and_its_status(tmp_path: Path, ending: str, status: int) -> None:
    """``os._exit`` skips the runner's return: the report is made inside it, and the status is the program's
    (before, the program ended with no report at all). Its unflushed output still comes out."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + ending + "\n")
    report = tmp_path / "r.json"
    done = run_cli("--fake-nvvfx", "--report", str(report), str(path))
    assert done.returncode == status, done.stdout + done.stderr
    assert "ran 3" in done.stdout and "3 run(s)" in done.stderr and f"program exit status: {status}" in done.stderr
    data = json.loads(report.read_text())
    assert data["exit_status"] == status and [e["runs"] for e in data["effects"]] == [3]


def _racy_program(tmp_path: Path, ending: str) -> Path:
    """``PROGRAM`` (run it with ``other-stream``: a copy on a stream nothing declared, which sanitize reports)
    ending with ``ending`` instead of its ``sys.exit``, with ``os`` imported."""
    path = tmp_path / "p.py"
    path.write_text(PROGRAM.replace("sys.exit(1 if corrupt else 0)", ending).replace("import sys\n", "import os, sys\n", 1))
    return path


@pytest.mark.parametrize("ending,status", [("os._exit(0)", 0), ("os._exit(np.int64(0))", 0), ("os._exit(256)", 256),
                                           ("os._exit(False)", 0)])
def test_os_exit_after_a_race_found_exits_3(tmp_path: Path, ending: str, status: int) -> None:
    """Any status the system reads as success (NumPy's integers, bools and multiples of 256 too)."""
    path = _racy_program(tmp_path, ending)
    done = run_cli("--fake-nvvfx", "--sanitize", str(path), "other-stream")
    assert done.returncode == 3 and "race(s) found" in done.stderr, done.stderr
    assert done.stderr.count("effect(s) guarded") == 1 and f"program exit status: {status}\n" in done.stderr


def test_os_exit_after_a_race_exits_3_when_the_report_file_cannot_be_written(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    path = _racy_program(tmp_path, f"os.rmdir({str(gone)!r}); os._exit(0)")
    done = run_cli("--fake-nvvfx", "--sanitize", "--report", str(gone / "r.json"), str(path), "other-stream")
    assert done.returncode == 3 and "race(s) found" in done.stderr, done.stderr
    assert f"--report {gone / 'r.json'}: cannot write it (No such file or directory); the report is above" in done.stderr


@pytest.mark.parametrize("ending,status", [("sys.exit(4)", 4), ("os._exit(4)", 4)])
def test_a_report_file_that_cannot_be_written_keeps_the_programs_status(tmp_path: Path, ending: str, status: int) -> None:
    path = tmp_path / "p.py"
    gone = tmp_path / "gone"
    gone.mkdir()
    path.write_text(_RUNS_THEN + f"os.rmdir({str(gone)!r})\n{ending}\n")
    done = run_cli("--fake-nvvfx", "--report", str(gone / "r.json"), str(path))
    assert done.returncode == status and "3 run(s)" in done.stderr and "cannot write it" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_ending_with_os_exit_makes_no_report(tmp_path: Path) -> None:
    """multiprocessing's forked children end with os._exit: the report is the parent's alone, made once."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "pid = os.fork()\nif pid == 0:\n    os._exit(9)\n"
                    "_, code = os.waitpid(pid, 0)\nprint('child status', os.waitstatus_to_exitcode(code))\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 0 and "child status 9" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("effect(s) guarded") == 1 and "program exit status: 0" in done.stderr, done.stderr
    assert "the program forked 1 process(es): their runs are not counted here" in done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_parent_that_forks_and_leaves_reports_once_and_says_it_forked(tmp_path: Path) -> None:
    """The daemon pattern: the parent ends with os._exit at once, the child goes on. One report (the parent's),
    which says its children's runs are not in it; the child's own end makes none."""
    path = tmp_path / "p.py"
    marker = tmp_path / "child-done"
    path.write_text(_RUNS_THEN + "if os.fork() > 0:\n    os._exit(0)\n"
                    f"sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))\nopen({str(marker)!r}, 'w').close()\n")
    report = tmp_path / "r.json"
    done = run_cli("--fake-nvvfx", "--report", str(report), str(path))
    for _ in range(200):  # (the child outlives the command)
        if marker.exists():
            break
        time.sleep(0.02)
    time.sleep(0.2)
    assert done.returncode == 0 and done.stderr.count("effect(s) guarded") == 1, done.stderr
    data = json.loads(report.read_text())
    assert data["forked_children"] == 1 and [e["runs"] for e in data["effects"]] == [3]


def test_os_exit_kept_by_the_program_after_the_run_ends_makes_no_second_report(tmp_path: Path) -> None:
    """atexit.register(os._exit, 0) keeps the wrapper; by the time it runs the report is out."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "import atexit\natexit.register(os._exit, 0)\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 0 and done.stderr.count("effect(s) guarded") == 1, done.stderr


def test_a_process_that_ran_a_program_in_process_exits_as_it_asks(tmp_path: Path) -> None:
    """main(["run", ...]) called in-process: the program's own wrapper of os._exit keeps streamsafe's, and the
    host's later os._exit(0) must neither report the old run again nor change the host's status."""
    # (a race the sanitizer reports: the run's status is 3, the host's is its own)
    program = _racy_program(tmp_path, "_orig = os._exit\nos._exit = lambda n: _orig(n)")
    host = tmp_path / "host.py"
    host.write_text("import os, sys\nfrom streamsafe.tools.cli import main\n"
                    f"print('main returned', main(['run', '--fake-nvvfx', '--sanitize', {str(program)!r}, 'other-stream']), "
                    "flush=True)\nos._exit(0)\n")
    done = subprocess.run([sys.executable, str(host)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "main returned 3" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("effect(s) guarded") == 1, done.stderr


def test_os_exit_on_the_thread_that_holds_the_tallys_lock_still_ends(tmp_path: Path) -> None:
    """A signal handler that calls os._exit while its thread counts a contract (the tally's lock held): the
    report waits at most a second for that lock, then is made without it."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "from streamsafe import contract\nwith contract.contract_sinks[-1]._lock:\n    os._exit(4)\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 4 and "3 run(s)" in done.stderr and "program exit status: 4" in done.stderr, done.stderr


def test_out_of_range_and_wrong_arguments_raise_as_os_exit_does(tmp_path: Path) -> None:
    """OverflowError and TypeError with no report: the program catches them and goes on, to one report."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "for bad in [(2**31,), ('3',), (), (1, 2)]:\n    try:\n        os._exit(*bad)\n"
                    "    except (OverflowError, TypeError) as e:\n        print('refused', type(e).__name__, flush=True)\n"
                    "os._exit(5)\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 5 and done.stdout.count("refused") == 4 and "refused OverflowError" in done.stdout, done.stdout
    assert done.stderr.count("effect(s) guarded") == 1 and "program exit status: 5" in done.stderr, done.stderr


def test_a_daemon_threads_os_exit_as_the_program_ends_gives_one_whole_report(tmp_path: Path) -> None:
    """A watchdog's os._exit racing the run's own end: whichever comes first reports; the other waits for it,
    so there is one report and the JSON file is whole."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "import time\ngo = threading.Event()\n"
                    "threading.Thread(target=lambda: (go.wait(), os._exit(5)), daemon=True).start()\n"
                    "go.set(); time.sleep(0.001)\n")
    report = tmp_path / "r.json"
    for _ in range(3):
        done = run_cli("--fake-nvvfx", "--report", str(report), str(path))
        assert done.stderr.count("effect(s) guarded") == 1, done.stderr
        status = json.loads(report.read_text())["exit_status"]
        assert status in (0, 5) and f"program exit status: {status}" in done.stderr
        # (the watchdog's exit first: its status; the run's end first: the process may end before it, or
        # with it after the report, as the program's own process would)
        assert done.returncode == 5 if status == 5 else done.returncode in (0, 5), (status, done.returncode)


def test_the_report_file_keeps_its_mode_and_a_new_one_gets_open_s(tmp_path: Path) -> None:
    """The report is written beside its file and renamed over it: the file's mode stays, a new one gets the
    mode a plain open() gives (not the temporary file's 0600)."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN)
    report = tmp_path / "r.json"
    assert run_cli("--fake-nvvfx", "--report", str(report), str(path)).returncode == 0
    umask = os.umask(0o022)
    os.umask(umask)
    assert report.stat().st_mode & 0o777 == 0o666 & ~umask
    report.chmod(0o640)
    assert run_cli("--fake-nvvfx", "--report", str(report), str(path)).returncode == 0
    assert report.stat().st_mode & 0o777 == 0o640 and json.loads(report.read_text())["effects"][0]["runs"] == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".streamsafe-report-")] == []


def test_a_program_that_closed_its_stdout_still_gets_its_report(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "sys.stdout.close()\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 0 and "3 run(s)" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_report_goes_where_it_was_asked_whatever_the_program_does(tmp_path: Path) -> None:
    """A relative --report path is the command's, not the program's after a chdir; a symbolic link is
    followed (and stays a link); a program that replaced or closed its sys.stderr still shows the report."""
    work, elsewhere, real = tmp_path / "work", tmp_path / "elsewhere", tmp_path / "real"
    for d in (work, elsewhere, real):
        d.mkdir()
    (work / "link.json").symlink_to(real / "target.json")
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + f"import io\nos.chdir({str(elsewhere)!r})\nsys.stderr = io.StringIO()\n")
    done = run_cli("--fake-nvvfx", "--report", "r.json", str(path), cwd=work)
    assert done.returncode == 0 and "3 run(s)" in done.stderr, done.stderr
    assert json.loads((work / "r.json").read_text())["effects"][0]["runs"] == 3 and not (elsewhere / "r.json").exists()
    path.write_text(_RUNS_THEN + "sys.stderr.close()\n")
    done = run_cli("--fake-nvvfx", "--report", "link.json", str(path), cwd=work)
    assert done.returncode == 0 and "3 run(s)" in done.stderr, done.stderr
    assert (work / "link.json").is_symlink() and json.loads((real / "target.json").read_text())["effects"][0]["runs"] == 3


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_report_into_a_pipe_reaches_its_reader(tmp_path: Path) -> None:
    """A device or a pipe (/dev/stdout, a FIFO) is written into, not replaced by a file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN)
    reader = subprocess.Popen([sys.executable, "-c", f"print(open({str(fifo)!r}).read())"], stdout=subprocess.PIPE, text=True)
    done = run_cli("--fake-nvvfx", "--report", str(fifo), str(path))
    got, _ = reader.communicate(timeout=60)
    assert done.returncode == 0 and json.loads(got)["effects"][0]["runs"] == 3, done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_os_exit_at_exit_after_a_race_still_exits_3(tmp_path: Path) -> None:
    """atexit.register(os._exit, 0), or a lambda that looks os._exit up then: after the report, such an
    exit keeps the race's status."""
    for hook in ("atexit.register(os._exit, 0)", "atexit.register(lambda: os._exit(0))"):
        path = _racy_program(tmp_path, f"import atexit\n{hook}\nsys.exit(0)")
        done = run_cli("--fake-nvvfx", "--sanitize", str(path), "other-stream")
        assert done.returncode == 3 and done.stderr.count("effect(s) guarded") == 1, (hook, done.stderr)


def test_os_exit_by_keyword_and_pickled_as_os_exit_does(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN + "import pickle\nassert pickle.loads(pickle.dumps(os._exit)) == os._exit\nos._exit(status=4)\n")
    done = run_cli("--fake-nvvfx", str(path))
    assert done.returncode == 4 and "program exit status: 4" in done.stderr, done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_a_report_to_dev_stdout_follows_the_programs_output_wherever_it_goes(tmp_path: Path) -> None:
    """--report /dev/stdout into a pipe, and into a file the shell opened: appended after the program's
    own output (before, a pipe's /proc path could not be found, and a file was replaced by the report)."""
    path = tmp_path / "p.py"
    path.write_text(_RUNS_THEN)
    piped = run_cli("--fake-nvvfx", "--report", "/dev/stdout", str(path))
    assert piped.returncode == 0 and piped.stdout.startswith("ran 3\n"), piped.stdout + piped.stderr
    assert json.loads(piped.stdout[len("ran 3\n"):])["effects"][0]["runs"] == 3
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "--report", "/dev/stdout", str(path)],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
    text = out.read_text()
    assert done.returncode == 0 and text.startswith("ran 3\n") and json.loads(text[len("ran 3\n"):])["effects"][0]["runs"] == 3


def test_an_os_exit_made_while_reporting_goes_straight_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal handler that calls os._exit on the thread writing the report (here: the report itself calls it)
    ends the process at once; before the reporting threads were known, it waited forever for the report's lock."""
    from streamsafe.tools import runner

    exits: list[int] = []

    def real_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)  # (the stand-in returns control; the real one would end the process here)

    monkeypatch.setattr(os, "_exit", real_exit)
    hard = runner._HardExit(lambda report: os._exit(7), keep=False)
    result: list[BaseException] = []

    def body() -> None:
        with hard:
            hard.start(lambda status, wait: runner.RunReport(["p.py"], status, "auto", False, True))
            try:
                os._exit(5)
            except SystemExit as e:
                result.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "os._exit made while reporting waited for the report's lock"
    assert exits == [7, 5] and os._exit is real_exit


# -- the host wait a declaration would drop (issue 37) ---------------------------------------------------------------


def test_the_report_says_which_declaration_drops_the_kept_host_wait_and_advise_names_the_stream(program: Path, tmp_path: Path) -> None:
    """Nothing declared: auto copies each input and the host waits for the copies; the report says so in one line
    per object, with the time measured, and --advise names the stream the inputs came from (the program's side
    stream) and the declaration. The program is correct either way."""
    report = tmp_path / "report.json"
    done = run_cli("--fake-nvvfx", "--advise", "--report", str(report), str(program))
    assert done.returncode == 0 and "corrupt frames: 0 of 6" in done.stdout, done.stdout + done.stderr
    [effect] = json.loads(report.read_text())["effects"]
    assert effect["input_copies"] == 6 and effect["host_waits"] >= 6 and effect["copy_wait_ms"] >= 0
    [side] = effect["input_streams"]
    assert side.startswith("non-blocking stream 0x")
    assert "a declaration would drop a host wait kept every call: auto copied 6 input(s)" in done.stderr
    advice = done.stderr.split("streamsafe run --advise:", 1)[1]
    assert f"every input came from {side}" in advice and "input_stream=" in advice
    assert "HostWaitWarning" not in done.stderr  # (the report says it: the run's guard does not warn)


def test_advise_says_nothing_to_declare_when_no_host_wait_was_kept(tmp_path: Path) -> None:
    path = tmp_path / "declared.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np
        import nvvfx
        import streamsafe as ss

        sim = ss.current_backend()
        sr = nvvfx.VideoSuperRes()
        sr.output_width = sr.output_height = 32
        sr.load()
        S = sim.create_stream(non_blocking=True)
        with sim.use_stream(S), ss.stream_contract(sr, S, input_stream=S):
            for i in range(3):
                out = sr.run(sim.empty((3, 16, 16), np.float32))
                sim.copy(sim.from_dlpack(out.image, stream=S), S)
        """
    ))
    done = run_cli("--fake-nvvfx", "--advise", str(path))
    assert done.returncode == 0, done.stderr
    assert "VideoSuperRes (cuda:0): nothing to declare" in done.stderr and "HostWaitWarning" not in done.stderr


def test_sanitize_observes_torchs_own_ops_from_the_first_guarded_call_on_cuda_to_the_runs_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``streamsafe run --sanitize`` registered the mirror but never observed torch's own ops (``ss.sanitize()`` does):
    a copy of a view on a stream nothing ordered went unreported. torch's observer (a stand-in here: no CUDA) begins
    at the first input or output a guarded call tells the observers of once torch runs on CUDA (on the model none is
    told: the program tells them as a GPU call would), in that thread, and ends with the run; the mirror it reports to is
    the run's. (On a GPU: tests/gpu/test_run_gpu.py.)"""
    from streamsafe.sim import torch_observer
    from streamsafe.tools.runner import run_program

    log: list[str] = []
    cuda_ready = tmp_path / "torch-runs-on-cuda"

    class Accesses:
        def __init__(self, mirror: Any) -> None:
            self.mirror = mirror

        def __enter__(self) -> Accesses:
            log.append(f"enter in {threading.current_thread().name}, mirror registered: {self.mirror in ss.hooks.observers}")
            return self

        def __exit__(self, *exc: Any) -> None:
            log.append(f"exit in {threading.current_thread().name}")

    def observe_torch(mirror: Any) -> Any:  # (None: torch does not run on CUDA yet, as observe_torch says)
        return Accesses(mirror) if cuda_ready.exists() else None

    monkeypatch.setattr(torch_observer, "observe_torch", observe_torch)
    program = tmp_path / "p.py"
    program.write_text(textwrap.dedent(
        f"""
        import streamsafe as ss

        def guarded_call_on_cuda():              # what a guarded call on a GPU tells the observers
            for o in ss.hooks.observers:
                o.on_input_write(0x1000, None, 0)

        guarded_call_on_cuda()                   # before torch runs on CUDA: nothing observed yet
        open({str(cuda_ready)!r}, "w").close()   # torch initialises CUDA
        for _ in range(3):                       # the first call after it: observed from there on
            guarded_call_on_cuda()
        """
    ))
    report = run_program(str(program), [], fake_nvvfx=True, sanitize=True)
    assert report.exit_status == 0
    assert log == ["enter in MainThread, mirror registered: True", "exit in MainThread"]
