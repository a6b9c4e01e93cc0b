"""A stream the ledger will fence later must outlive that fence: its framework object is held.

A destroyed stream's handle cannot be waited on (on an H200 the process died of SIGSEGV:
``docs/runs/2026-11-30-per-thread-2``), and CuPy destroys a stream when its object goes. The model
never destroys streams, so these tests follow the objects' lifetimes with weak references; the GPU
test ``test_a_stream_made_for_each_frame_lives_until_the_next_run_has_fenced_it`` runs the programs.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np

import streamsafe as ss
from streamsafe.testing import VideoSuperRes


class FrameworkStream:
    """A framework's stream object (``__cuda_stream__``) over a model stream: what CuPy destroys when it goes."""

    def __init__(self, stream: ss.Stream) -> None:
        self.stream = stream

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.stream.handle)


def make_sr(sim: ss.SimBackend) -> Any:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def frame(sim: ss.SimBackend) -> Any:
    x = sim.empty((3, 16, 16), np.float32)
    sim.launch(sim.current_stream(), "producer.write", lambda: x.buffer.data.fill(0.5), writes=[x])
    return x


def test_a_contracts_declared_stream_is_held_until_the_next_run_fenced_it() -> None:
    """A contract per clip, dropped without close(): its stream object lives until the next clip's first run."""
    sim = ss.SimBackend()
    sr = make_sr(sim)
    holder = FrameworkStream(sim.create_stream(non_blocking=True))
    gone = weakref.ref(holder)
    c = ss.StreamContract(sr, holder, strategy="event")
    c.run(frame(sim))
    del c, holder
    gc.collect()
    assert gone() is not None, "the previous run's SDK stream must outlive the next run's wait on it"
    c2 = ss.StreamContract(sr, FrameworkStream(sim.create_stream(non_blocking=True)), strategy="event")
    c2.run(frame(sim))  # waits for the first stream, then lets it go
    gc.collect()
    assert gone() is None
    c2.close()
    assert sim.races == []


def test_a_release_lets_the_declared_stream_go() -> None:
    sim = ss.SimBackend()
    sr = make_sr(sim)
    holder = FrameworkStream(sim.create_stream(non_blocking=True))
    gone = weakref.ref(holder)
    c = ss.StreamContract(sr, holder, strategy="event")
    c.run(frame(sim))
    c.synchronize()  # the host waited for the SDK's streams: no later run needs them
    del c, holder
    gc.collect()
    assert gone() is None
