"""The ordering model learns what real runtimes do: a caching allocator with ``record_stream``,
threads, recovery after a race, bounded memory, use after free (H7), and sanitize mode as a
registered observer of the backends."""

from __future__ import annotations

import ast
import sys
import threading
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamsafe as ss
from streamsafe import hooks
from streamsafe.sim import mirror, sync_hooks
from streamsafe.backend import _held
from streamsafe.backend import cuda as cuda_backend
from streamsafe.backend._pool import EventPool
from streamsafe.sim.backend import SimArray
from streamsafe.sim.clocks import is_ordered_after
from streamsafe.sim.races import Access, Race
from streamsafe.streams import Stream, StreamKind


def nb(sim: ss.sim.SimBackend) -> ss.Stream:
    return sim.create_stream(non_blocking=True)


def race_names(sim: ss.sim.SimBackend) -> set[tuple[str, str]]:
    return {(r.first.op, r.second.op) for r in sim.races}


def reader(sim: ss.sim.SimBackend, stream: ss.Stream, src: SimArray, dst: SimArray, name: str) -> None:
    s, d = src.buffer, dst.buffer
    sim.launch(stream, name, lambda: np.copyto(d.data, s.data), reads=[s], writes=[d])


# -- 1. the caching allocator --------------------------------------------------------------------------------


def test_a_freed_block_is_handed_out_again_on_its_stream(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.empty(4, name="x", stream=a)
    block = x.buffer
    del x
    y = sim.empty(4, name="y", stream=a)
    assert y.buffer is block and y.buffer.name == "y"
    assert sim.stats["reused_blocks"] == 1


def test_reuse_needs_the_same_stream_shape_and_dtype(sim: ss.sim.SimBackend) -> None:
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, stream=a)
    block = x.buffer
    del x
    others = [sim.empty(4, stream=b), sim.empty(5, stream=a), sim.empty(4, np.uint32, stream=a), sim.empty(4)]
    assert all(o.buffer is not block for o in others)
    assert sim.empty(4, stream=a).buffer is block


def test_the_allocation_stream_defaults_to_the_current_stream(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    with sim.use_stream(a):
        x = sim.empty(4)
    block = x.buffer
    del x
    assert sim.empty(4).buffer is not block  # the legacy stream's pool
    assert sim.empty(4, stream=a).buffer is block


def test_array_allocates_on_the_given_stream(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.array([1.0, 2.0], stream=a)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    block = x.buffer
    del x
    assert sim.empty(2, np.float64, stream=a).buffer is block


def test_views_and_capsules_keep_the_allocation(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.empty(4, stream=a)
    block = x.buffer
    view = sim.from_dlpack(x, stream=a)
    capsule = x.__dlpack__(stream=-1)
    del x
    assert sim.empty(4, stream=a).buffer is not block  # the view holds it
    del view
    assert sim.empty(4, stream=a).buffer is not block  # the capsule holds it
    imported = sim.from_dlpack(capsule)
    del capsule
    assert sim.empty(4, stream=a).buffer is not block  # the capsule's import holds it
    del imported
    assert sim.empty(4, stream=a).buffer is block


def test_pending_work_does_not_keep_a_block_allocated(sim: ss.sim.SimBackend) -> None:
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, stream=a)
    block = x.buffer
    sim.fill(x, 1.0, a)
    sim.fence(b, a)
    sim.copy(x, b)
    assert len(sim.pending) >= 2  # the adversarial scheduler runs nothing yet
    del x
    assert sim.empty(4, stream=a).buffer is block


def test_a_reused_block_keeps_its_data(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.empty(4, stream=a)
    sim.fill(x, 5.0, a)
    sim.synchronize_stream(a)
    del x
    np.testing.assert_array_equal(sim.empty(4, stream=a).buffer.data, np.full(4, 5.0))  # not poisoned again


def test_allocator_reuse_races_with_a_pending_read_and_corrupts(sim: ss.sim.SimBackend) -> None:
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, name="frame 0", stream=a)
    sim.fill(x, 1.0, a, name="write frame 0")
    sim.fence(b, a)
    y = sim.empty(4, name="y", stream=b)
    reader(sim, b, x, y, "read frame 0")
    del x  # nothing orders a's next allocation after b's read
    z = sim.empty(4, name="frame 1", stream=a)
    sim.fill(z, 2.0, a, name="write frame 1")
    assert race_names(sim) == {("read frame 0", "write frame 1")}
    assert sim.races[0].first.kind == "read" and sim.races[0].second.kind == "write"
    np.testing.assert_array_equal(sim.download(y, b), np.full(4, 2.0))  # the read saw the next frame


def test_record_stream_delays_reuse_until_the_reader_is_done(sim: ss.sim.SimBackend) -> None:
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, name="frame 0", stream=a)
    sim.fill(x, 1.0, a, name="write frame 0")
    sim.fence(b, a)
    y = sim.empty(4, name="y", stream=b)
    reader(sim, b, x, y, "read frame 0")
    block = x.buffer
    x.record_stream(b)
    x.record_stream(a)  # the allocation stream: nothing to do, as in torch
    del x  # an event is recorded on b now
    early = sim.empty(4, stream=a)
    assert early.buffer is not block  # b's read has not run: the block stays out of the pool
    sim.synchronize_stream(b)
    z = sim.empty(4, name="frame 1", stream=a)
    assert z.buffer is block
    sim.fill(z, 2.0, a, name="write frame 1")
    np.testing.assert_array_equal(sim.download(y, b), np.full(4, 1.0))
    assert sim.races == []


def test_record_stream_event_completes_by_query_without_a_host_wait() -> None:
    sim = ss.sim.SimBackend(scheduler="in-order")  # work runs as soon as it is issued
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, stream=a)
    block = x.buffer
    sim.fence(b, a)
    sim.copy(x, b)
    x.record_stream(b)
    del x
    waits = sim.stats["host_waits"]
    assert sim.empty(4, stream=a).buffer is block
    assert sim.stats["host_waits"] == waits  # the allocator's query is not the program's host wait


def test_free_is_never_pooled(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.empty(4, stream=a)
    block = x.buffer
    sim.free(x, name="SDK release")
    del x
    assert sim.empty(4, stream=a).buffer is not block


# -- 2. threads ----------------------------------------------------------------------------------------------


def test_the_current_stream_is_per_thread() -> None:
    sim = ss.sim.SimBackend()
    s = sim.create_stream()
    entered, checked = threading.Event(), threading.Event()
    seen: list[ss.Stream] = []

    def other() -> None:
        entered.wait(5)
        seen.append(sim.current_stream())
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with sim.use_stream(s):
        entered.set()
        assert checked.wait(5)
        assert sim.current_stream() == s
    t.join()
    assert seen == [sim.legacy_stream()]


def test_two_threads_share_one_backend() -> None:
    sim = ss.sim.SimBackend(scheduler="random", seed=5)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def worker(k: int) -> None:
        try:
            a, b = nb(sim), nb(sim)
            with sim.use_stream(a):
                x, y = sim.empty(4, name=f"x{k}"), sim.empty(4, name=f"y{k}")
                barrier.wait(5)
                for i in range(300):
                    value = float(1000 * k + i)
                    sim.fill(x, value, name=f"t{k} write")
                    sim.fence(b, a)
                    reader(sim, b, x, y, f"t{k} read")
                    sim.fence(a, b)
                    assert sim.current_stream() == a
                    if i % 10 == 9:
                        np.testing.assert_array_equal(sim.download(y), np.full(4, value))
                sim.synchronize_device()
                results[k] = y.numpy()
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(saved)
    assert errors == []
    assert sim.races == []
    for k in range(2):
        np.testing.assert_array_equal(results[k], np.full(4, 1000.0 * k + 299))


# -- 3. recovery after a RaceError ---------------------------------------------------------------------------


def test_the_model_goes_on_after_a_race_error() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", on_race="raise")
    a, b = nb(sim), nb(sim)
    x = sim.empty(4, name="x")
    sim.fill(x, 1.0, a, name="w1")
    with pytest.raises(ss.errors.RaceError, match="w2"):
        sim.fill(x, 2.0, b, name="w2")
    assert [op.name for op in sim.pending] == ["w1", "w2"]  # fully issued
    sim.fence(a, b)
    sim.fill(x, 3.0, a, name="w3")
    np.testing.assert_array_equal(sim.download(x, a), np.full(4, 3.0))
    sim.synchronize_device()
    assert [r.second.op for r in sim.races] == ["w2"]


def test_a_racing_host_release_is_done_before_the_error() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", on_race="raise")
    a = nb(sim)
    x = sim.empty(4, name="x", stream=a)
    y = sim.copy(x, a, name="copy x")
    with pytest.raises(ss.errors.RaceError, match="copy x"):
        sim.free(x, name="close() frees x")
    assert x.buffer.freed and x.buffer.freed_by is not None
    sim.synchronize_stream(a)  # no deadlock
    assert y.buffer.data.shape == (4,)


# -- 4. bounded memory, linear time ----------------------------------------------------------------------------


@pytest.mark.parametrize("host_wait", [False, True], ids=["no host wait", "host wait"])
def test_twenty_thousand_frames_run_in_bounded_memory(host_wait: bool) -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    a, b = nb(sim), nb(sim)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    xb, yb = x.buffer, y.buffer

    frame = [0.0]

    def write() -> None:
        xb.data.fill(frame[0])
        frame[0] += 1

    def copy() -> None:
        np.copyto(yb.data, xb.data)

    def frames(start: int, stop: int) -> None:
        for _ in range(start, stop):
            sim.launch(a, "write x", write, writes=[xb])
            sim.fence(b, a)
            sim.launch(b, "read x", copy, reads=[xb], writes=[yb])
            sim.fence(a, b)
            if host_wait:
                sim.synchronize_stream(a)

    frames(0, 1000)
    assert len(xb.history) <= 4 and len(sim.pending) <= sim.max_pending  # fail fast where it grows
    tracemalloc.start()
    try:
        frames(1000, 2000)
        before = tracemalloc.get_traced_memory()[0]
        frames(2000, 20000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, f"{grown / 1024:.0f} KiB retained"
    assert len(xb.history) <= 4 and len(yb.history) <= 4
    assert len(sim.pending) <= sim.max_pending
    assert sim.races == []
    np.testing.assert_array_equal(sim.download(y, b), np.full(4, 19999.0))


def test_the_pending_queue_is_bounded_and_runs_oldest_first() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", max_pending=16)
    a, b = nb(sim), nb(sim)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    for i in range(100):
        sim.fill(x, float(i), a, name=f"a{i}")
        sim.fill(y, float(i), b, name=f"b{i}")
    assert len(sim.pending) == 16
    assert sorted(op.name for op in sim.pending) == sorted([f"a{i}" for i in range(92, 100)] + [f"b{i}" for i in range(92, 100)])
    np.testing.assert_array_equal(sim.download(x, a), np.full(4, 99.0))


def test_finished_operations_hold_nothing(sim: ss.sim.SimBackend) -> None:
    a, b = nb(sim), nb(sim)
    x, y = sim.empty(4), sim.empty(4)
    sim.fill(x, 1.0, a)
    sim.fence(b, a)
    op = sim.launch(b, "read x", lambda: None, reads=[x], writes=[y])
    assert op.deps and not op.done
    sim.synchronize_stream(b)
    assert op.done and op.deps == () and op.fn is None


def test_a_write_after_many_reads_names_the_unordered_reader(sim: ss.sim.SimBackend) -> None:
    a, b, c = nb(sim), nb(sim), nb(sim)
    x = sim.empty(4, name="x")
    sim.fill(x, 1.0, a, name="write")
    for s, who in ((b, "b"), (c, "c")):
        sim.fence(s, a)
        for i in range(50):
            sim.launch(s, f"{who} read {i}", reads=[x])
    sim.fence(a, b)  # ordered after b's reads, not c's
    sim.fill(x, 2.0, a, name="rewrite")
    assert race_names(sim) == {("c read 49", "rewrite")}
    assert len(x.buffer.history) <= 4


N_BUFFERS = 3
N_EVENTS = 2
KINDS = ["legacy", "per-thread", "blocking", "non-blocking"]


@dataclass(frozen=True)
class Program:
    kinds: tuple[str, ...]
    steps: tuple[tuple[Any, ...], ...]


@st.composite
def programs(draw: st.DrawFn) -> Program:
    n = draw(st.integers(2, 4))
    kinds: list[str] = []
    for _ in range(n):
        kinds.append(draw(st.sampled_from([k for k in KINDS if k in ("blocking", "non-blocking") or k not in kinds])))
    stream, buf, event = st.integers(0, n - 1), st.integers(0, N_BUFFERS - 1), st.integers(0, N_EVENTS - 1)
    kernel = st.tuples(st.just("kernel"), stream, st.frozensets(buf, max_size=2), st.frozensets(buf, max_size=2))
    step = st.one_of(
        kernel,
        kernel,
        kernel,
        st.tuples(st.just("fence"), stream, stream),
        st.tuples(st.just("record"), event, stream),
        st.tuples(st.just("wait"), stream, event),
        st.tuples(st.just("sync_stream"), stream),
        st.tuples(st.just("sync_device")),
        st.tuples(st.just("query"), event),
        st.tuples(st.just("host"), st.frozensets(buf, max_size=1), st.frozensets(buf, max_size=1)),
    )
    return Program(tuple(kinds), tuple(draw(st.lists(step, min_size=3, max_size=24))))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_pruned_histories_report_every_racing_access(program: Program) -> None:
    """Against the definition (every earlier access kept): each access that races with any earlier
    one is reported, with an earlier access it really races with."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    streams = []
    for kind in program.kinds:
        if kind == "legacy":
            streams.append(sim.legacy_stream())
        elif kind == "per-thread":
            streams.append(sim.per_thread_stream())
        else:
            streams.append(sim.create_stream(non_blocking=kind == "non-blocking"))
    bufs = [sim.empty(2, name=f"b{i}") for i in range(N_BUFFERS)]
    events = [sim.create_event() for _ in range(N_EVENTS)]
    ops = []
    for i, step in enumerate(program.steps):
        if step[0] == "kernel":
            ops.append(sim.launch(streams[step[1]], f"k{i}", reads=[bufs[r] for r in sorted(step[2])], writes=[bufs[w] for w in sorted(step[3])]))
        elif step[0] == "host":
            ops.append(sim.host_access(f"h{i}", reads=[bufs[r] for r in step[1]], writes=[bufs[w] for w in step[2]]))
        elif step[0] == "fence":
            sim.fence(streams[step[1]], streams[step[2]])
        elif step[0] == "record":
            sim.record(events[step[1]], streams[step[2]])
        elif step[0] == "wait":
            sim.wait(streams[step[1]], events[step[2]])
        elif step[0] == "sync_stream":
            sim.synchronize_stream(streams[step[1]])
        elif step[0] == "sync_device":
            sim.synchronize_device()
        elif step[0] == "query":
            sim.query(events[step[1]])
    accesses = [(op, kind, buf) for op in ops for kind, group in (("read", op.reads), ("write", op.writes)) for buf in group]
    pairs, seconds = set(), set()
    for j, (later, lkind, lbuf) in enumerate(accesses):
        for earlier, ekind, ebuf in accesses[:j]:
            if ebuf is lbuf and earlier.index != later.index and "write" in (ekind, lkind):
                if not is_ordered_after(later.clock, earlier.actor, earlier.seq):
                    pairs.add((lbuf.name, earlier.index, ekind, later.index, lkind))
                    seconds.add((lbuf.name, later.index, lkind))
    reported = {(r.buffer, r.first.op_index, r.first.kind, r.second.op_index, r.second.kind) for r in sim.races}
    assert reported <= pairs
    assert {(b, i, k) for b, _, _, i, k in reported} == seconds


# -- 5. use after free (H7) --------------------------------------------------------------------------------------


def test_race_kind_defaults_to_unordered() -> None:
    access = Access("k", "write", (0, 5), "stream", 1, ss.sim.VectorClock(), 0)
    assert Race("x", access, access).kind == "unordered"


def test_an_access_after_free_is_a_use_after_free(sim: ss.sim.SimBackend) -> None:
    a = nb(sim)
    x = sim.array(np.ones(4), name="x")
    sim.free(x, name="close() releases x")
    sim.copy(x, a, name="read x after close")
    [race] = sim.races
    assert race.kind == "use-after-free"
    assert (race.first.op, race.second.op, race.second.kind) == ("close() releases x", "read x after close", "read")
    text = str(race)
    assert "use after free" in text and "close() releases x" in text and "read x after close" in text
    assert "copy what you need before" in race.fix
    with ss.sanitize(sim), pytest.raises(ss.errors.RaceError, match="use after free"):
        sim.fill(x, 0.0, a, name="write x after close")


# -- 6. sanitize as a registered observer ----------------------------------------------------------------------------


def fake(kind: StreamKind, handle: int) -> Stream:
    return Stream(0, handle, kind)  # a stream of no backend: what the GPU backend reports


P, S, C = (fake(StreamKind.NON_BLOCKING, h) for h in (0x1000, 0x2000, 0x3000))
LEGACY = fake(StreamKind.LEGACY, 1)


class _NotTheModel:
    """A backend that is not the model (as the driver's): its ordering calls are never made here."""

    name = "fake-gpu"

    def _never(self, *args: object) -> None:
        raise AssertionError("the mirror must not call the backend")

    current_stream = record = wait = fence = synchronize_stream = acquire_event = _never


def test_sanitize_registers_a_shadow_observer_for_the_block() -> None:
    before = mirror.active()  # STREAMSAFE_SANITIZE=1 may have registered one for the process
    with ss.sanitize(_NotTheModel()) as shadow:  # type: ignore[arg-type]
        assert isinstance(shadow, hooks.Observer) and shadow in hooks.observers
        assert mirror.active() is shadow
    assert shadow not in hooks.observers and mirror.active() is before


def test_shadow_reports_an_unfenced_input_and_accepts_a_fenced_one() -> None:
    with ss.sanitize(_NotTheModel()) as shadow:  # type: ignore[arg-type]
        assert isinstance(shadow, mirror.Mirror)
        for o in hooks.observers:
            o.on_input_write(0xA000, P, 0)
            o.on_fence(S, P)
            o.on_launch(S, "sdk.read", [0xA000], [0xB000], 0)
        assert shadow.races == []
        with pytest.raises(ss.errors.RaceError, match="'sdk.read'.*not ordered after write by 'producer.write'"):
            for o in hooks.observers:
                o.on_input_write(0xC000, P, 0)
                o.on_launch(S, "sdk.read", [0xC000], [], 0)
        for o in hooks.observers:  # the shadow goes on after the error
            o.on_fence(C, S)
            o.on_output_read(0xB000, C, 0)
            o.on_stream_synchronize(C)
        assert len(shadow.races) == 1


def test_shadow_release_then_read_is_a_use_after_free_and_a_write_reallocates() -> None:
    shadow = mirror.Mirror()
    shadow.on_launch(S, "sdk.write output", [], [0xB000], 0)
    shadow.on_stream_synchronize(S)
    shadow.on_host_write(0xB000, "VideoSuperRes.release output (close)", 0)
    with pytest.raises(ss.errors.RaceError, match="use after free") as info:
        shadow.on_output_read(0xB000, C, 0)
    assert info.value.races[0].first.op == "VideoSuperRes.release output (close)"
    shadow.on_stream_synchronize(C)
    shadow.on_launch(S, "sdk.write output", [], [0xB000], 0)  # the address handed out again
    shadow.on_fence(C, S)
    shadow.on_output_read(0xB000, C, 0)
    assert len(shadow.races) == 1


def test_shadow_mirrors_events_and_host_waits() -> None:
    shadow = mirror.Mirror()
    event = cuda_backend.CudaEvent(0, 7)
    shadow.on_launch(S, "sdk.write output", [], [0xB000], 0)
    shadow.on_record(event, S)
    shadow.on_wait(C, event)
    shadow.on_output_read(0xB000, C, 0)
    shadow.on_device_synchronize(0)
    shadow.on_host_write(0xB000, "host upload", 0)  # not a release: an ordinary host write
    shadow.on_launch(S, "sdk.write output", [], [0xB000], 0)
    shadow.on_record(event, S)
    shadow.on_event_complete(event)
    shadow.on_launch(LEGACY, "reader", [0xB000], [], 0)
    assert shadow.races == []


def test_environment_sanitize_registers_one_shadow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "_ENV_MIRROR", None)
    monkeypatch.setattr(hooks, "observers", hooks.observers)  # (what it registers goes with the test: its torch watch too)
    first = mirror.enable_from_environment()
    try:
        assert mirror.enable_from_environment() is first
        assert [o for o in hooks.observers if isinstance(o, mirror.Mirror)] == [first]
    finally:
        hooks.unregister(first)
        sync_hooks.release()  # (the process's hold on the program's sync wrappers, taken once)


def test_the_cuda_backend_imports_nothing_of_the_model() -> None:
    tree = ast.parse(Path(cuda_backend.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.update((node.module or "").split("."))
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported.update(alias.name.split("."))
    assert "hooks" in imported
    assert not imported & {"_sanitize", "sanitize", "sim", "mirror", "schedule", "SimBackend"}


class _FakeDriver:
    """Just enough of ``cuda.bindings.driver`` for the ordering calls, logging each call."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_NOT_READY = 600

    class CUevent_flags:
        CU_EVENT_DISABLE_TIMING = 2

    class CUstream_flags:
        CU_STREAM_NON_BLOCKING = 1

    CU_STREAM_LEGACY = 1
    CU_STREAM_PER_THREAD = 2

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def CUstream(self, handle: int) -> int:  # noqa: N802 - the driver's name
        return handle

    def cuCtxGetCurrent(self) -> tuple[int, int]:  # noqa: N802
        return (0, 7)

    def cuEventCreate(self, flags: int) -> tuple[int, int]:  # noqa: N802
        return (0, 99)

    def _ok(self, what: str) -> tuple[int]:
        self.log.append(f"driver {what}")
        return (0,)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[int]:  # noqa: N802
        return self._ok("record")

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[int]:  # noqa: N802
        return self._ok("wait")

    def cuEventQuery(self, event: Any) -> tuple[int]:  # noqa: N802
        return self._ok("query")

    def cuEventSynchronize(self, event: Any) -> tuple[int]:  # noqa: N802
        return self._ok("event sync")

    def cuStreamSynchronize(self, stream: Any) -> tuple[int]:  # noqa: N802
        return self._ok("stream sync")

    def cuCtxSynchronize(self) -> tuple[int]:  # noqa: N802
        return self._ok("device sync")


class _Log(hooks.Observer):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def on_fence(self, waiter: Any, signaller: Any) -> None:
        self.log.append("observer fence")

    def on_record(self, event: Any, stream: Any) -> None:
        self.log.append("observer record")

    def on_wait(self, stream: Any, event: Any) -> None:
        self.log.append("observer wait")

    def on_event_complete(self, event: Any) -> None:
        self.log.append("observer event complete")

    def on_stream_synchronize(self, stream: Any) -> None:
        self.log.append("observer stream sync")

    def on_device_synchronize(self, device: int) -> None:
        self.log.append("observer device sync")


def test_the_cuda_backend_tells_observers_before_ordering_and_after_host_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    driver = _FakeDriver(log)
    monkeypatch.setattr(cuda_backend, "_driver", driver)
    monkeypatch.setattr(cuda_backend, "_SUCCESS", 0)
    monkeypatch.setattr(_held, "_HELD", None)  # the fake driver's calls, not the real driver's entry points
    be: Any = object.__new__(cuda_backend.CudaBackend)
    be._d = driver
    be._pool = EventPool(be._create_event, lambda e: None, 4)
    be._devices = {0: cuda_backend._Device(7)}
    be._lock = threading.Lock()
    be._cu_streams = {}
    be._local = threading.local()
    be._stream_pool = {}
    be._count = 1
    a, b = Stream(0, 0x5000, StreamKind.NON_BLOCKING, be), Stream(0, 0x6000, StreamKind.NON_BLOCKING, be)
    event = be.acquire_event(0)
    be.fence(b, a)  # nobody listens: nothing but the driver
    assert log == ["driver record", "driver wait"]
    observer = hooks.register(_Log(log))
    try:
        calls = [
            (lambda: be.record(event, a), ["observer record", "driver record"]),
            (lambda: be.wait(b, event), ["observer wait", "driver wait"]),
            (lambda: be.fence(b, a), ["observer fence", "driver record", "driver wait"]),
            (lambda: be.query(event), ["driver query", "observer event complete"]),
            (lambda: be.synchronize_event(event), ["driver event sync", "observer event complete"]),
            (lambda: be.synchronize_stream(a), ["driver stream sync", "observer stream sync"]),
            (lambda: be.synchronize_device(0), ["driver device sync", "observer device sync"]),
        ]
        for call, want in calls:
            log.clear()
            call()
            assert log == want
    finally:
        hooks.unregister(observer)


def _hdr_copy_after_a_pooled_allocation(scheduler: str, fenced: bool) -> ss.sim.SimBackend:
    """TrueHDR on S with non_blocking=True, its input recorded on S and dropped, the next frame allocated
    (the allocator reuses the block once S's event has completed), then the output copied on C."""
    import gc

    from streamsafe.testing import TrueHDR

    sim = ss.sim.SimBackend(scheduler=scheduler)
    p, s, c = (sim.create_stream(non_blocking=True) for _ in range(3))
    hdr = TrueHDR(backend=sim)
    hdr.load()
    x = sim.empty((3, 36, 64), np.float32, stream=p)
    sim.fill(x, 0.5, stream=p)
    sim.fence(s, p)
    out = hdr.run(x, stream_ptr=s.ptr, non_blocking=True)
    x.record_stream(s)
    del x
    gc.collect()
    sim.empty((3, 36, 64), np.float32, stream=p)  # the next frame: may reuse the block
    if fenced:
        sim.fence(c, s)
    sim.copy(sim.from_dlpack(out.image, stream=c), c)
    sim.synchronize_device()
    return sim


@pytest.mark.parametrize("scheduler", ["in-order", "random", "adversarial"])
def test_the_allocators_query_gives_the_program_no_ordering(scheduler: str) -> None:
    """Whether the allocator's query of a recorded stream's event succeeds is timing: reusing the block must
    not order the program's other work after that stream (it hid this H4 race under the in-order scheduler)."""
    sim = _hdr_copy_after_a_pooled_allocation(scheduler, fenced=False)
    assert [r.buffer for r in sim.races] == ["TrueHDR output"]
    assert _hdr_copy_after_a_pooled_allocation(scheduler, fenced=True).races == []  # the fence closes it


def test_a_reused_blocks_finished_accesses_are_retired_not_reported() -> None:
    """The block's own accesses before the completed events are not raced against its new owner."""
    import gc

    sim = ss.sim.SimBackend()
    p, s = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    a = sim.empty((4,), np.float32, stream=p)
    sim.fill(a, 1.0, stream=p)
    sim.fence(s, p)
    sim.launch(s, "read on s", reads=[a])
    a.record_stream(s)
    del a
    gc.collect()
    b = sim.empty((4,), np.float32, stream=p)  # in order: s's read has run, the block comes back
    assert sim.stats["reused_blocks"] == 1
    sim.fill(b, 2.0, stream=p)
    sim.synchronize_device()
    assert sim.races == []


@pytest.mark.parametrize("scheduler", ["in-order", "adversarial"])
def test_empty_cache_gives_the_program_no_ordering(scheduler: str) -> None:
    """Dropping completed free blocks is the allocator's business: the host's later read of a buffer that
    a stream wrote is still a race, whether or not empty_cache ran between."""
    import gc

    sim = ss.sim.SimBackend(scheduler=scheduler)
    s = sim.create_stream(non_blocking=True)
    a = sim.empty((4,), np.float32, stream=s)
    sim.fill(a, 1.0, stream=s)
    b = sim.empty((4,), np.float32, stream=sim.create_stream(non_blocking=True))
    b.record_stream(s)  # freed: its pool waits for an event on s, which empty_cache queries
    del b
    gc.collect()
    sim.empty_cache()
    sim.host_access("host read", reads=[a])
    assert [r.buffer for r in sim.races] == [a.buffer.name]
