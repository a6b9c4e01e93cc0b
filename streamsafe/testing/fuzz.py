"""A randomized pipeline fuzzer: seeded programs that use an effect as users do, run under a strategy.

:func:`generate` draws one :class:`Program` from a seed: the effect (VideoSuperRes RGB8 or
RGB10A2, VideoFrameGeneration, TrueHDR), the kinds of the producer stream P, the SDK stream S,
the consumer stream C and a second consumer stream C2 (legacy, per-thread, blocking,
non-blocking; P and C may also be S itself), fresh inputs every frame that the program drops
after ``run()`` (an allocator recycles them) or surfaces rewritten in place, ``run()`` inside
or outside the framework's current-stream context, how the guard is made (a contract, a
``with`` block, the decorator, a ``with`` block per frame) and a second guard on the same
effect, and per frame: which guard runs it, configuration changes (output size, encoding,
input size, parameters), how the output is consumed (a copy helper or a raw
``from_dlpack(out.image)`` and copy; at once, after other work on C, or deferred until the
next frame; on C or on C2 after the program made C2 wait on C), and per-stream delays.

Every program is valid by the rules streamsafe states: each output is consumed before the
next ``run()`` of the effect, configuration changes go through a guard, and the input's
producer stream is S, declared (``input_stream=``) or current at ``run()``.

Two runners execute a program under one strategy and count corrupted frames (each copy
compared with a NumPy reference computed from the known input data):

* :func:`run_model`: on a :class:`~streamsafe.sim.SimBackend` (``adversarial`` or seeded
  ``random`` scheduler), which also reports every race it found.
* :class:`GpuRunner`: on a GPU, with torch tensors from torch's caching allocator, CuPy
  arrays from CuPy's pool, spin-kernel delays on P, S, the conversion and C, and torch,
  CuPy, JAX and NumPy consumers.

Both run the same executor; only the primitives (make a stream, write an input, import,
copy, delay, synchronise) differ. Only streamsafe's public API is used.

``python -m streamsafe.testing.fuzz --programs 40`` runs the model runner from the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import random
import sys
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import streamsafe as ss

from . import _kernels as K
from ..frameworks import cupy_external_stream
from .effects import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes

__all__ = [
    "EFFECTS",
    "KINDS",
    "STRATEGIES",
    "FRAMEWORKS",
    "State",
    "Consume",
    "Step",
    "Program",
    "Result",
    "generate",
    "programs",
    "frame_data",
    "reference",
    "run_model",
    "GpuRunner",
    "summarize",
    "main",
]

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


# -- data and references ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def frame_data(index: int, h: int, w: int, encoding: str) -> np.ndarray:
    """Input frame ``index % BANK`` of size ``h x w`` (read-only). Neighbouring frames differ everywhere
    by about 0.17 on average, below VideoFrameGeneration's cut threshold, so blends stay blends."""
    base = np.random.default_rng((h, w, 7)).random((3, h, w), dtype=np.float32)
    noise = np.random.default_rng((index % BANK, h, w)).random((3, h, w), dtype=np.float32)
    rgb = (np.float32(0.5) * base + np.float32(0.5) * noise).astype(np.float32)
    data = K.pack_rgb10a2(np, rgb) if encoding == "RGB10A2" else rgb
    data.setflags(write=False)
    return data


def _rgb8_roundtrip(rgb: np.ndarray) -> np.ndarray:
    out = np.empty(rgb.shape, np.float32)
    K.from_rgb8(np, K.to_rgb8(np, rgb), out)
    return out


@functools.lru_cache(maxsize=2048)
def _reference_cached(effect: str, st: State, scale: int, index: int, vfg_t: float, detect: bool) -> np.ndarray:
    h, w = st.in_hw[0] * scale, st.in_hw[1] * scale
    if effect == "truehdr":
        c, s, m, lum = st.hdr
        out = K.tone_map_hdr(np, frame_data(index, h, w, "RGB8"), contrast=c, saturation=s, middle_gray=m, luminance=lum)
    elif effect == "vfg":
        prev, cur = frame_data(index - 1, h, w, st.encoding), frame_data(index, h, w, st.encoding)
        if st.encoding == "RGB10A2":
            out = K.pack_rgb10a2(np, K.blend(np, K.unpack_rgb10a2(np, prev), K.unpack_rgb10a2(np, cur), vfg_t, detect))
        else:
            out = _rgb8_roundtrip(K.blend(np, prev, cur, vfg_t, detect))
    else:
        oh, ow = st.out_hw[0] * scale, st.out_hw[1] * scale
        data = frame_data(index, h, w, st.encoding)
        if st.encoding == "RGB10A2":
            out = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, data), oh, ow))
        else:
            out = _rgb8_roundtrip(K.resize_bilinear(np, data, oh, ow))
    out.setflags(write=False)
    return out


def reference(program: Program, k: int, scale: int = 1) -> np.ndarray:
    """What frame ``k`` of ``program`` must be, computed on the host with NumPy."""
    step = program.steps[k]
    t = 0.0
    if program.effect == "vfg":
        kind, value = step.vfg_call
        t = value / step.state.multiplier if kind == "index" else float(value)
    return _reference_cached(program.effect, step.state, scale, k + BANK, t, program.detect)


def _matches(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    """Exact on the model; on a GPU one code step of rounding (a race gives another frame or garbage)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype == np.uint32:
        if exact:
            return bool(np.array_equal(got, want))
        for shift in (0, 10, 20):
            diff = np.abs(((got >> shift) & 0x3FF).astype(np.int64) - ((want >> shift) & 0x3FF).astype(np.int64))
            if diff.max(initial=0) > 1:
                return False
        return bool(np.array_equal(got >> 30, want >> 30))
    if exact:
        return bool(np.array_equal(got, want))
    return bool(np.allclose(got, want, atol=1.5 / 255, rtol=0))


# -- results ------------------------------------------------------------------------------------------


@dataclass
class Result:
    """One program under one strategy on one backend."""

    program: Program
    strategy: str
    backend: str
    frames: int = 0
    """Frames whose copy was checked."""
    corrupt: int = 0
    corrupt_frames: list[int] = field(default_factory=list)
    races: int = 0
    race_samples: list[str] = field(default_factory=list)
    hazards: list[str] = field(default_factory=list)
    """The hazard ids of the races (the model's attribution)."""
    error: str | None = None
    """The exception that stopped the program, with where it was raised."""
    skipped: str | None = None
    """Why the strategy does not apply (``async`` with a conversion stream that is not legacy)."""
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    per_consumer: dict[str, list[int]] = field(default_factory=dict)
    """Consumer label -> [frames, corrupt]."""

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.corrupt == 0 and self.races == 0 and self.error is None)

    def verdict(self) -> str:
        if self.skipped:
            return f"skipped ({self.skipped})"
        parts = [f"{self.corrupt}/{self.frames} corrupt"]
        if self.corrupt_frames:
            parts.append(f"frames {self.corrupt_frames[:8]}")
        if self.races:
            parts.append(f"{self.races} races {','.join(self.hazards)}")
        if self.error:
            parts.append(f"ERROR {self.error}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"[{self.backend} {self.strategy}] {self.verdict()} :: {self.program.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.program.seed,
            "program": self.program.describe(),
            "kind": self.program.kind(),
            "strategy": self.strategy,
            "backend": self.backend,
            "frames": self.frames,
            "corrupt": self.corrupt,
            "corrupt_frames": self.corrupt_frames[:20],
            "races": self.races,
            "hazards": self.hazards,
            "race_samples": self.race_samples,
            "error": self.error,
            "skipped": self.skipped,
            "warnings": self.warnings[:3],
            "seconds": round(self.seconds, 3),
        }


# -- the executor (shared by both runners) -----------------------------------------------------------


class _World:
    """The primitives a runner provides. ``stream`` handles are the runner's own objects."""

    name = "?"
    scale = 1
    exact = True
    check_every = 0
    """Check copies every this many frames (0: only at the end)."""

    def stream(self, role: str, kind: str) -> Any:
        raise NotImplementedError

    def sdk_value(self, stream: Any) -> Any:
        """What to give a guard as ``stream=`` / ``input_stream=``."""
        raise NotImplementedError

    def ptr(self, stream: Any) -> int:
        raise NotImplementedError

    def context(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def make_effect(self, program: Program) -> Any:
        raise NotImplementedError

    def set_delays(self, effect: Any, delays: dict[str, float]) -> None:
        pass

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        raise NotImplementedError

    def spin(self, stream: Any, us: float) -> None:
        pass

    def other_work(self, stream: Any, us: float) -> None:
        raise NotImplementedError

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        raise NotImplementedError

    def synchronize(self) -> None:
        raise NotImplementedError

    def to_numpy(self, copy: Any) -> np.ndarray:
        raise NotImplementedError

    def races(self) -> list[Any]:
        return []

    def cleanup(self) -> None:
        pass


class _Api:
    """What a frame body calls: ``run``/``run_at_timestep``/``configure`` through one guard."""

    __slots__ = ("run", "run_at_timestep", "configure")

    def __init__(self, run: Callable[..., Any], run_at_timestep: Callable[..., Any] | None, configure: Callable[..., None]) -> None:
        self.run = run
        self.run_at_timestep = run_at_timestep
        self.configure = configure


class _Execution:
    def __init__(self, program: Program, strategy: str, world: _World, result: Result, max_delay_us: float, late_us: float) -> None:
        self.p = program
        self.strategy = strategy
        self.world = world
        self.result = result
        self.max_delay_us = max_delay_us
        self.late_us = late_us
        self.pending: list[tuple[int, str, Any]] = []
        self.deferred: list[Callable[[], None]] = []
        self.prev: tuple[int, tuple[int, int, str], Any] | None = None
        self.ring: dict[tuple[int, int, str], list[int]] = {}
        self.effect: Any = None
        self.main: Any = None
        self.second: Any = None
        self.stack = contextlib.ExitStack()
        self.setting_up = True

    # streams and guards ---------------------------------------------------------------------------

    def _streams(self) -> None:
        p, w = self.p, self.world
        self.S = w.stream("S", p.sdk)
        self.P = self.S if p.producer == "S" else w.stream("P", p.producer)
        self.C = self.S if p.consumer == "S" else w.stream("C", p.consumer)
        self.C2 = w.stream("C2", p.consumer2)
        self.S2 = self.S if p.second_sdk == "S" else w.stream("S2", p.second_sdk)

    def _kwargs(self, sdk: Any) -> tuple[Any, dict[str, Any]]:
        kw: dict[str, Any] = {"strategy": self.strategy, "allow_none": self.strategy == "none"}
        if self.p.declare_input:
            kw["input_stream"] = self.world.sdk_value(self.P)
        return (self.world.sdk_value(sdk) if self.p.declare_sdk else None), kw

    def _build(self, kind: str, sdk: Any) -> Any:
        stream, kw = self._kwargs(sdk)
        if kind == "contract":
            return ss.StreamContract(self.effect, stream, **kw)
        if kind == "decorator":
            return ss.stream_safe(self.effect, stream, **kw)(_call_thunk)
        if kind == "with":
            return self.stack.enter_context(ss.stream_contract(self.effect, stream, **kw))
        return None  # with-per-frame: built per frame

    def _effect_api(self, contract: Any) -> _Api:
        if self.p.call == "contract" and contract is not None:
            return _Api(contract.run, getattr(contract, "run_at_timestep", None), lambda **a: _setattrs(self.effect, a))
        fx = self.effect
        return _Api(lambda *a, **k: fx.run(*a, **k), getattr(fx, "run_at_timestep", None), lambda **a: _setattrs(fx, a))

    def _guarded(self, which: str, body: Callable[[_Api], None]) -> None:
        p = self.p
        kind = p.guard if which == "main" else p.second
        assert kind is not None
        sdk = self.S if which == "main" else self.S2
        ctx = {"S": sdk, "P": self.P, "none": None}[p.context]
        with self.world.context(ctx) if ctx is not None else contextlib.nullcontext():
            if kind == "contract":
                if which == "main":
                    c = self.main
                else:
                    if self.second is None:
                        self.second = self._build("contract", sdk)
                    c = self.second
                body(_Api(c.run, getattr(c, "run_at_timestep", None), c.configure))
            elif kind == "with":
                body(self._effect_api(self.main))
            elif kind == "decorator":
                fn = self.main if which == "main" else self.second
                fn(lambda: body(self._effect_api(None)))
            else:
                stream, kw = self._kwargs(sdk)
                with ss.stream_contract(self.effect, stream, **kw) as c:
                    body(self._effect_api(c))

    # frames ---------------------------------------------------------------------------------------

    def _inputs(self, k: int, step: Step) -> list[Any]:
        p, w = self.p, self.world
        st = step.state
        h, wd = st.in_hw[0] * w.scale, st.in_hw[1] * w.scale
        enc = "RGB8" if p.effect == "truehdr" else st.encoding
        d = self._delay(step, "P")
        idx = k + BANK
        if p.effect != "vfg":
            slot = None if p.inputs == "fresh" else "surface"
            return [w.produce(self.P, enc, h, wd, idx, d, slot)]
        key = (h, wd, enc)
        if p.inputs == "fresh":
            prev = self.prev[2] if self.prev is not None and self.prev[:2] == (idx - 1, key) else None
            if prev is None:
                prev = w.produce(self.P, enc, h, wd, idx - 1, 0.0, None)
            cur = w.produce(self.P, enc, h, wd, idx, d, None)
            self.prev = (idx, key, cur)
            return [prev, cur]
        ring = self.ring.setdefault(key, [-1, -1])
        cur = w.produce(self.P, enc, h, wd, idx, d, f"ring{idx % 2}")
        ring[idx % 2] = idx
        if ring[(idx - 1) % 2] != idx - 1:
            prev = w.produce(self.P, enc, h, wd, idx - 1, 0.0, f"ring{(idx - 1) % 2}")
            ring[(idx - 1) % 2] = idx - 1
        else:
            prev = w.produce(self.P, enc, h, wd, idx - 1, -1.0, f"ring{(idx - 1) % 2}")  # -1: look up, no write
        return [prev, cur]

    def _delay(self, step: Step, stage: str) -> float:
        frac = step.delays[DELAY_STAGES.index(stage)]
        return frac * (self.late_us if stage == "late" else self.max_delay_us)

    def _frame(self, k: int, step: Step) -> None:
        p = self.p
        inputs = self._inputs(k, step)
        for issue in self.deferred:  # the previous frame's deferred consumption: before this run
            issue()
        self.deferred.clear()
        self.world.set_delays(self.effect, {s: self._delay(step, s) for s in ("transfer", "inference", "conversion")})
        extra: dict[str, Any] = {}
        sdk = self.S if step.guard == "main" else self.S2
        if p.stream_ptr:
            extra["stream_ptr"] = self.world.ptr(sdk)
        if p.user_non_blocking:
            extra["non_blocking"] = True
        scale = self.world.scale

        def body(api: _Api) -> None:
            if step.config:
                api.configure(**{a: _scaled(a, v, scale) for a, v in step.config})
            if p.effect == "vfg":
                kind, value = step.vfg_call
                if kind == "index":
                    out = api.run(inputs[0], inputs[1], frame_index=int(value), **extra)
                else:
                    assert api.run_at_timestep is not None
                    out = api.run_at_timestep(inputs[0], inputs[1], float(value), **extra)
            else:
                out = api.run(inputs[0], **extra)
            self._consume(k, step, out)

        self._guarded(step.guard, body)
        inputs.clear()  # the program keeps no reference to this frame's inputs (VideoFrameGeneration keeps `current`)

    def _consume(self, k: int, step: Step, out: Any) -> None:
        c, w = step.consume, self.world
        label = str(c)
        if c.style == "helper":
            stream = self.C2 if c.on_c2 else self.C
            delay = self._delay(step, "C")

            def helper() -> None:
                w.spin(stream, delay)
                self.pending.append((k, label, w.helper(out, c.framework, stream)))

            if c.deferred:
                self.deferred.append(helper)
            else:
                helper()
            return
        view = w.import_view(out, c.framework, self.C)

        def finish() -> None:
            if c.late:
                w.other_work(self.C, self._delay(step, "late"))
            target = self.C
            if c.on_c2:
                w.user_fence(self.C2, self.C)
                declare = getattr(out, "record_stream", None)
                if declare is not None:  # the view is read on a stream streamsafe cannot see: say so
                    declare(w.sdk_value(self.C2))
                target = self.C2
            w.spin(target, self._delay(step, "C"))
            self.pending.append((k, label, w.copy(view, c.framework, target)))

        if c.deferred:
            self.deferred.append(finish)
        else:
            finish()

    def _close(self) -> None:
        kind = self.p.guard
        if kind == "contract":
            self.main.close()
        elif kind == "with":
            self.effect.close()  # guarded inside the block
        elif kind == "decorator":
            self.main.contract.close()
        else:
            stream, kw = self._kwargs(self.S)
            with ss.stream_contract(self.effect, stream, **kw):
                self.effect.close()

    def check(self) -> None:
        if not self.pending:
            return
        self.world.synchronize()
        r = self.result
        for k, label, copy in self.pending:
            ok = _matches(self.world.to_numpy(copy), reference(self.p, k, self.world.scale), self.world.exact)
            r.frames += 1
            counts = r.per_consumer.setdefault(label, [0, 0])
            counts[0] += 1
            if not ok:
                r.corrupt += 1
                counts[1] += 1
                r.corrupt_frames.append(k)
        self.pending.clear()

    def execute(self) -> None:
        p, r = self.p, self.result
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self._streams()
                self.effect = self.world.make_effect(p)
                if p.second in ("contract", "decorator") and not p.second_built_inside:
                    self.second = self._build(p.second, self.S2)  # before the main guard's block opens
                self.main = self._build(p.guard, self.S)
                self.setting_up = False
                for k, step in enumerate(p.steps):
                    self._frame(k, step)
                    every = self.world.check_every
                    if every and (k + 1) % every == 0 and not self.deferred:
                        self.check()
                for issue in self.deferred:
                    issue()
                self.deferred.clear()
                self._close()
                self.stack.close()
                self.check()
            except Exception as e:  # a crash is a failure of the library under test: record it
                if isinstance(e, ss.errors.StrategyError) and self.setting_up:
                    r.skipped = str(e).splitlines()[0]  # e.g. async where it is unsound
                else:
                    r.error = _describe_error(e)
                with contextlib.suppress(Exception):
                    self.stack.close()
                with contextlib.suppress(Exception):
                    self.check()  # the copies issued before the crash
            finally:
                self.deferred.clear()
                self.pending.clear()
        r.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]


def _call_thunk(thunk: Callable[[], Any]) -> Any:
    return thunk()


def _setattrs(obj: Any, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        setattr(obj, name, value)


def _scaled(name: str, value: Any, scale: int) -> Any:
    if name.endswith(("_width", "_height")):
        return int(value) * scale
    if name == "image_encoding":
        return ImageEncoding[value]
    return value


def _describe_error(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(frames):
        if "/streamsafe/" in fr.filename.replace("\\", "/") and not fr.filename.endswith("fuzz.py"):
            where = f" at {fr.filename.rsplit('streamsafe', 1)[-1].lstrip('/')}:{fr.lineno} {fr.name}"
            break
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}{where}"


def _make_effect(program: Program, backend: Any, scale: int) -> Any:
    st = program.initial
    if program.effect == "truehdr":
        fx: Any = TrueHDR(backend=backend)
    elif program.effect == "vfg":
        fx = VideoFrameGeneration(backend=backend, automatic_shot_change_detection_enabled=program.detect)
        fx.input_height, fx.input_width = st.in_hw[0] * scale, st.in_hw[1] * scale
        fx.frame_multiplier = st.multiplier
    else:
        fx = VideoSuperRes(backend=backend, image_encoding=ImageEncoding[st.encoding])
        fx.output_height, fx.output_width = st.out_hw[0] * scale, st.out_hw[1] * scale
    fx.load()
    return fx


def _execute(program: Program, strategy: str, world: _World, backend: str, max_delay_us: float = 0.0, late_us: float = 0.0) -> Result:
    result = Result(program, strategy, backend)
    start = time.perf_counter()
    try:
        _Execution(program, strategy, world, result, max_delay_us, late_us).execute()
        races = world.races()
        result.races = len(races)
        result.race_samples = [str(r).splitlines()[0][:300] for r in races[:3]]
        result.hazards = sorted({_classify(r) for r in races})
    finally:
        world.cleanup()
    result.seconds = time.perf_counter() - start
    return result


def _classify(race: Any) -> str:
    try:
        from ..tools.hazards import classify

        return classify(race)
    except Exception:
        return "?"


# -- the model runner ---------------------------------------------------------------------------------


class _SimWorld(_World):
    name = "sim"

    def __init__(self, scheduler: str, seed: int | None) -> None:
        self.sim = ss.sim.SimBackend(scheduler=scheduler, seed=seed)
        self._pool: list[tuple[weakref.ref[Any], Any, Any]] = []
        self._surfaces: dict[tuple[Any, ...], Any] = {}
        self._scratch: dict[Any, Any] = {}
        self._native = "stream" in inspect.signature(self.sim.empty).parameters
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def _alloc(self, shape: tuple[int, ...], dtype: Any, name: str, stream: Any) -> Any:
        if self._native:
            return self.sim.empty(shape, dtype, name=name, stream=stream)
        return self.sim.empty(shape, dtype, name=name)

    def stream(self, role: str, kind: str) -> Any:
        if kind == "legacy":
            return self.sim.legacy_stream()
        if kind == "per-thread":
            return self.sim.per_thread_stream()
        return self.sim.create_stream(non_blocking=kind == "non-blocking")

    def sdk_value(self, stream: Any) -> Any:
        return stream

    def ptr(self, stream: Any) -> int:
        return int(stream.ptr)

    def context(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return self.sim.use_stream(stream)

    def make_effect(self, program: Program) -> Any:
        return _make_effect(program, self.sim, 1)

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        data = frame_data(index, h, w, encoding)
        if slot is not None:
            key = (slot, h, w, encoding)
            arr = self._surfaces.get(key)
            if arr is None:
                arr = self._surfaces[key] = self._alloc(data.shape, data.dtype, f"input surface {slot}", stream)
            if delay < 0:
                return arr
            op = "producer.write"
        else:
            # A caching allocator (as torch's and CuPy's): memory of an input nobody references any
            # more goes back to the pool of the stream that allocated it and is handed to the next
            # allocation there at once, with no regard for other streams still reading it.
            if self._native:  # the model's own caching allocator
                arr = self.sim.empty(data.shape, data.dtype, name="input frame", stream=stream)
                op = "producer.reuse" if arr.buffer in self._seen else "producer.write"
                self._seen.add(arr.buffer)
                buffer = arr.buffer
                self.sim.launch(stream, op, functools.partial(np.copyto, buffer.data, data), writes=[buffer])
                return arr
            # An older model without one: the pool keeps its own handle; the program gets an alias of
            # the same memory, free once the program (and anything streamsafe keeps alive) drops it.
            block = None
            for i, (ref, handle, owner) in enumerate(self._pool):
                if ref() is None and owner == stream and handle.shape == data.shape and handle.dtype == data.dtype:
                    del self._pool[i]
                    block = handle
                    break
            op = "producer.reuse" if block is not None else "producer.write"
            if block is None:
                block = self.sim.empty(data.shape, data.dtype, name="input frame")
            arr = self.sim.from_dlpack(block.__dlpack__(stream=-1))
            self._pool.append((weakref.ref(arr), block, stream))
        buffer = arr.buffer  # the pending write must not keep the array object alive

        def write() -> None:
            np.copyto(buffer.data, data)

        self.sim.launch(stream, op, write, writes=[buffer])
        return arr

    def other_work(self, stream: Any, us: float) -> None:
        scratch = self._scratch.get(stream)
        if scratch is None:
            scratch = self._scratch[stream] = self._alloc((4,), np.float32, "consumer scratch", stream)
        self.sim.launch(stream, "consumer.other", None, writes=[scratch])

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        return out.numpy()

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        return self.sim.from_dlpack(out.image, stream=stream)

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        return self.sim.copy(view, stream, name="consumer.copy")

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        self.sim.fence(waiter, signaller)

    def synchronize(self) -> None:
        self.sim.synchronize_device()

    def to_numpy(self, copy: Any) -> np.ndarray:
        if isinstance(copy, np.ndarray):
            return copy
        return self.sim.download(copy)

    def races(self) -> list[Any]:
        return list(self.sim.races)


def run_model(program: Program, strategy: str, *, scheduler: str = "adversarial", seed: int | None = 0) -> Result:
    """Run ``program`` under ``strategy`` on a fresh :class:`~streamsafe.sim.SimBackend`; count corrupted
    frames and the races the model reports. Deterministic for a given scheduler and seed."""
    label = "sim" if scheduler == "adversarial" else f"sim-{scheduler}:{seed}"
    return _execute(program, strategy, _SimWorld(scheduler, seed), label)


# -- the GPU runner -----------------------------------------------------------------------------------

_SPIN_SOURCE = r"""
extern "C" __global__ void streamsafe_fuzz_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


@dataclass
class _GpuStream:
    kind: str
    torch: Any
    cupy: Any
    ss: Any
    ptr: int


class GpuRunner:
    """Runs programs on a GPU: torch and CuPy produce inputs from their allocators, the emulated
    effects run real CuPy kernels, consumers are torch, CuPy, JAX (``out.jax()`` or the seed's
    recipe) and NumPy; random spin delays on P, the SDK stages, the conversion and C.

    ``scale`` multiplies the programs' sizes (4: 64x64 inputs). ``max_delay_us`` bounds the
    per-stage delays, ``late_us`` the other work a late consumer enqueues on C. Copies are checked
    every ``check_every`` frames (a device synchronisation) and at the end of each program.
    ``producers`` limits which frameworks write inputs (torch, CuPy).
    """

    def __init__(
        self,
        device: int = 0,
        *,
        scale: int = 4,
        max_delay_us: float = 200.0,
        late_us: float = 500.0,
        check_every: int = 25,
        producers: Sequence[str] = ("torch", "cupy"),
    ) -> None:
        import cupy
        import torch

        from ._engines import spin_cycles_per_us

        self.torch, self.cupy = torch, cupy
        self.device = device
        self.scale = scale
        self.max_delay_us = max_delay_us
        self.late_us = late_us
        self.check_every = check_every
        self.producers = tuple(producers)
        """The frameworks allowed to write inputs; a program drawing another uses the first of these."""
        self.backend = ss.CudaBackend()
        torch.cuda.init()
        torch.cuda.set_device(device)
        self.cycles_per_us = spin_cycles_per_us(device)
        with cupy.cuda.Device(device):
            self._spin_kernel = cupy.RawKernel(_SPIN_SOURCE, "streamsafe_fuzz_spin")
        self._pools: dict[str, list[_GpuStream]] = {}
        self._singletons: dict[str, _GpuStream] = {}
        self._upload = torch.cuda.Stream(device)
        self._bank: dict[tuple[str, int, int, str], list[Any]] = {}
        self._jax: Any = None
        self.torch_uint32 = self._probe_torch_uint32()

    def _probe_torch_uint32(self) -> bool:
        """Whether torch can hand a uint32 tensor to the SDK by DLPack (else CuPy writes RGB10A2 inputs)."""
        torch, cupy = self.torch, self.cupy
        try:
            t = torch.zeros(4, dtype=torch.int32, device=f"cuda:{self.device}").view(torch.uint32)
            with cupy.cuda.Device(self.device):
                ok = cupy.from_dlpack(t).dtype == np.uint32
                back = torch.from_dlpack(cupy.zeros(4, dtype=np.uint32)).clone()
            ok = ok and back.dtype == torch.uint32
            torch.cuda.synchronize(self.device)
            return bool(ok)
        except Exception:
            return False

    def jax(self) -> Any:
        if self._jax is None:
            import jax
            import jax.numpy as jnp

            self._jax = (jax, jnp)
        return self._jax

    # streams: one pool per kind, a distinct stream per role; shared by all programs
    def stream(self, role: str, kind: str) -> _GpuStream:
        torch, cupy = self.torch, self.cupy
        if kind in ("legacy", "per-thread"):
            s = self._singletons.get(kind)
            if s is None:
                with torch.cuda.device(self.device), cupy.cuda.Device(self.device):
                    if kind == "legacy":
                        ts, cs = torch.cuda.default_stream(self.device), cupy.cuda.Stream.null
                    else:
                        ts, cs = torch.cuda.ExternalStream(2, device=self.device), cupy.cuda.Stream.ptds
                s = self._singletons[kind] = _GpuStream(kind, ts, cs, ss.as_stream(ts, backend=self.backend), int(ts.cuda_stream))
            return s
        pool = self._pools.setdefault(kind, [])
        roles = ("S", "P", "C", "C2", "S2")
        i = roles.index(role)
        while len(pool) <= i:
            with torch.cuda.device(self.device), cupy.cuda.Device(self.device):
                if kind == "non-blocking":
                    ts = torch.cuda.Stream(self.device)
                    cs = cupy_external_stream(cupy, ss.as_stream(ts, backend=self.backend))  # (the device is current)
                else:
                    cs = cupy.cuda.Stream(non_blocking=False)
                    ts = torch.cuda.ExternalStream(int(cs.ptr), device=self.device)
            pool.append(_GpuStream(kind, ts, cs, ss.as_stream(ts, backend=self.backend), int(ts.cuda_stream)))
        return pool[i]

    def bank(self, framework: str, encoding: str, h: int, w: int) -> list[Any]:
        """``BANK`` device copies of the input frames of this size, written once (never again)."""
        key = (framework, h, w, encoding)
        frames = self._bank.get(key)
        if frames is None:
            torch, cupy = self.torch, self.cupy
            frames = []
            for i in range(BANK):
                host = frame_data(i, h, w, encoding)
                if framework == "torch":
                    with torch.cuda.stream(self._upload):
                        src = torch.from_numpy(np.array(host.view(np.int32) if encoding == "RGB10A2" else host))
                        frames.append(src.to(f"cuda:{self.device}"))
                else:
                    with cupy.cuda.Device(self.device):
                        frames.append(cupy.asarray(host))
            self._upload.synchronize()
            cupy.cuda.runtime.deviceSynchronize()
            self._bank[key] = frames
        return frames

    def spin(self, stream: _GpuStream, us: float) -> None:
        if us <= 0:
            return
        with self.cupy.cuda.Device(self.device), stream.cupy:
            self._spin_kernel((1,), (1,), (np.int64(us * self.cycles_per_us),))

    def run(self, program: Program, strategy: str) -> Result:
        """Run ``program`` under ``strategy`` once on the GPU."""
        world = _GpuWorld(self, program)
        return _execute(program, strategy, world, "cuda", self.max_delay_us, self.late_us)


class _GpuWorld(_World):
    name = "cuda"
    exact = False

    def __init__(self, runner: GpuRunner, program: Program) -> None:
        self.r = runner
        self.scale = runner.scale
        self.check_every = runner.check_every
        self.program = program
        fw = program.producer_framework
        self.producer_framework = fw if fw in runner.producers else runner.producers[0]
        self._surfaces: dict[tuple[Any, ...], Any] = {}
        self._dev = f"cuda:{runner.device}"
        self._rgb10a2 = program.effect in ("truehdr", "vsr-rgb10a2") or any(
            s.state.encoding == "RGB10A2" for s in program.steps
        )

    def stream(self, role: str, kind: str) -> Any:
        return self.r.stream(role, kind)

    def sdk_value(self, stream: Any) -> Any:
        return stream.torch

    def ptr(self, stream: Any) -> int:
        return int(stream.ptr)

    @contextlib.contextmanager
    def context(self, stream: Any) -> Iterator[None]:
        with self.r.torch.cuda.stream(stream.torch), stream.cupy:
            yield

    def make_effect(self, program: Program) -> Any:
        return _make_effect(program, self.r.backend, self.scale)

    def set_delays(self, effect: Any, delays: dict[str, float]) -> None:
        effect.latency_us = delays

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        fw = self.producer_framework
        if encoding == "RGB10A2" and not self.r.torch_uint32:
            fw = "cupy"
        key = (slot, h, w, encoding, fw)
        torch, cupy = self.r.torch, self.r.cupy
        if slot is not None and delay < 0:  # the surface as it is: no write
            arr = self._surfaces[key]
            return arr.view(torch.uint32) if fw == "torch" and encoding == "RGB10A2" else arr
        src = self.r.bank(fw, encoding, h, w)[index % BANK]
        if fw == "torch":
            with torch.cuda.stream(stream.torch):
                self.r.spin(stream, delay)
                if slot is None:  # from torch's caching allocator, on P
                    dst = torch.empty(src.shape, dtype=src.dtype, device=self._dev)
                else:
                    dst = self._surfaces.get(key)
                    if dst is None:
                        dst = self._surfaces[key] = torch.empty(src.shape, dtype=src.dtype, device=self._dev)
                dst.copy_(src)
            if encoding == "RGB10A2":  # written as int32 bits; the SDK takes uint32
                return dst.view(torch.uint32)
            return dst
        with cupy.cuda.Device(self.r.device), stream.cupy:  # from CuPy's pool, on P
            self.r.spin(stream, delay)
            if slot is None:
                arr = cupy.empty(src.shape, dtype=src.dtype)
            else:
                arr = self._surfaces.get(key)
                if arr is None:
                    arr = self._surfaces[key] = cupy.empty(src.shape, dtype=src.dtype)
            cupy.copyto(arr, src)
        return arr

    def spin(self, stream: Any, us: float) -> None:
        self.r.spin(stream, us)

    def other_work(self, stream: Any, us: float) -> None:
        self.r.spin(stream, max(us, 1.0))

    def _fw(self, framework: str) -> str:
        """torch without uint32 DLPack support cannot take RGB10A2 outputs: CuPy copies them instead."""
        if framework == "torch" and not self.r.torch_uint32 and self._rgb10a2:
            return "cupy"
        return framework

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            return out.torch(stream.torch)
        if framework == "cupy":
            return out.cupy(stream.cupy)
        if framework == "jax":
            self.r.jax()
            return out.jax()
        return out.numpy()

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            with self.r.torch.cuda.stream(stream.torch):
                return self.r.torch.from_dlpack(out.image)
        if framework == "cupy":
            with self.r.cupy.cuda.Device(self.r.device), stream.cupy:
                return self.r.cupy.from_dlpack(out.image)
        jax, _ = self.r.jax()
        return jax.dlpack.from_dlpack(out.image, copy=False)  # JAX passes its own stream to __dlpack__

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        framework = self._fw(framework)
        if framework == "torch":
            with self.r.torch.cuda.stream(stream.torch):
                return view.clone()
        if framework == "cupy":
            with self.r.cupy.cuda.Device(self.r.device), stream.cupy:
                return view.copy()
        _, jnp = self.r.jax()
        out = jnp.array(view, copy=True)  # the seed's recipe: copy after a zero-copy import, then wait
        out.block_until_ready()
        return out

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        waiter.torch.wait_stream(signaller.torch)

    def synchronize(self) -> None:
        self.r.torch.cuda.synchronize(self.r.device)

    def to_numpy(self, copy: Any) -> np.ndarray:
        if isinstance(copy, np.ndarray):
            return copy
        module = type(copy).__module__ or ""
        if module.startswith("torch"):
            torch = self.r.torch
            if copy.dtype == torch.uint32:
                return copy.view(torch.int32).cpu().numpy().view(np.uint32)
            return copy.cpu().numpy()
        if module.startswith("cupy"):
            return self.r.cupy.asnumpy(copy)
        return np.asarray(copy)

    def cleanup(self) -> None:
        self._surfaces.clear()
        with contextlib.suppress(Exception):
            self.r.torch.cuda.synchronize(self.r.device)


# -- summaries and the command line ---------------------------------------------------------------------


def summarize(results: Sequence[Result]) -> dict[str, Any]:
    """Totals per strategy, per program kind (effect/inputs/guards) and per consumer, and the failures."""
    out: dict[str, Any] = {"strategies": {}, "failures": []}
    for r in results:
        s = out["strategies"].setdefault(
            r.strategy,
            {"programs": 0, "frames": 0, "corrupt": 0, "races": 0, "errors": 0, "skipped": 0, "seconds": 0.0,
             "by_kind": {}, "by_effect": {}, "by_inputs": {}, "by_consumer": {}},
        )
        s["programs"] += 1
        s["frames"] += r.frames
        s["corrupt"] += r.corrupt
        s["races"] += r.races
        s["errors"] += r.error is not None
        s["skipped"] += r.skipped is not None
        s["seconds"] = round(s["seconds"] + r.seconds, 3)
        for table, key in (("by_kind", r.program.kind()), ("by_effect", r.program.effect), ("by_inputs", r.program.inputs)):
            row = s[table].setdefault(key, {"frames": 0, "corrupt": 0, "errors": 0})
            row["frames"] += r.frames
            row["corrupt"] += r.corrupt
            row["errors"] += r.error is not None
        for label, (frames, corrupt) in r.per_consumer.items():
            fw = label.split("-", 1)[0]
            for key in (fw, label):
                row = s["by_consumer"].setdefault(key, {"frames": 0, "corrupt": 0})
                row["frames"] += frames
                row["corrupt"] += corrupt
        if not r.ok:
            out["failures"].append(r.to_dict())
    return out


def _table(results: Sequence[Result]) -> str:
    summary = summarize(results)
    lines = [f"{'strategy':<9} {'programs':>8} {'frames':>7} {'corrupt':>7} {'races':>6} {'errors':>6} {'skipped':>7}"]
    for name, s in summary["strategies"].items():
        lines.append(
            f"{name:<9} {s['programs']:>8} {s['frames']:>7} {s['corrupt']:>7} {s['races']:>6} {s['errors']:>6} {s['skipped']:>7}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m streamsafe.testing.fuzz``: run seeded programs on the model (or ``--backend cuda``)."""
    from ..sim.schedule import SCHEDULERS

    def positive(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is not a positive count: pass 1 or more (an empty run proves nothing)")
        return value

    ap = argparse.ArgumentParser(prog="python -m streamsafe.testing.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sim", "cuda"), default="sim")
    ap.add_argument("--programs", type=positive, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=positive, default=None, help="frames per program (default: 8 on sim, 50 on cuda)")
    ap.add_argument("--strategies", default=",".join(("none", *STRATEGIES)))
    ap.add_argument("--scheduler", type=str.lower, choices=SCHEDULERS, default="adversarial", help="sim: adversarial, random or in-order")
    ap.add_argument("--schedule-seeds", type=positive, default=1, help="sim with the random scheduler: seeds per program")
    ap.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failing result")
    args = ap.parse_args(argv)
    known = ("none", *STRATEGIES)
    strategies = list(dict.fromkeys(s.strip().lower() for s in args.strategies.split(",")))
    unknown = [s for s in strategies if s not in known]
    if unknown:
        ap.error(f"--strategies: unknown strategy {unknown[0]!r}; choose from {', '.join(known)}")
    runner = None
    if args.backend == "cuda":
        try:
            runner = GpuRunner()
        except Exception as e:  # no torch or CuPy, or no GPU for them
            ap.error(f"--backend cuda needs torch and CuPy on a machine with an NVIDIA GPU ({e}); use --backend sim here")
    frames = args.frames or (8 if args.backend == "sim" else 50)
    progs = programs(args.programs, seed=args.seed, frames=frames)
    results = []
    for strategy in strategies:
        for prog in progs:
            if runner is not None:
                results.append(runner.run(prog, strategy))
                continue
            seeds = range(1, args.schedule_seeds + 1) if args.scheduler == "random" else [0]
            for s in seeds:
                results.append(run_model(prog, strategy, scheduler=args.scheduler, seed=s))
    if args.verbose:
        for r in results:
            if not r.ok:
                print(r)
    print(_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summarize(results), f, indent=1)
    bad = [r for r in results if r.strategy != "none" and not r.ok]
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
