"""Correct programs a first version of this release's argument and routing checks refused or mis-routed: each test
fails on that version and passes now."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import functools
import threading
from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.profile import EffectProfile, register, unregister
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes

pytestmark = pytest.mark.filterwarnings("ignore::streamsafe.errors.HostWaitWarning")


def _effect(sim: SimBackend) -> Any:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def _x(sim: SimBackend) -> Any:
    x = sim.empty((3, 16, 16), np.float32)
    sim.fill(x, 0.5)
    return x


def _traced(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, trace: bool = False, **kwargs: Any) -> Any:  # (a keyword of the decorator's own)
        return fn(self, *args, **kwargs)
    return wrapper


@dataclasses.dataclass
class _Out:
    frame: object


def test_a_decorated_sdk_method_takes_its_wrappers_keyword() -> None:
    """The call binds to what is called, the decorator's wrapper, not to the function it wraps."""
    sim = SimBackend()

    class Sharpener:
        def __init__(self) -> None:
            self.output: Any = None

        @_traced
        def process(self, *, image: Any, stream: int = 0) -> Any:
            s = ss.as_stream(stream, backend=sim)
            x = sim.from_dlpack(image.__dlpack__())
            if self.output is None:
                self.output = sim.malloc(x.shape, name="out")
            src, dst = x.buffer, self.output.buffer
            sim.launch(s, "k", lambda: np.multiply(src.data, 2, out=dst.data), reads=[x], writes=[self.output])
            sim.synchronize_stream(s)
            return _Out(frame=self.output.__dlpack__())

    prof = register(EffectProfile(name="sharpener.Sharpener", classes=(Sharpener,), calls=("process",), stream_keyword="stream",
                                  blocking_keyword=None, inputs=("image",), output="frame"))
    try:
        S = sim.create_stream(non_blocking=True)
        out = ss.StreamContract(Sharpener(), S, backend=sim).process(image=_x(sim), trace=True)
        assert float(out.numpy().max()) == 1.0
    finally:
        unregister(prof)


def test_a_contract_subclass_reads_its_own_keywords_through_kwargs() -> None:
    sim = SimBackend()

    class Labelled(ss.StreamContract):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.label = kwargs.pop("label", "")
            super().__init__(*args, **kwargs)

    assert Labelled(_effect(sim), sim.create_stream(non_blocking=True), label="cam0").label == "cam0"


def test_profile_subclasses_with_init_vars_their_own_constructor_or_an_abc() -> None:
    class Sharpener:
        def process(self, *, image: Any, stream: int = 0) -> Any: ...

    fields = dict(calls=("process",), stream_keyword="stream", blocking_keyword=None, output="frame")

    @dataclass(frozen=True)
    class Scaled(EffectProfile):
        scale: InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:  # type: ignore[override]
            super().__post_init__()

    class For(EffectProfile):
        def __init__(self, sdk: type, **kw: Any) -> None:
            super().__init__(name=sdk.__qualname__, classes=(sdk,), **kw)

    assert Scaled(name="s.S", classes=(Sharpener,), scale=2, **fields).name == "s.S"  # type: ignore[arg-type]
    assert For(Sharpener, **fields).classes == (Sharpener,)
    assert issubclass(type("Abstract", (EffectProfile, abc.ABC), {}), EffectProfile)
    with pytest.raises(ss.errors.ProfileError, match="bogus"):
        Scaled(name="s.S", classes=(Sharpener,), bogus=1, **fields)  # type: ignore[arg-type]


def test_a_device_given_as_a_numpy_integer_names_the_default_streams_too() -> None:
    sim = SimBackend(devices=2)
    for handle in (None, 0, 2):
        assert ss.as_stream(handle, device=np.int64(1), backend=sim).device == 1


def test_a_helpers_block_closed_from_another_task_leaves_that_tasks_own_block_open() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))

    class Opener:
        def open(self) -> None:
            c.__enter__()

        def close(self) -> None:
            c.__exit__(None, None, None)

    helper, seen = Opener(), {}

    async def a(opened: asyncio.Event, closed: asyncio.Event) -> None:
        helper.open()
        opened.set()
        await closed.wait()

    async def b(opened: asyncio.Event, closed: asyncio.Event) -> None:
        await opened.wait()
        with c:
            helper.close()  # (ends task a's block, not this one)
            seen["guarded"] = isinstance(sr.run(_x(sim)), ss.SafeOutput)
            closed.set()

    async def main() -> None:
        opened, closed = asyncio.Event(), asyncio.Event()
        await asyncio.gather(a(opened, closed), b(opened, closed))

    asyncio.run(main())
    assert seen["guarded"]
    assert not isinstance(sr.run(_x(sim)), ss.SafeOutput)  # (both ended)


def test_a_workers_block_closed_from_the_main_thread_leaves_the_main_threads_block_open() -> None:
    sim = SimBackend()
    sr = _effect(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))

    class Pipeline:
        def __init__(self) -> None:
            self.stack = contextlib.ExitStack()

        def start(self) -> None:
            self.stack.enter_context(c)

        def stop(self) -> None:
            self.stack.close()

    p = Pipeline()
    with c:
        t = threading.Thread(target=p.start)
        t.start()
        t.join()
        p.stop()  # (ends the worker's block)
        assert isinstance(sr.run(_x(sim)), ss.SafeOutput)
    assert not isinstance(sr.run(_x(sim)), ss.SafeOutput)
