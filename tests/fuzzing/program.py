"""The fuzzer's programs: what a user's pipeline does, frame by frame, drawn from a seed (:func:`generate`)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EFFECTS", "KINDS", "STRATEGIES", "FRAMEWORKS", "State", "Consume", "Step", "Program", "generate", "programs"]

EFFECTS = ("vsr-rgb8", "vsr-rgb10a2", "vfg", "truehdr")
KINDS = ("legacy", "per-thread", "blocking", "non-blocking")
STRATEGIES = ("auto", "event", "async", "stream", "device")
"""The strategies that must never corrupt a frame; ``none`` is the control."""
FRAMEWORKS = ("torch", "cupy", "jax", "numpy")
GUARDS = ("contract", "with", "decorator", "with-per-frame")
DELAY_STAGES = ("P", "transfer", "inference", "conversion", "C", "late")
BANK = 8
"""Distinct input frames per size; frame ``k`` shows frame data ``k % BANK``."""

_IN_SIZES = ((16, 16), (16, 24), (24, 16))
_HDR_DEFAULT = (100, 100, 50, 650)


# -- programs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """The effect's configuration for one frame. Sizes are in model units (the GPU runner scales them)."""

    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    encoding: str
    hdr: tuple[int, int, int, int] = _HDR_DEFAULT
    """TrueHDR contrast, saturation, middle_gray, luminance."""
    multiplier: int = 2
    """VideoFrameGeneration frame_multiplier."""


@dataclass(frozen=True)
class Consume:
    """How one output is consumed."""

    framework: str
    """torch, cupy, jax or numpy (the model imports every one with ``sim.from_dlpack`` or ``out.numpy()``)."""
    style: str
    """``helper`` (``out.torch(stream)`` ...) or ``raw`` (``from_dlpack(out.image)`` then a copy)."""
    late: bool = False
    """Other work is enqueued on C between the import and the copy."""
    deferred: bool = False
    """The copy (raw) or the helper call is issued at the next frame, after its input is written (and
    after the guard's block was left), but before the next ``run()``."""
    on_c2: bool = False
    """Raw: the copy runs on C2 after the program makes C2 wait on C. Helper: it runs on C2."""

    def __str__(self) -> str:
        extra = [n for n, on in (("late", self.late), ("deferred", self.deferred), ("C2", self.on_c2)) if on]
        return "-".join([self.framework, self.style, *extra])


@dataclass(frozen=True)
class Step:
    """One frame of a program."""

    guard: str
    """``main`` or ``second``: which guard runs this frame."""
    state: State
    config: tuple[tuple[str, Any], ...]
    """Attribute changes made through the guard before ``run()`` (sizes in model units)."""
    consume: Consume
    delays: tuple[float, ...]
    """Per :data:`DELAY_STAGES`, a fraction of the runner's maximum delay (the model ignores them)."""
    vfg_call: tuple[str, float] = ("index", 1)
    """VideoFrameGeneration: ``("index", i)`` for ``run(frame_index=i)`` or ``("timestep", t)``."""


@dataclass(frozen=True)
class Program:
    """A user's pipeline. See the module docstring; :meth:`describe` says it in one line."""

    seed: int
    effect: str
    producer: str
    """P: a stream kind, or ``S`` (the input is written on the SDK stream itself)."""
    sdk: str
    consumer: str
    """C: a stream kind, or ``S``."""
    consumer2: str
    inputs: str
    """``fresh`` (allocated per frame, dropped after run) or ``in-place`` (one surface rewritten per frame)."""
    context: str
    """The framework's current stream around each guarded call: ``S`` (the frame's SDK stream), ``P``, or ``none``."""
    declare_sdk: bool
    """The SDK stream is given to the guard (else the guard takes the current stream)."""
    declare_input: bool
    """``input_stream=P`` is given to the guard."""
    stream_ptr: bool
    """The program passes ``stream_ptr=S`` to ``run()``."""
    user_non_blocking: bool
    """The program passes ``non_blocking=True`` to ``run()`` (only ``none`` honours it)."""
    guard: str
    second: str | None
    second_sdk: str
    """The second guard's SDK stream: ``S`` or another stream of this kind."""
    second_built_inside: bool
    """The second contract is built while the main ``with`` block is open."""
    call: str
    """Inside blocks: ``effect`` (plain ``sr.run``) or ``contract`` (``c.run``)."""
    producer_framework: str
    """GPU: torch or cupy writes the inputs."""
    detect: bool
    """VideoFrameGeneration shot-change detection."""
    initial: State
    steps: tuple[Step, ...]

    @property
    def frames(self) -> int:
        return len(self.steps)

    def kind(self) -> str:
        """A coarse label for summaries."""
        return f"{self.effect}/{self.inputs}/{self.guard}{'+' + self.second if self.second else ''}"

    def describe(self) -> str:
        p = "S" if self.producer == "S" else self.producer
        c = "S" if self.consumer == "S" else self.consumer
        decl = []
        if self.declare_sdk:
            decl.append("stream=S")
        if self.declare_input:
            decl.append("input_stream=P")
        if self.stream_ptr:
            decl.append("stream_ptr=S")
        if self.user_non_blocking:
            decl.append("non_blocking=True")
        guard = self.guard
        if self.second:
            share = sum(s.guard == "second" for s in self.steps)
            s2 = "" if self.second_sdk == "S" else f" on S2={self.second_sdk}"
            inside = " built inside the block" if self.second_built_inside else ""
            guard += f" + second {self.second}{s2}{inside} ({share} frames)"
        changes = [f"{i}:{','.join(a for a, _ in s.config)}" for i, s in enumerate(self.steps) if s.config]
        consumers = sorted({str(s.consume) for s in self.steps})
        return (
            f"seed={self.seed} {self.effect} P={p} S={self.sdk} C={c} C2={self.consumer2} inputs={self.inputs}"
            f"({self.producer_framework}) run-context={self.context} [{' '.join(decl)}] guard={guard}"
            f" call={self.call} changes=[{' '.join(changes)}] consume={{{', '.join(consumers)}}} frames={self.frames}"
        )


def _draw_state(rng: random.Random, effect: str, st: State) -> tuple[State, tuple[tuple[str, Any], ...]]:
    """A configuration change for ``effect`` from ``st``: the new state and the attributes to set."""
    if effect.startswith("vsr"):
        what = rng.choice(("output", "output", "input", "encoding"))
        in_hw, out_hw, enc = st.in_hw, st.out_hw, st.encoding
        if what == "encoding":
            enc = "RGB10A2" if enc == "RGB8" else "RGB8"
        if what == "input":
            in_hw = rng.choice([s for s in _IN_SIZES if s != in_hw])
        if what in ("output", "input"):
            # 1x to 2x per dimension, never exactly 1x (the SDK allows that only for denoise/deblur qualities)
            choices = [(in_hw[0] * a, in_hw[1] * b) for a, b in ((1, 2), (2, 1), (2, 2))]
            out_hw = rng.choice([c for c in choices if c != out_hw] if what == "output" else choices)
        attrs: list[tuple[str, Any]] = []
        if out_hw[1] != st.out_hw[1]:
            attrs.append(("output_width", out_hw[1]))
        if out_hw[0] != st.out_hw[0]:
            attrs.append(("output_height", out_hw[0]))
        if enc != st.encoding:
            attrs.append(("image_encoding", enc))
        return dataclasses.replace(st, in_hw=in_hw, out_hw=out_hw, encoding=enc), tuple(attrs)
    if effect == "vfg":
        if rng.random() < 0.5:
            m = rng.choice([m for m in (2, 3, 4) if m != st.multiplier])
            return dataclasses.replace(st, multiplier=m), (("frame_multiplier", m),)
        hw = rng.choice([s for s in _IN_SIZES if s != st.in_hw])
        attrs = []
        if hw[1] != st.in_hw[1]:
            attrs.append(("input_width", hw[1]))
        if hw[0] != st.in_hw[0]:
            attrs.append(("input_height", hw[0]))
        return dataclasses.replace(st, in_hw=hw, out_hw=hw), tuple(attrs)
    # TrueHDR: a new input size (run() itself replaces the output), or new parameters
    if rng.random() < 0.5:
        hw = rng.choice([s for s in _IN_SIZES if s != st.in_hw])
        return dataclasses.replace(st, in_hw=hw, out_hw=hw), ()
    hdr = (rng.choice((80, 100, 120)), rng.choice((90, 100, 110)), rng.choice((40, 50)), rng.choice((650, 1000)))
    names = ("contrast", "saturation", "middle_gray", "luminance")
    attrs = [(n, v) for n, v, old in zip(names, hdr, st.hdr) if v != old]
    return dataclasses.replace(st, hdr=hdr), tuple(attrs)


def _draw_consume(rng: random.Random, gpu_mix: Sequence[float]) -> Consume:
    fw = rng.choices(FRAMEWORKS, weights=gpu_mix)[0]
    style = rng.choice(("helper", "raw"))
    if fw == "numpy":
        return Consume(fw, "helper", deferred=rng.random() < 0.3)
    if fw == "jax":  # JAX has no user-visible stream: no late work, no C2
        return Consume(fw, style, deferred=rng.random() < 0.3)
    if style == "helper":
        return Consume(fw, style, deferred=rng.random() < 0.3, on_c2=rng.random() < 0.2)
    return Consume(fw, style, late=rng.random() < 0.4, deferred=rng.random() < 0.3, on_c2=rng.random() < 0.3)


def generate(
    seed: int, *, frames: int = 8, consumer_mix: Sequence[float] = (0.35, 0.35, 0.15, 0.15), c2_copies: bool = True
) -> Program:
    """The program of ``seed`` (deterministic), with ``frames`` frames. A longer program of the same
    seed has the same streams, guards and settings, and the shorter one's frames first.

    ``consumer_mix`` weighs the consumer frameworks torch, CuPy, JAX, NumPy (the model maps every
    one to its own import and copy, so it only changes which copy styles are drawn).
    ``c2_copies=False`` leaves out copies of a view imported on C made on C2 after the program made
    C2 wait on C (the seeds' other draws stay the same).
    """
    rng = random.Random(seed)
    effect = rng.choice(EFFECTS)
    sdk = rng.choice(KINDS)
    producer = rng.choice((*KINDS, "S", "S"))
    consumer = rng.choice((*KINDS, "S"))
    consumer2 = rng.choice(KINDS)
    inputs = rng.choice(("fresh", "in-place"))
    context = rng.choice(("S", "P", "none"))
    if producer == "S" and context == "P":
        context = "S"
    guard = rng.choice(GUARDS)
    second_choices: tuple[str | None, ...] = (None, "contract") if guard == "with" else (None, "contract", "decorator", "with-per-frame")
    second = rng.choice(second_choices) if rng.random() < 0.5 else None
    second_sdk = rng.choice(KINDS) if second and rng.random() < 0.3 else "S"
    stream_ptr = rng.random() < 0.25
    declare_sdk = True if (context != "S" and not stream_ptr) else rng.random() < 0.6
    # The producer must be S, declared, or current at run(): streamsafe cannot see any other stream.
    known = context == "P" or (producer == "S" and second_sdk == "S")
    declare_input = True if not known else rng.random() < 0.3
    h, w = rng.choice(_IN_SIZES)
    if effect.startswith("vsr"):
        initial = State((h, w), (2 * h, 2 * w), "RGB10A2" if effect == "vsr-rgb10a2" else "RGB8")
    else:
        initial = State((h, w), (h, w), "RGB8")
    user_non_blocking = rng.random() < 0.2
    second_built_inside = guard == "with" and second == "contract" and rng.random() < 0.5
    call = rng.choice(("effect", "contract"))
    producer_framework = rng.choice(("torch", "cupy"))
    detect = rng.random() < 0.5
    change_rate = rng.choice((0.0, 0.0, 0.15, 0.3))
    second_rate = rng.choice((0.2, 0.4, 0.6))
    steps = []
    st = initial
    for k in range(frames):
        config: tuple[tuple[str, Any], ...] = ()
        if k > 0 and rng.random() < change_rate:
            st, config = _draw_state(rng, effect, st)
        which = "second" if second and rng.random() < second_rate else "main"
        delays = tuple(0.0 if rng.random() < 0.5 else round(rng.random(), 3) for _ in DELAY_STAGES)
        vfg_call: tuple[str, float] = ("index", rng.randrange(1, st.multiplier))
        if rng.random() < 0.3:
            vfg_call = ("timestep", rng.choice((0.25, 0.4, 0.6, 0.75)))
        consume = _draw_consume(rng, consumer_mix)
        if not c2_copies and consume.style == "raw" and consume.on_c2:
            consume = dataclasses.replace(consume, on_c2=False)
        steps.append(Step(which, st, config, consume, delays, vfg_call))
    return Program(
        seed=seed, effect=effect, producer=producer, sdk=sdk, consumer=consumer, consumer2=consumer2, inputs=inputs,
        context=context, declare_sdk=declare_sdk, declare_input=declare_input, stream_ptr=stream_ptr,
        user_non_blocking=user_non_blocking, guard=guard, second=second, second_sdk=second_sdk,
        second_built_inside=second_built_inside, call=call, producer_framework=producer_framework,
        detect=detect, initial=initial, steps=tuple(steps),
    )


def programs(count: int, *, seed: int = 0, frames: int = 8, **kwargs: Any) -> list[Program]:
    """``count`` programs, seeds ``seed`` to ``seed + count - 1``."""
    return [generate(seed + i, frames=frames, **kwargs) for i in range(count)]
