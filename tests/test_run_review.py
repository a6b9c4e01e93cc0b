"""``streamsafe run`` runs the program as ``python`` does: its ``__main__`` stays the program's module to the
process's end, its ``__file__``, ``sys.path[0]`` and globals are python's, and streamsafe's own warnings do not
trip the program's warning filters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np

import streamsafe as ss
from streamsafe.testing import VideoSuperRes


def run_cli(*args: str, cwd: Path | None = None, python_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *python_args, "-m", "streamsafe", "run", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# -- defect 1: the program's __main__ to the process's end -------------------------------------------------------------


def test_threads_and_atexit_handlers_pickle_classes_of_main_after_the_module_body(tmp_path: Path) -> None:
    prog = write(tmp_path / "late.py", """
        import atexit, pickle, sys, threading, time

        class Result:
            def __init__(self, v): self.v = v

        me = sys.modules["__main__"]
        atexit.register(lambda: print("atexit ok", len(pickle.dumps([Result(1)])), sys.modules["__main__"] is me, flush=True))

        def late():
            time.sleep(0.2)
            print("thread ok", len(pickle.dumps(Result(2))), sys.modules["__main__"] is me, flush=True)

        threading.Thread(target=late).start()
        """)
    done = run_cli("--fake-nvvfx", str(prog), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["thread", "atexit"] and all(line.endswith("True") for line in lines), done.stdout
    assert "program exit status: 0" in done.stderr


def test_main_is_the_programs_module_also_for_a_module_run_with_m(tmp_path: Path) -> None:
    write(tmp_path / "mypkg" / "__init__.py", "")
    write(tmp_path / "mypkg" / "__main__.py", """
        import atexit, pickle, sys

        class Item:
            pass

        atexit.register(lambda: print("atexit ok", type(pickle.loads(pickle.dumps(Item()))).__name__, flush=True))
        print("spec", __spec__.name, sys.argv[1:], flush=True)
        """)
    done = run_cli("--fake-nvvfx", "-m", "mypkg", "a", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["spec mypkg.__main__ ['a']", "atexit ok Item"]


# -- defect 2: __file__ and sys.path[0] as python sets them ------------------------------------------------------------


def test_file_is_absolute_and_path0_is_the_resolved_scripts_folder(tmp_path: Path) -> None:
    write(tmp_path / "proj" / "config.txt", "scale: 2\n")
    write(tmp_path / "proj" / "helpers.py", "LEVEL = 42\n")
    write(tmp_path / "proj" / "upscale.py", """
        import os
        here = __file__
        os.chdir("/")
        print("config:", open(os.path.join(os.path.dirname(here), "config.txt")).read().strip(), os.path.isabs(here))
        """)
    write(tmp_path / "proj" / "tool.py", "import sys\nfrom helpers import LEVEL\nprint('level', LEVEL, __file__, sys.path[0])\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").symlink_to("../proj/tool.py")
    for prog in ("proj/upscale.py", "bin/tool"):
        python = subprocess.run([sys.executable, prog], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        done = run_cli("--fake-nvvfx", prog, cwd=tmp_path)
        assert python.returncode == 0, python.stderr
        assert (done.returncode, done.stdout) == (0, python.stdout), done.stderr
    assert done.stdout.split()[2:] == [str(tmp_path / "bin" / "tool"), str((tmp_path / "proj").resolve())]


def test_a_folder_target_has_an_absolute_file_and_path0(tmp_path: Path) -> None:
    write(tmp_path / "app" / "__main__.py", "import os, sys\nos.chdir('/')\nprint(__file__, sys.path[0], __spec__.name)\n")
    python = subprocess.run([sys.executable, "app"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    done = run_cli("--fake-nvvfx", "app", cwd=tmp_path)
    assert python.returncode == 0, python.stderr
    assert (done.returncode, done.stdout) == (0, python.stdout), done.stderr
    assert done.stdout.split() == [str(tmp_path / "app" / "__main__.py"), str(tmp_path / "app"), "__main__"]


# -- defect 3: streamsafe's HostWaitWarning is the report's, not the program's -----------------------------------------

STRICT = """
    import sys, warnings
    warnings.simplefilter("error")          # this program treats any warning as a bug
    import numpy as np
    import nvvfx
    from streamsafe.backend import current_backend
    sim = current_backend()
    sr = nvvfx.VideoSuperRes(); sr.output_width, sr.output_height = 32, 32; sr.load()
    out = sr.run(sim.array(np.full((3, 16, 16), 0.5, np.float32)))
    print("strict", int(round(float(sim.download(sim.copy(sim.from_dlpack(out.image))).mean()) * 255)))
    sr.close()
    """


def test_a_program_that_turns_warnings_into_errors_runs_under_the_guard(tmp_path: Path) -> None:
    prog = write(tmp_path / "strict.py", STRICT)
    done = run_cli("--fake-nvvfx", "--advise", str(prog), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "strict 128\n", done.stderr
    assert "HostWaitWarning" not in done.stderr
    assert "a declaration would drop a host wait kept every call" in done.stderr  # (the report says it instead)


def test_under_w_error_the_guarded_program_runs(tmp_path: Path) -> None:
    prog = write(tmp_path / "plain.py", STRICT.replace('warnings.simplefilter("error")', "pass"))
    done = run_cli("--fake-nvvfx", str(prog), cwd=tmp_path, python_args=("-W", "error"))
    assert done.returncode == 0 and done.stdout == "strict 128\n", done.stderr


def test_a_contract_the_program_makes_itself_still_warns(tmp_path: Path) -> None:
    prog = write(tmp_path / "own.py", """
        import warnings
        import numpy as np
        import nvvfx
        import streamsafe as ss
        sim = ss.current_backend()
        sr = nvvfx.VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
        S = sim.create_stream(non_blocking=True)
        with warnings.catch_warnings(record=True) as caught, sim.use_stream(S), ss.stream_contract(sr, S):
            warnings.simplefilter("always")
            sr.run(sim.array(np.full((3, 16, 16), 0.5, np.float32)))
        print("warned", sum(issubclass(w.category, ss.errors.HostWaitWarning) for w in caught))
        """)
    done = run_cli("--fake-nvvfx", str(prog), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "warned 1\n", done.stdout + done.stderr


def test_a_class_guard_warns_unless_told_not_to() -> None:
    sim = ss.sim.SimBackend()
    for quiet in (False, True):
        with ss.use_backend(sim):
            sr = VideoSuperRes()
            sr.output_width = sr.output_height = 32
            sr.load()
            cg = ss.guard(VideoSuperRes)
            cg.warn_host_wait = not quiet
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    sr.run(sim.array(np.full((3, 16, 16), 0.5, np.float32)))
            finally:
                cg.undo()
                sr.close()
        said = [w for w in caught if issubclass(w.category, ss.errors.HostWaitWarning)]
        assert len(said) == (0 if quiet else 1)


# -- defect 4: the script's globals are python's __main__'s ------------------------------------------------------------


def test_builtins_is_the_module_and_loader_is_set(tmp_path: Path) -> None:
    prog = write(tmp_path / "b.py", """
        __builtins__.DEBUG_FLAG = False
        import builtins
        print("ok", __builtins__ is builtins, __loader__ is not None, __spec__, __package__, __cached__)
        """)
    python = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60)
    done = run_cli("--fake-nvvfx", str(prog), cwd=tmp_path)
    assert python.returncode == 0 and python.stdout == "ok True True None None None\n", python.stderr
    assert (done.returncode, done.stdout) == (0, python.stdout), done.stderr


def test_the_stdin_program_keeps_its_names(tmp_path: Path) -> None:
    program = "import sys, builtins\nprint(sys.argv, repr(sys.path[0]), __file__, __builtins__ is builtins)\n"
    done = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "-", "x"], input=program,
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stdout == "['-', 'x'] '' <stdin> True\n", done.stderr
