"""The invariant, as a property: a program that is correct without streamsafe stays correct with it.

Random programs follow the vendor's recipes (the producer's stream synchronised on the host before
``run()``, or the input written on the SDK stream; ``run()`` with ``non_blocking=False``; the output taken
after a device sync and the copy stream synchronised before the next frame, or copied on the stream that
wrote it with no wait), with persistent surfaces or fresh inputs from the allocator, on every kind of SDK, copy and current
stream. Each program is first run without streamsafe on the adversarial model: a program that races or
gets a wrong frame there is not correct, and is not used (the generator makes few). Each correct program
then runs unchanged inside a guard (a ``with`` block, a block per frame, the decorator, a class guard, the
contract's ``run``) under every fenced strategy, and in sanitize mode: every frame must be right and the
model must report no race. 1,000 programs a run (``STREAMSAFE_INVARIANT_PROGRAMS`` sets another number).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.sim import SimBackend
from streamsafe.testing import ImageEncoding, TrueHDR, VideoSuperRes

PROGRAMS = int(os.environ.get("STREAMSAFE_INVARIANT_PROGRAMS", "1000"))
STRATEGIES = ["auto", "event", "async", "stream", "device"]
KINDS = ["non-blocking", "blocking", "legacy"]


@dataclass(frozen=True)
class Program:
    seed: int
    effect: str  # "sr8", "sr10", "hdr"
    sdk: str
    current: str  # the current stream at run(): "sdk", "legacy", or another stream of a kind
    producer: str  # "foreign" (its own stream, synchronised before run) or "sdk"
    surface: bool  # one persistent surface rewritten in place, else a fresh input each frame
    consume: tuple[str, ...]  # per frame: "device-sync" (then copy on a stream of any kind) or "writer"
    copy_kind: str
    guard: str
    frames: int

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.effect} S={self.sdk} current={self.current} producer={self.producer} "
                f"{'surface' if self.surface else 'fresh'} consume={','.join(self.consume)} C={self.copy_kind} "
                f"guard={self.guard} frames={self.frames}")


def draw(seed: int) -> Program:
    r = random.Random(seed)
    frames = r.randint(2, 4)
    return Program(
        seed=seed, effect=r.choice(["sr8", "sr10", "hdr"]), sdk=r.choice(KINDS),
        current=r.choice(["sdk", "legacy", "non-blocking"]), producer=r.choice(["foreign", "sdk"]),
        surface=r.random() < 0.5, consume=tuple(r.choice(["device-sync", "writer"]) for _ in range(frames)),
        copy_kind=r.choice(KINDS), guard=r.choice(["with", "with-per-frame", "decorator", "class", "contract"]),
        frames=frames,
    )


def _stream(sim: SimBackend, kind: str) -> ss.Stream:
    return sim.legacy_stream() if kind == "legacy" else sim.create_stream(non_blocking=kind == "non-blocking")


def _effect(sim: SimBackend, name: str) -> Any:
    if name == "hdr":
        fx = TrueHDR(backend=sim)
    else:
        fx = VideoSuperRes(backend=sim, image_encoding=ImageEncoding.RGB10A2 if name == "sr10" else ImageEncoding.RGB8)
        fx.output_width = fx.output_height = 24
    fx.load()
    return fx


def execute(program: Program, strategy: str | None, *, scheduler: str = "adversarial", sanitize: bool = False) -> tuple[list[bytes], int]:
    """Run ``program`` (``strategy=None``: without streamsafe): the frames it copied, and the races found."""
    sim = SimBackend(scheduler=scheduler, seed=program.seed)
    rng = np.random.default_rng(program.seed)
    fx = _effect(sim, program.effect)
    S = _stream(sim, program.sdk)
    current = S if program.current == "sdk" else _stream(sim, program.current)
    P = _stream(sim, "non-blocking") if program.producer == "foreign" else S
    C = _stream(sim, program.copy_kind)
    packed = program.effect == "sr10"
    surface = None
    copies = []
    contract = None
    guard = None
    if strategy is not None:
        if program.guard == "contract":
            contract = ss.StreamContract(fx, S, strategy=strategy)
        elif program.guard == "class":
            guard = ss.guard(type(fx), strategy=strategy)

    def one_frame(i: int) -> None:
        nonlocal surface
        data = rng.random((3, 16, 16), dtype=np.float32)
        if packed:
            from streamsafe.testing import _kernels as K

            data = K.pack_rgb10a2(np, data)
        shape, dtype = data.shape, data.dtype
        if program.surface:
            if surface is None:
                surface = sim.empty(shape, dtype, stream=P, name="surface")
            x = surface
        else:
            x = sim.empty(shape, dtype, stream=P, name=f"frame{i}")
        sim.launch(P, "producer.write", lambda x=x, data=data: np.copyto(x.buffer.data, data), writes=[x])
        if P != S:
            sim.synchronize_stream(P)  # the vendor's recipe: the input is complete before run()
        run = contract.run if contract is not None else fx.run
        out = run(x, stream_ptr=S.ptr)
        if program.consume[i] == "device-sync":  # the vendor's documented fallback
            sim.synchronize_device()
            copies.append(sim.copy(sim.from_dlpack(out.image, stream=C), C))
            sim.synchronize_stream(C)  # the recipe ends with a wait for the copy stream
        else:  # on the stream that wrote the output last (stream 0 for RGB8, else the SDK stream): no wait
            consumer = S if (program.effect == "hdr" or packed) else sim.legacy_stream()
            copies.append(sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer))

    def frames() -> None:
        for i in range(program.frames):
            if strategy is not None and program.guard == "with-per-frame":
                with ss.stream_contract(fx, S, strategy=strategy):
                    one_frame(i)
            else:
                one_frame(i)

    def body() -> None:
        with sim.use_stream(current):
            if strategy is not None and program.guard == "with":
                with ss.stream_contract(fx, S, strategy=strategy):
                    frames()
            elif strategy is not None and program.guard == "decorator":
                ss.stream_safe(fx, S, strategy=strategy)(frames)()
            else:
                frames()

    try:
        if sanitize:
            with ss.sanitize(sim):
                body()
        else:
            body()
    finally:
        if guard is not None:
            guard.undo()
    sim.synchronize_device()
    return [sim.download(c, sim.legacy_stream()).tobytes() for c in copies], len(sim.races)


def _oracle(program: Program) -> list[bytes]:
    """What the frames must be: the program run in issue order (every operation after the one before it)."""
    frames, _ = execute(program, None, scheduler="in-order")
    return frames


def test_the_invariant_holds_for_random_programs_that_follow_the_vendors_recipes() -> None:
    correct = 0
    broken: list[str] = []
    for seed in range(PROGRAMS):
        program = draw(seed)
        want = _oracle(program)
        got, races = execute(program, None)
        if races or got != want:
            continue  # not correct without streamsafe: the invariant says nothing of it
        correct += 1
        strategy = STRATEGIES[seed % len(STRATEGIES)]
        for st in (strategy, STRATEGIES[(seed + 2) % len(STRATEGIES)]):
            got, races = execute(program, st)
            if races or got != want:
                broken.append(f"{program.describe()} under {st}: {races} race(s), {sum(a != b for a, b in zip(got, want))} wrong frame(s)")
        if seed % 10 == 0:
            try:
                got, races = execute(program, strategy, sanitize=True)
            except ss.errors.RaceError as e:
                broken.append(f"{program.describe()} in sanitize mode under {strategy}: {e}")
    assert correct >= PROGRAMS * 0.9, f"only {correct} of {PROGRAMS} programs were correct without streamsafe"
    assert broken == [], "\n".join(broken[:20])


@pytest.mark.parametrize("seed", range(20))
def test_a_program_with_its_wait_dropped_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the same programs with streamsafe planning as if every input writer were known (dropping the
    SDK's host wait the foreign producer relies on) race or corrupt, so the property above can fail."""
    import streamsafe.frame as contract_module

    real = contract_module.plan_fences
    monkeypatch.setattr(contract_module, "plan_fences", lambda *a, **k: real(*a, **{**k, "writers_known": True}))
    program = Program(seed, "sr8", "non-blocking", "sdk", "foreign", True, ("writer",) * 4, "non-blocking", "with", 4)
    got, races = execute(program, "auto")
    assert races > 0 or got != _oracle(program)
