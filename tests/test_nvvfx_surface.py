"""The emulated nvvfx 0.2 surface, as NVIDIA's sample programs and the SDK's documentation use it.

Part 1 is an API tour: every call, attribute and enum that ``video_super_resolution.py``,
``video_frame_generation.py`` and ``true_hdr.py`` (github.com/NVIDIA-Maxine/nvidia-vfx-python-samples)
use, in the order they use them, once per command line of their README, with ``import nvvfx``
resolving to the emulation and every effect on the simulated backend. The decode/encode
side (PyAV, ``video_io_utils``) is replaced by small NumPy frames; ``torch.from_dlpack(...).clone()``
by the model's import and copy on the current stream.

Part 2 checks each validation rule: the QualityLevel/Mode tables, 1x only for the denoise and
deblur qualities, the per-scale input limits, the frame_multiplier range, the TrueHDR ranges,
and the error types and messages (value, rule, fix).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import types
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import (
    INPUT_LIMITS,
    SAME_RESOLUTION_QUALITIES,
    Effect,
    EffectOutput,
    ImageEncoding,
    Mode,
    NvVFXError,
    QualityLevel,
    TrueHDR,
    VideoFrameGeneration,
    VideoSuperRes,
)
from streamsafe.testing import _kernels as K

# -- the tables (the sources are named in streamsafe/testing/effects.py) --------------------------------

QUALITY_TABLE = {
    "BICUBIC": 0,
    "LOW": 1,
    "MEDIUM": 2,
    "HIGH": 3,
    "ULTRA": 4,
    "DENOISE_LOW": 8,
    "DENOISE_MEDIUM": 9,
    "DENOISE_HIGH": 10,
    "DENOISE_ULTRA": 11,
    "DEBLUR_LOW": 12,
    "DEBLUR_MEDIUM": 13,
    "DEBLUR_HIGH": 14,
    "DEBLUR_ULTRA": 15,
    "HIGHBITRATE_LOW": 16,
    "HIGHBITRATE_MEDIUM": 17,
    "HIGHBITRATE_HIGH": 18,
    "HIGHBITRATE_ULTRA": 19,
    "STREAMING_MEDIUM": 21,
    "STREAMING_ULTRA": 23,
}
MODE_TABLE = {"LOW": 0, "MEDIUM": 1, "HIGH": 2}

# The README's --quality values (the table of video_super_resolution.py's arguments).
README_QUALITIES = [
    "BICUBIC", "LOW", "MEDIUM", "HIGH", "ULTRA", "STREAMING_MEDIUM", "STREAMING_ULTRA",
    "DENOISE_LOW", "DENOISE_MEDIUM", "DENOISE_HIGH", "DENOISE_ULTRA",
    "DEBLUR_LOW", "DEBLUR_MEDIUM", "DEBLUR_HIGH", "DEBLUR_ULTRA",
]  # fmt: skip


def test_quality_level_names_and_values() -> None:
    assert {q.name: int(q) for q in QualityLevel} == QUALITY_TABLE
    assert VideoSuperRes.QualityLevel is QualityLevel
    assert set(README_QUALITIES) <= set(VideoSuperRes.QualityLevel.__members__)
    for gone in ("DENOISE", "DEBLUR"):  # the emulation's old names; the SDK has no such members
        assert gone not in VideoSuperRes.QualityLevel.__members__
        with pytest.raises(KeyError):
            VideoSuperRes.QualityLevel[gone]
    assert {q.name for q in SAME_RESOLUTION_QUALITIES} == {n for n in QUALITY_TABLE if n.startswith(("DENOISE_", "DEBLUR_"))}


def test_mode_and_encoding_names_and_values() -> None:
    assert {m.name: int(m) for m in Mode} == MODE_TABLE
    assert VideoFrameGeneration.Mode is Mode
    assert VideoSuperRes.ImageEncoding is VideoFrameGeneration.ImageEncoding is TrueHDR.ImageEncoding is ImageEncoding
    assert {e.name for e in ImageEncoding} == {"RGB8", "RGB10A2"}


# -- part 1: the samples' calls, on the model --------------------------------------------------------


def frame8(sim: ss.sim.SimBackend, h: int, w: int, seed: int = 0) -> tuple[Any, np.ndarray]:
    """avframe_to_rgb8_tensor: float32 (3, H, W) in [0, 1] on the device."""
    x = np.random.default_rng(seed).integers(0, 256, (3, h, w)).astype(np.float32) / np.float32(255)
    return sim.array(x), x


def frame10(sim: ss.sim.SimBackend, h: int, w: int, seed: int = 0) -> tuple[Any, np.ndarray]:
    """avframe_to_rgb10a2_tensor: packed uint32 (H, W) with alpha 3 on the device."""
    x = np.random.default_rng(seed).integers(0, 1024, (3, h, w)).astype(np.float32) / np.float32(1023)
    packed = K.pack_rgb10a2(np, x)
    return sim.array(packed), packed


def take(sim: ss.sim.SimBackend, output: Any) -> np.ndarray:
    """``torch.from_dlpack(output.image).clone()`` on the current stream, then to the host."""
    return sim.download(sim.copy(sim.from_dlpack(output.image)))


def sr_args(*argv: str) -> argparse.Namespace:
    """video_super_resolution.py's parser: --scale, --quality (choices from the enum), --strength."""
    import nvvfx

    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, choices=[1, 2, 3, 4], default=2)
    parser.add_argument("--quality", type=str, choices=nvvfx.VideoSuperRes.QualityLevel.__members__.keys(), default="HIGH")
    parser.add_argument("--strength", type=float, default=1.0)
    return parser.parse_args(argv)


SR_COMMANDS = [  # the README's command lines for video_super_resolution.py (-i/-o only change paths)
    (),
    ("-i", "path/to/input.mp4", "-o", "path/to/output.mp4"),
    ("--scale", "4", "--quality", "ULTRA"),
    ("--scale", "1", "--quality", "DENOISE_HIGH"),
    ("--quality", "STREAMING_MEDIUM", "--strength", "0.75"),
    ("--quality", "STREAMING_ULTRA"),
]


@pytest.mark.parametrize("bit_depth", [8, 10])
@pytest.mark.parametrize("argv", SR_COMMANDS, ids=lambda a: " ".join(a) or "default")
def test_tour_video_super_resolution(
    fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend, argv: tuple[str, ...], bit_depth: int
) -> None:
    from nvvfx import VideoSuperRes

    sim = sim_backend
    args = sr_args(*[a for a in argv if a not in ("-i", "-o") and not a.startswith("path/")])
    quality = VideoSuperRes.QualityLevel[args.quality]
    stream_ptr = sim.current_stream().ptr  # torch.cuda.current_stream().cuda_stream
    h, w = 18, 32
    oh, ow = h * args.scale, w * args.scale
    image_encoding = VideoSuperRes.ImageEncoding.RGB10A2 if bit_depth == 10 else VideoSuperRes.ImageEncoding.RGB8
    sr = VideoSuperRes(device=0, quality=quality, strength=args.strength, image_encoding=image_encoding)
    sr.input_width = w
    sr.input_height = h
    sr.output_width = ow
    sr.output_height = oh
    sr.load()
    assert sr.is_loaded is True
    assert (sr.quality, sr.strength, sr.image_encoding) == (quality, args.strength, image_encoding)
    try:
        for i in range(3):
            rgb_input, host = frame10(sim, h, w, i) if bit_depth == 10 else frame8(sim, h, w, i)
            if bit_depth == 10:
                assert len(rgb_input.shape) == 2  # the sample's packing check
            output = sr.run(rgb_input, stream_ptr=stream_ptr)
            rgb_output = take(sim, output)
            if bit_depth == 10:
                want = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, host), oh, ow))
                assert rgb_output.dtype == np.uint32 and rgb_output.shape == (oh, ow)
            else:
                want = K.to_rgb8(np, K.resize_bilinear(np, host, oh, ow)).astype(np.float32) / np.float32(255)
                assert rgb_output.dtype == np.float32 and rgb_output.shape == (3, oh, ow)
            np.testing.assert_array_equal(rgb_output, want)
    finally:
        sr.close()
    assert not sr.is_loaded and sim.races == []


def vfg_args(*argv: str) -> argparse.Namespace:
    """video_frame_generation.py's parser (the parts the effect sees)."""
    import nvvfx

    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--multiplier", type=int, default=2)
    group.add_argument("--timesteps", type=lambda v: [float(t) for t in v.split(",")])
    parser.add_argument("--target-fps", type=float, default=0.0)
    parser.add_argument("--mode", type=str, choices=nvvfx.VideoFrameGeneration.Mode.__members__.keys(), default="MEDIUM")
    parser.add_argument("--automatic-shot-change-detection", action=argparse.BooleanOptionalAction, default=True)
    return parser.parse_args(argv)


VFG_COMMANDS = [  # the README's command lines for video_frame_generation.py, plus the documented switch
    ((), 8),
    (("--mode", "HIGH"), 8),
    (("--multiplier", "4"), 8),
    (("--timesteps", "0.25,0.5,0.75"), 8),
    (("--multiplier", "4", "--target-fps", "24"), 8),
    ((), 10),  # -i path/to/10bit_input.mp4 -o output/vfg_10bit.mp4
    (("--no-automatic-shot-change-detection",), 8),
]


@pytest.mark.parametrize("argv,bit_depth", VFG_COMMANDS, ids=lambda a: str(a))
def test_tour_video_frame_generation(
    fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend, argv: tuple[str, ...], bit_depth: int
) -> None:
    from nvvfx import VideoFrameGeneration

    sim = sim_backend
    args = vfg_args(*argv)
    mode = VideoFrameGeneration.Mode[args.mode]
    timesteps = args.timesteps
    stream_ptr = sim.current_stream().ptr
    h, w = 18, 32
    image_encoding = (
        VideoFrameGeneration.ImageEncoding.RGB10A2 if bit_depth == 10 else VideoFrameGeneration.ImageEncoding.RGB8
    )
    vfg = VideoFrameGeneration(
        mode=mode,
        automatic_shot_change_detection_enabled=args.automatic_shot_change_detection,
        device=0,
        image_encoding=image_encoding,
    )
    vfg.input_width = w
    vfg.input_height = h
    vfg.frame_multiplier = args.multiplier
    vfg.load()
    assert vfg.is_loaded is True
    assert (vfg.mode, vfg.frame_multiplier) == (mode, args.multiplier)
    assert vfg.automatic_shot_change_detection_enabled is args.automatic_shot_change_detection
    written = generated = 0
    previous_frame = None
    for i in range(3):
        current_frame, _ = frame10(sim, h, w, i) if bit_depth == 10 else frame8(sim, h, w, i)
        output_frames: list[np.ndarray] = []
        if previous_frame is not None:
            if timesteps:
                for timestep in timesteps:
                    output = vfg.run_at_timestep(previous_frame, current_frame, timestep, stream_ptr=stream_ptr)
                    output_frames.append(take(sim, output))
                    generated += 1
            else:
                for frame_index in range(1, args.multiplier):
                    output = vfg.run(previous_frame, current_frame, frame_index=frame_index, stream_ptr=stream_ptr)
                    output_frames.append(take(sim, output))
                    generated += 1
        for out in output_frames:
            assert out.shape == ((h, w) if bit_depth == 10 else (3, h, w))
            assert out.dtype == (np.uint32 if bit_depth == 10 else np.float32)
        written += len(output_frames) + 1
        previous_frame = current_frame
    vfg.close()
    per_pair = len(timesteps) if timesteps else args.multiplier - 1
    assert generated == 2 * per_pair and written == 3 + generated
    assert not vfg.is_loaded and sim.races == []


TRUE_HDR_COMMANDS = [
    (),
    ("-i", "path/to/sdr_input.mp4", "-o", "path/to/hdr10_output.mp4"),
    ("--luminance", "1000", "--saturation", "120"),
    ("--debanding-off",),
]


@pytest.mark.parametrize("argv", TRUE_HDR_COMMANDS, ids=lambda a: " ".join(a) or "default")
def test_tour_true_hdr(fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend, argv: tuple[str, ...]) -> None:
    from nvvfx import TrueHDR

    sim = sim_backend
    parser = argparse.ArgumentParser()
    parser.add_argument("-i")
    parser.add_argument("-o")
    for flag, default in (("--contrast", 100), ("--saturation", 100), ("--middle-gray", 50), ("--luminance", 650)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--debanding-off", action="store_true")
    args = parser.parse_args(argv)
    stream_ptr = sim.current_stream().ptr
    thdr = TrueHDR(
        contrast=args.contrast,
        saturation=args.saturation,
        middle_gray=args.middle_gray,
        luminance=args.luminance,
        debanding_off=1 if args.debanding_off else 0,
        device=0,
    )
    thdr.load()
    assert thdr.is_loaded is True
    assert (thdr.luminance, thdr.saturation, thdr.debanding_off) == (args.luminance, args.saturation, int(args.debanding_off))
    try:
        for i in range(2):
            rgb_input, host = frame8(sim, 18, 32, i)
            output = thdr.run(rgb_input, stream_ptr=stream_ptr)
            rgb_output = take(sim, output)
            assert rgb_output.dtype == np.uint32 and rgb_output.shape == (18, 32)  # rgb10a2_tensor_to_avframe's check
            want = K.tone_map_hdr(
                np, host, contrast=args.contrast, saturation=args.saturation, middle_gray=args.middle_gray, luminance=args.luminance
            )
            np.testing.assert_array_equal(rgb_output, want)
    finally:
        thdr.close()
    assert not thdr.is_loaded and sim.races == []


def test_tour_with_a_backend_argument_and_a_side_stream() -> None:
    """The same calls with ``backend=`` instead of the fixture, on a non-blocking SDK stream."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    side = sim.create_stream(non_blocking=True)
    x, host = frame8(sim, 18, 32)
    with VideoSuperRes(quality=QualityLevel.DEBLUR_ULTRA, backend=sim) as sr:
        sr.output_width, sr.output_height = 32, 18
        sr.load()
        out = sr.run(x, stream_ptr=side.ptr)  # non_blocking=False: the host waits for the SDK stream
        sim.synchronize_device()
        got = sim.from_dlpack(out.image).numpy()
    np.testing.assert_array_equal(got, K.to_rgb8(np, host).astype(np.float32) / np.float32(255))


# -- part 2: validation rules ---------------------------------------------------------------------------


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="in-order")


def sr_loaded(sim: ss.sim.SimBackend, quality: QualityLevel, w: int, h: int, ow: int, oh: int) -> VideoSuperRes:
    sr = VideoSuperRes(quality=quality, backend=sim)
    sr.input_width, sr.input_height = w, h
    sr.output_width, sr.output_height = ow, oh
    sr.load()
    return sr


@pytest.mark.parametrize("quality", list(QualityLevel), ids=lambda q: q.name)
def test_1x_only_for_denoise_and_deblur(sim: ss.sim.SimBackend, quality: QualityLevel) -> None:
    x, _ = frame8(sim, 18, 32)
    same_res = quality.name.startswith(("DENOISE_", "DEBLUR_"))
    sr = VideoSuperRes(quality=quality, backend=sim)
    sr.output_width, sr.output_height = 32, 18
    sr.load()  # the input size is not known yet: checked at run()
    if same_res:
        assert take(sim, sr.run(x)).shape == (3, 18, 32)
    else:
        level = quality.name.split("_")[-1] if quality.name.endswith(("LOW", "MEDIUM", "HIGH", "ULTRA")) else "HIGH"
        with pytest.raises(ss.errors.EffectConfigError) as info:
            sr.run(x)
        msg = str(info.value)
        assert msg.startswith("VideoSuperRes: output size='32x18' is invalid: equals the input size (1x)")
        assert f"only the DENOISE_* and DEBLUR_* qualities allow, not {quality.name}" in msg
        assert f"choose e.g. QualityLevel.DENOISE_{level}" in msg and "set an output larger than the input" in msg
        assert isinstance(info.value, ValueError) and sr.runs == 0
    # and at load(), when input_width/input_height are set first (as the samples do)
    if same_res:
        sr_loaded(sim, quality, 32, 18, 32, 18)
    else:
        with pytest.raises(ss.errors.EffectConfigError, match=r"equals the input size \(1x\)"):
            sr_loaded(sim, quality, 32, 18, 32, 18)


@pytest.mark.parametrize("quality", sorted(SAME_RESOLUTION_QUALITIES), ids=lambda q: q.name)
def test_denoise_and_deblur_do_not_upscale(sim: ss.sim.SimBackend, quality: QualityLevel) -> None:
    with pytest.raises(ss.errors.EffectConfigError) as info:
        sr_loaded(sim, quality, 32, 18, 64, 36)
    assert str(info.value) == (
        f"VideoSuperRes: output size='64x36' is invalid: {quality.name} denoises or deblurs at 1x only, so the output "
        "must equal the input size 32x18; set output_width=32 and output_height=18, or choose an upscaling quality "
        "such as HIGH"
    )


def test_quality_can_change_between_runs_and_is_checked_at_each_run(sim: ss.sim.SimBackend) -> None:
    x, _ = frame8(sim, 18, 32)
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 64, 36
    sr.load()
    assert take(sim, sr.run(x)).shape == (3, 36, 64)
    sr.quality = QualityLevel.DENOISE_MEDIUM
    with pytest.raises(ss.errors.EffectConfigError, match="DENOISE_MEDIUM denoises or deblurs at 1x only"):
        sr.run(x)
    sr.output_width, sr.output_height = 32, 18
    assert take(sim, sr.run(x)).shape == (3, 18, 32)


@pytest.mark.parametrize(
    "ow,oh,rule",
    [
        (200, 36, r"must be 1x to 4x the input size 32x18 in each dimension; set output_width and output_height "
                  r"within \[32, 128\] x \[18, 72\]"),
        (16, 18, r"must be 1x to 4x the input size 32x18"),  # downscaling
    ],
)  # fmt: skip
def test_output_scale_range(sim: ss.sim.SimBackend, ow: int, oh: int, rule: str) -> None:
    with pytest.raises(ss.errors.EffectConfigError, match=rf"output size='{ow}x{oh}' is invalid: {rule}"):
        sr_loaded(sim, QualityLevel.HIGH, 32, 18, ow, oh)


def test_non_uniform_and_fractional_scales_are_accepted(sim: ss.sim.SimBackend) -> None:
    x, _ = frame8(sim, 18, 32)
    sr = sr_loaded(sim, QualityLevel.HIGH, 32, 18, 48, 18)  # 1.5x wide, 1x high: not a same-size run
    assert take(sim, sr.run(x)).shape == (3, 18, 48)


# Per scale: (input w, input h, output w, output h, accepted). Boxes: 2x 3840x2160, 3x 1280x720, 4x 960x540.
LIMIT_CASES = [
    (3840, 2160, 7680, 4320, True),  # 2x from 2160p
    (2160, 3840, 4320, 7680, True),  # portrait fits the box turned
    (4096, 2160, 8192, 4320, False),  # DCI 4K is wider than 3840
    (1920, 1080, 2880, 1620, True),  # 1.5x counts as 2x
    (1280, 720, 3840, 2160, True),  # 3x from 720p
    (1920, 1080, 5760, 3240, False),  # 3x from 1080p
    (1280, 720, 3200, 1800, True),  # 2.5x counts as 3x
    (1920, 1080, 4800, 2700, False),
    (960, 540, 3840, 2160, True),  # 4x from 540p
    (540, 960, 2160, 3840, True),
    (1280, 720, 5120, 2880, False),  # 4x from 720p
    (976, 544, 3904, 2176, False),
    (1920, 1080, 7680, 4320, False),  # the samples' --scale 4 on a 1080p source
]


@pytest.mark.parametrize("w,h,ow,oh,ok", LIMIT_CASES)
def test_per_scale_input_limits(sim: ss.sim.SimBackend, w: int, h: int, ow: int, oh: int, ok: bool) -> None:
    if ok:
        sr_loaded(sim, QualityLevel.ULTRA, w, h, ow, oh)
        return
    with pytest.raises(ss.errors.EffectConfigError) as info:
        sr_loaded(sim, QualityLevel.ULTRA, w, h, ow, oh)
    factor = max(ow / w, oh / h)
    bucket = max(2, -int(-factor // 1))
    lw, lh = INPUT_LIMITS[bucket]
    msg = str(info.value)
    assert msg.startswith(f"VideoSuperRes: input size='{w}x{h}' is invalid: at {factor:g}x (output {ow}x{oh}) ")
    assert f"the input must fit {lw}x{lh} ({lh}p, either orientation); use a smaller input or a lower scale" in msg


def test_per_scale_limit_at_1x(sim: ss.sim.SimBackend) -> None:
    sr_loaded(sim, QualityLevel.DENOISE_ULTRA, 3840, 2160, 3840, 2160)
    with pytest.raises(ss.errors.EffectConfigError, match=r"at 1x \(output 4096x2160\) the input must fit 3840x2160"):
        sr_loaded(sim, QualityLevel.DENOISE_ULTRA, 4096, 2160, 4096, 2160)


def test_per_scale_limit_is_checked_at_run_when_the_input_size_is_inferred(sim: ss.sim.SimBackend) -> None:
    sr = VideoSuperRes(quality=QualityLevel.HIGH, backend=sim)  # no input_width/height: inferred from the frame
    sr.output_width, sr.output_height = 3904, 2176
    sr.load()
    x = sim.array(np.zeros((3, 544, 976), np.float32))
    with pytest.raises(ss.errors.EffectConfigError, match=r"input size='976x544' is invalid: at 4x .* must fit 960x540") as info:
        sr.run(x)
    assert "(2x up to 3840x2160, 3x up to 1280x720)" in str(info.value)  # what would be accepted instead
    assert sr.runs == 0


def test_input_limits_table() -> None:
    assert INPUT_LIMITS == {1: (3840, 2160), 2: (3840, 2160), 3: (1280, 720), 4: (960, 540)}


@pytest.mark.parametrize("value", [0, 1, 9, 2.0, True])
def test_frame_multiplier_range(sim: ss.sim.SimBackend, value: Any) -> None:
    vfg = VideoFrameGeneration(backend=sim)
    with pytest.raises(ss.errors.EffectConfigError) as info:
        vfg.frame_multiplier = value
    assert str(info.value).startswith(f"VideoFrameGeneration: frame_multiplier={value!r} is invalid: must be an integer in [2, 8]")
    assert "call run_at_timestep() instead" in str(info.value)
    assert vfg.frame_multiplier == 2  # unchanged


def test_frame_multiplier_accepts_2_to_8(sim: ss.sim.SimBackend) -> None:
    vfg = VideoFrameGeneration(backend=sim)
    vfg.input_width, vfg.input_height = 32, 18
    vfg.load()
    a, _ = frame8(sim, 18, 32, 1)
    b, _ = frame8(sim, 18, 32, 2)
    for m in range(2, 9):
        vfg.frame_multiplier = m
        for i in range(1, m):
            vfg.run(a, b, frame_index=i)
        with pytest.raises(ss.errors.EffectConfigError, match=rf"frame_index={m} is invalid: .* = \[1, {m - 1}\]; raise frame_multiplier"):
            vfg.run(a, b, frame_index=m)
    with pytest.raises(ss.errors.EffectConfigError, match=r"frame_index=0 is invalid"):
        vfg.run(a, b, frame_index=0)
    for t in (0.0, 1.0, -0.1):
        with pytest.raises(ss.errors.EffectConfigError, match=r"pass a position strictly between them"):
            vfg.run_at_timestep(a, b, t)


def test_mode_validation(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.EffectConfigError) as info:
        VideoFrameGeneration(mode=3, backend=sim)  # type: ignore[arg-type]
    assert str(info.value) == (
        "VideoFrameGeneration: mode=3 is invalid: must be a Mode value, one of LOW (0), MEDIUM (1), HIGH (2); "
        "pass a member, e.g. VideoFrameGeneration.Mode.MEDIUM"
    )
    assert VideoFrameGeneration(mode=2, backend=sim).mode is Mode.HIGH  # ints are taken, like the IntEnum


def test_quality_validation(sim: ss.sim.SimBackend) -> None:
    for bad in (5, 20, 22, 24, "HIGH"):
        with pytest.raises(ss.errors.EffectConfigError, match=rf"quality={bad!r} is invalid: must be a QualityLevel value, one of BICUBIC \(0\)"):
            VideoSuperRes(quality=bad, backend=sim)  # type: ignore[arg-type]
    assert VideoSuperRes(quality=21, backend=sim).quality is QualityLevel.STREAMING_MEDIUM  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name,lo,hi",
    [("contrast", 0, 200), ("saturation", 0, 200), ("middle_gray", 10, 100), ("luminance", 400, 2000), ("debanding_off", 0, 1)],
)
def test_true_hdr_ranges(sim: ss.sim.SimBackend, name: str, lo: int, hi: int) -> None:
    for ok in (lo, hi):
        assert getattr(TrueHDR(backend=sim, **{name: ok}), name) == ok
    hdr = TrueHDR(backend=sim)
    for bad in (lo - 1, hi + 1, 1.5):
        with pytest.raises(ss.errors.EffectConfigError, match=rf"{name}={bad!r} is invalid: must be an integer in \[{lo}, {hi}\]; "):
            TrueHDR(backend=sim, **{name: bad})
        with pytest.raises(ss.errors.EffectConfigError):
            setattr(hdr, name, bad)  # the tunables are settable, and checked the same way
    assert TrueHDR(backend=sim, debanding_off=True).debanding_off == 1


def test_strength_range(sim: ss.sim.SimBackend) -> None:
    assert VideoSuperRes(strength=0.0, backend=sim).strength == 0.0
    assert VideoSuperRes(strength=1, backend=sim).strength == 1.0
    for bad in (-0.1, 1.01):
        with pytest.raises(ss.errors.EffectConfigError, match=rf"strength={bad!r} is invalid: must be a number in \[0.0, 1.0\]; 1.0 is"):
            VideoSuperRes(strength=bad, backend=sim)


def test_error_types(sim: ss.sim.SimBackend) -> None:
    assert issubclass(ss.errors.EffectConfigError, ValueError) and issubclass(ss.errors.EffectStateError, RuntimeError)
    sr = VideoSuperRes(backend=sim)
    with pytest.raises(RuntimeError, match=r"VideoSuperRes.run\(\) cannot run: the effect is not loaded. Call VideoSuperRes.load\(\)"):
        sr.run(frame8(sim, 18, 32)[0])
    with pytest.raises(RuntimeError, match="Set output_width and output_height before load"):
        sr.load()
    sr.close()
    with pytest.raises(RuntimeError, match="the effect is closed. Create a new effect"):
        sr.load()
    vfg = VideoFrameGeneration(backend=sim)
    with pytest.raises(RuntimeError, match="Set input_width and input_height before load"):
        vfg.load()
    with pytest.raises(ValueError, match=r"input_width=8 is invalid: must be an integer in \[16, 8192\]; pass a pixel count"):
        vfg.input_width = 8


def test_frame_size_mismatch_names_the_fix(sim: ss.sim.SimBackend) -> None:
    sr = sr_loaded(sim, QualityLevel.HIGH, 32, 18, 64, 36)
    with pytest.raises(ss.errors.EffectConfigError, match=r"does not match input_width x input_height = 32x18; pass frames of that size"):
        sr.run(frame8(sim, 20, 32)[0])
    vfg = VideoFrameGeneration(backend=sim)
    vfg.input_width, vfg.input_height = 32, 18
    vfg.load()
    a = frame8(sim, 18, 32)[0]
    with pytest.raises(ss.errors.EffectConfigError, match="frame generation does not scale"):
        vfg.run(a, frame8(sim, 36, 64)[0], frame_index=1)


# -- part 3: the API reference's surface: modules, names, values, signatures, errors -------------------------

# What nvvfx 0.2's API reference documents and code in the wild uses, module by module (the values are checked below).
SURFACE: dict[str, set[str]] = {
    "nvvfx": {
        "VideoSuperRes", "VideoFrameGeneration", "TrueHDR", "VideoSuperResOutput", "VideoFrameGenerationOutput",
        "TrueHDROutput", "ImageEncoding", "QualityLevel", "Mode", "NvVFXError", "get_sdk_version",
    },
    "nvvfx.effects": {"QualityLevel"},
    "nvvfx.effects.base": {"Effect"},
    "nvvfx.effects.video_super_res": {"VideoSuperRes", "VideoSuperResOutput", "QualityLevel"},
}  # fmt: skip

_P, _K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
_REQUIRED = inspect.Parameter.empty
_RUN = [("non_blocking", _K, False), ("stream_ptr", _K, 0)]
# (name, kind, default) of each documented call, in order: the positional ones exactly; the keyword-only ones as a set.
SIGNATURES: dict[str, list[tuple[str, Any, Any]]] = {
    "VideoSuperRes": [("quality", _P, QualityLevel.HIGH), ("device", _P, 0), ("strength", _P, 1.0),
                      ("image_encoding", _P, ImageEncoding.RGB8)],
    "VideoSuperRes.run": [("input_array", _P, _REQUIRED), *_RUN],
    "VideoFrameGeneration": [("mode", _P, Mode.MEDIUM), ("automatic_shot_change_detection_enabled", _P, True),
                             ("device", _P, 0), ("image_encoding", _P, ImageEncoding.RGB8)],
    "VideoFrameGeneration.run": [("previous", _P, _REQUIRED), ("current", _P, _REQUIRED), ("frame_index", _K, _REQUIRED),
                                 ("shot_change", _K, False), *_RUN],
    "VideoFrameGeneration.run_at_timestep": [("previous", _P, _REQUIRED), ("current", _P, _REQUIRED),
                                             ("timestep", _P, _REQUIRED), ("shot_change", _K, False), *_RUN],
    "TrueHDR": [("contrast", _P, 100), ("saturation", _P, 100), ("middle_gray", _P, 50), ("luminance", _P, 650),
                ("debanding_off", _P, 0), ("device", _P, 0)],
    "TrueHDR.run": [("rgb_input", _P, _REQUIRED), *_RUN],
    "Effect": [("device", _P, 0), ("image_encoding", _P, ImageEncoding.RGB8)],
    "Effect.run": [("input_array", _P, _REQUIRED), *_RUN],
}  # fmt: skip
EMULATION_KEYWORDS = {"backend", "latency_us", "launch_mode", "host_cost_us"}
"""The constructors' keyword-only extras (not the SDK's): each has a default, so SDK code never passes one."""

MEMBERS = {  # every effect has Effect's; each its own settings
    "Effect": {"load", "run", "close", "is_loaded", "needs_reload", "device", "image_encoding", "ImageEncoding",
               "__enter__", "__exit__", "_SELECTOR"},
    "VideoSuperRes": {"QualityLevel", "quality", "strength", "input_width", "input_height", "output_width", "output_height"},
    "VideoFrameGeneration": {"Mode", "mode", "automatic_shot_change_detection_enabled", "frame_multiplier",
                             "input_width", "input_height", "run_at_timestep"},
    "TrueHDR": {"contrast", "saturation", "middle_gray", "luminance", "debanding_off"},
}  # fmt: skip


def _module_named(name: str) -> types.ModuleType:
    import importlib

    return importlib.import_module(name)


def test_the_documented_modules_import_and_hold_the_documented_names(fake_nvvfx: types.ModuleType) -> None:
    import nvvfx
    import nvvfx.effects
    import nvvfx.effects.base
    import nvvfx.effects.video_super_res
    from nvvfx.effects import QualityLevel as EffectsQuality
    from nvvfx.effects.base import Effect
    from nvvfx.effects.video_super_res import QualityLevel as SrQuality

    for name, names in SURFACE.items():
        module = _module_named(name)
        assert module.__name__ == name and set(module.__all__) == names, name
        assert [n for n in names if getattr(module, n, None) is None] == [], name
    assert nvvfx.effects.base.Effect is Effect and nvvfx.effects.video_super_res.VideoSuperRes is nvvfx.VideoSuperRes
    assert nvvfx.QualityLevel is EffectsQuality is SrQuality is nvvfx.VideoSuperRes.QualityLevel is QualityLevel
    assert nvvfx.ImageEncoding is nvvfx.VideoFrameGeneration.ImageEncoding is Effect.ImageEncoding is ImageEncoding
    assert nvvfx.Mode is nvvfx.VideoFrameGeneration.Mode is Mode
    assert not hasattr(nvvfx, "STAGES") and nvvfx.__version__ == "0.2.0+streamsafe"
    assert isinstance(nvvfx.get_sdk_version(), str) and nvvfx.get_sdk_version()
    with pytest.raises(ModuleNotFoundError, match="No module named 'nvvfx.effects.true_hdr'"):  # not documented: not made up
        _module_named("nvvfx.effects.true_hdr")


def test_the_enums_hold_the_documented_members_and_values(fake_nvvfx: types.ModuleType) -> None:
    import nvvfx

    assert {q.name: int(q) for q in nvvfx.effects.QualityLevel} == QUALITY_TABLE
    assert {m.name: int(m) for m in nvvfx.Mode} == MODE_TABLE
    assert {e.name: int(e) for e in nvvfx.ImageEncoding} == {"RGB8": 0, "RGB10A2": 1}
    assert {q.name for q in SAME_RESOLUTION_QUALITIES} == {n for n in QUALITY_TABLE if n[:7] in ("DENOISE", "DEBLUR_")}


@pytest.mark.parametrize("call", sorted(SIGNATURES))
def test_the_documented_signatures(fake_nvvfx: types.ModuleType, call: str) -> None:
    import nvvfx

    cls_name, _, method = call.partition(".")
    cls = nvvfx.effects.base.Effect if cls_name == "Effect" else getattr(nvvfx, cls_name)
    params = list(inspect.signature(getattr(cls, method) if method else cls).parameters.values())
    params = [p for p in params if p.name != "self"]
    got = [(p.name, p.kind, p.default) for p in params if p.name not in EMULATION_KEYWORDS]
    want = SIGNATURES[call]
    assert [g for g in got if g[1] is not _K] == [w for w in want if w[1] is not _K]  # positional: names, order, defaults
    assert {g for g in got if g[1] is _K} == {w for w in want if w[1] is _K}
    extras = [p for p in params if p.name in EMULATION_KEYWORDS]
    assert all(p.kind is _K and p.default is not _REQUIRED for p in extras)
    assert not method or len(extras) == 0


def test_the_documented_members_and_bases(fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend) -> None:
    import nvvfx
    from nvvfx.effects.base import Effect

    for cls in (nvvfx.VideoSuperRes, nvvfx.VideoFrameGeneration, nvvfx.TrueHDR):
        assert issubclass(cls, Effect), cls
        effect = cls()
        assert [m for m in MEMBERS["Effect"] | MEMBERS[cls.__name__] if not hasattr(effect, m)] == [], cls
        assert isinstance(cls._SELECTOR, str) and cls._SELECTOR
    for prop in ("is_loaded", "needs_reload"):
        assert isinstance(inspect.getattr_static(Effect, prop), property) and inspect.getattr_static(Effect, prop).fset is None
    assert issubclass(nvvfx.NvVFXError, Exception)
    for out in (nvvfx.VideoSuperResOutput, nvvfx.VideoFrameGenerationOutput, nvvfx.TrueHDROutput):
        assert [f.name for f in dataclasses.fields(out)] == ["image"]


def test_positional_and_keyword_use_as_code_in_the_wild_writes_it(fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend) -> None:
    import nvvfx
    from nvvfx.effects import QualityLevel

    sim = sim_backend
    x, host = frame8(sim, 18, 32)
    with nvvfx.VideoSuperRes(QualityLevel.ULTRA) as sr:  # the quality positional, the effect a context manager
        assert sr.quality is QualityLevel.ULTRA and sr.is_loaded is False
        sr.output_width, sr.output_height = 64, 36
        sr.load()
        got = take(sim, sr.run(x))
    assert sr.is_loaded is False and sr.closed  # __exit__ closed it
    np.testing.assert_array_equal(got, K.to_rgb8(np, K.resize_bilinear(np, host, 36, 64)).astype(np.float32) / np.float32(255))
    assert nvvfx.VideoSuperRes(nvvfx.VideoSuperRes.QualityLevel(10), 0, 0.5, nvvfx.ImageEncoding.RGB10A2).strength == 0.5
    assert nvvfx.VideoFrameGeneration(nvvfx.Mode.HIGH, False, 0).automatic_shot_change_detection_enabled is False
    assert nvvfx.TrueHDR(120, 90, 40, 1000, 1, 0).luminance == 1000
    strength = "MEDIUM"  # getattr(nvvfx.effects.QualityLevel, f"DEBLUR_{strength}"), as nodes in the wild look levels up
    assert getattr(nvvfx.effects.QualityLevel, f"DEBLUR_{strength}") == 13 and nvvfx.effects.QualityLevel["STREAMING_ULTRA"] == 23


def test_sdk_failures_are_nvvfx_errors_and_streamsafes_errors_too(fake_nvvfx: types.ModuleType, sim_backend: ss.sim.SimBackend) -> None:
    import nvvfx

    sim = sim_backend
    sr = nvvfx.VideoSuperRes()
    with pytest.raises(nvvfx.NvVFXError) as state:
        sr.run(frame8(sim, 18, 32)[0])
    assert isinstance(state.value, ss.errors.EffectStateError) and isinstance(state.value, RuntimeError)
    assert str(state.value) == "VideoSuperRes.run() cannot run: the effect is not loaded. Call VideoSuperRes.load() before run()."
    with pytest.raises(nvvfx.NvVFXError) as config:
        sr.output_width = 8
    assert isinstance(config.value, ss.errors.EffectConfigError) and isinstance(config.value, ValueError)
    assert (config.value.name, config.value.value) == ("output_width", 8)  # the structured fields stay
    refused = [
        lambda: nvvfx.VideoSuperRes(quality=5),  # not a QualityLevel
        lambda: nvvfx.VideoFrameGeneration(mode=7),
        lambda: nvvfx.TrueHDR(luminance=100),
        lambda: nvvfx.VideoSuperRes(device=-1),
        lambda: setattr(nvvfx.VideoFrameGeneration(), "frame_multiplier", 1),
        lambda: nvvfx.VideoSuperRes().load(),  # no output size
    ]
    for call in refused:
        with pytest.raises(nvvfx.NvVFXError):
            call()
    with pytest.raises(ss.errors.EffectConfigError) as knob:  # the emulation's own knobs are not the SDK's
        nvvfx.VideoSuperRes(latency_us=-1)
    assert not isinstance(knob.value, nvvfx.NvVFXError)


def test_shot_change_repeats_the_nearer_frame(sim_backend: ss.sim.SimBackend) -> None:
    sim = sim_backend
    vfg = VideoFrameGeneration(automatic_shot_change_detection_enabled=False)
    vfg.input_width, vfg.input_height = 32, 18
    vfg.frame_multiplier = 4
    vfg.load()
    (a, ha), (b, hb) = frame8(sim, 18, 32, 1), frame8(sim, 18, 32, 2)

    def rgb8(x: np.ndarray) -> np.ndarray:
        return K.to_rgb8(np, x).astype(np.float32) / np.float32(255)

    np.testing.assert_array_equal(take(sim, vfg.run(a, b, frame_index=1, shot_change=True)), rgb8(ha))
    np.testing.assert_array_equal(take(sim, vfg.run(a, b, frame_index=3, shot_change=True)), rgb8(hb))
    np.testing.assert_array_equal(take(sim, vfg.run_at_timestep(a, b, 0.4, shot_change=True)), rgb8(ha))
    np.testing.assert_array_equal(take(sim, vfg.run_at_timestep(a, b, 0.5, shot_change=1)), rgb8(hb))
    np.testing.assert_array_equal(take(sim, vfg.run(a, b, frame_index=2, shot_change=False)), rgb8(K.blend(np, ha, hb, 0.5, False)))
    assert not np.array_equal(rgb8(K.blend(np, ha, hb, 0.5, False)), rgb8(hb))  # (so the cut above made a difference)
    with pytest.raises(NvVFXError, match=r"shot_change='yes' is invalid: must be True .* or False \(interpolate\); pass a bool"):
        vfg.run(a, b, frame_index=1, shot_change="yes")  # type: ignore[arg-type]
    assert vfg.runs == 5


def test_shot_change_in_rgb10a2(sim_backend: ss.sim.SimBackend) -> None:
    sim = sim_backend
    vfg = VideoFrameGeneration(image_encoding=ImageEncoding.RGB10A2, automatic_shot_change_detection_enabled=False)
    vfg.input_width, vfg.input_height = 32, 18  # (detection off: random frames read as a cut to it)
    vfg.load()
    (a, ha), (b, hb) = frame10(sim, 18, 32, 1), frame10(sim, 18, 32, 2)
    np.testing.assert_array_equal(take(sim, vfg.run_at_timestep(a, b, 0.75, shot_change=True)), hb)
    np.testing.assert_array_equal(take(sim, vfg.run_at_timestep(a, b, 0.25, shot_change=True)), ha)


def test_needs_reload_after_a_change_and_the_next_run_loads_again(sim_backend: ss.sim.SimBackend) -> None:
    sim = sim_backend
    sr = VideoSuperRes(QualityLevel.DENOISE_LOW)
    sr.output_width, sr.output_height = 32, 18
    assert sr.needs_reload is False  # not loaded yet: nothing to reload
    sr.quality = QualityLevel.HIGH
    sr.load()
    assert sr.needs_reload is False
    sr.quality = QualityLevel.HIGH  # the same value: no change
    assert sr.needs_reload is False
    sr.quality = QualityLevel.DENOISE_HIGH
    assert sr.needs_reload is True
    take(sim, sr.run(frame8(sim, 18, 32)[0]))
    assert sr.needs_reload is False
    sr.output_width, sr.output_height = 64, 36  # a 1x quality, now at 2x
    assert sr.needs_reload is True
    with pytest.raises(NvVFXError, match=r"DENOISE_HIGH denoises or deblurs at 1x only"):
        sr.run(frame8(sim, 18, 32)[0])  # loaded again (as load() does: the input size is unknown to it), then refused
    assert sr.needs_reload is False and sr.runs == 1  # the refused run issued nothing
    sr.input_width, sr.input_height = 32, 18  # known now: load() checks the scale rules itself
    with pytest.raises(NvVFXError, match=r"DENOISE_HIGH denoises or deblurs at 1x only"):
        sr.load()
    assert sr.needs_reload is True  # the load was refused: still to do
    sr.quality = QualityLevel.HIGH
    take(sim, sr.run(frame8(sim, 18, 32)[0]))
    assert sr.needs_reload is False and sr.runs == 2
    sr.close()
    sr.output_width = 48
    assert sr.needs_reload is False  # closed: nothing to reload

    def loaded(effect: Any) -> Any:
        if isinstance(effect, VideoFrameGeneration):
            effect.input_width, effect.input_height = 32, 18
        if isinstance(effect, VideoSuperRes):
            effect.output_width, effect.output_height = 64, 36
        effect.load()
        return effect

    for cls, name, value in [(VideoFrameGeneration, "mode", Mode.HIGH),
                             (VideoFrameGeneration, "automatic_shot_change_detection_enabled", False),
                             (VideoFrameGeneration, "input_width", 48),
                             (VideoSuperRes, "strength", 0.5),
                             (VideoSuperRes, "image_encoding", ImageEncoding.RGB10A2),
                             (TrueHDR, "luminance", 1000)]:  # fmt: skip
        effect = loaded(cls())
        setattr(effect, name, value)
        assert effect.needs_reload is True, (cls.__name__, name)
    vfg = loaded(VideoFrameGeneration())
    vfg.frame_multiplier = 4  # which frames a run makes, not a setting the SDK loads
    assert vfg.needs_reload is False


# -- part 4: nvvfx.effects.base.Effect, subclassed as third-party code does ---------------------------------


class ArtifactReduction(Effect):
    _SELECTOR = "ArtifactReduction"


def test_a_subclass_with_a_selector_loads_runs_and_closes(sim_backend: ss.sim.SimBackend) -> None:
    sim = sim_backend
    x, host = frame8(sim, 18, 32)
    with ArtifactReduction(device=0) as fx:
        assert fx.is_loaded is False and fx.needs_reload is False
        fx.load()
        out = fx.run(x, stream_ptr=sim.current_stream().ptr)
        assert isinstance(out, EffectOutput)
        np.testing.assert_array_equal(take(sim, out), K.to_rgb8(np, host).astype(np.float32) / np.float32(255))
    assert fx.closed and sim.races == []
    packed = ArtifactReduction(image_encoding=ImageEncoding.RGB10A2)
    packed.load()
    y, yhost = frame10(sim, 18, 32)
    np.testing.assert_array_equal(take(sim, packed.run(y)), yhost)
    with pytest.raises(NvVFXError, match=r"ArtifactReduction.run\(\) cannot run: the effect is closed"):
        fx.run(x)


def test_the_base_class_alone_or_without_a_selector_is_refused() -> None:
    class NoSelector(Effect):
        pass

    for cls in (Effect, NoSelector):
        with pytest.raises(NvVFXError, match=rf"{cls.__name__}: _SELECTOR=None is invalid: must name the SDK filter .* "
                                             r"subclass it and set _SELECTOR"):
            cls()


def _grey_pipeline(sim: ss.sim.SimBackend, fx: Effect, guarded: bool) -> tuple[int, list[Any]]:
    """Four flat-grey frames: written on a producer stream P, run on a non-blocking SDK stream S, imported and copied
    on a consumer stream C (three ``torch.cuda.Stream()``s); returns the wrong frames and the races."""
    producer, sdk, consumer = (sim.create_stream(non_blocking=True) for _ in range(3))
    levels = [30, 90, 150, 210]
    copies = []
    block: Any = ss.stream_contract(fx, sdk, input_stream=producer, consumer_stream=consumer) if guarded else contextlib.nullcontext()
    with sim.use_stream(sdk), block:
        for level in levels:
            frame = sim.empty((3, 18, 32), np.float32, stream=producer)
            sim.fill(frame, np.float32(level / 255), stream=producer)
            out = fx.run(frame, stream_ptr=sdk.ptr)
            copies.append(sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer))
    sim.synchronize_device()
    wrong = sum(not np.array_equal(np.round(sim.download(c, consumer) * 255), np.full((3, 18, 32), lv)) for c, lv in zip(copies, levels))
    return wrong, sim.take_races()


def test_stream_contract_orders_an_effect_subclass_on_the_adversarial_model() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    fx = ArtifactReduction(backend=sim)
    fx.load()
    wrong, races = _grey_pipeline(sim, fx, guarded=False)
    assert wrong > 0 and races, "the control: unguarded, the subclass's frames race"
    fx = ArtifactReduction(backend=sim)
    fx.load()
    wrong, races = _grey_pipeline(sim, fx, guarded=True)
    assert (wrong, races) == (0, [])


def test_a_subclass_is_guarded_with_the_sdks_stream_behaviour() -> None:
    """The contract knows the subclass's RGB8 output is converted on stream 0 (H3) and its RGB10A2 output is not."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    consumer = sim.create_stream(non_blocking=True)
    for encoding, hazard in ((ImageEncoding.RGB8, "H3"), (ImageEncoding.RGB10A2, "H4")):
        fx = ArtifactReduction(image_encoding=encoding, backend=sim)
        fx.load()
        with ss.stream_contract(fx, sim.create_stream(non_blocking=True), consumer_stream=consumer) as c:
            assert hazard in str(c.plan), (encoding, str(c.plan))


def test_guarded_frame_generation_takes_shot_change(sim_backend: ss.sim.SimBackend) -> None:
    sim = sim_backend
    vfg = VideoFrameGeneration(automatic_shot_change_detection_enabled=False)
    vfg.input_width, vfg.input_height = 32, 18
    vfg.load()
    (a, ha), (b, hb) = frame8(sim, 18, 32, 1), frame8(sim, 18, 32, 2)
    side = sim.create_stream(non_blocking=True)
    with sim.use_stream(side), ss.stream_contract(vfg, side) as c:
        cut = c.run(a, b, frame_index=1, shot_change=True).numpy()
        early = vfg.run_at_timestep(a, b, 0.25, shot_change=True).numpy()
    np.testing.assert_array_equal(cut, K.to_rgb8(np, hb).astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(early, K.to_rgb8(np, ha).astype(np.float32) / np.float32(255))
    assert sim.races == []
