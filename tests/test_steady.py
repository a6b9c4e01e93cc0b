"""The steady-state replay (streamsafe.steady): a repeated call issues exactly what planning it issues.

Each program runs twice on a fresh adversarial model: once with replays, once with every call
planned. The two must issue the same operations on the same streams in the same order, count
the same fences, give the same frames, and race nowhere. Controls show that a recipe that
skips a fence is caught, by the model and by STREAMSAFE_CHECK_REPLAY. The bound programs of the
CUDA backend are checked against a recording driver.
"""

from __future__ import annotations

import dataclasses

import threading
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import hooks, ledger, steady
from streamsafe.contract import StreamContract
from streamsafe.program import FenceProgram
from streamsafe.testing import ImageEncoding, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _kernels as K

FENCED = ["auto", "event", "async", "stream", "device"]
PROGRAMS = [
    "plain", "other-consumer", "two-consumers", "declared-input", "stream-ptr", "escaped-view",
    "resize-midway", "frame-generation", "configure-midway", "current-stream-changes",
]


class OpLog(ss.sim.SimBackend):
    """The model, logging every stream operation: (name, stream handle, waited event's stream)."""

    def __init__(self) -> None:
        super().__init__(scheduler="adversarial")
        self.ops: list[tuple[str, int, Any]] = []

    def _issue(self, stream: ss.Stream, name: str, fn: Any, reads: Any = (), writes: Any = (), *, after: Any = None) -> Any:
        self.ops.append((name, stream.handle, None if after is None else getattr(after, "device", None)))
        return super()._issue(stream, name, fn, reads, writes, after=after)


def _frame(seed: int, h: int = 16, w: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).random((3, h, w), dtype=np.float32)


def _sr_ref(x: np.ndarray, size: int) -> np.ndarray:
    return K.to_rgb8(np, K.resize_bilinear(np, x, size, size)).astype(np.float32) / np.float32(255)


def _fresh(sim: ss.sim.SimBackend, x: np.ndarray, stream: ss.Stream) -> Any:
    arr = sim.empty(x.shape, np.float32, name="frame")
    sim.launch(stream, "producer.write", lambda: np.copyto(arr.buffer.data, x), writes=[arr])
    return arr


def _sr_contract(sim: ss.sim.SimBackend, strategy: str) -> tuple[ss.sim.SimBackend, ss.Stream, StreamContract]:
    """A loaded VideoSuperRes (to 32x32) and its contract on a new non-blocking SDK stream."""
    s = sim.create_stream(non_blocking=True)
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sim, s, StreamContract(sr, s, strategy=strategy)


def run_program(program: str, strategy: str, *, replay: bool, frames: int = 8) -> dict[str, Any]:
    """One user program on a fresh model; what it issued, counted and got."""
    sim = OpLog()
    s, other = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    size = 32
    if program == "frame-generation":
        fx: Any = VideoFrameGeneration(backend=sim)
        fx.input_width = fx.input_height = 16
        fx.load()
    else:
        fx = VideoSuperRes(backend=sim, image_encoding=ImageEncoding.RGB8)
        fx.output_width = fx.output_height = size
        fx.load()
    kw: dict[str, Any] = {"input_stream": s} if program == "declared-input" else {}
    c = StreamContract(fx, None if program == "stream-ptr" else s, strategy=strategy, **kw)
    saved = steady.enabled
    steady.enabled = replay  # (planned: every call planned, none reused)
    try:
        return _run_program(sim, s, other, fx, c, program, size, frames)
    finally:
        steady.enabled = saved


def _run_program(sim: Any, s: Any, other: Any, fx: Any, c: StreamContract, program: str, size: int, frames: int) -> dict[str, Any]:
    before = steady.replays
    got, want = [], []
    with sim.use_stream(s):
        prev = _fresh(sim, _frame(100), s)
        for i in range(frames):
            h = 24 if program == "resize-midway" and i >= frames // 2 else 16
            x = _frame(i, h, h)
            arr = _fresh(sim, x, s)
            if program == "configure-midway" and i == frames // 2:
                c.configure(output_width=40, output_height=40)
                size = 40
            if program == "current-stream-changes" and i % 3 == 2:
                with sim.use_stream(other):
                    sim.launch(other, "producer.wait", lambda: None)
                    other_arr = _fresh(sim, x, other)
                    out = c.run(other_arr)
                    copy = sim.copy(sim.from_dlpack(out.image, stream=other), other, name="consumer.copy")
                got.append(copy)
                want.append(_sr_ref(x, size))
                continue
            if program == "frame-generation":
                out = c.run(prev, arr, frame_index=1)
                want.append(K.to_rgb8(np, K.blend(np, _frame(100) if i == 0 else _frame(i - 1), x, 0.5, True))
                            .astype(np.float32) / np.float32(255))
                prev = arr
            elif program == "stream-ptr":
                out = c.run(arr, stream_ptr=s.ptr)
                want.append(_sr_ref(x, size))
            else:
                out = c.run(arr)
                want.append(_sr_ref(x, h * 2 if program == "resize-midway" and size == 32 else size)
                            if program != "resize-midway" else None)
            consumer = other if program in ("other-consumer", "two-consumers") and i % 2 else s
            copy = sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer, name="consumer.copy")
            if program == "two-consumers":
                out.record_stream(s)
            if program == "escaped-view":
                view = sim.from_dlpack(c.run(_fresh(sim, x, s)).image, stream=s)  # a zero-copy view leaves
                copy = sim.copy(view, s, name="consumer.copy")
                del view
            got.append(copy)
            del arr
        c.close()
    sim.synchronize_device(0)
    frames_ok = [w is None or np.allclose(g.buffer.data, w, atol=1.5 / 255)
                 for g, w in zip(got, want)]
    return {
        "ops": sim.ops,
        "stats": dict(c.stats),
        "replays": steady.replays - before,
        "races": list(sim.races),
        "frames_ok": frames_ok,
    }


@pytest.mark.parametrize("strategy", FENCED)
@pytest.mark.parametrize("program", PROGRAMS)
def test_replay_issues_exactly_what_planning_issues(program: str, strategy: str) -> None:
    replayed = run_program(program, strategy, replay=True)
    planned = run_program(program, strategy, replay=False)
    assert planned["replays"] == 0
    assert replayed["ops"] == planned["ops"]
    assert replayed["stats"] == planned["stats"]
    assert replayed["races"] == planned["races"] == []
    assert all(replayed["frames_ok"]) and all(planned["frames_ok"])
    if program not in ("current-stream-changes",):
        assert replayed["replays"] > 0, "a repeated call should replay"


def test_an_input_size_change_is_never_replayed() -> None:
    """A run whose input size changed first waits for every outstanding reader (TrueHDR reallocates
    its output); the outstanding readers are not part of a recipe, so such a run is always planned.
    Here a reader of an older output (o2) is outstanding when the sizes alternate again."""
    from streamsafe.testing import TrueHDR

    sim = ss.sim.SimBackend(scheduler="adversarial")
    s, o1, o2 = (sim.create_stream(non_blocking=True) for _ in range(3))
    fx = TrueHDR(backend=sim)
    fx.load()
    c = StreamContract(fx, s, strategy="event")
    waits_on_o2 = []
    with sim.use_stream(s):
        for i in range(13):
            size = 16 if i % 2 else 24
            out = c.run(_fresh(sim, _frame(i, size, size), s))
            consumer = o2 if i == 8 else o1
            sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer)
            if i > 8:
                waits_on_o2.append(any(f.signaller == o2 and f.action == "host-wait"
                                       for f in c.ledger.release_fences(c.last_plan)))
    sim.synchronize_device(0)
    assert sim.races == []
    assert all(waits_on_o2)  # o2 stays outstanding: every later size change waits for it


def test_a_recipe_that_skips_a_fence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Controls: a replay missing its fences races on the model; the check mode refuses it."""
    sim, s, c = _sr_contract(ss.sim.SimBackend(scheduler="adversarial"), "event")
    other = sim.create_stream(non_blocking=True)  # the consumer reads on its own stream: the next run must wait for it
    with sim.use_stream(s):
        for i in range(3):
            arr = _fresh(sim, _frame(i), s)
            sim.copy(sim.from_dlpack(c.run(arr).image, stream=other), other)
        assert c.steady.kept
        c.steady.kept = [  # the fences before the run: gone (a kept frame never changes once made: new ones)
            steady.Kept(k.facts, k.state, k.config, dataclasses.replace(k.frame, before=(), before_program=FenceProgram(sim, 0, ())), k.holds)
            for k in c.steady.kept
        ]
        arr = _fresh(sim, _frame(9), s)
        monkeypatch.setattr(steady, "check_replay", True)
        with pytest.raises(AssertionError, match="differs from the plan"):
            c.run(arr)
        monkeypatch.setattr(steady, "check_replay", False)
        assert sim.races == []
        sim.copy(sim.from_dlpack(c.run(arr).image, stream=other), other)
        sim.synchronize_device(0)
        assert sim.races, "without its fences the replayed run races"


def test_an_observer_sends_every_call_down_the_planned_path() -> None:
    sim, s, c = _sr_contract(ss.sim.SimBackend(), "auto")
    with sim.use_stream(s):
        for i in range(3):
            sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(i), s)).image, stream=s), s)
        before = steady.replays
        observer = hooks.Observer()
        hooks.register(observer)
        try:
            for i in range(3):
                sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(i), s)).image, stream=s), s)
        finally:
            hooks.unregister(observer)
        assert steady.replays == before
        sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(7), s)).image, stream=s), s)
        assert steady.replays == before + 1


def test_closed_contract_and_bad_input_still_refused_after_replays() -> None:
    sim, s, c = _sr_contract(ss.sim.SimBackend(), "auto")
    with sim.use_stream(s):
        for i in range(4):
            sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(i), s)).image, stream=s), s)
        with pytest.raises(ss.errors.InputArrayError):
            c.run(np.zeros((3, 16, 16), np.float32))
        other = ss.sim.SimBackend(devices=2)
        with pytest.raises(ss.errors.DeviceMismatchError):
            c.run(other.empty((3, 16, 16), np.float32, device=1))
        c.close()
        with pytest.raises(ss.errors.EffectStateError, match="closed"):
            c.run(_fresh(sim, _frame(5), s))


@pytest.mark.parametrize("strategy", FENCED)
def test_a_pipeline_that_switches_how_it_imports_keeps_replaying(strategy: str) -> None:
    """Frames that import a zero-copy view and frames that take a host copy leave the effect in two states, with a
    recipe each. Once both are known, every frame of either kind is replayed, whichever was remembered
    last (the replay used to try only the newest recipe of a call, and plan every frame after a switch
    back), and the frames stay right, with no race."""
    sim, s, c = _sr_contract(ss.sim.SimBackend(scheduler="adversarial"), strategy)
    replayed = []
    frame = 0
    with sim.use_stream(s):
        for phase in ("view", "copy", "view", "copy", "view"):
            before = steady.replays
            for _ in range(6):
                x = _frame(frame)
                out = c.run(_fresh(sim, x, s))
                if phase == "view":
                    got = sim.download(sim.copy(sim.from_dlpack(out.image, stream=s), s), s)  # the view escapes
                else:
                    got = out.numpy()  # a copy helper: no view leaves, the host waits for it
                np.testing.assert_allclose(got, _sr_ref(x, 32), atol=1e-6)
                frame += 1
            replayed.append(steady.replays - before)
    assert sim.races == []
    assert replayed[2:] == [6, 6, 6], replayed  # both states known: nothing is planned again
    c.close()


def test_the_thread_rule_holds_in_steady_state() -> None:
    """Another thread inside a call on the effect: a replayed run and an import raise, and leave the
    output importable; the thread's closing host wait is waited for instead."""
    sim, s, c = _sr_contract(ss.sim.SimBackend(), "auto")
    inside, release = threading.Event(), threading.Event()

    def hold(wait: bool) -> None:  # another thread in a call on the same effect (wait: its closing host wait)
        c.ledger.turns.run("run", lambda: (inside.set(), release.wait(5)), wait=wait)

    def held_by_another_thread() -> threading.Thread:
        inside.clear()
        release.clear()
        t = threading.Thread(target=hold, args=(False,), name="decoder-thread")
        t.start()
        inside.wait(5)
        return t

    with sim.use_stream(s):
        for i in range(3):
            sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(i), s)).image, stream=s), s)
        before = steady.replays
        t = held_by_another_thread()
        try:
            with pytest.raises(ss.errors.ConcurrentUseError, match="'decoder-thread' is inside a call on the same effect"):
                c.run(_fresh(sim, _frame(3), s))
        finally:
            release.set()
            t.join()
        out = c.run(_fresh(sim, _frame(4), s))
        assert steady.replays == before + 1, "the same call replays once the effect is free"
        t = held_by_another_thread()
        try:
            with pytest.raises(ss.errors.ConcurrentUseError, match="'decoder-thread' is inside a call on the same effect"):
                out.image.__dlpack__(stream=s.handle)
        finally:
            release.set()
            t.join()
        assert not out.image.consumed
        sim.copy(sim.from_dlpack(out.image, stream=s), s)  # still importable, once

        inside.clear()
        release.clear()
        out = c.run(_fresh(sim, _frame(5), s))
        t = threading.Thread(target=hold, args=(True,))
        t.start()
        inside.wait(5)
        threading.Timer(0.05, release.set).start()
        sim.copy(sim.from_dlpack(c.run(_fresh(sim, _frame(6), s)).image, stream=s), s)  # waits for the closing wait
        t.join()
    sim.synchronize_device(0)
    assert sim.races == []


# -- the CUDA backend's bound programs, against a recording driver ------------------------------------


class _Result(tuple):  # type: ignore[type-arg]
    pass


class RecordingDriver:
    """The few cuda.bindings driver calls a bound program makes, recorded."""

    CU_STREAM_LEGACY = "legacy"
    CU_STREAM_PER_THREAD = "per-thread"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def CUstream(self, handle: Any) -> Any:  # noqa: N802 (the driver's name)
        return ("stream", handle)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[int]:  # noqa: N802
        self.calls.append(("record", event, stream))
        return (0,)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[int]:  # noqa: N802
        self.calls.append(("wait", stream, event))
        return (0,)

    def cuCtxGetCurrent(self) -> tuple[int, Any]:  # noqa: N802
        self.calls.append(("ctx?",))
        return (0, 7)


def _recording_backend(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, RecordingDriver]:
    from streamsafe.backend import _held, cuda
    from streamsafe.backend._pool import EventPool

    be = cuda.CudaBackend.__new__(cuda.CudaBackend)
    d = RecordingDriver()
    handles = iter(range(100, 200))
    be._d = d
    be._pool = EventPool(lambda dev: cuda.CudaEvent(dev, next(handles)), lambda e: None)
    be._cu_streams = {}
    be._devices = {0: cuda._Device(ctx=7)}
    be._count = 1
    be._lock = __import__("threading").Lock()
    monkeypatch.setattr(cuda, "_SUCCESS", 0)
    monkeypatch.setattr(_held, "_HELD", None)  # cuda.bindings' own calls (the recording driver's)
    return be, d


def test_bound_program_records_each_signaller_once_until_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    be, d = _recording_backend(monkeypatch)
    S, A, B, X = (ss.Stream(0, h, ss.StreamKind.NON_BLOCKING, be) for h in (0x10, 0x20, 0x30, 0x40))

    class Owner:
        pass

    owner = Owner()
    run = be.bind_fences([(A, S), (B, S), (S, X), (A, S)], owner)
    run()
    assert d.calls == [
        ("record", 100, ("stream", 0x10)), ("wait", ("stream", 0x20), 100),
        ("wait", ("stream", 0x30), 100),  # S not recorded again: no work and no wait on S since
        ("record", 101, ("stream", 0x40)), ("wait", ("stream", 0x10), 101),
        ("record", 102, ("stream", 0x10)), ("wait", ("stream", 0x20), 102),  # S waited: a new record carries it
    ]
    assert be.pool_stats(0).in_use == 3
    del run, owner
    import gc

    gc.collect()
    assert be.pool_stats(0).in_use == 0  # the program's events go back with its owner


def test_bound_program_on_the_legacy_stream_checks_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    be, d = _recording_backend(monkeypatch)
    S = ss.Stream(0, 0x10, ss.StreamKind.NON_BLOCKING, be)
    L = ss.Stream(0, 1, ss.StreamKind.LEGACY, be)
    owner = type("Owner", (), {})()
    be.bind_fences([(S, L)], owner)()
    assert d.calls == [("ctx?",), ("record", 100, ("stream", "legacy")), ("wait", ("stream", 0x10), 100)]


def test_bound_program_with_the_gil_held_makes_the_same_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the driver's entry points are found, the program calls them through ctypes with the GIL
    held (no other thread cuts in between a record and its wait), with plain integer handles, in the
    same order, and checks the context the same way."""
    from streamsafe.backend import _held, cuda
    from streamsafe.backend._pool import EventPool

    be, d = _recording_backend(monkeypatch)
    d.CU_STREAM_LEGACY, d.CU_STREAM_PER_THREAD = 1, 2
    calls: list[tuple[Any, ...]] = []

    def get_current(ref: Any) -> int:
        calls.append(("ctx?",))
        ref._obj.value = 7
        return 0

    held = _held.HeldCalls(
        cuEventRecord=lambda ev, st: calls.append(("record", ev, st)) or 0,
        cuStreamWaitEvent=lambda st, ev, flags: calls.append(("wait", st, ev)) or 0,
        cuCtxGetCurrent=get_current,
    )
    monkeypatch.setattr(_held, "_HELD", held)
    handles = iter(range(500, 600))
    be._pool = EventPool(lambda dev: cuda.CudaEvent(dev, next(handles)), lambda e: None)
    S, A = (ss.Stream(0, h, ss.StreamKind.NON_BLOCKING, be) for h in (0x10, 0x20))
    L = ss.Stream(0, 1, ss.StreamKind.LEGACY, be)
    owner = type("Owner", (), {})()
    be.bind_fences([(A, S), (S, L)], owner)()
    # the legacy stream as CU_STREAM_LEGACY, a stream as its handle, an event as its integer handle
    assert calls == [("ctx?",), ("record", 500, 0x10), ("wait", 0x20, 500), ("record", 501, 1), ("wait", 0x10, 501)]
    assert d.calls == []  # nothing through cuda.bindings' own calls


def test_fence_program_counts_like_apply_fences() -> None:
    sim = ss.sim.SimBackend()
    s, t = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    plan = ss.plan.plan_fences(ss.Strategy.EVENT, sdk=s, conversion=sim.legacy_stream(0), consumer=t, producer=s)
    fences = plan.at("before run") + plan.import_fences(t)
    a: dict[str, int] = ledger.new_stats()
    b: dict[str, int] = ledger.new_stats()
    ledger.apply_fences(sim, 0, fences, a)
    FenceProgram(sim, 0, fences)(b)
    assert a == b and a["fences"] == len(fences) > 0
