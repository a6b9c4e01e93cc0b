"""A stream the ledger will fence later must outlive that fence: its framework object is held.

A destroyed stream's handle cannot be waited on (on an H200 the process died of SIGSEGV), and CuPy destroys a stream when its object goes. The model
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
    """A stand-in for CuPy's stream object (``__cuda_stream__``) over a model stream: what CuPy destroys when
    it goes. (The ledger holds the stream objects of torch, CuPy and cuda.core, by their module: they hold
    no effect, so a hold cannot keep one alive.)"""

    __module__ = "cupy.cuda.stream"

    def __init__(self, stream: ss.Stream) -> None:
        self.stream = stream

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.stream.handle)


def make_sr(sim: ss.sim.SimBackend) -> Any:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def frame(sim: ss.sim.SimBackend) -> Any:
    x = sim.empty((3, 16, 16), np.float32)
    sim.launch(sim.current_stream(), "producer.write", lambda: x.buffer.data.fill(0.5), writes=[x])
    return x


def run_on_a_declared_stream(sim: ss.sim.SimBackend, sr: Any) -> tuple[ss.StreamContract, weakref.ref[FrameworkStream]]:
    """One run of a contract declared with a stream object only the contract holds; the contract, and a
    weak reference to the object."""
    holder = FrameworkStream(sim.create_stream(non_blocking=True))
    c = ss.StreamContract(sr, holder, strategy="event")
    c.run(frame(sim))
    return c, weakref.ref(holder)


def test_a_contracts_declared_stream_is_held_until_the_next_run_fenced_it() -> None:
    """A contract per clip, dropped without close(): its stream object lives until the next clip's first run."""
    sim = ss.sim.SimBackend()
    sr = make_sr(sim)
    c, gone = run_on_a_declared_stream(sim, sr)
    del c
    gc.collect()
    assert gone() is not None, "the previous run's SDK stream must outlive the next run's wait on it"
    c2 = ss.StreamContract(sr, FrameworkStream(sim.create_stream(non_blocking=True)), strategy="event")
    c2.run(frame(sim))  # waits for the first stream, then lets it go
    gc.collect()
    assert gone() is None
    c2.close()
    assert sim.races == []


def test_a_release_lets_the_declared_stream_go() -> None:
    sim = ss.sim.SimBackend()
    c, gone = run_on_a_declared_stream(sim, make_sr(sim))
    c.synchronize()  # the host waited for the SDK's streams: no later run needs them
    del c
    gc.collect()
    assert gone() is None


def test_a_contracts_declared_consumer_stream_is_held_until_the_next_run_fenced_it() -> None:
    """The output imported as a bare capsule (read on the declared consumer stream), the contract dropped
    without close(): the next contract's run waits for that stream, whose object lives until then."""
    sim = ss.sim.SimBackend()
    sr = make_sr(sim)
    holder = FrameworkStream(sim.create_stream(non_blocking=True))
    gone = weakref.ref(holder)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True), strategy="event", consumer_stream=holder)
    view = sim.from_dlpack(c.run(frame(sim)).image.__dlpack__())
    sim.copy(view, holder.stream, name="consumer.copy")
    del c, holder, view
    gc.collect()
    assert gone() is not None
    c2 = ss.StreamContract(sr, sim.create_stream(non_blocking=True), strategy="event")
    c2.run(frame(sim))
    c2.synchronize()  # (the reader stays outstanding until a release)
    gc.collect()
    assert gone() is None
    assert sim.races == []


def test_a_declared_object_that_owns_the_effect_does_not_keep_it_alive() -> None:
    """A program's own object that owns the effect and names its stream (``__cuda_stream__``): not held by
    the ledger (a ledger lives as long as its effect), so dropping the contract frees both."""
    sim = ss.sim.SimBackend()

    class Pipeline:
        def __init__(self) -> None:
            self.fx = make_sr(sim)
            self.s = sim.create_stream(non_blocking=True)

        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, self.s.handle)

    p = Pipeline()
    c = ss.StreamContract(p.fx, p, strategy="event")
    c.run(frame(sim))
    effect, pipeline = weakref.ref(p.fx), weakref.ref(p)
    del c, p
    gc.collect()
    assert effect() is None and pipeline() is None


def test_a_declared_per_thread_stream_is_never_known_by_its_handle() -> None:
    """Handle 2 names another stream in each thread: a declared per-thread stream's object is not a
    handle-to-stream entry that another thread's import of ``stream=2`` would find."""
    sim = ss.sim.SimBackend()
    sr = make_sr(sim)
    pt = FrameworkStream(sim.per_thread_stream())
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True), strategy="event", consumer_stream=pt)
    with sim.use_stream(sim.per_thread_stream()):
        view = sim.from_dlpack(c.run(frame(sim)).image.__dlpack__())
        sim.copy(view, sim.per_thread_stream(), name="consumer.copy")
    assert c.ledger.holds.known.get(2) is None and c.ledger.holds.stream(2) is None
    c.close()
    assert sim.races == []


def test_a_destroyed_streams_handle_is_refused_by_name_until_a_new_stream_gets_it() -> None:
    import pytest

    from streamsafe.backend.naming import as_stream
    from streamsafe.errors import CudaDriverError
    from streamsafe.sim import SimBackend

    sim = SimBackend()
    live, gone = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    sim.destroy_stream(gone)
    assert sim.stream_info(live.handle) == (0, True)
    with pytest.raises(CudaDriverError, match="was destroyed"):
        as_stream(gone.handle, backend=sim)
    again = sim.create_stream(non_blocking=False)  # (the driver hands the handle to the next stream, of either kind)
    assert again.handle == gone.handle and sim.stream_info(gone.handle) == (0, False)
