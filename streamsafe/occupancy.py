"""Which threads drive guarded effects on each device: what ``auto`` asks before it picks ``async``.

``async`` runs the SDK on a blocking shadow stream so that stream 0, where the SDK converts its
output, waits for it on the device. One pipeline gains: the host never waits. But every blocking
stream of a device is ordered with stream 0, so when several threads each run a pipeline (a video
server), every conversion waits for every other pipeline's inference and the pipelines run one
after another. ``auto`` therefore picks ``event`` (non-blocking SDK streams, per-pipeline host
waits that release the GIL) for a run when another live thread ran a guarded effect on the same
device since this thread's previous run there (within :data:`WINDOW_S` seconds): the pipelines
interleave. Otherwise it keeps ``async``. Nothing here blocks; a note costs a clock read and a
dict write, plus a look at the other threads while there are any.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .streams import thread_token

__all__ = ["note_run", "threads_on", "WINDOW_S"]

WINDOW_S = 1.0
"""Seconds a thread counts as driving a device after its last guarded run there."""

_seen: dict[int, dict[int, list[Any]]] = {}
"""Per device, per thread (its :func:`~streamsafe.streams.thread_token`): ``[time of its last run, the thread, this dict]``."""
_clock = time.monotonic


class _Mine(threading.local):
    """This thread's records, by device (each the list :data:`_seen` holds for it)."""

    def __init__(self) -> None:
        self.token = thread_token()  # (never reused: threading.get_ident is, once a thread ends, and an entry would outlive it)
        self.by_device: dict[int, list[Any]] = {}


_mine = _Mine()


def note_run(device: int) -> bool:
    """Record a guarded run on ``device`` by this thread. True when another live thread ran a guarded
    effect on ``device`` since this thread's previous run there (and within :data:`WINDOW_S`): the
    pipelines interleave, the device is shared."""
    now = _clock()
    record: list[Any] | None = _mine.by_device.get(device)
    threads = _seen.get(device)
    if record is None or threads is None or threads.get(_mine.token) is not record:
        # (first here, forgotten since, or dropped as quiet by another thread: counted again from this run on)
        record = _new_record(device)
        threads = _seen[device]
    previous = record[0]
    record[0] = now
    if len(threads) == 1:
        return False
    mine = _mine.token
    for other, (last, thread, _) in list(threads.items()):
        if other == mine:
            continue
        if now - last > WINDOW_S:  # quiet: it no longer counts (and adds itself again when it runs again)
            threads.pop(other, None)
        elif last >= previous:  # it ran since this thread's previous run: shared, if it still lives
            if thread.is_alive():
                return True
            threads.pop(other, None)
    return False


def _new_record(device: int) -> list[Any]:
    """This thread's record on ``device``: ``[time of its last run, the thread, the device's records]``."""
    threads = _seen.setdefault(device, {})
    record = _mine.by_device[device] = threads[_mine.token] = [0.0, threading.current_thread(), threads]
    return record


def threads_on(device: int) -> int:
    """How many threads ran guarded effects on ``device`` within the last :data:`WINDOW_S` seconds."""
    now = _clock()
    return sum(1 for last, thread, _ in list(_seen.get(device, {}).values()) if now - last <= WINDOW_S and thread.is_alive())


def forget() -> None:
    """Forget every thread (tests)."""
    _seen.clear()
