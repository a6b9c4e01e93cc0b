"""The per-thread default stream (handle 2) is a different stream in each host thread.

CUDA resolves handle 2 in the thread that issues the work, so a stream remembered as "2" in one
thread is another stream when a second thread fences it. The model gives each thread its own
per-thread stream (work goes to the issuing thread's), and streamsafe fences another thread's
per-thread stream through the legacy stream, which CUDA orders with every per-thread stream.

Each contract test runs one effect from two threads taking turns (the host hands the turn over
with a ``threading.Event``, which orders nothing on the device), on the adversarial scheduler.
The ``control`` tests show the race without fences, and with the old rule put back.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import ledger as ledger_module, program as program_module
from streamsafe.streams import StreamKind, implicitly_ordered, issuable, on_this_thread, thread_token
from _per_thread import expected, in_thread, make_hdr, run_threads, take_turns, wrong_and_races

FENCED = ["auto", "event", "async", "stream", "device"]


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial")


def write(sim: ss.sim.SimBackend, arr: Any, data: np.ndarray, stream: ss.Stream, name: str = "producer.write") -> None:
    sim.launch(stream, name, lambda: np.copyto(arr.buffer.data, data), writes=[arr])


# -- the model --------------------------------------------------------------------------------------------


def test_each_thread_has_its_own_per_thread_stream(sim: ss.sim.SimBackend) -> None:
    mine = sim.per_thread_stream()
    theirs = in_thread(sim.per_thread_stream)
    assert mine == sim.per_thread_stream() and mine != theirs and hash(mine) != hash(theirs)
    assert mine.kind is theirs.kind is StreamKind.PER_THREAD and mine.handle == theirs.handle == 2
    assert not implicitly_ordered(mine, theirs)
    assert implicitly_ordered(mine, sim.legacy_stream()) and implicitly_ordered(theirs, sim.legacy_stream())
    assert "per-thread stream of thread 'MainThread'" in str(mine)
    assert ss.as_stream(2, backend=sim) == mine
    assert in_thread(lambda: ss.as_stream(2, backend=sim)) not in (mine, theirs)  # (a new thread: another stream again)


def test_a_thread_started_after_another_ended_has_another_per_thread_stream(sim: ss.sim.SimBackend) -> None:
    """CPython reuses a thread's ``get_ident()`` once it ends; the next thread's per-thread stream is still another."""
    x = sim.empty((4,), np.float32, name="x")
    in_thread(lambda: write(sim, x, np.full(4, 1.0, np.float32), sim.per_thread_stream(), "first thread writes x"))
    in_thread(lambda: sim.copy(x, sim.per_thread_stream(), name="second thread reads x"))
    assert {(r.first.op, r.second.op) for r in sim.races} == {("first thread writes x", "second thread reads x")}
    assert in_thread(thread_token) != in_thread(thread_token)


def test_per_thread_streams_of_two_threads_are_not_ordered(sim: ss.sim.SimBackend) -> None:
    x = sim.empty((4,), np.float32, name="x")
    write(sim, x, np.full(4, 1.0, np.float32), sim.per_thread_stream(), "main thread writes x")
    in_thread(lambda: sim.copy(x, sim.per_thread_stream(), name="other thread reads x"))
    assert {(r.first.op, r.second.op) for r in sim.races} == {("main thread writes x", "other thread reads x")}


def test_work_on_a_per_thread_stream_goes_to_the_issuing_threads_stream(sim: ss.sim.SimBackend) -> None:
    """CUDA's rule: the stream object named in the main thread, used in another, is the other's stream."""
    x = sim.empty((4,), np.float32, name="x")
    mine = sim.per_thread_stream()
    write(sim, x, np.full(4, 1.0, np.float32), mine, "main thread writes x")
    in_thread(lambda: sim.copy(x, mine, name="other thread reads x through the main thread's stream object"))
    assert len(sim.races) == 1


def test_every_threads_per_thread_stream_shares_one_pool_of_the_allocator(sim: ss.sim.SimBackend) -> None:
    """Torch's allocator and CuPy's pool know a stream by its handle: a block freed on one thread's per-thread
    stream goes to another thread's allocation on its own per-thread stream, unordered (a race on a GPU too)."""

    def fill(name: str, value: float) -> None:
        x = sim.empty((4,), np.float32, name=name, stream=sim.per_thread_stream())
        data = x.buffer.data  # (the kernel holds the memory, not the array: the array goes with the thread)
        sim.launch(sim.per_thread_stream(), f"{name} written", lambda: data.fill(value), writes=[x])

    in_thread(lambda: fill("first thread's x", 1.0))
    in_thread(lambda: fill("second thread's y", 2.0))

    assert sim.stats["reused_blocks"] == 1
    assert {(r.first.op, r.second.op) for r in sim.races} == {("first thread's x written", "second thread's y written")}


def test_the_legacy_stream_orders_another_threads_per_thread_stream(sim: ss.sim.SimBackend) -> None:
    x = sim.empty((4,), np.float32, name="x")
    write(sim, x, np.full(4, 1.0, np.float32), sim.per_thread_stream(), "main thread writes x")

    def other() -> None:
        event = sim.acquire_event(0)
        sim.record(event, sim.legacy_stream())  # follows every per-thread stream's earlier work
        sim.wait(sim.per_thread_stream(), event)
        sim.copy(x, sim.per_thread_stream(), name="other thread reads x")

    in_thread(other)
    assert sim.races == []


def test_issuable_and_on_this_thread(sim: ss.sim.SimBackend) -> None:
    mine, theirs = sim.per_thread_stream(), in_thread(sim.per_thread_stream)
    blocking = sim.create_stream()
    assert issuable(mine) is mine and issuable(blocking) is blocking and on_this_thread(blocking) is blocking
    assert issuable(theirs) == sim.legacy_stream()
    assert on_this_thread(theirs) == mine and on_this_thread(mine) is mine


# -- one effect, two threads --------------------------------------------------------------------------------


def readers_on_per_thread_streams(sim: ss.sim.SimBackend, strategy: str, frames: int = 12) -> tuple[int, int]:
    """Each thread imports and copies the output on its own per-thread stream; the SDK has a stream of its own.
    Returns (wrong frames, races)."""
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_hdr(sim), s, strategy=strategy, allow_none=strategy == "none")
    rng = np.random.default_rng(7)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(frames)]
    copies: list[Any] = [None] * frames

    def step(i: int) -> None:
        pt = sim.per_thread_stream()
        with sim.use_stream(pt):
            x = sim.empty((3, 16, 16), np.float32, name=f"frame{i}")
            write(sim, x, datas[i], pt)
            out = c.run(x)
            copies[i] = sim.copy(sim.from_dlpack(out.image, stream=pt), pt, name=f"consumer.copy {i}")

    take_turns(frames, step)
    return wrong_and_races(sim, zip(copies, datas))


@pytest.mark.parametrize("strategy", FENCED)
def test_a_reader_on_one_threads_per_thread_stream_is_waited_for_by_the_next_run_in_another(sim: ss.sim.SimBackend, strategy: str) -> None:
    assert readers_on_per_thread_streams(sim, strategy) == (0, 0)


def test_control_readers_on_per_thread_streams_race_without_fences(sim: ss.sim.SimBackend) -> None:
    wrong, races = readers_on_per_thread_streams(sim, "none")
    assert races > 0


def test_control_fencing_handle_2_from_the_wrong_thread_misses_the_reader(sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix is what orders it: recording the fence's event on "2" in the next run's thread (the old
    behaviour) leaves the other thread's copy unordered with the SDK's next writes."""
    for module in (program_module, ledger_module):
        monkeypatch.setattr(module, "issuable", lambda s: s)
    wrong, races = readers_on_per_thread_streams(sim, "event")
    assert races > 0


def sdk_on_per_thread_streams(sim: ss.sim.SimBackend, strategy: str, how: str, frames: int = 12) -> tuple[int, int]:
    """The SDK runs on the calling thread's per-thread stream (declared as 2 in the main thread, or passed as
    ``stream_ptr=2`` each call); only every third frame is consumed, so nothing but the contract orders a
    run after the previous one in the other thread (the strategies that let the SDK make the host wait
    order it that way). Returns (wrong frames, races)."""
    declared = sim.per_thread_stream() if how == "declared" else None  # (stream_ptr: the call names its stream)
    c = ss.StreamContract(make_hdr(sim), declared, strategy=strategy, allow_none=strategy == "none")
    rng = np.random.default_rng(11)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(frames)]
    copies: dict[int, Any] = {}
    consumers = [sim.create_stream(non_blocking=True) for _ in range(frames)]

    def step(i: int) -> None:
        pt = sim.per_thread_stream()
        with sim.use_stream(pt):
            x = sim.empty((3, 16, 16), np.float32, name=f"frame{i}")
            write(sim, x, datas[i], pt)
            out = c.run(x, stream_ptr=2) if how == "stream_ptr" else c.run(x)
            if how == "declared":  # the declared 2 is, in this thread, this thread's stream
                assert c.plan.sdk == pt and c.plan.sdk != declared
            if i % 3 == 2:
                copies[i] = sim.copy(sim.from_dlpack(out.image, stream=consumers[i]), consumers[i], name=f"consumer.copy {i}")

    take_turns(frames, step)
    return wrong_and_races(sim, ((cp, datas[i]) for i, cp in copies.items()))


@pytest.mark.parametrize("how", ["declared", "stream_ptr"])
@pytest.mark.parametrize("strategy", FENCED)
def test_the_sdk_on_each_threads_per_thread_stream(sim: ss.sim.SimBackend, strategy: str, how: str) -> None:
    try:
        assert sdk_on_per_thread_streams(sim, strategy, how) == (0, 0)
    except ss.errors.StrategyError:
        pytest.skip(f"{strategy} is refused for these streams")


@pytest.mark.parametrize("strategy", FENCED)
def test_each_frame_in_a_thread_of_its_own(sim: ss.sim.SimBackend, strategy: str) -> None:
    """Each frame run, read and copied on the per-thread stream of a new thread (which may get the ended
    thread's ``get_ident()``): the next frame's run still waits for the last one's copy."""
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_hdr(sim), s, strategy=strategy)
    rng = np.random.default_rng(2)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(6)]
    copies = []

    def frame(i: int) -> None:
        pt = sim.per_thread_stream()
        with sim.use_stream(pt):
            x = sim.empty((3, 16, 16), np.float32, name=f"frame{i}")
            write(sim, x, datas[i], pt)
            copies.append(sim.copy(sim.from_dlpack(c.run(x).image, stream=pt), pt, name=f"consumer.copy {i}"))

    for i in range(6):
        in_thread(lambda i=i: frame(i))
    sim.synchronize_device()
    assert [np.array_equal(sim.download(cp, sim.legacy_stream()), expected(d)) for cp, d in zip(copies, datas)] == [True] * 6
    assert sim.races == []


def producer_thread_declared_input(sim: ss.sim.SimBackend, strategy: str, frames: int = 8) -> tuple[int, int]:
    """Thread P rewrites one input surface each frame on its per-thread stream; thread R runs the effect with
    ``input_stream=`` P's per-thread stream (named in P). Returns (wrong frames, races)."""
    fx = make_hdr(sim)
    sdk = sim.create_stream(non_blocking=True)
    rng = np.random.default_rng(3)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(frames)]
    surface = sim.empty((3, 16, 16), np.float32, name="surface")
    ready, consumed = [threading.Event() for _ in range(frames)], [threading.Event() for _ in range(frames)]
    named, copies = threading.Event(), []
    box: dict[str, Any] = {}

    def producer() -> None:
        box["pt"] = sim.per_thread_stream()
        named.set()
        for i in range(frames):
            if i:
                consumed[i - 1].wait()
            write(sim, surface, datas[i], box["pt"], f"P.write {i}")
            ready[i].set()

    def runner() -> None:
        named.wait()
        c = ss.StreamContract(fx, sdk, strategy=strategy, allow_none=strategy == "none", input_stream=box["pt"])
        consumer = sim.create_stream(non_blocking=True)
        for i in range(frames):
            ready[i].wait()
            out = c.run(surface)
            copies.append(sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer, name=f"copy {i}"))
            consumed[i].set()

    run_threads(P=producer, R=runner)
    return wrong_and_races(sim, zip(copies, datas))


@pytest.mark.parametrize("strategy", [*FENCED, "none"])
def test_a_declared_input_stream_is_the_producer_threads(sim: ss.sim.SimBackend, strategy: str) -> None:
    wrong, races = producer_thread_declared_input(sim, strategy)
    if strategy == "none":
        assert races > 0
    else:
        assert (wrong, races) == (0, 0)


def consumer_thread_declared_consumer(sim: ss.sim.SimBackend, strategy: str, frames: int = 6) -> tuple[int, int]:
    """Thread C imports each output as a bare capsule (no stream: ``consumer_stream=`` says where it is read)
    and copies it on its per-thread stream, declared as ``consumer_stream=`` in C; thread R runs the effect
    after C has issued its copy of the previous frame. Returns (wrong frames, races)."""
    fx = make_hdr(sim)
    sdk = sim.create_stream(non_blocking=True)
    rng = np.random.default_rng(5)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(frames)]
    outs: list[Any] = [None] * frames
    produced, consumed = [threading.Event() for _ in range(frames)], [threading.Event() for _ in range(frames)]
    made, copies = threading.Event(), []
    box: dict[str, Any] = {}

    def consumer() -> None:
        pt = sim.per_thread_stream()
        box["c"] = ss.StreamContract(fx, sdk, strategy=strategy, allow_none=strategy == "none", consumer_stream=pt)
        made.set()
        for i in range(frames):
            produced[i].wait()
            view = sim.from_dlpack(outs[i].image.__dlpack__())  # a bare capsule
            copies.append(sim.copy(view, pt, name=f"C.copy {i}"))
            outs[i] = None
            consumed[i].set()

    def runner() -> None:
        made.wait()
        src = sim.create_stream(non_blocking=True)
        for i in range(frames):
            if i:
                consumed[i - 1].wait()
            with sim.use_stream(src):
                x = sim.empty((3, 16, 16), np.float32, name=f"in{i}")
                write(sim, x, datas[i], src)
                outs[i] = box["c"].run(x)
            produced[i].set()

    run_threads(C=consumer, R=runner)
    return wrong_and_races(sim, zip(copies, datas))


@pytest.mark.parametrize("strategy", [*FENCED, "none"])
def test_a_declared_consumer_stream_is_the_consumer_threads(sim: ss.sim.SimBackend, strategy: str) -> None:
    wrong, races = consumer_thread_declared_consumer(sim, strategy)
    if strategy == "none":
        assert races > 0
    else:
        assert (wrong, races) == (0, 0)


@pytest.mark.parametrize("how", ["current", "stream_ptr"])
@pytest.mark.parametrize("strategy", FENCED)
def test_one_per_thread_stream_object_used_by_every_thread(sim: ss.sim.SimBackend, strategy: str, how: str) -> None:
    """One per-thread stream object for the program (CuPy's global ``cupy.cuda.Stream.ptds``), named in the main
    thread, made current (or passed as ``stream_ptr=``) in each worker: in each, it is the worker's own
    stream, so the second worker's run waits for the first's (only the last frame is copied)."""
    fx = make_hdr(sim)
    shared = sim.per_thread_stream()
    c = ss.StreamContract(fx, strategy=strategy)
    rng = np.random.default_rng(0)
    datas = [rng.random((3, 16, 16), dtype=np.float32) for _ in range(3)]
    copies: dict[int, Any] = {}

    def frame(i: int) -> None:
        with sim.use_stream(shared):
            assert sim.current_stream() == sim.per_thread_stream() != shared
            x = sim.empty((3, 16, 16), np.float32, name=f"in{i}")
            write(sim, x, datas[i], shared, f"write {i}")
            out = c.run(x, stream_ptr=shared) if how == "stream_ptr" else c.run(x)
            if i == 2:
                copies[i] = sim.copy(sim.from_dlpack(out.image, stream=shared), shared, name=f"copy {i}")

    for i in range(3):
        in_thread(lambda i=i: frame(i))
    sim.synchronize_device()
    assert np.array_equal(sim.download(copies[2], sim.legacy_stream()), expected(datas[2]))
    assert sim.races == []


def test_sanitize_mode_replays_another_threads_per_thread_stream_as_that_threads() -> None:
    """On a GPU, sanitize mode replays what it hears on a model: a producer thread's write on its stream 2
    (a declared ``input_stream=``), reported from the thread that runs the effect, is that producer's
    stream there, so the SDK's unfenced read on the runner's own stream 2 is a race."""
    from streamsafe.sim.mirror import Mirror

    mirror = Mirror(devices=1)
    producer = in_thread(lambda: ss.Stream(0, 2, StreamKind.PER_THREAD))  # named in the producer thread
    runner = ss.Stream(0, 2, StreamKind.PER_THREAD)
    mirror.on_input_write(0x1000, producer, 0)
    with pytest.raises(ss.errors.RaceError, match="per-thread stream of thread"):
        mirror.on_launch(runner, "SDK.transfer", [0x1000], [], 0)
