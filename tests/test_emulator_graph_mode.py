"""The emulated SDK's graph mode (the bench's) on the CPU: which buffers, graphs and driver calls a run uses.

Graph mode runs only on a GPU (CUDA graphs), where ``tests/gpu/test_testing_gpu.py`` checks its frames
against eager mode's. Here a stand-in engine logs what the effect asks of it instead: captures (with the
latencies the stages were captured with), graph launches, input copies, releases and waits. So the
bookkeeping is checked in CI: a repeated run reuses its buffers and graphs with no look-up; a change of
latency, of input size or of key makes new ones; close() and dropping graphs wait for their own work.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streamsafe.streams import Stream, StreamKind
from streamsafe.testing import TrueHDR, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _engines as engines


class Array:
    """A stand-in device array (the SDK's own buffers): shape, dtype, address, size."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, ptr: int) -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.data = type("Pointer", (), {"ptr": ptr})()
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize


class Graph:
    def __init__(self, log: list[tuple[Any, ...]], number: int, latency: float) -> None:
        self.log, self.number, self.latency = log, number, latency

    def wait(self) -> None:
        self.log.append(("wait", self.number))


class Engine(engines.CupyEngine):
    """A CuPy engine with every driver call replaced by an entry in ``log``; inputs are NumPy arrays
    whose DLPack capsules are read in place as the GPU engine reads CUDA ones."""

    supports_graphs = True

    def __init__(self) -> None:
        self.device, self._by_ptr, self.log = 0, {}, []
        self._get_device = lambda: 0
        self.backend: Any = None
        self._allocated = 0
        self._capturing: list[float] = []

    def stream(self, stream_ptr: int) -> Stream:
        kind = StreamKind.LEGACY if stream_ptr in (0, 1) else StreamKind.NON_BLOCKING
        return Stream(0, stream_ptr or 1, kind, None)  # type: ignore[arg-type]

    def legacy(self) -> Stream:
        return self.stream(0)

    def empty(self, shape: tuple[int, ...], dtype: Any, name: str) -> Array:
        self._allocated += 1
        return Array(tuple(shape), dtype, 0x100000 * self._allocated)

    def release(self, array: Any, name: str) -> None:
        self.log.append(("release", name))

    def copy_inputs(self, stream: Stream, srcs: Any, dsts: Any) -> None:
        self.log.append(("copy", tuple(s.ptr if type(s) is engines.TakenInput else s.data.ptr for s in srcs), tuple(d.data.ptr for d in dsts)))

    def delay(self, stream: Stream, us: float) -> None:
        self._capturing.append(us)

    def launch(self, *args: Any) -> None:
        pass

    def capture(self, stages: Any) -> Graph:
        self._capturing = []
        stages(None)
        graph = Graph(self.log, sum(1 for e in self.log if e[0] == "capture"), sum(self._capturing))
        self.log.append(("capture", graph.number, graph.latency))
        return graph

    def launch_graph(self, graph: Any, stream: Stream) -> None:
        self.log.append(("launch", graph.number))

    def export(self, array: Any) -> Any:
        return array


@pytest.fixture(autouse=True)
def numpy_capsules_read_as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "DLPACK_CUDA", 1)  # (NumPy's capsules say kDLCPU; the stand-in reads them as the GPU's)


def graph_mode(fx: Any, **config: Any) -> tuple[Any, Engine]:
    """``fx`` configured, on the stand-in engine, loaded."""
    engine = Engine()
    fx._engine = engine
    for name, value in config.items():
        setattr(fx, name, value)
    fx.load()
    return fx, engine


def kinds(log: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    return [e for e in log if e[0] == kind]


def frame(h: int = 32, w: int = 48, value: float = 0.0) -> np.ndarray:
    return np.full((3, h, w), value, np.float32)


def test_a_repeated_run_reuses_its_buffers_and_graphs_and_copies_each_input() -> None:
    fx, eng = graph_mode(VideoFrameGeneration(launch_mode="graph"), input_width=48, input_height=32)
    a, b = frame(), frame(value=1.0)
    fx._graph_warm.add(("vfg", False, 0.5, True))  # (the first run of a key is eager, on the backend: skip it here)
    outs = [fx.run(a, b, frame_index=1, non_blocking=True, stream_ptr=7) for _ in range(4)]
    assert all(o.image is outs[0].image for o in outs)  # the SDK's one output buffer
    assert len(kinds(eng.log, "capture")) == 2  # inference and conversion, captured once
    assert [e[1] for e in kinds(eng.log, "launch")] == [0, 1] * 4
    copies = kinds(eng.log, "copy")
    assert len(copies) == 4 and len(set(copies)) == 1  # both inputs, into the same two staging buffers, every run
    assert copies[0][1][0] != copies[0][1][1]
    assert fx._steady is not None and not kinds(eng.log, "release")


def test_a_latency_change_captures_new_graphs_with_it() -> None:
    fx, eng = graph_mode(VideoSuperRes(launch_mode="graph", latency_us=10), output_width=96, output_height=64)
    fx._graph_warm.add(("sr", False, 64, 96))
    x = frame()
    fx.run(x, non_blocking=True)
    fx.run(x, non_blocking=True)
    fx.latency_us = {"inference": 500, "conversion": 70}
    fx.run(x, non_blocking=True)
    fx.run(x, non_blocking=True)
    captures = kinds(eng.log, "capture")
    assert [c[2] for c in captures] == [20.0, 10.0, 500.0, 70.0]  # (transfer + inference, then conversion)
    assert [e[1] for e in kinds(eng.log, "launch")] == [0, 1, 0, 1, 2, 3, 2, 3]
    fx.latency_us = 10  # the first settings again: their graphs are found, not captured again
    fx.run(x, non_blocking=True)
    assert len(kinds(eng.log, "capture")) == 4 and [e[1] for e in kinds(eng.log, "launch")][-2:] == [0, 1]


def test_an_input_size_change_makes_new_buffers_and_the_old_size_finds_its_graphs_again() -> None:
    fx, eng = graph_mode(TrueHDR(launch_mode="graph"))
    fx._graph_warm.add(("hdr", 100, 100, 50, 650))
    for h, w in ((32, 48), (32, 48), (16, 24), (16, 24), (32, 48)):
        out = fx.run(frame(h, w), non_blocking=True)
        assert out.image.shape == (h, w)
    assert len(kinds(eng.log, "capture")) == 3  # one graph a size (no conversion stage), the third size's output is new again
    releases = [e[1] for e in kinds(eng.log, "release")]
    assert any("input0" in r for r in releases) and any("output" in r for r in releases)
    waits = kinds(eng.log, "wait")
    assert waits, "a buffer was released without waiting for the graphs' own work"
    # every release comes after a wait for the last run's graphs
    first_release = next(i for i, e in enumerate(eng.log) if e[0] == "release")
    assert any(e[0] == "wait" for e in eng.log[:first_release])


def test_close_waits_for_the_last_runs_graphs_and_lets_every_graph_go() -> None:
    fx, eng = graph_mode(VideoSuperRes(launch_mode="graph"), output_width=96, output_height=64)
    fx._graph_warm.add(("sr", False, 64, 96))
    fx.run(frame(), non_blocking=True)
    eng.log.clear()
    fx.close()
    waits = [e[1] for e in kinds(eng.log, "wait")]
    assert sorted(set(waits)) == [0, 1]
    assert eng.log.index(("wait", 0)) < min(i for i, e in enumerate(eng.log) if e[0] == "release")
    assert fx._graphs == {} and fx._steady is None and fx._own_graphs == ()


def test_past_sixteen_graph_sets_the_effect_waits_for_them_and_lets_them_go() -> None:
    fx, eng = graph_mode(TrueHDR(launch_mode="graph"))
    x = frame()
    for contrast in range(80, 100):
        fx.contrast = contrast
        fx._graph_warm.add(("hdr", contrast, 100, 50, 650))
        fx.run(x, non_blocking=True)
    assert len(kinds(eng.log, "capture")) == 20
    assert len(fx._graphs) == 3  # dropped once, at the 18th key: 17 sets waited for, then 3 new
    dropped = kinds(eng.log, "wait")
    assert sorted(e[1] for e in dropped[-17:]) == list(range(17))


def test_an_input_not_read_in_place_takes_the_look_up_path_every_run() -> None:
    """An input graph mode cannot read from its capsule (here: a dtype NumPy lacks would be imported by
    CuPy) is never remembered as the steady state: the buffers are looked up for it each run."""
    fx, eng = graph_mode(VideoSuperRes(launch_mode="graph"), output_width=96, output_height=64)
    fx._graph_warm.add(("sr", False, 64, 96))
    staged = Array((3, 32, 48), np.float32, 0x42)
    eng.take = lambda obj, what: staged  # type: ignore[method-assign]
    eng.shape_dtype = lambda a: (a.shape, a.dtype)  # type: ignore[method-assign]
    fx.run(frame(), non_blocking=True)
    fx.run(frame(), non_blocking=True)
    assert fx._steady is None and len(kinds(eng.log, "capture")) == 2


# -- the engine's captures, on a stand-in driver ----------------------------------------------------


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A stand-in ``cuda.bindings.driver`` for :meth:`CupyEngine.capture`: counts the driver objects alive."""
    import sys
    import types

    import cuda.bindings

    live = {"event": 0, "graph": 0, "exe": 0}

    def make(kind: str) -> int:
        live[kind] += 1
        return 100 + sum(live.values())

    def destroy(kind: str) -> Any:
        def call(handle: int) -> tuple[int]:
            live[kind] -= 1
            return (0,)
        return call

    d = types.ModuleType("cuda.bindings.driver")
    d.CUevent_flags = types.SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)  # type: ignore[attr-defined]
    d.CUevent_record_flags = types.SimpleNamespace(CU_EVENT_RECORD_EXTERNAL=1)  # type: ignore[attr-defined]
    d.CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED=2)  # type: ignore[attr-defined]
    d.CUstream = lambda ptr: ptr  # type: ignore[attr-defined]
    d.cuEventCreate = lambda flags: (0, make("event"))  # type: ignore[attr-defined]
    d.cuStreamBeginCapture = lambda stream, mode: (0,)  # type: ignore[attr-defined]
    d.cuEventRecordWithFlags = lambda event, stream, flags: (0,)  # type: ignore[attr-defined]
    d.cuStreamEndCapture = lambda stream: (0, make("graph"))  # type: ignore[attr-defined]
    d.cuGraphInstantiate = lambda graph, flags: (0, make("exe"))  # type: ignore[attr-defined]
    d.cuGraphExecDestroy, d.cuGraphDestroy, d.cuEventDestroy = destroy("exe"), destroy("graph"), destroy("event")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", d)
    monkeypatch.setattr(cuda.bindings, "driver", d, raising=False)
    return live


def capture_engine() -> engines.CupyEngine:
    """A CuPy engine on a stand-in CuPy (devices, streams, the pool: nothing runs)."""
    import contextlib
    import types

    cupy = types.SimpleNamespace(
        get_default_memory_pool=lambda: types.SimpleNamespace(malloc=lambda n: object()),
        cuda=types.SimpleNamespace(Device=lambda i: contextlib.nullcontext(), Stream=lambda non_blocking: types.SimpleNamespace(ptr=0x77),
                                   using_allocator=lambda allocator: contextlib.nullcontext()),
    )
    engine = object.__new__(engines.CupyEngine)
    engine._cupy, engine.device, engine._streams, engine.backend = cupy, 0, {}, None
    return engine


def test_a_captured_graph_and_its_event_go_with_it_and_a_failed_capture_leaves_nothing(driver: dict[str, int]) -> None:
    engine = capture_engine()
    graph = engine.capture(lambda stream: None)
    assert driver == {"event": 1, "graph": 1, "exe": 1} and not engine._streams
    del graph
    assert driver == {"event": 0, "graph": 0, "exe": 0}

    def fails(stream: Any) -> None:
        raise RuntimeError("a stage's kernel did not compile")

    with pytest.raises(RuntimeError, match="did not compile"):
        engine.capture(fails)
    assert driver == {"event": 0, "graph": 0, "exe": 0} and not engine._streams


def test_a_run_that_fails_after_its_first_launch_is_waited_for_before_a_release() -> None:
    """The host wait of a blocking run raises after the first graph launched: that graph is still the
    last run's own work, waited for before the next size's release."""
    fx, eng = graph_mode(TrueHDR(launch_mode="graph"))
    fx._graph_warm.add(("hdr", 100, 100, 50, 650))
    fx._graph_warm.add(("hdr", 90, 100, 50, 650))
    fx.run(frame(), non_blocking=True, stream_ptr=7)
    fx.contrast = 90

    def fails(stream: Any) -> None:
        raise RuntimeError("the host wait failed")

    eng.host_wait = fails  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="host wait failed"):
        fx.run(frame(), stream_ptr=9)
    eng.log.clear()
    fx.run(frame(16, 24), non_blocking=True)  # another size: the old buffers are released
    first_release = next(i for i, e in enumerate(eng.log) if e[0] == "release")
    assert ("wait", 1) in eng.log[:first_release], eng.log
