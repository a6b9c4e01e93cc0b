"""Programs written the way video pipelines are written stay correct with streamsafe: the vendor's input
recipe, decorated generators and coroutines, blocks interleaved in one thread (asyncio tasks, generators),
recycled stream handles, temporary consumer streams, interrupted calls and stale views. Each test has a
control that shows the hazard is real on the model (the adversarial scheduler, vector clocks)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import signal
import sys
import weakref
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import ledger as ledger_module
from streamsafe.sim import SimBackend
from streamsafe.testing import TrueHDR, VideoSuperRes
from streamsafe.testing import _kernels as K

FENCED = ["auto", "event", "async", "stream", "device"]


@pytest.fixture
def sim() -> SimBackend:
    return SimBackend(scheduler="adversarial")


def make(sim: SimBackend, cls: type = VideoSuperRes) -> Any:
    fx = cls(backend=sim)
    if issubclass(cls, VideoSuperRes):
        fx.output_width = fx.output_height = 32
    fx.load()
    return fx


def data_of(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((3, 16, 16), dtype=np.float32)


def expected(fx: Any, data: np.ndarray) -> np.ndarray:
    if isinstance(fx, TrueHDR):
        return K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)
    return K.to_rgb8(np, K.resize_bilinear(np, data, 32, 32)).astype(np.float32) / np.float32(255)


def write(sim: SimBackend, arr: Any, data: np.ndarray, stream: ss.Stream) -> None:
    sim.launch(stream, "producer.write", lambda: np.copyto(arr.buffer.data, data), writes=[arr])


def wrong(sim: SimBackend, copies: list[tuple[Any, np.ndarray]]) -> int:
    sim.synchronize_device()
    return sum(not np.allclose(sim.download(c, sim.legacy_stream()), want, atol=1e-6) for c, want in copies)


# -- 1. the vendor's input recipe: a surface rewritten in place on an undeclared stream, synchronised before run()


def vendor_recipe(sim: SimBackend, cls: type, strategy: str | None, frames: int = 6) -> tuple[int, int]:
    """A decoder-style producer rewrites one persistent surface on its own stream P every frame; the program
    synchronises P on the host before each ``fx.run(surface)``, as the vendor's documentation says, inside
    one block on S with nothing declared, and copies on S. ``strategy=None``: no streamsafe, the run
    ``non_blocking=False`` and the output taken by the vendor's device sync."""
    fx = make(sim, cls)
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    surface = sim.empty((3, 16, 16), np.float32, stream=P, name="decoder surface")
    copies = []
    guard = ss.stream_contract(fx, S, strategy=strategy) if strategy else None
    with sim.use_stream(S):
        if guard is not None:
            guard.__enter__()
        for i in range(frames):
            data = data_of(i)
            write(sim, surface, data, P)
            sim.synchronize_stream(P)  # the vendor's recipe: the input is complete before run()
            out = fx.run(surface, stream_ptr=S.ptr)
            if guard is None:
                sim.synchronize_device()  # the vendor's documented fallback for the output
            copies.append((sim.copy(sim.from_dlpack(out.image, stream=S), S), expected(fx, data)))
        if guard is not None:
            guard.__exit__(None, None, None)
    return wrong(sim, copies), len(sim.races)


@pytest.mark.parametrize("cls", [VideoSuperRes, TrueHDR])
def test_the_vendors_input_recipe_is_correct_without_streamsafe(sim: SimBackend, cls: type) -> None:
    assert vendor_recipe(sim, cls, None) == (0, 0)


@pytest.mark.parametrize("strategy", FENCED)
@pytest.mark.parametrize("cls", [VideoSuperRes, TrueHDR])
def test_the_vendors_input_recipe_stays_correct_under_every_strategy(sim: SimBackend, cls: type, strategy: str) -> None:
    assert vendor_recipe(sim, cls, strategy) == (0, 0)


@pytest.mark.parametrize("cls", [VideoSuperRes, TrueHDR])
def test_control_the_recipe_breaks_when_the_sdks_wait_is_dropped(sim: SimBackend, cls: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program relies on run() returning after the SDK read the input: plan as if every writer were
    known (non_blocking=True) and P's next write races with the SDK's read."""
    import streamsafe.frame as contract_module

    real = contract_module.plan_fences
    monkeypatch.setattr(contract_module, "plan_fences", lambda *a, **k: real(*a, **{**k, "writers_known": True}))
    bad, races = vendor_recipe(sim, cls, "auto")
    assert races > 0 or bad > 0


@pytest.mark.parametrize("cls", [VideoSuperRes, TrueHDR])
def test_control_the_recipe_breaks_when_the_copies_are_not_waited_for(
    sim: SimBackend, cls: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto copies the undeclared input and the host waits for the copy: without that wait P's next write races
    with the copy's read."""
    import dataclasses

    import streamsafe.frame as contract_module

    real = contract_module.plan_fences

    def no_copy_wait(*a: Any, **k: Any) -> Any:
        plan = real(*a, **k)
        assert plan.copy_stream is not None  # (the recipe's inputs are copied)
        kept = tuple(f for f in plan.fences if not (f.action == "host-wait" and f.signaller == plan.copy_stream))
        return dataclasses.replace(plan, fences=kept)

    monkeypatch.setattr(contract_module, "plan_fences", no_copy_wait)
    bad, races = vendor_recipe(sim, cls, "auto")
    assert races > 0 or bad > 0


def test_declaring_the_input_stream_lets_auto_drop_the_wait(sim: SimBackend) -> None:
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    undeclared = ss.StreamContract(make(sim), S).plan
    declared = ss.StreamContract(make(sim), S, input_stream=P).plan
    # undeclared: the SDK reads copies, and the host waits for the copies only
    assert undeclared.non_blocking and undeclared.copy_stream is not None and "input_stream=" in undeclared.reason
    assert [f.signaller for f in undeclared.at("after run") if f.action == "host-wait"] == [undeclared.copy_stream]
    assert declared.non_blocking and declared.strategy is ss.Strategy.ASYNC and declared.copy_stream is None
    assert declared.host_waits == ()


# -- 2. @stream_safe on a generator function, an async def, an async generator -------------------------------


def _inputs(sim: SimBackend, S: ss.Stream, n: int) -> list[tuple[Any, np.ndarray]]:
    out = []
    for i in range(n):
        arr = sim.empty((3, 16, 16), np.float32, stream=S, name=f"frame{i}")
        write(sim, arr, data_of(i), S)
        out.append((arr, data_of(i)))
    return out


def test_a_decorated_generator_is_guarded_at_every_resumption(sim: SimBackend) -> None:
    fx, S, C = make(sim), sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    inputs = _inputs(sim, S, 5)

    @ss.stream_safe(fx, S, input_stream=S)
    def frames() -> Any:
        for x, _ in inputs:
            yield fx.run(x)

    copies = []
    for (_, data), out in zip(inputs, frames()):
        assert isinstance(out, ss.SafeOutput)  # (the plain call of the SDK would give its raw output)
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), expected(fx, data)))
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_control_an_unguarded_generator_races(sim: SimBackend) -> None:
    fx, S, C = make(sim), sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    inputs = _inputs(sim, S, 3)
    copies = [(sim.copy(sim.from_dlpack(fx.run(x, stream_ptr=S.ptr).image, stream=C), C), expected(fx, d)) for x, d in inputs]
    assert wrong(sim, copies) > 0 or sim.races


def test_a_decorated_coroutine_and_async_generator_are_guarded(sim: SimBackend) -> None:
    fx, S, C = make(sim), sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    inputs = _inputs(sim, S, 4)

    @ss.stream_safe(fx, S, input_stream=S)
    async def one(x: Any) -> Any:
        await asyncio.sleep(0)
        return fx.run(x)

    @ss.stream_safe(fx, S, input_stream=S)
    async def many() -> Any:
        for x, _ in inputs[2:]:
            await asyncio.sleep(0)
            yield fx.run(x)

    async def main() -> list[Any]:
        outs = []
        for x, _ in inputs[:2]:
            out = await one(x)
            outs.append(sim.copy(sim.from_dlpack(out.image, stream=C), C))
        async for out in many():
            outs.append(sim.copy(sim.from_dlpack(out.image, stream=C), C))
        return outs

    copies = list(zip(asyncio.run(main()), (expected(fx, d) for _, d in inputs)))
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_a_function_returning_a_generator_it_did_not_make_is_refused(sim: SimBackend) -> None:
    fx, S = make(sim), sim.create_stream(non_blocking=True)

    @ss.stream_safe(fx, S)
    def lazy() -> Any:
        return (fx.run(x) for x, _ in _inputs(sim, S, 2))

    with pytest.raises(ss.errors.UnguardedResultError, match=r"lazy\(\) returned a generator .* unguarded.*Decorate the function that holds the loop"):
        lazy()
    assert fx.__class__.run is not None and sim.races == []


# -- 3. blocks interleaved in one thread: asyncio tasks, generators ------------------------------------------


def _task_program(sim: SimBackend, fx: Any, streams: list[ss.Stream], k: int, copies: list[Any]) -> Any:
    S, P = streams[2 * k], streams[2 * k + 1]

    async def task() -> int:
        with ss.stream_contract(fx, S, input_stream=P) as c:
            for i in range(4):
                data = data_of(10 * k + i)
                x = sim.empty((3, 16, 16), np.float32, stream=P, name=f"task{k} frame{i}")
                write(sim, x, data, P)
                out = fx.run(x)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=S), S), expected(fx, data)))
                await asyncio.sleep(0)  # the other task runs its frame meanwhile, in its own block
            return int(c.stats["runs"])

    return task()


def test_interleaved_asyncio_tasks_each_go_through_their_own_block(sim: SimBackend) -> None:
    fx = make(sim)
    streams = [sim.create_stream(non_blocking=True) for _ in range(4)]
    copies: list[Any] = []

    async def main() -> list[int]:
        return list(await asyncio.gather(_task_program(sim, fx, streams, 0, copies), _task_program(sim, fx, streams, 1, copies)))

    assert asyncio.run(main()) == [4, 4]
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_interleaved_generators_each_go_through_their_own_block(sim: SimBackend) -> None:
    fx = make(sim)
    streams = [sim.create_stream(non_blocking=True) for _ in range(4)]
    copies: list[Any] = []

    def frames(k: int) -> Any:
        S, P = streams[2 * k], streams[2 * k + 1]
        with ss.stream_contract(fx, S, input_stream=P) as c:
            for i in range(3):
                data = data_of(20 * k + i)
                x = sim.empty((3, 16, 16), np.float32, stream=P)
                write(sim, x, data, P)
                out = fx.run(x)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=S), S), expected(fx, data)))
                yield c

    a, b = frames(0), frames(1)
    seen = [next(a), next(b), next(a), next(b), next(a), next(b)]
    assert seen[0] is seen[2] is seen[4] and seen[1] is seen[3] is seen[5] and seen[0] is not seen[1]
    assert [c.stats["runs"] for c in (seen[0], seen[1])] == [3, 3]
    assert fx.run.__name__ == "run"  # (between resumptions, the caller's own calls are plain again)
    assert (wrong(sim, copies), sim.races) == (0, [])


# -- 4. a destroyed stream's handle comes back as a stream of the other kind --------------------------------


def test_the_model_hands_a_destroyed_streams_handle_to_the_next_stream_of_either_kind(sim: SimBackend) -> None:
    blocking = sim.create_stream(non_blocking=False)
    sim.destroy_stream(blocking)
    reused = sim.create_stream(non_blocking=True)
    assert reused.handle == blocking.handle and reused.kind is not blocking.kind and reused != blocking
    with pytest.raises(ss.errors.StreamValueError, match="it was destroyed.*now names a non-blocking stream"):
        sim.launch(blocking, "late work")


@pytest.mark.parametrize("strategy", FENCED)
def test_a_recycled_handle_of_another_kind_gets_its_own_fences(sim: SimBackend, strategy: str) -> None:
    """A blocking consumer stream (ordered with stream 0's conversion: no import fence) is destroyed, and its
    handle comes back as a non-blocking one (which needs the fence): the cached plans must not be reused."""
    fx, S = make(sim), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, strategy=strategy, input_stream=S)
    copies = []
    handles = []
    for i in range(6):
        consumer = sim.create_stream(non_blocking=i % 2 == 1)
        handles.append(consumer.handle)
        x = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, x, data_of(i), S)
        with sim.use_stream(S):
            out = c.run(x)
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer), expected(fx, data_of(i))))
        sim.destroy_stream(consumer)  # (held while the ledger still orders it; then its handle goes back)
        if i % 2 == 1:
            c.synchronize()  # (the host waits for the copies: the ledger lets the destroyed streams go)
    assert len(set(handles)) < len(handles), "the model must hand handles out again for this to test anything"
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_control_a_plan_for_a_blocking_consumer_has_no_import_fence_a_non_blocking_one_needs(sim: SimBackend) -> None:
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make(sim), S, strategy="event", input_stream=S)
    blocking = sim.create_stream(non_blocking=False)
    as_non_blocking = ss.Stream(blocking.device, blocking.handle, ss.StreamKind.NON_BLOCKING, sim)
    assert c.plan.import_fences(blocking) == () and c.plan.import_fences(as_non_blocking) != ()
    assert blocking != as_non_blocking and hash(blocking) != hash(as_non_blocking)


# -- 5. a new temporary consumer stream every frame is not held without bound --------------------------------


def temporary_consumers(sim: SimBackend, frames: int) -> tuple[int, Any]:
    fx, S = make(sim), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, strategy="event", input_stream=S)
    copies = []
    most = 0
    for i in range(frames):
        x = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, x, data_of(i % 7), S)
        with sim.use_stream(S):
            out = c.run(x)
        consumer = sim.create_stream(non_blocking=True)  # `with cupy.cuda.Stream(): ...` a frame
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer), expected(fx, data_of(i % 7))))
        sim.destroy_stream(consumer)
        if i % 10 == 9:
            sim.progress(10_000)  # the GPU catches up now and then (no host wait)
        most = max(most, len(c.ledger.outstanding), len(c.ledger.holds.held))
    assert (wrong(sim, copies), sim.races) == (0, [])
    return most, c


def test_temporary_consumer_streams_are_let_go_once_their_reads_are_done(sim: SimBackend) -> None:
    most, c = temporary_consumers(sim, 300)
    assert most <= 32, most


def test_control_without_retiring_every_temporary_stream_stays_held(sim: SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "OUTSTANDING_BOUND", 10**9)
    most, _ = temporary_consumers(sim, 60)
    assert most >= 60


# -- 6. an interrupted run ------------------------------------------------------------------------------------


class _Interrupted(VideoSuperRes):
    """The SDK's work is issued, then the call is interrupted as it returns (a KeyboardInterrupt)."""

    interrupt: type[BaseException] | None = None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        out = super().run(*args, **kwargs)
        if self.interrupt is not None:
            raise self.interrupt("interrupted")
        return out


@pytest.mark.parametrize("strategy", FENCED)
def test_an_interrupted_run_counts_as_a_run(sim: SimBackend, strategy: str) -> None:
    fx, S = make(sim, _Interrupted), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, strategy=strategy, input_stream=S)
    with sim.use_stream(S):
        x = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, x, data_of(0), S)
        first = c.run(x)
        fx.interrupt = KeyboardInterrupt
        y = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, y, data_of(1), S)
        with pytest.raises(KeyboardInterrupt):
            c.run(y)
        fx.interrupt = None
        with pytest.raises(ss.errors.StaleOutputError):  # its buffer holds the interrupted frame's data now
            first.image.__dlpack__()
        z = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, z, data_of(2), S)
        copy = sim.copy(sim.from_dlpack(c.run(z).image, stream=S), S)
    assert c.stats["runs"] == 3
    assert (wrong(sim, [(copy, expected(fx, data_of(2)))]), sim.races) == (0, [])


def test_control_a_refusal_before_any_work_leaves_the_previous_output_valid(sim: SimBackend) -> None:
    fx, S = make(sim, _Interrupted), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, strategy="event", input_stream=S)
    with sim.use_stream(S):
        first = c.run(sim.array(data_of(0)))
        with pytest.raises(ss.errors.EffectConfigError):
            c.run(sim.array(np.zeros((3, 16, 16), np.int32)))  # refused by the SDK's checks, nothing issued
        copy = sim.copy(sim.from_dlpack(first.image, stream=S), S)
    assert c.stats["runs"] == 1 and wrong(sim, [(copy, expected(fx, data_of(0)))]) == 0


def _first_then_dropped(sim: SimBackend, fx: Any, c: Any, S: ss.Stream, drop: Any, *, replayed: bool = False) -> Any:
    """Run frame 0, then frame 1 under ``drop`` (a context that makes that call raise), as a pipeline that keeps
    its last good frame to show again when a frame is dropped; returns frame 0's output."""
    with sim.use_stream(S):
        first = c.run(sim.array(data_of(0)))
        if replayed:  # (the same call again: the next one replays its recipe)
            first = c.run(sim.array(data_of(0)))
        with drop:
            c.run(sim.array(data_of(1)))
    return first


def _later_frames_are_right(sim: SimBackend, fx: Any, c: Any, S: ss.Stream) -> None:
    with sim.use_stream(S):
        copies = [(sim.copy(sim.from_dlpack(c.run(sim.array(data_of(i))).image, stream=S), S), expected(fx, data_of(i)))
                  for i in (2, 3)]
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_a_subclass_that_runs_super_run_in_a_worker_thread_stays_guarded(sim: SimBackend) -> None:
    """A frame deadline where ``signal.alarm`` cannot be used: ``run()`` hands ``super().run()`` to a worker
    thread and waits for it with a timeout (the calling thread holds the effect meanwhile)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        class Deadline(VideoSuperRes):
            def run(self, *args: Any, **kwargs: Any) -> Any:
                return pool.submit(super().run, *args, **kwargs).result(timeout=30)

        fx, S = make(sim, Deadline), sim.create_stream(non_blocking=True)
        c = ss.StreamContract(fx, S, input_stream=S)
        _later_frames_are_right(sim, fx, c, S)
        assert c.stats["runs"] == 2


class _Deadline:
    """A callable-object signal handler (one of the shapes a handler takes)."""

    def __call__(self, signum: int, frame: Any) -> None:
        raise TimeoutError("frame deadline")


def _deadline(signum: int, frame: Any) -> None:
    raise TimeoutError("frame deadline")


def _one_shot(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # (gone by the time the guard looks at the exception)
    raise TimeoutError("frame deadline")


_HANDLERS = {"function": _deadline, "partial": functools.partial(lambda tag, signum, frame: _deadline(signum, frame), 1),
             "callable object": _Deadline(), "one-shot": _one_shot}


class _SignalAfterConversion:
    """Inside the SDK's own ``run()``, right after it queued its conversion (its output written), a SIGALRM whose
    Python handler raises ``TimeoutError`` (a per-frame deadline with ``signal.alarm``); ``by_signal=False``: the
    same exception raised there directly, no signal (the control: then it reads as the SDK's refusal)."""

    def __init__(self, sim: SimBackend, by_signal: bool = True, handler: Any = _deadline) -> None:
        self.sim, self.by_signal, self.handler, self.launch = sim, by_signal, handler, sim.launch

    def _launch(self, stream: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        result = self.launch(stream, name, *args, **kwargs)
        if name.endswith("conversion"):
            if self.by_signal:
                signal.raise_signal(signal.SIGALRM)
            else:
                raise TimeoutError("frame deadline")
        return result

    def __enter__(self) -> None:
        self.previous = signal.signal(signal.SIGALRM, self.handler)
        self.sim.launch = self._launch  # type: ignore[method-assign]

    def __exit__(self, kind: Any, *rest: Any) -> bool:
        del self.sim.launch
        signal.signal(signal.SIGALRM, self.previous)
        return kind is TimeoutError


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")
@pytest.mark.parametrize("handler", list(_HANDLERS))
@pytest.mark.parametrize("replayed", [False, True], ids=["planned", "replayed"])
def test_an_exception_a_signal_handler_raises_inside_run_counts_as_a_run(sim: SimBackend, replayed: bool,
                                                                        handler: str) -> None:
    fx, S = make(sim), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, input_stream=S)
    first = _first_then_dropped(sim, fx, c, S, _SignalAfterConversion(sim, handler=_HANDLERS[handler]), replayed=replayed)
    with pytest.raises(ss.errors.StaleOutputError):
        first.image.__dlpack__()
    _later_frames_are_right(sim, fx, c, S)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")
def test_control_the_same_exception_raised_without_a_signal_reads_as_a_refusal_and_the_kept_frame_is_wrong(
        sim: SimBackend) -> None:
    fx, S = make(sim), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, input_stream=S)
    first = _first_then_dropped(sim, fx, c, S, _SignalAfterConversion(sim, by_signal=False))
    with sim.use_stream(S):
        kept = sim.copy(sim.from_dlpack(first.image, stream=S), S)  # taken for the SDK's refusal: still "valid"
    assert wrong(sim, [(kept, expected(fx, data_of(0)))]) == 1  # but the buffer holds frame 1: the hazard is real


def test_a_signal_handler_called_as_a_plain_function_is_no_signal(sim: SimBackend) -> None:
    class Checked(VideoSuperRes):
        late = False

        def check(self, signum: int = 0, frame: Any = None) -> None:  # (also the SIGALRM handler, elsewhere)
            if self.late:
                raise TimeoutError("late")

        def run(self, *args: Any, **kwargs: Any) -> Any:
            self.check()  # before the SDK's run: nothing written
            return super().run(*args, **kwargs)

    fx, S = make(sim, Checked), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, input_stream=S)
    with sim.use_stream(S):
        first = c.run(sim.array(data_of(0)))
        fx.late = True
        with pytest.raises(TimeoutError):
            c.run(sim.array(data_of(1)))
        kept = sim.copy(sim.from_dlpack(first.image, stream=S), S)  # a refusal: frame 0 is still there
    assert (wrong(sim, [(kept, expected(fx, data_of(0)))]), c.stats["runs"], sim.races) == (0, 1, [])


class _InterruptAtEntry:
    """A Ctrl-C that lands as ``code`` is entered (CPython runs a pending signal's handler there), once."""

    def __init__(self, code: Any) -> None:
        self.code = code

    def __enter__(self) -> None:
        self.previous = sys.gettrace()

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            if event == "call" and frame.f_code is self.code:
                sys.settrace(self.previous)
                raise KeyboardInterrupt
            return None

        sys.settrace(tracer)

    def __exit__(self, kind: Any, *rest: Any) -> bool:
        sys.settrace(self.previous)
        return kind is KeyboardInterrupt


@pytest.mark.parametrize("replayed", [False, True], ids=["planned", "replayed"])
def test_a_ctrl_c_between_the_sdks_return_and_the_ledgers_update_counts_as_a_run(sim: SimBackend, replayed: bool) -> None:
    fx, S = make(sim), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, input_stream=S)
    first = _first_then_dropped(sim, fx, c, S, _InterruptAtEntry(ledger_module.EffectLedger.record_write.__code__), replayed=replayed)
    with pytest.raises(ss.errors.StaleOutputError):
        first.image.__dlpack__()
    _later_frames_are_right(sim, fx, c, S)


def _in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` runs inside a weakref finalizer or callback (garbage collection runs those at any point, and
    Python ignores what they raise: no Ctrl-C reaches the program from there)."""
    while frame is not None:
        if frame.f_code.co_filename == weakref.__file__:
            return True
        frame = frame.f_back
    return False


class _InterruptAtNthEntry:
    """A Ctrl-C at the ``n``-th entry of a function of streamsafe's own guard code (its model and emulations
    aside), once; ``n=None`` counts the entries. A function's entry is where CPython runs a pending signal's
    handler (and after a C call, and on a loop's jump back)."""

    def __init__(self, n: int | None) -> None:
        self.n, self.count, self.where = n, 0, ""

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        root = ss.__file__.rpartition("/")[0] + "/"
        generator = frame.f_code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE)  # (a tracer cannot raise there)
        if event == "call" and not generator and name.startswith(root) and not name.startswith((root + "sim/", root + "testing/")) \
                and not _in_finalizer(frame):
            self.count += 1
            if self.count == self.n:
                self.where = f"{name.rpartition('/')[2]}:{frame.f_code.co_name}"
                sys.settrace(None)
                raise KeyboardInterrupt
        return None

    def __enter__(self) -> None:
        self.previous = sys.gettrace()
        sys.settrace(self._global)

    def __exit__(self, kind: Any, *rest: Any) -> bool:
        sys.settrace(self.previous)
        return kind is KeyboardInterrupt


def _interrupted_pipeline(way: str, n: int | None) -> tuple[SimBackend, _InterruptAtNthEntry, int]:
    sim = SimBackend(scheduler="adversarial")
    fx = make(sim)
    S, P, C = (sim.create_stream(non_blocking=True) for _ in range(3))
    c = ss.StreamContract(fx, S, input_stream=P)
    boom, copies, kept = _InterruptAtNthEntry(n), [], None
    for i in range(4):  # frame 2 interrupted; frame 1 made the recipe frame 2 replays, and is read after it
        x = sim.empty((3, 16, 16), np.float32, stream=P)
        write(sim, x, data_of(i), P)
        with sim.use_stream(S), (boom if i == 2 else contextlib.nullcontext()):
            if way == "contract":
                out = c.run(x)
            else:
                with ss.stream_contract(fx, S, input_stream=P):
                    out = fx.run(x)
            if i == 1:
                kept = out
            else:
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), expected(fx, data_of(i))))
        if i == 2:
            with contextlib.suppress(ss.errors.StaleOutputError):  # stale, or still frame 1: never other data
                copies.append((sim.copy(sim.from_dlpack(kept.image, stream=C), C), expected(fx, data_of(1))))
    return sim, boom, wrong(sim, copies)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # (one landing in a finalizer: ignored)
@pytest.mark.parametrize("way", ["contract", "block"])
def test_a_ctrl_c_at_any_function_entry_of_a_guarded_call_leaves_every_later_frame_right(way: str) -> None:
    entries = _interrupted_pipeline(way, None)[1].count
    assert entries > 20
    bad = []
    for n in range(1, entries + 1):
        sim, boom, wrong_frames = _interrupted_pipeline(way, n)
        if wrong_frames or sim.races:
            bad.append((boom.where, wrong_frames, str(sim.races[0])[:120] if sim.races else ""))
    assert bad == []


# -- 7. a stale zero-copy view passed down a pipeline -------------------------------------------------------


def _stages(sim: SimBackend, **kw: Any) -> tuple[Any, Any, ss.Stream]:
    """Two effects chained on one stream S (stage 2 upscales stage 1's 32x32 output to 64x64): their contracts."""
    first, second = make(sim), make(sim)
    second.output_width = second.output_height = 64
    S = sim.create_stream(non_blocking=True)
    return ss.StreamContract(first, S, input_stream=S, **kw), ss.StreamContract(second, S, input_stream=S, **kw), S


def two_stages(sim: SimBackend, late: bool) -> None:
    c1, c2, S = _stages(sim, strategy="event")
    pending = []
    with sim.use_stream(S):
        for i in range(3):
            x = sim.empty((3, 16, 16), np.float32, stream=S)
            write(sim, x, data_of(i), S)
            view = sim.from_dlpack(c1.run(x).image, stream=S)  # stage 1's zero-copy view
            pending.append(view)
            if late and i > 0:
                c2.run(pending[i - 1])  # one iteration late: stage 1 ran again since
            elif not late:
                c2.run(view)


def test_a_stale_view_handed_to_a_guarded_call_is_refused(sim: SimBackend) -> None:
    with pytest.raises(ss.errors.StaleOutputError, match=r"a zero-copy view of VideoSuperRes's output #1.*run again"):
        two_stages(sim, late=True)


@pytest.mark.parametrize("replayed", [False, True], ids=["planned", "replayed"])
def test_a_refused_stale_view_leaves_the_counters_and_the_ledger_as_they_were(sim: SimBackend, replayed: bool) -> None:
    c1, c2, S = _stages(sim)
    with sim.use_stream(S):
        for _ in range(2 if replayed else 1):  # (twice: the stale call below would replay the recipe)
            view = sim.from_dlpack(c1.run(sim.array(data_of(0))).image, stream=S)
            c2.run(view)
        stats, generation = dict(c2.stats), c2.ledger.generation
        c1.run(sim.array(data_of(1)))
        with pytest.raises(ss.errors.StaleOutputError):
            c2.run(view)
    assert (dict(c2.stats), c2.ledger.generation) == (stats, generation)


def test_control_a_current_view_is_ordered_and_passes(sim: SimBackend) -> None:
    two_stages(sim, late=False)
    sim.synchronize_device()
    assert sim.races == []


def _view_then_release(sim: SimBackend, release: str, guarded: bool) -> None:
    """Stage 1's zero-copy view, then stage 1 released (``close()``, or a resize), then the view handed to
    stage 2 (through its contract, or, ``guarded=False``, to the raw effect: the control)."""
    c1, c2, S = _stages(sim)
    with sim.use_stream(S):
        view = sim.from_dlpack(c1.run(sim.array(data_of(0))).image, stream=S)
        if release == "close":
            c1.close()
        else:
            c1.configure(output_width=48)
        if guarded:
            c2.run(view)
        else:
            c2.effect.run(view, stream_ptr=S.ptr)
    sim.synchronize_device()


@pytest.mark.parametrize("release", ["close", "resize"])
def test_a_view_of_a_released_output_is_refused_as_an_input(sim: SimBackend, release: str) -> None:
    with pytest.raises(ss.errors.StaleOutputError, match="released its buffer"):
        _view_then_release(sim, release, guarded=True)


@pytest.mark.parametrize("release", ["close", "resize"])
def test_control_a_view_of_a_released_output_reads_freed_memory(sim: SimBackend, release: str) -> None:
    _view_then_release(sim, release, guarded=False)
    assert any("after it was released" in str(r) for r in sim.races)


# -- blocks entered through context-manager helpers, errors after work, recycled model handles ------------


def _guarded_frames(sim: SimBackend, fx: Any, S: ss.Stream, C: ss.Stream, n: int = 3) -> list[tuple[Any, np.ndarray]]:
    copies = []
    for i in range(n):
        x = sim.empty((3, 16, 16), np.float32, stream=S)
        write(sim, x, data_of(i), S)
        out = fx.run(x)
        assert isinstance(out, ss.SafeOutput)
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), expected(fx, data_of(i))))
    return copies


def test_a_block_inside_a_contextmanager_or_an_exit_stack_guards_the_code_that_uses_it(sim: SimBackend) -> None:
    import contextlib

    from streamsafe import guarding

    fx, S, C = make(sim), sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)

    @contextlib.contextmanager
    def pipeline() -> Any:
        with ss.stream_contract(fx, S, input_stream=S) as c:
            yield c

    def elsewhere() -> Any:  # (a suspended block on the same effect: the slow path looks at frames)
        with ss.stream_contract(fx, S, input_stream=S):
            yield

    parked = elsewhere()
    next(parked)
    with sim.use_stream(S):
        with pipeline():
            copies = _guarded_frames(sim, fx, S, C)
        with contextlib.ExitStack() as stack:
            stack.enter_context(ss.stream_contract(fx, S, input_stream=S))
            copies += _guarded_frames(sim, fx, S, C)
    parked.close()
    assert id(fx) not in guarding._open  # (every block was popped)
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_an_sdk_error_after_its_work_was_issued_keeps_the_next_frame_ordered(sim: SimBackend) -> None:
    class LateError(TrueHDR):
        fail = False

        def run(self, *args: Any, **kwargs: Any) -> Any:
            out = super().run(*args, **kwargs)
            if self.fail:
                raise RuntimeError("a late step failed")
            return out

    fx, P, S = make(sim, LateError), sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, strategy="async", input_stream=P)
    copies = []
    with sim.use_stream(S):
        for i in range(4):
            x = sim.empty((3, 16, 16), np.float32, stream=P)
            write(sim, x, data_of(i), P)
            fx.fail = i == 1
            try:
                out = c.run(x)
            except RuntimeError:
                continue
            finally:
                del x  # (its memory goes back to P's pool: the next frame's write must wait for the SDK's read)
            copies.append((sim.copy(sim.from_dlpack(out.image, stream=S), S), expected(fx, data_of(i))))
    assert (wrong(sim, copies), sim.races) == (0, [])


def test_the_model_gives_a_recycled_handle_of_the_same_kind_a_clock_of_its_own(sim: SimBackend) -> None:
    L = sim.legacy_stream()
    buf = sim.empty((4,), np.float32, stream=L)
    sim.fill(buf, 0.0, stream=L)
    sim.synchronize_device()
    A = sim.create_stream(non_blocking=False)
    for k in range(5):
        sim.fill(buf, float(k), stream=A)
    sim.fill(buf, -1.0, stream=L)
    sim.synchronize_device()
    sim.destroy_stream(A)
    B = sim.create_stream(non_blocking=False)
    assert B.handle == A.handle
    sim.fill(buf, 42.0, stream=B)
    out = sim.copy(buf, L)  # stream 0 waits for the blocking stream B
    sim.synchronize_device()
    assert sim.download(out, L).tolist() == [42.0] * 4 and sim.races == []
