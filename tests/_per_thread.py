"""Helpers of the per-thread stream tests: threads that take turns, and the TrueHDR frames they check."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import streamsafe as ss
from streamsafe.testing import TrueHDR
from streamsafe.testing import _kernels as K


def in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a new thread (joined); its result or its exception."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed back to the test
            box["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def take_turns(frames: int, step: Callable[[int], None]) -> None:
    """``step(frame)`` for frames 0, 1, ... alternately in two threads: frame i runs in thread i % 2,
    after frame i - 1 returned on the host (nothing orders their device work)."""
    turns = [threading.Event() for _ in range(frames + 1)]
    errors: list[BaseException] = []

    def worker(parity: int) -> None:
        for i in range(parity, frames, 2):
            turns[i].wait()
            try:
                if not errors:
                    step(i)
            except BaseException as e:
                errors.append(e)
            finally:
                turns[i + 1].set()

    threads = [threading.Thread(target=worker, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    turns[0].set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run_threads(**targets: Callable[[], None]) -> None:
    """Start one thread per target, named by its keyword, and join them all."""
    threads = [threading.Thread(target=fn, name=name) for name, fn in targets.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def make_hdr(sim: ss.sim.SimBackend) -> Any:
    """A loaded ``TrueHDR``: its output is written on the run stream (no conversion on stream 0, which
    CUDA would order with every per-thread stream)."""
    fx = TrueHDR(backend=sim)
    fx.load()
    return fx


def expected(data: np.ndarray) -> np.ndarray:
    return K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)


def wrong_and_races(sim: ss.sim.SimBackend, copies: Iterable[tuple[Any, np.ndarray]]) -> tuple[int, int]:
    """After the device is done: how many (copy, input data) pairs are not the input's TrueHDR frame, and
    how many races the model reported."""
    sim.synchronize_device()
    wrong = sum(not np.array_equal(sim.download(cp, sim.legacy_stream()), expected(d)) for cp, d in copies)
    return wrong, len(sim.races)
