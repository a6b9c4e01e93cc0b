"""A Hypothesis state machine over everything a program can do to one guarded effect, on the model.

Random stream kinds for the producer P, the SDK stream S and the consumers C and C2; a random
fenced strategy per guard; several guards on one effect (two contracts, a decorator, ``with``
blocks, unguarded raw calls); inputs allocated from the model's caching allocator and freed
(recycled), or rewritten in place; runs; zero-copy imports; copies issued late, on the import
stream or on a second stream after the user's fence (declared with ``out.record_stream``); resizes,
encoding changes, synchronize, close. The adversarial scheduler runs every unordered pair in the
order that breaks it. Invariant: no corrupted frame and no race, ever.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import streamsafe as ss
from streamsafe.testing import ImageEncoding, TrueHDR, VideoSuperRes
from streamsafe.testing import _kernels as K

KINDS = ["legacy", "per-thread", "blocking", "non-blocking"]
STRATEGIES = ["auto", "event", "async", "stream", "device"]
EXAMPLES = int(os.environ.get("STREAMSAFE_MACHINE_EXAMPLES", "2000"))


def _stream(sim: ss.sim.SimBackend, kind: str) -> ss.Stream:
    if kind == "legacy":
        return sim.legacy_stream()
    if kind == "per-thread":
        return sim.per_thread_stream()
    return sim.create_stream(non_blocking=kind == "non-blocking")


class OnTheModel(RuleBasedStateMachine):
    """What both machines share: time passes on the model's GPU, and no race is ever found."""

    sim: ss.sim.SimBackend

    @rule(steps=st.integers(1, 8))
    def time_passes(self, steps: int) -> None:
        self.sim.progress(steps)  # the GPU runs some ready work (the scheduler picks which)

    @invariant()
    def no_race(self) -> None:
        if hasattr(self, "sim"):
            assert self.sim.races == [], [str(r) for r in self.sim.races[:3]]


class EffectLife(OnTheModel):
    """One effect over its whole life, driven by every guard a program can put on it."""

    forced: str | None = None
    """Every guard's strategy, when set (the control uses ``none``)."""

    @initialize(
        effect=st.sampled_from(["sr-rgb8", "sr-rgb10", "hdr"]),
        p=st.sampled_from(KINDS), s=st.sampled_from(KINDS), c=st.sampled_from(KINDS), c2=st.sampled_from(KINDS),
        strategies=st.lists(st.sampled_from(STRATEGIES), min_size=3, max_size=3),
        declare_input=st.booleans(),
    )
    def setup(self, effect: str, p: str, s: str, c: str, c2: str, strategies: list[str], declare_input: bool) -> None:
        self.sim = sim = ss.sim.SimBackend(scheduler="adversarial")
        self.P, self.S, self.C, self.C2 = (_stream(sim, k) for k in (p, s, c, c2))
        self.kind = effect
        if effect == "hdr":
            self.effect: Any = TrueHDR(backend=sim)
        else:
            enc = ImageEncoding.RGB8 if effect == "sr-rgb8" else ImageEncoding.RGB10A2
            self.effect = VideoSuperRes(backend=sim, image_encoding=enc)
            self.effect.output_width = self.effect.output_height = 32
        self.effect.load()
        strategies = [self.forced or x for x in strategies]
        extra: dict[str, Any] = {"input_stream": self.P} if declare_input else {}
        extra["allow_none"] = "none" in strategies
        self.declared = declare_input
        self.main = ss.StreamContract(self.effect, self.S, strategy=strategies[0], **extra)
        self.second = ss.StreamContract(self.effect, self.S if s != "legacy" else None, strategy=strategies[1], **extra)
        self.decorated = ss.stream_safe(self.effect, self.S, strategy=strategies[2], **extra)(lambda x: self.effect.run(x))
        self.inputs: list[tuple[Any, np.ndarray]] = []
        self.outputs: list[tuple[Any, np.ndarray]] = []  # not imported yet, current generation only
        self.views: list[tuple[Any, np.ndarray, ss.Stream]] = []  # imported zero-copy views of the current output
        self.copies: list[tuple[Any, np.ndarray]] = []
        self.closed = False
        self.seed = 0

    # -- inputs ----------------------------------------------------------------------------------

    def _shape(self) -> tuple[int, ...]:
        size = getattr(self, "hdr_size", 16)
        return (size, size) if self.kind == "sr-rgb10" else (3, size, size)

    def _data(self) -> tuple[np.ndarray, np.ndarray]:
        self.seed += 1
        rgb = np.random.default_rng(self.seed).random((3, *self._shape()[-2:]), dtype=np.float32)
        return (K.pack_rgb10a2(np, rgb), rgb) if self.kind == "sr-rgb10" else (rgb, rgb)

    def _write(self, arr: Any, values: np.ndarray) -> None:
        self.sim.launch(self.P, "producer.write", lambda: np.copyto(arr.buffer.data, values), writes=[arr])

    @precondition(lambda self: not self.closed and len(self.inputs) < 3)
    @rule()
    def allocate(self) -> None:
        values, rgb = self._data()
        arr = self.sim.empty(self._shape(), values.dtype, stream=self.P, name="input")
        self._write(arr, values)
        self.inputs.append((arr, rgb))

    @precondition(lambda self: bool(self.inputs))
    @rule(i=st.integers(0, 2))
    def free(self, i: int) -> None:
        del self.inputs[i % len(self.inputs)]  # back to P's pool: the next allocation there reuses it

    @precondition(lambda self: not self.closed and bool(self.inputs))
    @rule(i=st.integers(0, 2))
    def rewrite_in_place(self, i: int) -> None:
        i %= len(self.inputs)
        arr = self.inputs[i][0]
        if tuple(arr.shape) != self._shape():
            return
        values, rgb = self._data()
        self._write(arr, values)
        self.inputs[i] = (arr, rgb)

    # -- runs -----------------------------------------------------------------------------------------

    def _expected(self, rgb: np.ndarray) -> np.ndarray:
        if self.kind == "hdr":
            return K.tone_map_hdr(np, rgb, contrast=100, saturation=100, middle_gray=50, luminance=650)
        ow, oh = self.effect.output_width, self.effect.output_height
        if self.effect.image_encoding is ImageEncoding.RGB10A2:
            src = K.unpack_rgb10a2(np, K.pack_rgb10a2(np, rgb))
            return K.pack_rgb10a2(np, K.resize_bilinear(np, src, oh, ow))
        return K.to_rgb8(np, K.resize_bilinear(np, rgb, oh, ow)).astype(np.float32) / np.float32(255)

    def _new_generation(self) -> None:
        self.outputs.clear()
        self.views.clear()

    @precondition(lambda self: not self.closed and bool(self.inputs))
    @rule(i=st.integers(0, 2), how=st.sampled_from(["main", "second", "decorator", "block", "unguarded"]))
    def run(self, i: int, how: str) -> None:
        arr, rgb = self.inputs[i % len(self.inputs)]
        if tuple(arr.shape) != self._shape():
            return
        want = self._expected(rgb)
        with self.sim.use_stream(self.P):  # the producer is the current stream (or declared)
            if how == "main":
                out = self.main.run(arr)
            elif how == "second":
                out = self.second.run(arr)
            elif how == "decorator":
                out = self.decorated(arr)
            elif how == "block":
                with self.main:
                    out = self.effect.run(arr)
            else:  # raw: the program orders its own input (the vendor's rule); streamsafe orders its readers
                self.sim.fence(self.S, self.P)
                self.effect.run(arr, stream_ptr=self.S.ptr)
                self._new_generation()
                return
        self._new_generation()
        self.outputs.append((out, want))

    # -- consumers -----------------------------------------------------------------------------------

    @precondition(lambda self: bool(self.outputs))
    @rule(on=st.sampled_from(["C", "C2"]))
    def import_view(self, on: str) -> None:
        out, want = self.outputs.pop()
        stream = self.C if on == "C" else self.C2
        view = self.sim.from_dlpack(out.image, stream=stream)
        self.views.append((view, want, stream))
        self.last_output = out

    @precondition(lambda self: bool(self.views))
    @rule(second=st.booleans(), j=st.integers(0, 3))
    def copy_view(self, second: bool, j: int) -> None:
        view, want, stream = self.views[j % len(self.views)]
        target = stream
        if second:
            target = self.C2 if stream != self.C2 else self.C
            self.sim.fence(target, stream)  # the user's fence: the second stream waits for the import stream
            self.last_output.record_stream(target)  # ... and says so (the documented rule)
        self.copies.append((self.sim.copy(view, target, name="consumer.copy"), want))

    @precondition(lambda self: bool(self.outputs))
    @rule()
    def helper_copy(self) -> None:
        out, want = self.outputs.pop()
        self.copies.append((self.sim.array(out.numpy()), want))  # a blocking helper copy

    # -- configuration and life cycle ----------------------------------------------------------------

    @precondition(lambda self: not self.closed and self.kind != "hdr")
    @rule(size=st.sampled_from([32, 48]), via=st.sampled_from(["configure", "attribute", "block"]))
    def resize(self, size: int, via: str) -> None:
        if via == "configure":
            self.main.configure(output_width=size, output_height=size)
        elif via == "attribute":
            self.effect.output_width = size  # tracked: waits for the readers first
            self.effect.output_height = size
        else:
            with self.second:
                self.effect.output_width = size
                self.effect.output_height = size
        self._new_generation()

    @precondition(lambda self: not self.closed and self.kind == "hdr")
    @rule(size=st.sampled_from([16, 24]))
    def hdr_input_size(self, size: int) -> None:
        self.hdr_size = size  # the next inputs have another size: TrueHDR reallocates inside run()

    @precondition(lambda self: not self.closed)
    @rule()
    def synchronize(self) -> None:
        self.main.synchronize()

    @precondition(lambda self: not self.closed)
    @rule(via=st.sampled_from(["main", "second", "raw"]))
    def close(self, via: str) -> None:
        if via == "raw":
            self.effect.close()
        else:
            (self.main if via == "main" else self.second).close()
        self.closed = True
        self._new_generation()

    def teardown(self) -> None:
        if not hasattr(self, "sim"):
            return
        if not self.closed:
            self.main.close()
        sim = self.sim
        sim.synchronize_device()
        assert sim.races == [], [str(r) for r in sim.races[:3]]
        for copy, want in self.copies:
            np.testing.assert_array_equal(sim.download(copy, sim.legacy_stream()), want)


EffectLife.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
)
TestEffectLife = EffectLife.TestCase


class Unfenced(EffectLife):
    forced = "none"


FIND_ONLY = (Phase.explicit, Phase.generate)
"""The controls' phases: a failing example found is the result; shrinking it (most of their time) adds nothing."""


def test_the_machine_finds_corruption_without_fences() -> None:
    """The control: with no fences the same machine fails (so the invariant can fail)."""
    import pytest
    from hypothesis.stateful import run_state_machine_as_test

    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            Unfenced, settings=settings(max_examples=300, stateful_step_count=12, deadline=None, phases=FIND_ONLY,
                                        suppress_health_check=list(HealthCheck), database=None, report_multiple_bugs=False)
        )


# -- beside the effects: NVIDIA's video decoder (the emulated PyNvVideoCodec) ----------------------------------------

DECODER_EXAMPLES = int(os.environ.get("STREAMSAFE_DECODER_MACHINE_EXAMPLES", "300"))
DECODER_KINDS = ["legacy", "blocking", "non-blocking"]  # (a decoder's cuda_stream: a handle the program made)


class DecoderLife(OnTheModel):
    """One decoder over its whole life: batches, single frames, frames by index, seeks, a new source, on a random
    stream; frames imported on random consumer streams through several guards (two contracts, a decorator, plain
    tracked calls), copies issued late; stale frames refused. Invariant: no corrupted frame and no race, ever."""

    forced: str | None = None

    @initialize(
        threaded=st.booleans(), d=st.sampled_from(DECODER_KINDS), c=st.sampled_from(KINDS), c2=st.sampled_from(KINDS),
        strategies=st.lists(st.sampled_from(STRATEGIES), min_size=2, max_size=2),
    )
    def setup(self, threaded: bool, d: str, c: str, c2: str, strategies: list[str]) -> None:
        from streamsafe.testing.fake_pynvvideocodec import OutputColorType, SimpleDecoder, ThreadedDecoder, decode_reference, sample_clip

        self.sim = sim = ss.sim.SimBackend(scheduler="adversarial")
        self.scope = ss.use_backend(sim)
        self.scope.__enter__()
        clip = sample_clip(24, (32, 16))
        self.reference = decode_reference(clip)
        stream = 0 if d == "legacy" else sim.create_stream(non_blocking=d == "non-blocking").handle
        self.threaded = threaded
        kw: dict[str, Any] = {"cuda_stream": stream, "output_color_type": OutputColorType.RGBP}
        self.dec = ThreadedDecoder(clip, 4, **kw) if threaded else SimpleDecoder(clip, **kw)
        self.clip = clip
        strategies = [self.forced or x for x in strategies]
        extra = {"allow_none": True} if self.forced else {}
        self.main = ss.stream_contract(self.dec, strategy=strategies[0], **extra)
        self.decorated = ss.stream_safe(self.dec, strategy=strategies[1], **extra)(lambda f: f())
        self.C, self.C2 = _stream(sim, c), _stream(sim, c2)
        self.frames: list[Any] = []
        self.copies: list[tuple[Any, np.ndarray]] = []

    def _call(self, how: str, fn: Any) -> Any:
        if how == "main":
            return fn(self.main)
        if how == "decorator":
            return self.decorated(lambda: fn(self.dec))
        return fn(self.dec)  # a plain (tracked) call: raw frames, still ordered after the guarded readers

    def _keep(self, result: Any) -> None:
        for f in result if isinstance(result, list) else [result]:
            if isinstance(f, ss.SafeFrame):
                self.frames.append(f)

    @rule(n=st.integers(1, 4), how=st.sampled_from(["main", "decorator", "plain"]))
    def batch(self, n: int, how: str) -> None:
        self._keep(self._call(how, lambda d: d.get_batch_frames(n)))

    @precondition(lambda self: not self.threaded)
    @rule(i=st.integers(0, 23), how=st.sampled_from(["main", "decorator", "plain"]))
    def one_frame(self, i: int, how: str) -> None:
        self._keep(self._call(how, lambda d: d[i]))

    @precondition(lambda self: not self.threaded)
    @rule(indices=st.lists(st.integers(0, 23), min_size=1, max_size=3), how=st.sampled_from(["main", "decorator"]))
    def by_index(self, indices: list[int], how: str) -> None:
        self._keep(self._call(how, lambda d: d.get_batch_frames_by_index(indices)))

    @precondition(lambda self: not self.threaded)
    @rule(i=st.integers(0, 23))
    def seek(self, i: int) -> None:
        self.main.seek_to_index(i)

    @rule(how=st.sampled_from(["main", "decorator"]))
    def new_source(self, how: str) -> None:
        self._call(how, lambda d: d.reconfigure_decoder(self.clip))

    @precondition(lambda self: self.frames)
    @rule(j=st.integers(0, 7), second=st.booleans())
    def consume(self, j: int, second: bool) -> None:
        frame = self.frames[-1 - j % len(self.frames)]
        stream = self.C2 if second else self.C
        if frame.stale:
            with pytest.raises(ss.errors.StaleOutputError):
                self.sim.from_dlpack(frame, stream=stream)
            return
        with self.sim.use_stream(stream):
            view = self.sim.from_dlpack(frame)
            self.copies.append((self.sim.copy(view, stream), self.reference[frame.raw.index]))

    @rule()
    def synchronize(self) -> None:
        self.main.synchronize()

    def teardown(self) -> None:
        if not hasattr(self, "sim"):
            return
        try:
            sim = self.sim
            sim.synchronize_device()
            assert sim.races == [], [str(r) for r in sim.races[:3]]
            for copy, want in self.copies:
                np.testing.assert_array_equal(sim.download(copy, sim.legacy_stream()), want)
        finally:
            self.scope.__exit__(None, None, None)


DecoderLife.TestCase.settings = settings(
    max_examples=DECODER_EXAMPLES, stateful_step_count=14, deadline=None, suppress_health_check=list(HealthCheck)
)
TestDecoderLife = pytest.importorskip("av") and DecoderLife.TestCase


class UnfencedDecoder(DecoderLife):
    forced = "none"


def test_the_decoder_machine_finds_corruption_without_fences() -> None:
    """The control: with no fences the decoder's machine fails too."""
    pytest.importorskip("av")
    from hypothesis.stateful import run_state_machine_as_test

    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            UnfencedDecoder, settings=settings(max_examples=200, stateful_step_count=14, deadline=None, phases=FIND_ONLY,
                                               suppress_health_check=list(HealthCheck), database=None,
                                               report_multiple_bugs=False)
        )
