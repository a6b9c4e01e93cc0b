"""The files of ``streamsafe run``: the program read from standard input (``streamsafe run -``), and the
``--report`` file, written whole."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile

__all__ = ["program_from_stdin", "write_whole"]


_STDIN_PROLOGUE = "import sys as _streamsafe_sys\n_streamsafe_sys.argv[0], _streamsafe_sys.path[0] = '-', ''\n" \
                  "__file__ = '<stdin>'\ndel _streamsafe_sys\n"
"""What ``python -`` sets up for a program it reads from standard input: ``sys.argv[0]``, ``sys.path[0]``, ``__file__``."""


def program_from_stdin(folder: str) -> str:
    """``streamsafe run -``: the program on standard input, compiled as ``<stdin>`` (its frames and tracebacks say so,
    as ``python -`` gives them) after :data:`_STDIN_PROLOGUE` (placed after its docstring and ``__future__``
    imports), into a compiled file in ``folder`` that the runner runs; returns its path. Raises ``SyntaxError``."""
    tree = ast.parse(sys.stdin.buffer.read(), "<stdin>")
    body = tree.body
    at = int(bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
             and isinstance(body[0].value.value, str))  # (a docstring stays first)
    while at < len(body) and isinstance(node := body[at], ast.ImportFrom) and node.module == "__future__":
        at += 1
    line = body[at].lineno if at < len(body) else 1
    prologue = ast.parse(_STDIN_PROLOGUE).body
    for node in prologue:
        for inner in ast.walk(node):
            if isinstance(inner, (ast.stmt, ast.expr)):  # (the prologue's lines: the program's first statement's)
                inner.lineno = inner.end_lineno = line
    body[at:at] = prologue
    code = compile(tree, "<stdin>", "exec", dont_inherit=True)  # (not this module's __future__ flags)
    path = os.path.join(folder, "stdin.pyc")
    with open(path, "wb") as f:  # (a .pyc's header: the magic number, then flags, mtime and size, unused here)
        f.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))
    return path


def write_whole(path: str, text: str) -> None:
    """``text`` into ``path``. A regular file (or a new one) is written beside itself and renamed over
    itself: a reader, or a process that ends meanwhile, sees the old file or the new one, never half of
    one. A symbolic link is followed (the link stays). Anything else, and any path under ``/dev`` or
    ``/proc`` (``/dev/stdout``, whatever it leads to), is appended to in place; a file where no file can
    be made beside it is written in place."""
    given = os.path.abspath(path)
    try:
        special = not stat.S_ISREG(os.stat(given).st_mode)
    except OSError:  # (not there yet: a new file)
        special = False
    if special or given.startswith(("/dev/", "/proc/")):
        with open(given, "a") as f:  # (appended: /dev/stdout sent to a file holds the program's output too)
            f.write(text)
        return
    real = os.path.realpath(given)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".streamsafe-report-", dir=os.path.dirname(real))
    except OSError:
        with open(real, "w") as f:
            f.write(text)
        return
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), _new_file_mode(real))  # (the file's mode, or a plain open()'s; not mkstemp's 0600)
            f.write(text)
        os.replace(tmp, real)
        return
    except OSError:  # (a folder that lets us make files but not replace this one: written in place below)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with open(real, "w") as f:
        f.write(text)


def _new_file_mode(path: str) -> int:
    """The mode ``path`` has, else what ``open(path, "w")`` would give it: 0o666 less the process's umask
    (read from ``/proc``, since setting it to read it would race the program's threads; 0o022 elsewhere)."""
    with contextlib.suppress(OSError):
        return os.stat(path).st_mode & 0o7777
    umask = 0o022
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        umask = next((int(line.split()[1], 8) for line in f if line.startswith("Umask:")), umask)
    return 0o666 & ~umask
