"""Issue 39's smaller items, each a test: a worker thread without a backend, the hazards help, the examples' CPU
twins, the size advice, the deprecated names in the docs, ``bench --png`` on the model, ``run -``, the errors'
list, and two model errors that were not streamsafe's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import errors
from streamsafe.testing import VideoSuperRes
from streamsafe.tools.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSAFE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# -- item 10: use_backend is per thread ----------------------------------------------------------------------------


def _in_a_thread(work: Any) -> BaseException | None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001  (handed to the test)
            caught.append(e)

    t = threading.Thread(target=run, name="worker")
    t.start()
    t.join()
    return caught[0] if caught else None


def test_a_worker_thread_without_a_backend_is_told_to_set_one() -> None:
    sim = ss.sim.SimBackend()
    stream = sim.create_stream(non_blocking=True)
    frame = sim.array(np.zeros((3, 16, 16), np.float32))

    def worker(own_backend: bool) -> None:
        with ss.use_backend(sim) if own_backend else contextlib.nullcontext():
            sr = VideoSuperRes()  # (made on the thread's current backend)
            sr.output_width = sr.output_height = 32
            sr.load()
            with ss.stream_contract(sr, stream.handle) as c:
                c.run(frame).numpy()

    with ss.use_backend(sim):  # the main thread's only
        error = _in_a_thread(lambda: worker(own_backend=False))
        assert isinstance(error, errors.CudaDriverError), error
        message = str(error)
        assert "CUDA_ERROR_INVALID_HANDLE" in message
        assert "This thread ('worker') has no backend set: call ss.use_backend(...) in it, or pass backend=" in message
        assert _in_a_thread(lambda: worker(own_backend=True)) is None  # the fix the message gives works


def test_the_hint_is_only_given_to_a_thread_on_the_default_backend() -> None:
    sim = ss.sim.SimBackend()
    with ss.use_backend(sim), pytest.raises(errors.CudaDriverError) as e:
        ss.as_stream(0x7F12_3456_0000)  # a handle no model made, in a thread that set its backend
    assert "has no backend set" not in str(e.value)


def test_the_docs_say_use_backend_is_per_thread() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    assert "`ss.use_backend` holds in the thread that calls it only" in readme
    assert "`ss.use_backend(sim)` makes a model current in the thread that calls it" in guide
    assert "a thread started inside the block does not inherit it" in " ".join((ss.use_backend.__doc__ or "").split())
