"""The example programs under examples/ on a CPU: options, the no-GPU message, the PyAV helpers,
and the --verify references against the emulation on the model. (They run on a GPU in
scripts/gpu_lane.sh examples.)"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import TrueHDR, VideoFrameGeneration, VideoSuperRes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROGRAMS = ["video_super_resolution.py", "video_frame_generation.py", "true_hdr.py"]


@pytest.fixture
def vio(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("_video_io")


def _load(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module(name.removesuffix(".py"))


def _run(program: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(EXAMPLES / program), *args], capture_output=True, text=True,
                          env=full, timeout=60)


def _has_cuda_torch() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# -- the programs' command lines -------------------------------------------------------------------


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_exits_zero_without_torch_or_pyav(program: str) -> None:
    result = _run(program, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--input", "--output", "--frames", "--side-stream", "--verify", "--emulation-latency-us"):
        assert option in result.stdout


@pytest.mark.parametrize("program", PROGRAMS)
def test_programs_are_plain_nvvfx_programs(program: str) -> None:
    source = (EXAMPLES / program).read_text()
    assert "streamsafe" not in "\n".join(line for line in source.splitlines() if "import" in line)
    assert "stream_ptr=torch.cuda.current_stream().cuda_stream" in source or "stream_ptr = torch.cuda.current_stream().cuda_stream" in source
    assert "torch.from_dlpack(out.image).clone()" in source
    assert "synchronize" not in source


@pytest.mark.parametrize(
    ("program", "args"),
    [
        ("video_super_resolution.py", ["--scale", "5"]),
        ("video_super_resolution.py", ["--frames", "0"]),
        ("video_frame_generation.py", ["--timestep", "1.0"]),
        ("true_hdr.py", ["--debanding-off", "2"]),
        ("true_hdr.py", ["--size", "15x9"]),
    ],
)
def test_bad_options_are_usage_errors(program: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _load(program, monkeypatch).build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(args)
    assert exc.value.code == 2


def test_options_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _load("video_frame_generation.py", monkeypatch).build_parser()
    args = parser.parse_args(["-i", "in.mp4", "-o", "out.mp4", "--frames", "60", "--side-stream", "--copy-stream",
                              "--non-blocking", "--emulation-latency-us", "300", "--verify", "--timestep", "0.25",
                              "--size", "64x48"])
    assert (args.input, args.output, args.frames, args.timestep, args.size) == ("in.mp4", "out.mp4", 60, 0.25, (64, 48))
    assert args.side_stream and args.copy_stream and args.non_blocking and args.verify
    assert args.emulation_latency_us == 300.0


@pytest.mark.skipif(_has_cuda_torch(), reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("program", [*PROGRAMS, "nvvfx_api_tour.py"])
def test_without_a_gpu_the_program_says_so(program: str) -> None:
    result = _run(program, "--frames", "2", env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    assert program in result.stderr and ("GPU" in result.stderr or "PyTorch" in result.stderr)
    assert "Traceback" not in result.stderr


# -- the PyAV helpers --------------------------------------------------------------------------------


def test_synthesized_frames_move_without_a_shot_change(vio: Any) -> None:
    frames = list(vio.synthesize_frames(4, 64, 48))
    assert [f.shape for f in frames] == [(48, 64, 3)] * 4 and frames[0].dtype == np.uint8
    for a, b in zip(frames, frames[1:]):
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        assert diff.max() > 100  # the square moved: a stale frame shows
        assert diff.mean() / 255 < 0.25  # below frame generation's shot-change threshold


def test_encode_then_decode_a_clip(vio: Any, tmp_path: Path) -> None:
    pytest.importorskip("av")
    frames = list(vio.synthesize_frames(5, 64, 48))
    path = tmp_path / "clip.mp4"
    assert vio.write_clip(str(path), frames, Fraction(25)) == 5
    clip = vio.open_clip(str(path), frames=None)
    assert (clip.width, clip.height, clip.fps) == (64, 48, Fraction(25))
    decoded = list(clip.frames)
    assert len(decoded) == 5
    for want, got in zip(frames, decoded):
        assert got.shape == want.shape and got.dtype == np.uint8
        assert np.abs(got.astype(np.int16) - want).mean() < 12  # lossy, but the same pictures
    assert len(list(vio.open_clip(str(path), frames=2).frames)) == 2


def test_open_clip_without_input_synthesizes(vio: Any) -> None:
    clip = vio.open_clip(None, frames=3, size=(32, 16))
    assert (clip.width, clip.height) == (32, 16)
    assert len(list(clip.frames)) == 3
    with pytest.raises(FileNotFoundError):
        vio.open_clip("/nonexistent/video.mp4", frames=1)


def test_writer_in_memory_and_ten_bit(vio: Any, tmp_path: Path) -> None:
    pytest.importorskip("av")
    with vio.VideoWriter(None, 32, 16, Fraction(30)) as w:
        for f in vio.synthesize_frames(3, 32, 16):
            w.write(f)
    assert w.frames_written == 3 and w.bit_depth == 8
    packed = vio.rgb24_to_rgb10a2(next(vio.synthesize_frames(1, 32, 16)))
    with vio.VideoWriter(str(tmp_path / "hdr.mp4"), 32, 16, Fraction(30), bit_depth=10) as w:
        w.write(vio.to_video_frame(packed))  # rgb48, reduced to 8 bits if the build has no 10-bit encoder
    assert w.frames_written == 1 and (tmp_path / "hdr.mp4").stat().st_size > 0


def test_pixel_conversions(vio: Any) -> None:
    rgb = np.array([[[0, 128, 255]]], dtype=np.uint8)
    packed = vio.rgb24_to_rgb10a2(rgb)
    assert packed.dtype == np.uint32 and int(packed[0, 0]) >> 30 == 3
    assert vio.rgb10a2_codes(packed)[0, 0].tolist() == [0, 514, 1023]
    assert vio.rgb10a2_to_rgb48(packed)[0, 0].tolist() == [0, (514 << 6) | (514 >> 4), 65535]
    assert vio.float_to_rgb24(vio.rgb24_to_float(rgb)).tolist() == rgb.tolist()


# -- --verify's references are the emulation's arithmetic (on the model) ------------------------------


def _sim_run(effect: Any, sim: ss.sim.SimBackend, *inputs: np.ndarray, **call: Any) -> np.ndarray:
    out = effect.run(*(sim.array(x) for x in inputs), **call)
    sim.synchronize_device()
    return sim.from_dlpack(out.image).numpy().copy()


@pytest.mark.parametrize("encoding", ["RGB8", "RGB10A2"])
def test_verifier_matches_the_emulated_super_res(vio: Any, encoding: str) -> None:
    sim = ss.sim.SimBackend()
    frames = list(vio.synthesize_frames(2, 48, 32))
    to_input = vio.rgb24_to_float if encoding == "RGB8" else vio.rgb24_to_rgb10a2
    sr = VideoSuperRes(backend=sim, image_encoding=VideoSuperRes.ImageEncoding[encoding])
    sr.output_width, sr.output_height = 96, 64
    sr.load()
    outputs = [_sim_run(sr, sim, to_input(f)) for f in frames]
    verifier = vio.FrameVerifier("super_res", encoding, output_width=96, output_height=64)
    assert verifier.check(outputs[0], frames[0]) and verifier.check(outputs[1], frames[1])
    assert not verifier.check(outputs[0], frames[1])  # a stale frame is caught
    assert verifier.summary() == 1


@pytest.mark.parametrize("encoding", ["RGB8", "RGB10A2"])
def test_verifier_matches_the_emulated_frame_generation(vio: Any, encoding: str) -> None:
    sim = ss.sim.SimBackend()
    a, b, c = vio.synthesize_frames(3, 48, 32)
    to_input = vio.rgb24_to_float if encoding == "RGB8" else vio.rgb24_to_rgb10a2
    vfg = VideoFrameGeneration(backend=sim, image_encoding=VideoFrameGeneration.ImageEncoding[encoding])
    vfg.input_width, vfg.input_height = 48, 32
    vfg.frame_multiplier = 4
    vfg.load()
    verifier = vio.FrameVerifier("frame_gen", encoding)
    got = _sim_run(vfg, sim, to_input(a), to_input(b), frame_index=1)
    assert verifier.check(got, a, b, timestep=0.25)
    assert not verifier.check(got, a, b, timestep=0.75)
    got = _sim_run(vfg, sim, to_input(b), to_input(c), frame_index=2)
    assert verifier.check(got, b, c, timestep=0.5)
    out = vfg.run_at_timestep(sim.array(to_input(b)), sim.array(to_input(c)), 0.3)
    sim.synchronize_device()
    assert verifier.check(sim.from_dlpack(out.image).numpy().copy(), b, c, timestep=0.3)
    assert verifier.checked == 4 and verifier.corrupt == [1]


def test_verifier_matches_the_emulated_true_hdr(vio: Any, capsys: pytest.CaptureFixture[str]) -> None:
    sim = ss.sim.SimBackend()
    a, b = vio.synthesize_frames(2, 48, 32)
    hdr = TrueHDR(backend=sim, luminance=1000, saturation=120)
    hdr.load()
    verifier = vio.FrameVerifier("true_hdr", "RGB8", contrast=100, saturation=120, middle_gray=50, luminance=1000)
    assert verifier.check(_sim_run(hdr, sim, vio.rgb24_to_float(a)), a)
    assert not verifier.check(_sim_run(hdr, sim, vio.rgb24_to_float(b)), a)
    assert verifier.summary() == 1
    assert "corrupt frames: 1 of 2" in capsys.readouterr().out


def test_emulation_latency_only_on_the_emulation(vio: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from streamsafe.testing import build_fake_nvvfx

    sr = VideoSuperRes(backend=ss.sim.SimBackend())
    vio.set_emulation_latency(build_fake_nvvfx(), sr, 300, "x.py")
    assert sr.latency_us == {"transfer": 0.0, "inference": 300.0, "conversion": 300.0}

    class Real:
        pass

    other = VideoSuperRes(backend=ss.sim.SimBackend())
    vio.set_emulation_latency(Real(), other, 300, "x.py")
    assert other.latency_us["conversion"] == 0.0
    assert "ignored" in capsys.readouterr().err


# -- decode_upscale.py: NVIDIA's decoder -> conversion -> VideoSuperRes -> torch -> PyAV -------------------------


def test_decode_upscale_runs_on_the_model_and_every_frame_is_right() -> None:
    pytest.importorskip("av")
    result = _run("decode_upscale.py", "--model", "--verify", "--frames", "24")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: 0 of 24 frames wrong" in result.stdout
    assert "0 host waits of streamsafe's" in result.stdout


def test_decode_upscale_unguarded_races_on_the_model() -> None:
    pytest.importorskip("av")
    result = _run("decode_upscale.py", "--model", "--verify", "--unguarded", "--frames", "24")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the unguarded program races" in result.stdout


def test_decode_upscale_writes_a_video(tmp_path: Path) -> None:
    av = pytest.importorskip("av")
    out = tmp_path / "up.mp4"
    result = _run("decode_upscale.py", "--model", "--frames", "16", "--scale", "2", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    with av.open(str(out)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 16 and (frames[0].width, frames[0].height) == (320, 192)


def test_decode_upscale_says_what_is_missing(tmp_path: Path) -> None:
    result = _run("decode_upscale.py", "--model", "-i", str(tmp_path / "missing.mp4"))
    assert result.returncode == 2 and "no such file" in result.stderr


# -- nvvfx_effects_api.py: a program written against nvvfx 0.2's API reference, on the emulation ------------------

API_PROGRAM = "nvvfx_effects_api.py"
_PLAIN = (  # the program unchanged, after install_fake_nvvfx(), on an adversarial model; then the model's races
    "import runpy, sys, streamsafe as ss, streamsafe.testing as t\n"
    "from streamsafe.backend import process_default\n"
    "sim = ss.sim.SimBackend(scheduler='adversarial')\n"
    "t.install_fake_nvvfx()\n"
    "sys.argv = sys.argv[1:]\n"
    "with process_default(sim):\n"
    "    try:\n"
    "        runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "    except SystemExit as e:\n"
    "        print('races:', len(sim.races))\n"
    "        raise\n"
)


def _api_lines_are_right(stdout: str) -> None:
    assert f"{API_PROGRAM}: all results right" in stdout and "WRONG" not in stdout, stdout
    assert "VFX SDK 0.0.0+streamsafe" in stdout
    assert "after a change of quality and size: needs_reload=True" in stdout and "after the run: needs_reload=False" in stdout
    assert "NvVFXError, as expected: VideoSuperRes: output size='160x90' is invalid" in stdout
    assert "ArtifactReduction (_SELECTOR 'ArtifactReduction')" in stdout


@pytest.mark.parametrize("args", [[], ["--guarded"]], ids=["plain", "guarded-in-a-block"])
def test_the_api_program_runs_unchanged_on_the_emulation(args: list[str]) -> None:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", _PLAIN, str(EXAMPLES / API_PROGRAM), *args], capture_output=True,
                            text=True, env=full, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    _api_lines_are_right(result.stdout)
    assert "races: 0" in result.stdout


@pytest.mark.parametrize("args", [[], ["--guarded"]], ids=["run", "run-and-a-block"])
def test_the_api_program_runs_unchanged_under_streamsafe_run(args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "--sanitize",
                             str(EXAMPLES / API_PROGRAM), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    _api_lines_are_right(result.stdout)
    assert "sanitize: no race found" in result.stderr
    assert "VideoSuperRes (cuda:0): 2 run(s)" in result.stderr and "VideoFrameGeneration (cuda:0): 3 run(s)" in result.stderr
    if args:  # the block guards the program's own filter too
        assert "ArtifactReduction (cuda:0): 1 run(s)" in result.stderr


@pytest.mark.skipif(_has_cuda_torch(), reason="this machine has a CUDA GPU")
def test_the_api_program_without_nvvfx_says_how_to_run_it() -> None:
    result = _run(API_PROGRAM, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "nvvfx cannot be imported" in result.stderr and "streamsafe run --fake-nvvfx" in result.stderr


# -- the video programs' options: refused up front, not a traceback ------------------------------------------------


@pytest.mark.parametrize("program", ["decode_upscale.py", "pyav_nvdec_upscale.py"])
@pytest.mark.parametrize("option", [("--frames", "0"), ("--batch", "0"), ("--batch", "-2"), ("--scale", "1")])
def test_video_programs_refuse_an_option_they_cannot_run(program: str, option: tuple[str, str]) -> None:
    """A count below 1 (no frame made, or a loop that ends at once and says it succeeded) and a 1x scale (HIGH quality
    refuses it) are usage errors: exit 2 naming the option, no traceback."""
    result = _run(program, "--model", *option)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"argument {option[0]}" in result.stderr and "Traceback" not in result.stderr


def test_video_programs_refuse_an_odd_size_up_front(tmp_path: Path) -> None:
    """An odd frame size is refused with the fix (NV12 and the yuv420p encoder halve each side), not a traceback."""
    av = pytest.importorskip("av")
    import numpy as np

    def clip(name: str, width: int, height: int) -> str:  # (make_test_clip refuses odd sizes: one frame by PyAV)
        path = str(tmp_path / name)
        with av.open(path, "w") as c:
            s = c.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = width, height, "yuv444p"
            for p in s.encode(av.VideoFrame.from_ndarray(np.full((height, width, 3), 40, np.uint8), format="rgb24")):
                c.mux(p)
            for p in s.encode(None):
                c.mux(p)
        return path

    result = _run("decode_upscale.py", "--model", "-i", clip("odd clip.mp4", 162, 98), "--scale", "3")  # 486x294 is even: it runs
    assert result.returncode == 0, result.stdout + result.stderr
    odd = clip("odder clip.mp4", 161, 97)
    for program, args in (("decode_upscale.py", ("--scale", "3")), ("pyav_nvdec_upscale.py", ())):
        result = _run(program, "--model", "-i", odd, *args)
        assert result.returncode == 2 and "even width and height" in result.stderr, result.stdout + result.stderr


def test_make_test_clip_refuses_what_it_cannot_encode(tmp_path: Path) -> None:
    from streamsafe.errors import ArgumentError
    from streamsafe.testing import make_test_clip

    for kw in ({"frames": 0}, {"size": (97, 64)}, {"size": (8, 8)}):
        with pytest.raises(ArgumentError, match="make_test_clip"):
            make_test_clip(str(tmp_path / "x.mp4"), **kw)  # type: ignore[arg-type]
    assert not (tmp_path / "x.mp4").exists()


def test_ray_example_clip_writer_aborts_quietly_before_its_first_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error before a clip's first packet (no ``.part`` file yet) surfaces as itself, not as the abort's own error."""
    pytest.importorskip("av")
    ray_upscale = _load("ray_upscale.py", monkeypatch)
    writer = ray_upscale.ClipWriter(str(tmp_path / "clip.mp4"), 64, 64, 30.0, encode=True, attempt=1, kill_at=None)
    writer.abort()
    assert not list(tmp_path.iterdir())
