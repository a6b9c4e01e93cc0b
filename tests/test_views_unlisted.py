"""Views known by their memory alone, at a buffer whose newest contents streamsafe did not hand out.

A plain call of an SDK object a guard held before is tracked: its writes make the frames streamsafe handed out
stale, but its result is the SDK's own. A view of that result, imported as the SDK allows, has the memory of an
older guarded frame that was imported as a view: it shows the current contents and is read, not refused. A tag of
the model's own (an unguarded emulated effect's capsule says which of its runs it is) is no streamsafe output's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.profile import EffectProfile, register, unregister
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes, sample_clip
from streamsafe.testing.fake_pynvvideocodec import decode_reference

pytest.importorskip("av")


@pytest.fixture(scope="module")
def clip() -> str:
    return sample_clip(24, (64, 48))


@pytest.fixture
def nvc(fake_pynvvideocodec: Any) -> Any:
    return fake_pynvvideocodec


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


class Copier:
    """``process(image=x, stream=s)``: copies ``x`` into its own output buffer on ``s``, then waits."""

    def __init__(self) -> None:
        self.gpu, self.output = ss.current_backend(), None

    def process(self, *, image: Any, stream: Any = 0) -> Any:
        gpu, s = self.gpu, ss.as_stream(stream, backend=self.gpu)
        x = gpu.from_dlpack(image.__dlpack__())
        if self.output is None:
            self.output = gpu.malloc(x.shape, x.dtype, name="Copier.output")
        src, dst = x.buffer, self.output.buffer
        gpu.launch(s, "copy", lambda: np.copyto(dst.data, src.data), reads=[x], writes=[self.output])
        gpu.synchronize_stream(s)
        return self.output.__dlpack__()


@pytest.fixture
def copier() -> Iterator[None]:
    p = register(EffectProfile(name="test.Copier", classes=(Copier,), calls=("process",), stream_keyword="stream",
                               blocking_keyword=None, inputs=("image",), output=None))
    yield
    unregister(p)


@pytest.mark.usefixtures("copier")
@pytest.mark.parametrize("viewed_before", [False, True], ids=["control", "a view of an older frame at that memory"])
def test_a_view_of_a_plain_calls_frame_is_read_not_refused(nvc: Any, sim: SimBackend, clip: str, viewed_before: bool) -> None:
    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    C = sim.create_stream(non_blocking=True)
    with ss.stream_contract(dec):
        frames = dec.get_batch_frames(2)
        if viewed_before:  # (frame 0 leaves as a view: its memory is remembered)
            sim.download(sim.copy(sim.from_dlpack(frames[0], stream=C), C), C)
    raw = dec.get_batch_frames(2)  # (a plain call, tracked: frames 2 and 3, the SDK's own, in the same buffers)
    assert not isinstance(raw[0], ss.SafeFrame)
    x = sim.from_dlpack(raw[0], stream=C)
    sim.synchronize_device()
    cp = Copier()
    with ss.stream_contract(cp, C):
        out = cp.process(image=x, stream=C.handle)
        got = sim.download(sim.from_dlpack(out.image, stream=C), C)
    assert np.array_equal(got, decode_reference(clip)[2]) and sim.races == []


def test_an_unguarded_effects_output_is_no_streamsafe_view(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    with ss.stream_contract(dec):
        sim.from_dlpack(dec.get_batch_frames(1)[0])  # (a view in the registry: inputs are looked up)
    first, second = VideoSuperRes(backend=sim), VideoSuperRes(backend=sim)
    for sr, (w, h) in ((first, (128, 96)), (second, (256, 192))):
        sr.output_width, sr.output_height = w, h
        sr.load()
    view = sim.from_dlpack(first.run(sim.array(np.random.default_rng(0).random((3, 48, 64), dtype=np.float32))).image)
    with ss.stream_contract(second, input_stream=sim.legacy_stream()):
        out = second.run(view)  # (the emulation tags its own capsules with its runs: not a guarded output)
    assert out.numpy().shape == (3, 192, 256)


@pytest.mark.usefixtures("copier")
def test_a_view_is_stale_again_once_a_guarded_call_wrote_after_the_plain_one(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    C = sim.create_stream(non_blocking=True)
    guard = ss.stream_contract(dec)
    with guard:
        frames = dec.get_batch_frames(2)
        sim.download(sim.copy(sim.from_dlpack(frames[0], stream=C), C), C)  # (frame 0 leaves as a view)
    x = sim.from_dlpack(dec.get_batch_frames(2)[0], stream=C)  # (a plain call: frame 2, the SDK's own)
    sim.synchronize_device()
    with guard:
        dec.get_batch_frames(2)  # (a guarded call writes frame 4 over x's memory)
    sim.synchronize_device()
    cp = Copier()
    with ss.stream_contract(cp, C), pytest.raises(ss.errors.StaleOutputError):
        cp.process(image=x, stream=C.handle)
