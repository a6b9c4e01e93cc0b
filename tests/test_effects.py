"""The emulated nvvfx effects on the model: arithmetic, stream behaviour, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _kernels as K


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(devices=2, scheduler="random", seed=5)


def rgb(h: int = 16, w: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((3, h, w), dtype=np.float32)


def fetch(sim: ss.sim.SimBackend, out: Any) -> np.ndarray:
    sim.synchronize_device()
    return sim.from_dlpack(out.image).numpy()


def sr_effect(sim: ss.sim.SimBackend, oh: int = 32, ow: int = 48, **kw: Any) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim, **kw)
    sr.output_height, sr.output_width = oh, ow
    sr.load()
    return sr


# -- arithmetic against NumPy references --------------------------------------------------------


def test_resize_kernel_matches_a_direct_bilinear_formula() -> None:
    src = rgb(16, 16)
    out = K.resize_bilinear(np, src, 32, 32)
    # output pixel (1, 1) sits at source position (0.25, 0.25): a weighted mean of the top-left 2x2
    want = src[:, 0, 0] * 0.5625 + src[:, 0, 1] * 0.1875 + src[:, 1, 0] * 0.1875 + src[:, 1, 1] * 0.0625
    np.testing.assert_allclose(out[:, 1, 1], want, rtol=1e-6)
    np.testing.assert_allclose(K.resize_bilinear(np, src, 16, 16), src, rtol=1e-6)  # identity at scale 1


def test_rgb10a2_pack_roundtrip() -> None:
    x = rgb(16, 16)
    packed = K.pack_rgb10a2(np, x)
    assert packed.dtype == np.uint32 and packed.shape == (16, 16)
    assert np.all(packed >> 30 == 3)
    np.testing.assert_allclose(K.unpack_rgb10a2(np, packed), np.rint(x * 1023) / 1023, atol=1e-6)


def test_super_res_rgb8_output(sim: ss.sim.SimBackend) -> None:
    x = rgb()
    sr = sr_effect(sim)
    got = fetch(sim, sr.run(sim.array(x)))
    want = K.to_rgb8(np, K.resize_bilinear(np, x, 32, 48)).astype(np.float32) / 255
    assert got.dtype == np.float32 and got.shape == (3, 32, 48)
    np.testing.assert_array_equal(got, want)


def test_super_res_rgb10a2_output(sim: ss.sim.SimBackend) -> None:
    packed = K.pack_rgb10a2(np, rgb())
    sr = sr_effect(sim, image_encoding=ImageEncoding.RGB10A2)
    got = fetch(sim, sr.run(sim.array(packed)))
    assert got.dtype == np.uint32 and got.shape == (32, 48)
    np.testing.assert_array_equal(got, K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, packed), 32, 48)))


def test_frame_generation_multiplier_and_timestep(sim: ss.sim.SimBackend) -> None:
    a = rgb(seed=1)
    b = (a * 0.8 + 0.1 + rgb(seed=2) * 0.05).astype(np.float32)  # similar frames: no shot change
    vfg = VideoFrameGeneration(backend=sim)
    vfg.input_height, vfg.input_width = 16, 24
    vfg.frame_multiplier = 4
    vfg.load()
    pa, pb = sim.array(a), sim.array(b)
    for idx in (1, 2, 3):
        got = fetch(sim, vfg.run(pa, pb, frame_index=idx))
        want = K.to_rgb8(np, (1 - idx / 4) * a + idx / 4 * b).astype(np.float32) / 255
        np.testing.assert_allclose(got, want, atol=1 / 255 + 1e-6)
    got = fetch(sim, vfg.run_at_timestep(pa, pb, 0.3))
    np.testing.assert_allclose(got, K.to_rgb8(np, 0.7 * a + 0.3 * b) / np.float32(255), atol=1 / 255 + 1e-6)


def test_frame_generation_shot_change_repeats_nearest_frame(sim: ss.sim.SimBackend) -> None:
    dark, bright = np.zeros((3, 16, 16), np.float32), np.ones((3, 16, 16), np.float32)
    vfg = VideoFrameGeneration(backend=sim)
    vfg.input_height = vfg.input_width = 16
    vfg.load()
    assert np.all(fetch(sim, vfg.run_at_timestep(sim.array(dark), sim.array(bright), 0.25)) == 0.0)
    vfg.automatic_shot_change_detection_enabled = False
    got = fetch(sim, vfg.run_at_timestep(sim.array(dark), sim.array(bright), 0.25))
    np.testing.assert_allclose(got, np.full_like(got, np.rint(0.25 * 255) / 255))


def test_true_hdr_output(sim: ss.sim.SimBackend) -> None:
    x = rgb()
    hdr = TrueHDR(backend=sim, luminance=1000, contrast=120)
    hdr.load()
    got = fetch(sim, hdr.run(sim.array(x)))
    want = K.tone_map_hdr(np, x, contrast=120, saturation=100, middle_gray=50, luminance=1000)
    np.testing.assert_array_equal(got, want)
    assert hdr.image_encoding is ImageEncoding.RGB10A2
    black = fetch(sim, hdr.run(sim.array(np.zeros((3, 16, 16), np.float32))))
    assert np.all((black & 0x3FF) == 0)  # PQ of 0 nits is code 0


# -- the SDK's stream behaviour ----------------------------------------------------------------------


class Spy:
    """A producer that records how __dlpack__ was called."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.inner.__dlpack__(**kwargs)


def test_input_is_taken_with_no_stream(sim: ss.sim.SimBackend) -> None:
    spy = Spy(sim.array(rgb()))
    sr_effect(sim).run(spy, stream_ptr=sim.create_stream().ptr)
    assert spy.calls == [{}]


def test_inference_on_stream_ptr_and_conversion_on_legacy(sim: ss.sim.SimBackend) -> None:
    side = sim.create_stream(non_blocking=True)
    sr = sr_effect(sim)
    sr.run(sim.array(rgb()), stream_ptr=side.ptr, non_blocking=True)
    [race] = [r for r in sim.races if r.second.op.endswith("conversion")]
    assert race.first.op == "VideoSuperRes.inference" and race.first.where == str(side)
    assert race.second.where == str(sim.legacy_stream())


def test_blocking_mode_waits_for_the_sdk_stream(sim: ss.sim.SimBackend) -> None:
    side = sim.create_stream(non_blocking=True)
    sr = sr_effect(sim)
    before = sim.stats["host_waits"]
    sr.run(sim.array(rgb()), stream_ptr=side.ptr, non_blocking=False)
    assert sim.stats["host_waits"] == before + 1
    assert not [r for r in sim.races if r.second.op.endswith("conversion")]  # H2 closed by the host wait


def test_true_hdr_has_no_conversion_stage(sim: ss.sim.SimBackend) -> None:
    hdr = TrueHDR(backend=sim)
    hdr.load()
    side = sim.create_stream(non_blocking=True)
    hdr.run(sim.array(rgb()), stream_ptr=side.ptr, non_blocking=True)
    assert not any(op.name.endswith("conversion") for op in sim.pending)


def test_output_buffer_is_reused_by_the_next_run() -> None:
    sim = ss.sim.SimBackend(scheduler="in-order")
    sr = sr_effect(sim)
    first = sr.run(sim.array(rgb(seed=1)))
    view = sim.from_dlpack(first.image)  # a zero-copy view kept across run(): H7
    before = view.numpy()
    sr.run(sim.array(rgb(seed=2)))
    assert not np.array_equal(view.numpy(), before)  # the SDK overwrote the same buffer


def test_output_size_change_and_close_release_the_buffer() -> None:
    sim = ss.sim.SimBackend(scheduler="in-order")
    sr = sr_effect(sim)
    view = sim.from_dlpack(sr.run(sim.array(rgb())).image)
    sr.output_width = 64  # releases the old buffer at once
    assert view.buffer.freed and np.isnan(view.numpy()).all()
    view2 = sim.from_dlpack(sr.run(sim.array(rgb())).image)
    assert view2.shape == (3, 32, 64)
    sr.close()
    assert view2.buffer.freed and sr.closed and not sr.is_loaded


def test_context_manager_closes(sim: ss.sim.SimBackend) -> None:
    with VideoSuperRes(backend=sim) as sr:
        sr.output_width, sr.output_height = 32, 32
        sr.load()
        assert sr.is_loaded
    assert sr.closed


def test_latency_knob_validation(sim: ss.sim.SimBackend) -> None:
    sr = VideoSuperRes(backend=sim, latency_us={"inference": 100})
    assert sr.latency_us == {"transfer": 0.0, "inference": 100.0, "conversion": 0.0}
    with pytest.raises(ss.errors.EffectConfigError, match="stages are transfer, inference, conversion"):
        sr.latency_us = {"decode": 1}


# -- errors: each names the value, the rule and the fix, and changes nothing -------------------------


def test_run_before_load(sim: ss.sim.SimBackend) -> None:
    sr = VideoSuperRes(backend=sim)
    with pytest.raises(ss.errors.EffectStateError, match=r"VideoSuperRes.run\(\) cannot run: the effect is not loaded. Call VideoSuperRes.load\(\)"):
        sr.run(sim.array(rgb()))


def test_load_without_output_size(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.EffectStateError, match="Set output_width and output_height before load"):
        VideoSuperRes(backend=sim).load()


def test_run_after_close(sim: ss.sim.SimBackend) -> None:
    sr = sr_effect(sim)
    sr.close()
    with pytest.raises(ss.errors.EffectStateError, match="the effect is closed. Create a new effect"):
        sr.run(sim.array(rgb()))


def test_host_array_is_refused(sim: ss.sim.SimBackend) -> None:
    sr = sr_effect(sim)
    with pytest.raises(ss.errors.InputArrayError, match=r"not CUDA \(2\). Move it to the GPU first") as info:
        sr.run(rgb())  # a NumPy array speaks DLPack, on the CPU
    assert isinstance(info.value, TypeError)
    with pytest.raises(ss.errors.InputArrayError, match="has no __dlpack__"):
        sr.run([1, 2, 3])
    assert sr.runs == 0


def test_array_of_another_device_is_refused(sim: ss.sim.SimBackend) -> None:
    sr = sr_effect(sim)
    other = sim.array(rgb(), device=1)
    with pytest.raises(ss.errors.InputArrayError, match="on CUDA device 1 but the effect runs on device 0"):
        sr.run(other)


@pytest.mark.parametrize(
    "array,match",
    [
        (np.zeros((16, 16), np.float32), "RGB8 input must be float32 \\(3, H, W\\)"),
        (np.zeros((3, 16, 16), np.float64), "RGB8 input must be float32"),
        (np.zeros((3, 8, 8), np.float32), "width and height must be in \\[16, 8192\\]"),
    ],
)
def test_bad_input_shapes(sim: ss.sim.SimBackend, array: np.ndarray, match: str) -> None:
    with pytest.raises(ss.errors.EffectConfigError, match=match):
        sr_effect(sim).run(sim.array(array))


def test_bad_rgb10a2_input(sim: ss.sim.SimBackend) -> None:
    sr = sr_effect(sim, image_encoding=ImageEncoding.RGB10A2)
    with pytest.raises(ss.errors.EffectConfigError, match="RGB10A2 input must be uint32 \\(H, W\\)"):
        sr.run(sim.array(rgb()))


def test_output_size_outside_scale_range(sim: ss.sim.SimBackend) -> None:
    sr = sr_effect(sim, oh=200, ow=200)
    with pytest.raises(ss.errors.EffectConfigError, match="must be 1x to 4x the input size 24x16"):
        sr.run(sim.array(rgb()))


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda s: VideoSuperRes(backend=s, strength=2.0), "strength=2.0 is invalid: must be a number in \\[0.0, 1.0\\]"),
        (lambda s: VideoSuperRes(backend=s, quality=99), "quality=99 is invalid"),
        (lambda s: TrueHDR(backend=s, contrast=300), "contrast=300 is invalid: must be an integer in \\[0, 200\\]"),
        (lambda s: TrueHDR(backend=s, luminance=100), "luminance=100 is invalid"),
        (lambda s: VideoSuperRes(backend=s, image_encoding=7), "image_encoding=7 is invalid"),
    ],
)
def test_bad_parameters(sim: ss.sim.SimBackend, make: Any, match: str) -> None:
    with pytest.raises(ss.errors.EffectConfigError, match=match):
        make(sim)


def test_frame_generation_validation(sim: ss.sim.SimBackend) -> None:
    vfg = VideoFrameGeneration(backend=sim)
    with pytest.raises(ss.errors.EffectStateError, match="Set input_width and input_height"):
        vfg.load()
    vfg.input_width = vfg.input_height = 16
    with pytest.raises(ss.errors.EffectConfigError, match="frame_multiplier=1 is invalid"):
        vfg.frame_multiplier = 1
    vfg.load()
    a = sim.array(np.zeros((3, 16, 16), np.float32))
    with pytest.raises(ss.errors.EffectConfigError, match=r"frame_index=2 is invalid: must be an integer in \[1, frame_multiplier - 1\] = \[1, 1\]"):
        vfg.run(a, a, frame_index=2)
    with pytest.raises(ss.errors.EffectConfigError, match=r"timestep=1.0 is invalid: must be a number in the open interval"):
        vfg.run_at_timestep(a, a, 1.0)
    b = sim.array(np.zeros((3, 16, 32), np.float32))
    with pytest.raises(ss.errors.EffectConfigError, match="does not match input_width x input_height = 16x16"):
        vfg.run(a, b, frame_index=1)


def test_true_hdr_output_is_always_rgb10a2(sim: ss.sim.SimBackend) -> None:
    hdr = TrueHDR(backend=sim)
    hdr.image_encoding = ImageEncoding.RGB10A2  # allowed: no change
    with pytest.raises(ss.errors.EffectConfigError, match="TrueHDR output is always RGB10A2"):
        hdr.image_encoding = ImageEncoding.RGB8
    assert hdr.image_encoding is ImageEncoding.RGB10A2


def test_launch_mode_and_host_cost_knobs_are_validated_and_graph_mode_runs_on_the_model() -> None:
    import time

    from streamsafe.errors import EffectConfigError as ConfigError

    sim = ss.sim.SimBackend()
    with pytest.raises(ConfigError, match="launch_mode"):
        VideoSuperRes(backend=sim, launch_mode="fast")
    with pytest.raises(ConfigError, match="host_cost_us"):
        VideoSuperRes(backend=sim, host_cost_us=-1)
    with pytest.raises(ConfigError, match="host_cost_us"):
        VideoSuperRes(backend=sim, host_cost_us=True)
    outs = []
    for mode, cost in (("eager", 0.0), ("graph", 300.0)):
        sr = VideoSuperRes(backend=sim, launch_mode=mode, host_cost_us=cost)
        sr.output_width = sr.output_height = 32
        sr.load()
        x = sim.array(np.random.default_rng(1).random((3, 16, 16), dtype=np.float32))
        t0 = time.perf_counter()
        out = sr.run(x)
        elapsed = time.perf_counter() - t0
        sim.synchronize_device()
        outs.append(sim.from_dlpack(out.image).buffer.data.copy())
        if cost:
            assert elapsed >= cost * 1e-6  # the host cost is spent inside run()
    assert np.array_equal(outs[0], outs[1])  # the model runs stages one by one in either mode


def _unguarded_view_read(after_next_run: bool) -> tuple[ss.sim.SimBackend, float]:
    """The SDK used without streamsafe, fully synchronised on one stream: a zero-copy view of frame 1's
    output, read before or after frame 2's run (the vendor's documentation: do not retain a zero-copy
    tensor imported from result.image across another run())."""
    from streamsafe.testing import VideoSuperRes

    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    s = sim.legacy_stream()
    view = sim.from_dlpack(sr.run(sim.array(np.full((3, 16, 16), 0.2, np.float32)), stream_ptr=1).image, stream=s)
    if after_next_run:
        sr.run(sim.array(np.full((3, 16, 16), 0.8, np.float32)), stream_ptr=1)
    copy = sim.copy(view, s)
    sim.synchronize_device()
    return sim, float(sim.download(copy).mean())


def test_a_view_kept_across_the_next_run_of_an_unguarded_effect_is_reported() -> None:
    sim, value = _unguarded_view_read(after_next_run=True)
    assert value == pytest.approx(0.8, abs=0.01)  # frame 2's pixels through frame 1's view
    assert [r.kind for r in sim.races] == ["stale-view"]
    assert "VideoSuperRes's run #2 (the view is of run #1)" in sim.races[0].first.op


def test_a_view_read_before_the_next_run_is_not_reported() -> None:
    sim, value = _unguarded_view_read(after_next_run=False)
    assert value == pytest.approx(0.2, abs=0.01) and sim.races == []


@pytest.mark.parametrize("value", ["stream", None, True, 1.0])
def test_stream_ptr_must_be_an_int_handle_as_the_sdk_takes_it(value: Any) -> None:
    """The vendor's API and samples pass ``stream_ptr`` as an int (``stream.cuda_stream``); code passing a
    stream object must fail in CI as it would on the real SDK, not pass."""
    sim = ss.sim.SimBackend()
    hdr = TrueHDR(backend=sim)
    hdr.load()
    s = sim.create_stream(non_blocking=True)
    with pytest.raises(ss.errors.EffectConfigError, match=r"stream_ptr=.* must be the stream's handle as an int"):
        hdr.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)), stream_ptr=s if value == "stream" else value)
    assert hdr.runs == 0
    hdr.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)), stream_ptr=np.int64(s.ptr))  # a NumPy integer is an int


def test_an_eager_run_that_fails_after_launching_leaves_its_work_to_be_waited_for() -> None:
    """A blocking run whose host wait fails after the SDK's stages launched: what launched is still the
    SDK's own work, which the next release waits for (an event on the SDK stream); a run refused before
    anything launched marks nothing."""
    sim = ss.sim.SimBackend(scheduler="in-order")
    sr = sr_effect(sim)
    s = sim.create_stream()

    def fails(stream: Any) -> None:
        raise RuntimeError("the host wait failed")

    sr.engine.host_wait = fails  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="host wait failed"):
        sr.run(sim.array(rgb(), stream=s), stream_ptr=s.handle)
    assert len(sr._own_work) == 1
    sr._wait_own_work()  # a host wait for the marked work: nothing of the SDK's is pending after it
    assert sr._own_work == []

    fresh = sr_effect(sim)
    fresh.engine.as_array = lambda a: (_ for _ in ()).throw(RuntimeError("no import"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="no import"):
        fresh.run(sim.array(rgb(), stream=s), stream_ptr=s.handle)
    assert fresh._own_work == []
