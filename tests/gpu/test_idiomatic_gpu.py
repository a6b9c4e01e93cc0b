"""Idiomatic programs on a real GPU, with randomized delays on every stream: the vendor's input recipe,
decorated generators and coroutines, interleaved asyncio tasks and recycled stream handles give no
corrupted frame under any fenced strategy; sanitize mode sees torch's own work (a copy on a second
stream, a producer on an undeclared stream). The same programs as tests/test_idiomatic_programs.py."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from _recipe import delay, effect, make_bank

pytestmark = pytest.mark.gpu
FRAMES = int(os.environ.get("STREAMSAFE_IDIOM_FRAMES", "2000"))
STRATEGIES = ["auto", "event", "async", "stream", "device"]


@pytest.fixture(scope="module")
def bank(torch_cuda):  # type: ignore[no-untyped-def]
    return make_bank(torch_cuda)


def _count(torch: Any, copies: list[tuple[Any, Any]]) -> int:
    torch.cuda.synchronize()
    return sum(not torch.allclose(got, want, atol=1.5 / 255) for got, want in copies)


def vendor_recipe(torch: Any, bank: Any, strategy: str | None, frames: int, s_work_us: int = 150) -> int:
    """A decoder-style producer rewrites one surface on its own stream P, synchronised on the host before
    each ``run()`` (the vendor's recipe), inside one block on S with nothing declared; copies on S."""
    xs, want = bank
    rng = np.random.default_rng(1)
    sr = effect()
    P, S = torch.cuda.Stream(), torch.cuda.Stream()
    surface = torch.empty_like(xs[0])
    copies = []
    guard = ss.stream_contract(sr, S, strategy=strategy) if strategy else None
    with torch.cuda.stream(S):
        if guard is not None:
            guard.__enter__()
        for i in range(frames):
            with torch.cuda.stream(P):
                delay(torch, rng, P, 40)
                surface.copy_(xs[i % 8])  # the decoder rewrites its surface
            P.synchronize()  # the vendor's recipe
            delay(torch, rng, S, s_work_us)  # other work queued on S: the SDK's read of the surface comes after it
            out = sr.run(surface, stream_ptr=S.cuda_stream)
            delay(torch, rng, S)
            copies.append((torch.from_dlpack(out.image).clone(), want[i % 8]))
        if guard is not None:
            guard.__exit__(None, None, None)
    return _count(torch, copies)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_vendors_input_recipe_stays_correct(torch_cuda, bank, strategy: str) -> None:  # type: ignore[no-untyped-def]
    bad = _frames_checked(lambda n: vendor_recipe(torch_cuda, bank, strategy, n))
    print(f"vendor recipe {strategy}: {bad} corrupt of {FRAMES}")
    assert bad == 0


def _frames_checked(run: Any) -> int:
    bad = 0
    for _ in range(FRAMES // 200):
        bad += run(200)
    return bad


def test_control_the_recipe_breaks_when_the_sdks_wait_is_dropped(torch_cuda, bank, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Planned as if every writer were known, with no copies: P's next write races with the SDK's read."""
    import streamsafe.frame as frame_module

    real = frame_module.plan_fences
    monkeypatch.setattr(frame_module, "plan_fences", lambda *a, **k: real(*a, **{**k, "writers_known": True}))
    bad = vendor_recipe(torch_cuda, bank, "auto", 200, s_work_us=3000)
    print(f"vendor recipe with the SDK's wait dropped: {bad} corrupt of 200")
    assert bad > 0


def test_control_the_recipe_breaks_when_the_copies_are_not_waited_for(torch_cuda, bank, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """auto hands the SDK copies of the undeclared input and waits on the host for the copies: without that wait,
    and with the copy queued behind 3 ms of work, P's next write races with the copy's read."""
    import dataclasses

    import streamsafe.frame as frame_module

    real = frame_module.plan_fences

    def no_copy_wait(*a: Any, **k: Any) -> Any:
        plan = real(*a, **k)
        assert plan.copy_stream is not None
        kept = tuple(f for f in plan.fences if not (f.action == "host-wait" and f.signaller == plan.copy_stream))
        return dataclasses.replace(plan, fences=kept)

    monkeypatch.setattr(frame_module, "plan_fences", no_copy_wait)
    bad = vendor_recipe(torch_cuda, bank, "auto", 200, s_work_us=3000)
    print(f"vendor recipe with the copies' wait dropped: {bad} corrupt of 200")
    assert bad > 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_decorated_generators_and_coroutines_and_interleaved_tasks(torch_cuda, bank, strategy: str) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    xs, want = bank
    rng = np.random.default_rng(2)
    sr = effect()
    S, C = torch.cuda.Stream(), torch.cuda.Stream()
    copies: list[tuple[Any, Any]] = []

    @ss.stream_safe(sr, S, strategy=strategy, input_stream=S)
    def frames(n: int) -> Any:
        for i in range(n):
            with torch.cuda.stream(S):
                delay(torch, rng, S)
                x = xs[i % 8].clone()
            yield sr.run(x), want[i % 8]

    for out, w in frames(FRAMES // 2):
        delay(torch, rng, C)
        copies.append((out.torch(C), w))
    assert _count(torch, copies) == 0

    copies.clear()
    sr2 = effect()
    streams = [torch.cuda.Stream() for _ in range(4)]

    async def task(k: int) -> None:
        s, p = streams[2 * k], streams[2 * k + 1]
        with torch.cuda.stream(s), ss.stream_contract(sr2, s, strategy=strategy, input_stream=p):
            for i in range(FRAMES // 4):
                with torch.cuda.stream(p):
                    delay(torch, rng, p)
                    x = xs[(i + k) % 8].clone()
                out = sr2.run(x)
                delay(torch, rng, s)
                copies.append((torch.from_dlpack(out.image).clone(), want[(i + k) % 8]))
                await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(task(0), task(1))

    asyncio.run(main())
    bad = _count(torch, copies)
    print(f"generator + interleaved tasks {strategy}: {bad} corrupt of {FRAMES}")
    assert bad == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_recycled_stream_handles_of_the_other_kind(torch_cuda, bank, strategy: str) -> None:  # type: ignore[no-untyped-def]
    cupy = pytest.importorskip("cupy")
    torch = torch_cuda
    xs, want = bank
    rng = np.random.default_rng(3)
    sr = effect()
    S = torch.cuda.Stream()
    c = ss.StreamContract(sr, S, strategy=strategy, input_stream=S)
    copies = []
    handles = set()
    for i in range(FRAMES):
        with torch.cuda.stream(S):
            x = xs[i % 8].clone()
            out = c.run(x)
        consumer = cupy.cuda.Stream(non_blocking=bool(rng.integers(0, 2)))  # made and dropped each frame
        handles.add(consumer.ptr)
        with consumer:
            ext = torch.cuda.ExternalStream(consumer.ptr)
            delay(torch, rng, ext)
            with torch.cuda.stream(ext):
                copies.append((torch.from_dlpack(out.image).clone(), want[i % 8]))
        del consumer, ext
        if i % 100 == 99:
            c.synchronize()
    bad = _count(torch, copies)
    print(f"recycled handles {strategy}: {bad} corrupt of {FRAMES}, {len(handles)} distinct handles, "
          f"{len(c.ledger.holds)} streams held at the end")
    assert bad == 0 and len(c.ledger.holds) <= 32


def test_sanitize_sees_a_torch_copy_on_a_second_stream_and_an_undeclared_producer(torch_cuda, bank) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    xs, _ = bank
    sr = effect()
    S, C, C2, P = (torch.cuda.Stream() for _ in range(4))
    with ss.sanitize(), pytest.raises(ss.errors.RaceError) as info:
        c = ss.StreamContract(sr, S, strategy="auto", input_stream=S)
        for i in range(3):
            with torch.cuda.stream(S):
                out = c.run(xs[i].clone())
            with torch.cuda.stream(C):
                view = torch.from_dlpack(out.image)
            C2.wait_stream(C)  # the program's own fence: C2 after C
            with torch.cuda.stream(C2):
                view.clone()  # read on C2, which the next run does not know of (undeclared)
    text = str(info.value)
    print(text)
    assert "torch" in text and hex(C2.cuda_stream)[2:] in text.lower()

    surface = xs[0].clone()
    with ss.sanitize(), pytest.raises(ss.errors.RaceError) as info:
        c = ss.StreamContract(effect(), S, strategy="event")
        for i in range(3):
            with torch.cuda.stream(P):
                surface.copy_(xs[i])  # written on P, neither declared nor current nor synchronised
            with torch.cuda.stream(S):
                c.run(surface).torch()
    text = str(info.value)
    print(text)
    assert "torch" in text and hex(P.cuda_stream)[2:] in text.lower()
