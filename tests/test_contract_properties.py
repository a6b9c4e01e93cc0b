"""Hypothesis: random stream kinds for P, S, C, random effects and encodings, random sequences
of run / run_at_timestep / import on random consumer streams / resize / close, and random
schedules. Every strategy but ``none`` yields no race and correct copies; ``none`` races."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamsafe as ss
from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _kernels as K

KINDS = ["legacy", "per-thread", "blocking", "non-blocking"]
EFFECTS = [("sr", "RGB8"), ("sr", "RGB10A2"), ("vfg", "RGB8"), ("vfg", "RGB10A2"), ("hdr", "RGB10A2")]
H = W = 16


@dataclass(frozen=True)
class Case:
    p: str
    s: str
    consumers: tuple[str, ...]
    effect: tuple[str, str]
    ops: tuple[tuple[Any, ...], ...]
    non_blocking: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    kind = st.sampled_from(KINDS + ["same-as-S"])
    consumers = tuple(draw(st.lists(kind, min_size=1, max_size=3)))
    effect = draw(st.sampled_from(EFFECTS))
    consumer = st.integers(0, len(consumers) - 1)
    frame = st.tuples(st.lists(consumer, min_size=0, max_size=2), st.integers(0, 5))
    ops: list[tuple[Any, ...]] = []
    for imports, extra in draw(st.lists(frame, min_size=1, max_size=5)):
        ops.append(("run",))
        ops += [("import", c) for c in imports]
        if extra == 0:
            ops.append(("resize",))
    close = draw(st.booleans())
    return Case(
        draw(kind), draw(st.sampled_from(KINDS)), consumers, effect,
        tuple(ops) + ((("close",),) if close else ()), draw(st.booleans()),
    )


def _stream(sim: ss.sim.SimBackend, kind: str, s: ss.Stream | None = None) -> ss.Stream:
    if kind == "same-as-S":
        assert s is not None
        return s
    if kind == "legacy":
        return sim.legacy_stream()
    if kind == "per-thread":
        return sim.per_thread_stream()
    return sim.create_stream(non_blocking=kind == "non-blocking")


def _input(rng: np.random.Generator, encoding: str, similar_to: np.ndarray | None = None) -> np.ndarray:
    rgb = rng.random((3, H, W), dtype=np.float32)
    if similar_to is not None:  # a neighbouring frame: no shot change
        rgb = np.clip(similar_to + (rgb - 0.5) * 0.1, 0, 1).astype(np.float32)
    return rgb


def run_case(case: Case, strategy: str, scheduler: Any) -> tuple[list[str], int, int]:
    """Returns (races, copies checked, wrong copies)."""
    sim = ss.sim.SimBackend(scheduler=scheduler)
    rng = np.random.default_rng(0)
    s = _stream(sim, case.s)
    p = _stream(sim, case.p, s)
    consumers = [_stream(sim, k, s) for k in case.consumers]
    kind, encoding = case.effect
    enc = ImageEncoding[encoding]
    out_w = [32]
    if kind == "sr":
        fx: Any = VideoSuperRes(backend=sim, image_encoding=enc)
        fx.output_width, fx.output_height = out_w[0], 32
    elif kind == "vfg":
        fx = VideoFrameGeneration(backend=sim, image_encoding=enc)
        fx.input_width, fx.input_height = W, H
    else:
        fx = TrueHDR(backend=sim)
    fx.load()
    contract = ss.StreamContract(fx, s, strategy=strategy, input_stream=p if p != s else None, allow_none=True)

    def reference(rgbs: list[np.ndarray], t: float) -> np.ndarray:
        if kind == "hdr":
            return K.tone_map_hdr(np, rgbs[0], contrast=100, saturation=100, middle_gray=50, luminance=650)
        if kind == "sr":
            src = K.unpack_rgb10a2(np, K.pack_rgb10a2(np, rgbs[0])) if encoding == "RGB10A2" else rgbs[0]
            up = K.resize_bilinear(np, src, 32, out_w[0])
        else:
            a, b = ((K.unpack_rgb10a2(np, K.pack_rgb10a2(np, x)) if encoding == "RGB10A2" else x) for x in rgbs)
            up = K.blend(np, a, b, t, True)
        if encoding == "RGB10A2":
            return K.pack_rgb10a2(np, up)
        return K.to_rgb8(np, up).astype(np.float32) / np.float32(255)

    def produce(rgb: np.ndarray) -> Any:
        data = K.pack_rgb10a2(np, rgb) if encoding == "RGB10A2" and kind != "hdr" else rgb
        arr = sim.empty(data.shape, data.dtype, name="input")
        buf = arr.buffer
        sim.launch(p, "producer.write", lambda: np.copyto(buf.data, data), writes=[buf])
        return arr

    current: tuple[Any, np.ndarray] | None = None
    copies: list[tuple[Any, ss.Stream, np.ndarray]] = []
    previous = _input(rng, encoding)
    closed = False
    run_count = 0
    for op in case.ops:
        if closed:
            break
        if op[0] == "run":
            rgb = _input(rng, encoding, previous)
            run_count += 1
            if kind == "vfg":
                a, b = produce(previous), produce(rgb)
                if run_count % 2:
                    out, t = contract.run(a, b, frame_index=1, non_blocking=case.non_blocking), 0.5
                else:
                    out, t = contract.run_at_timestep(a, b, 0.25, non_blocking=case.non_blocking), 0.25
                current = (out, reference([previous, rgb], t))
            else:
                out = contract.run(produce(rgb), non_blocking=case.non_blocking)
                current = (out, reference([rgb], 0.0))
            previous = rgb
        elif op[0] == "import" and current is not None and not current[0].image.consumed:
            c = consumers[op[1]]
            view = sim.from_dlpack(current[0].image, stream=c)
            copies.append((sim.copy(view, c, name="consumer.copy"), c, current[1]))
        elif op[0] == "resize" and kind == "sr":
            out_w[0] = 48 if out_w[0] == 32 else 32
            contract.configure(output_width=out_w[0])
            current = None
        elif op[0] == "close":
            contract.close()
            closed = True
    sim.synchronize_device()
    wrong = sum(not np.array_equal(sim.download(copy, c), want) for copy, c, want in copies)
    return [str(r) for r in sim.races], len(copies), wrong


SAFE = ["auto", "event", "async", "stream", "device"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), strategy=st.sampled_from(SAFE), data=st.data())
def test_every_strategy_is_race_free_and_correct(case: Case, strategy: str, data: st.DataObject) -> None:
    chooser = ss.sim.ChoiceScheduler(lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0)
    races, checked, wrong = run_case(case, strategy, chooser)
    assert races == []
    assert wrong == 0, f"{wrong} of {checked} copies wrong"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), strategy=st.sampled_from(SAFE))
def test_every_strategy_survives_the_adversarial_schedule(case: Case, strategy: str) -> None:
    races, checked, wrong = run_case(case, strategy, ss.sim.AdversarialScheduler())
    assert races == [] and wrong == 0


def test_the_same_generator_finds_races_without_fences() -> None:
    found: list[Case] = []

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(case=cases())
    def probe(case: Case) -> None:
        races, checked, wrong = run_case(case, "none", ss.sim.AdversarialScheduler())
        if races:
            found.append(case)

    probe()
    assert len(found) >= 10
