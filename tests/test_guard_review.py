"""A review of the guard blocks and the class guard, on the model: each test fails on the defect it names.

1. a block opened by a program's own context-manager class (its ``__enter__`` enters the contract), or by a helper
   function that returns, held across ``await`` by two asyncio tasks: each task goes through its own contract;
2. one ``contract.guarded()`` object entered again while open (nested, or shared by tasks or threads) nests;
3. a class guard nested in itself ends at the outermost exit, and an ended one refuses to be entered again;
4. a block left from another thread than the one that entered it ends, and blocks are told apart by a thread number
   that is never reused;
5. ``ss.guard(...)``'s option values are checked when the guard is made;
6. ``ss.guard('')`` and ``ss.guard('nvvfx.')`` raise the error other unimportable names give.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import guarding
from streamsafe.errors import ArgumentError, FrameworkUnavailableError, StreamsafeError, StreamTypeError, StreamValueError
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ss.errors.HostWaitWarning)
        yield


def make_sr(sim: SimBackend) -> Any:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def frame_on(sim: SimBackend, stream: Any, seed: int) -> tuple[Any, np.ndarray]:
    data = np.random.default_rng(seed).random((3, 16, 16), dtype=np.float32)
    x = sim.empty((3, 16, 16), np.float32)
    sim.launch(stream, "producer.write", lambda: np.copyto(x.buffer.data, data), writes=[x])
    return x, data


def expected(data: np.ndarray) -> np.ndarray:
    return K.to_rgb8(np, K.resize_bilinear(np, data, 32, 32)).astype(np.float32) / np.float32(255)


def wrong_frames(sim: SimBackend, copies: list[tuple[Any, np.ndarray]]) -> int:
    sim.synchronize_device()
    return sum(not np.array_equal(sim.download(c, sim.legacy_stream()), expected(d)) for c, d in copies)


def no_block_open(sr: Any) -> bool:
    return guarding._open.get(id(sr)) is None


def plain_run(sim: SimBackend, sr: Any) -> Any:
    x = sim.empty((3, 16, 16), np.float32)
    sim.launch(sim.legacy_stream(), "w", lambda: None, writes=[x])
    return sr.run(x)


# -- 1. blocks opened through a program's own helper, held across await ----------------------------------------------


class Session:
    """A program's pipeline object: its ``__enter__`` opens the guard block (the helper's frame returns)."""

    def __init__(self, contract: Any) -> None:
        self.c = contract

    def __enter__(self) -> Session:
        self.c.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.c.__exit__(*exc)

    async def __aenter__(self) -> Session:
        self.c.__enter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.c.__exit__(*exc)


class Opener:
    """A helper whose plain methods (not a context manager's) open and close the block."""

    def __init__(self, contract: Any) -> None:
        self.c = contract

    def open(self) -> None:
        self.c.__enter__()

    def close(self) -> None:
        self.c.__exit__(None, None, None)


@contextlib.contextmanager
def opened(contract: Any) -> Iterator[None]:
    """A ``@contextmanager`` whose body opens the block through a helper."""
    helper = Opener(contract)
    helper.open()
    try:
        yield
    finally:
        helper.close()


def _two_tasks(sim: SimBackend, way: str, shared: bool) -> tuple[int, int, int, int]:
    """Two asyncio tasks on one effect, each with its own declared producer stream, each in a block opened by
    ``way`` and held across ``await``: (calls through another task's contract, wrong frames, races, blocks left)."""
    sr = make_sr(sim)
    misrouted: list[bool] = []
    copies: list[tuple[Any, np.ndarray]] = []
    shared_s = sim.create_stream(non_blocking=True)
    shared_c = ss.stream_contract(sr, shared_s, input_stream=shared_s, strategy="event") if shared else None

    async def task(k: int) -> None:
        s, p, cons = (sim.create_stream(non_blocking=True) for _ in range(3))
        if shared_c is not None:
            c, p = shared_c, shared_s
        else:
            c = ss.stream_contract(sr, s, input_stream=p, strategy="event")

        async def frames() -> None:
            for i in range(3 + 2 * k):  # (the second task outlives the first one's block)
                x, data = frame_on(sim, p, 10 * k + i)
                out = sr.run(x)
                misrouted.append(guarding.active_contract(sr) is not c)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=cons), cons), data))
                await asyncio.sleep(0)

        if way == "__enter__":
            with Session(c):
                await frames()
        elif way == "__aenter__":
            async with Session(c):
                await frames()
        elif way == "ExitStack in __enter__":
            with contextlib.ExitStack() as stack:
                stack.enter_context(Session(c))
                await frames()
        elif way == "helper in a @contextmanager":
            with opened(c):
                await frames()
        else:
            helper = Opener(c)
            helper.open()
            await frames()
            helper.close()
        misrouted.append(guarding.active_contract(sr) is not None)  # (its block has ended)

    async def main() -> None:
        await asyncio.gather(task(0), task(1))

    asyncio.run(main())
    return sum(misrouted), wrong_frames(sim, copies), len(sim.races), len(guarding._open.get(id(sr), ()))


WAYS = ["__enter__", "__aenter__", "ExitStack in __enter__", "helper in a @contextmanager", "helper methods"]


@pytest.mark.parametrize("way", WAYS)
def test_two_tasks_in_blocks_a_helper_opened_each_go_through_their_own_contract(sim: SimBackend, way: str) -> None:
    """docs/guide.md, "Guards follow the code, not the thread": a block entered by a program's own ``__enter__`` (or a
    helper that returns) guards the code that runs the ``with``, not whichever block of the thread is newest."""
    assert _two_tasks(sim, way, shared=False) == (0, 0, 0, 0)


@pytest.mark.parametrize("way", WAYS)
def test_two_tasks_sharing_a_contract_through_helpers_each_leave_their_own_block(sim: SimBackend, way: str) -> None:
    """The first task to leave ends its own block, not the other task's (which still guards that task's calls)."""
    assert _two_tasks(sim, way, shared=True) == (0, 0, 0, 0)


def test_a_generator_in_a_block_its_helper_opened_guards_its_own_code_only(sim: SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    seen: list[Any] = []

    def gen() -> Iterator[int]:
        with Session(c):
            for i in range(3):
                seen.append(guarding.active_contract(sr))
                yield i

    between = []
    for _ in gen():
        between.append(guarding.active_contract(sr))  # (the caller's code between two resumptions)
    assert seen == [c, c, c] and between == [None, None, None] and no_block_open(sr)


@pytest.mark.parametrize("way", ["helper methods", "helper in a @contextmanager", "__enter__"])
def test_a_block_a_helper_opened_in_a_thread_still_guards_the_thread(sim: SimBackend, way: str) -> None:
    """The ordinary case is as it was: a helper's block guards the code after it in its thread, until it is closed
    (also while a generator's block on the effect is open, and inside a generator that is not the helper's)."""
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    other = ss.StreamContract(sr, sim.create_stream(non_blocking=True))

    def suspended() -> Iterator[None]:
        with other:
            yield

    held = suspended()
    next(held)  # (a generator's block, suspended: the effect's blocks are looked up by the running code)
    with contextlib.ExitStack() as stack:
        if way == "helper methods":
            helper = Opener(c)
            helper.open()
            stack.callback(helper.close)
        elif way == "helper in a @contextmanager":
            stack.enter_context(opened(c))
        else:
            stack.enter_context(Session(c))
        assert guarding.active_contract(sr) is c and isinstance(plain_run(sim, sr), ss.SafeOutput)
    assert guarding.active_contract(sr) is None and not isinstance(plain_run(sim, sr), ss.SafeOutput)
    held.close()
    assert no_block_open(sr)


# -- 2. one guarded() object entered again while open -------------------------------------------------------------


def test_one_guard_block_nested_in_itself_nests(sim: SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    block = c.guarded(host_wait_on_exit=False)
    with block:
        with block as inner:
            assert inner is c
        assert guarding.active_contract(sr) is c and isinstance(plain_run(sim, sr), ss.SafeOutput)
    assert no_block_open(sr) and block.stack_frame is None
    assert not isinstance(plain_run(sim, sr), ss.SafeOutput)


def test_one_guard_block_shared_by_two_tasks_guards_each_until_it_leaves(sim: SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    shared = c.guarded(host_wait_on_exit=False)
    routed: list[bool] = []

    async def task(k: int) -> None:
        with shared:
            for _ in range(2 + 3 * k):  # (the second task is still inside after the first one left)
                routed.append(guarding.active_contract(sr) is c)
                await asyncio.sleep(0)
        routed.append(guarding.active_contract(sr) is None)

    async def main() -> None:
        await asyncio.gather(task(0), task(1))

    asyncio.run(main())
    assert all(routed) and no_block_open(sr)


def test_one_guard_block_shared_by_two_threads_guards_each_until_it_leaves(sim: SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    shared = c.guarded(host_wait_on_exit=False)
    inside, leave = threading.Barrier(2), threading.Event()
    routed: list[bool] = []

    def worker(k: int) -> None:
        with shared:
            inside.wait()
            if k == 1:
                leave.wait()  # (the first thread has left)
            routed.append(guarding.active_contract(sr) is c)
        if k == 0:
            leave.set()
        routed.append(guarding.active_contract(sr) is None)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert routed.count(True) == 4 and no_block_open(sr)


# -- 3. a class guard nested in itself, and entered after it ended ------------------------------------------------


def test_a_class_guard_nested_in_itself_ends_at_the_outermost_exit(sim: SimBackend) -> None:
    sr = make_sr(sim)
    g = ss.guard(VideoSuperRes)
    try:
        with g:
            with g:
                assert isinstance(plain_run(sim, sr), ss.SafeOutput)
            assert g.active and isinstance(plain_run(sim, sr), ss.SafeOutput)
        assert not g.active and not isinstance(plain_run(sim, sr), ss.SafeOutput)
    finally:
        g.undo()


@pytest.mark.parametrize("ended_by", ["with", "undo", "unguard"])
def test_an_ended_class_guard_refuses_to_be_entered_again(sim: SimBackend, ended_by: str) -> None:
    """The guide's class guard starts at ``ss.guard(...)`` and ends once: entering an ended one would guard nothing."""
    sr = make_sr(sim)
    g = ss.guard(VideoSuperRes)
    if ended_by == "with":
        with g:
            pass
    elif ended_by == "undo":
        g.undo()
    else:
        ss.unguard(VideoSuperRes)
    with pytest.raises(StreamsafeError, match=r"VideoSuperRes has ended.*call ss\.guard\(\.\.\.\) again"):
        with g:
            pass
    assert not g.active and not isinstance(plain_run(sim, sr), ss.SafeOutput)


# -- 4. a block left from another thread ------------------------------------------------------------------------


def test_a_block_left_from_another_thread_ends_and_frees_its_effect(sim: SimBackend) -> None:
    """A pipeline whose start() runs in a worker thread and whose stop() the main thread calls (an ExitStack)."""

    class Pipeline:
        def __init__(self, sr: Any) -> None:
            self.sr, self.stack = sr, contextlib.ExitStack()

        def start(self) -> None:
            self.contract = self.stack.enter_context(ss.stream_contract(self.sr, sim.create_stream(non_blocking=True)))

        def stop(self) -> None:
            self.stack.close()

    sr = make_sr(sim)
    p = Pipeline(sr)
    t = threading.Thread(target=p.start)
    t.start()
    t.join()
    assert guarding.active_contract(sr) is None  # (the worker's block guards the worker's code)
    p.stop()
    assert no_block_open(sr)
    routed: list[bool] = []
    gone = weakref.ref(sr)

    def later() -> None:
        routed.append(guarding.active_contract(gone()) is not None)

    for _ in range(10):
        t = threading.Thread(target=later)
        t.start()
        t.join()
    del p, sr, t
    gc.collect()
    assert not any(routed) and gone() is None


def test_a_block_left_open_by_an_ended_thread_does_not_guard_a_thread_with_its_reused_id(sim: SimBackend) -> None:
    """``threading.get_ident()`` is reused once a thread ends; the thread number blocks are told apart by is not."""
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    idents: list[int] = []

    def opens() -> None:
        idents.append(threading.get_ident())
        Opener(c).open()  # (left open: the thread ends inside the block)

    t = threading.Thread(target=opens)
    t.start()
    t.join()
    routed: list[tuple[int, bool]] = []

    def later() -> None:
        routed.append((threading.get_ident(), guarding.active_contract(sr) is not None))

    for _ in range(200):
        t = threading.Thread(target=later)
        t.start()
        t.join()
        if routed[-1][0] == idents[0]:
            break
    reused = any(ident == idents[0] for ident, _ in routed)
    try:
        assert not any(r for _, r in routed)
    finally:
        guarding.pop(sr, c, None)  # (the block the ended thread left open, ended from here)
    assert no_block_open(sr)
    if not reused:
        pytest.skip("no new thread got the ended thread's id here: the reuse was not tried")


# -- 5. guard()'s option values, checked when the guard is made ----------------------------------------------------


@pytest.mark.parametrize("options,error", [
    ({"backend": 42}, ArgumentError),
    ({"backend": SimBackend}, ArgumentError),
    ({"input_stream": "x"}, StreamTypeError),
    ({"consumer_stream": -3}, StreamValueError),
    ({"conversion_stream": 1.5}, StreamTypeError),
    ({"input_stream": True}, StreamTypeError),
])
def test_guard_checks_its_option_values_as_a_contract_does(sim: SimBackend, options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        ss.guard(VideoSuperRes, **options)
    with ss.use_backend(sim):
        sr = VideoSuperRes()
        sr.output_width = 32  # (no guard was left behind: a plain setting)
    assert guarding.active_contract(sr) is None


def test_guard_checks_a_handle_in_its_backend(sim: SimBackend) -> None:
    with pytest.raises(ss.errors.CudaDriverError):
        ss.guard(VideoSuperRes, backend=sim, input_stream=0x7777)


def test_guard_takes_the_streams_and_backends_a_contract_takes(sim: SimBackend) -> None:
    P, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    legacy = sim.legacy_stream()
    for options, writer in (
        ({"backend": sim, "input_stream": P, "consumer_stream": C.handle, "conversion_stream": 1}, P),
        ({"input_stream": P.handle}, P),  # (a handle of the effects' model, not the current backend's: checked later)
        ({"input_stream": 1, "consumer_stream": 0}, legacy),
    ):
        with ss.guard(VideoSuperRes, **options):
            sr = make_sr(sim)
            x, data = frame_on(sim, writer, 1)
            out = sr.run(x)
            assert isinstance(out, ss.SafeOutput) and np.array_equal(out.numpy(), expected(data))
    assert sim.races == []


# -- 6. module names that name no module ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "nvvfx.", ".nvvfx", "a..b", "surely_no_such_module_here"])
@pytest.mark.parametrize("call", [ss.guard, ss.unguard])
def test_a_name_that_names_no_module_raises_the_unimportable_modules_error(name: str, call: Any) -> None:
    with pytest.raises(FrameworkUnavailableError, match=rf"^{'un' if call is ss.unguard else ''}guard\({name!r}\) needs"):
        call(name)


@pytest.mark.parametrize("name", ["nvvfx.", "nvvfx..effects"])
def test_a_name_under_an_imported_sdk_that_names_no_module_raises_the_same_error(fake_nvvfx: Any, name: str) -> None:
    """With the SDK imported (here its emulation), importlib's own ``ValueError('Empty module name')`` escaped."""
    with pytest.raises(FrameworkUnavailableError, match=rf"^guard\({name!r}\) needs .*is not a module name"):
        ss.guard(name)
