"""Helpers shared by the example programs: PyAV decoding and encoding, and options.

The programs beside this file are plain nvvfx programs; this module never imports
streamsafe except in the section marked TEST ONLY at the bottom, which is used only when a
program is given ``--verify`` (and which only makes sense on streamsafe's emulated nvvfx).

Frames travel as NumPy arrays on the host: ``(H, W, 3)`` uint8 (rgb24) for 8-bit video,
``(H, W, 3)`` uint16 (rgb48, full 16-bit range) for 10-bit video. PyAV and PyTorch are
imported lazily, so ``--help`` works on a machine that has neither.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "Clip",
    "VideoWriter",
    "download",
    "frame_to_tensor",
    "load_clip",
    "prepare",
    "to_video_frame",
    "add_common_options",
    "open_clip",
    "require_av",
    "require_cuda_torch",
    "require_nvvfx",
    "rgb10a2_to_rgb48",
    "synthesize_frames",
    "write_clip",
    # test only
    "FrameVerifier",
    "is_emulated",
    "set_emulation_latency",
]

EXIT_UNAVAILABLE = 2  # the machine lacks what the program needs (GPU, torch, PyAV, nvvfx)


# -- options -------------------------------------------------------------------------------------


def frame_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 320x180, got {text!r}") from None
    if w < 16 or h < 16 or w % 2 or h % 2:
        raise argparse.ArgumentTypeError(f"{text}: width and height must be even and at least 16")
    return w, h


def positive_count(text: str) -> int:
    """An option's count that must be 1 or more (argparse's ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every example program takes."""
    io_ = parser.add_argument_group("video")
    io_.add_argument("-i", "--input", help="input video; without it a short test clip is synthesized in memory")
    io_.add_argument("-o", "--output", help="output video (.mp4); without it the result is encoded in memory and dropped")
    io_.add_argument("--frames", type=positive_count, help="process at most N input frames (synthesized clip: default 30)")
    io_.add_argument("--size", type=frame_size, default=(320, 180), metavar="WxH",
                     help="size of the synthesized clip when no --input is given")
    streams = parser.add_argument_group("streams")
    streams.add_argument("--side-stream", action="store_true",
                         help="run the whole loop inside `with torch.cuda.stream(torch.cuda.Stream()):`, so the "
                              "current stream (and the SDK stream) is a non-blocking stream")
    streams.add_argument("--copy-stream", action="store_true",
                         help="import and download each output on a second stream (a pipelined consumer that relies "
                              "on DLPack to order the import after the effect)")
    streams.add_argument("--non-blocking", action="store_true", help="call run(..., non_blocking=True)")
    test = parser.add_argument_group("testing (streamsafe's emulated nvvfx only)")
    test.add_argument("--emulation-latency-us", type=_non_negative, default=0.0, metavar="N",
                      help="delay the emulated effect's inference and RGB8 conversion by N microseconds each, to "
                           "widen race windows; ignored (with a warning) on the real nvvfx")
    test.add_argument("--verify", action="store_true",
                      help="compare every output frame with a NumPy reference of the emulation's arithmetic; print "
                           "'corrupt frames: K of N' and exit 1 if K > 0")


# -- what the machine must have --------------------------------------------------------------------


CPU_TWINS = {
    "video_super_resolution.py": "python examples/effects_cpu.py --effect super_res",
    "video_frame_generation.py": "python examples/effects_cpu.py --effect frame_gen",
    "true_hdr.py": "python examples/effects_cpu.py --effect true_hdr --non-blocking",
}
"""Each GPU program's twin on a CPU: the same loop on streamsafe's model (``effects_cpu.py``)."""


def _unavailable(program: str, why: str) -> None:
    twin = CPU_TWINS.get(program)
    print(f"{program}: {why}" + (f". Without a GPU, its twin runs the same loop on streamsafe's model: {twin}" if twin else ""),
          file=sys.stderr)
    raise SystemExit(EXIT_UNAVAILABLE)


def require_cuda_torch(program: str) -> Any:
    """``torch``, or exit 2 with a clear message when PyTorch or a CUDA GPU is missing."""
    try:
        import torch
    except ImportError:
        _unavailable(program, "needs PyTorch with CUDA and an NVIDIA GPU, and PyTorch is not installed; nothing was run")
    if not torch.cuda.is_available():
        _unavailable(program, "needs an NVIDIA GPU with CUDA (torch.cuda.is_available() is False on this machine); "
                              "nothing was run")
    return torch


def require_nvvfx(program: str) -> Any:
    """The ``nvvfx`` module, or exit 2 saying how to get one."""
    try:
        import nvvfx
    except ImportError:
        _unavailable(program, "needs the nvvfx package (NVIDIA Video Effects SDK for Python); without it, run the "
                              "program on streamsafe's emulation: streamsafe run --fake-nvvfx " + program)
    return nvvfx


def prepare(program: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Any, Any]:
    """What every program needs first: ``(torch, nvvfx)`` and PyAV, or exit 2 saying what is missing;
    ``--verify`` only with streamsafe's emulation."""
    torch = require_cuda_torch(program)
    nvvfx = require_nvvfx(program)
    require_av(program)
    if args.verify and not is_emulated(nvvfx):
        parser.error("--verify compares with streamsafe's emulation: run with the fake nvvfx (streamsafe run --fake-nvvfx)")
    return torch, nvvfx


def load_clip(program: str, args: argparse.Namespace) -> Clip:
    """The input clip (``-i``, else a synthesized one), announced; exit 2 when it cannot be opened."""
    try:
        clip = open_clip(args.input, frames=args.frames, size=args.size)
    except (OSError, ValueError) as e:  # missing file, or one PyAV cannot open
        print(f"{program}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    print(f"input:  {clip.source} ({clip.width}x{clip.height} @ {float(clip.fps):g} fps)")
    return clip


def require_av(program: str) -> Any:
    try:
        import av
    except ImportError:
        _unavailable(program, "needs PyAV to decode and encode video: pip install 'streamsafe[video]' (or pip install av)")
    return av


# -- synthesized input ---------------------------------------------------------------------------


def synthesize_frames(count: int, width: int = 320, height: int = 180) -> Iterator[np.ndarray]:
    """``count`` rgb24 frames of a smooth moving scene: drifting colour ramps and a bright square.

    Consecutive frames differ clearly where the square moves (so a stale or half-written output
    shows) but little on average (no shot change for frame generation).
    """
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    side = max(4, min(width, height) // 5)
    for i in range(count):
        phase = i / max(count, 1)
        r = 0.5 + 0.4 * np.sin(2 * np.pi * (x / width + phase))
        g = 0.5 + 0.4 * np.cos(2 * np.pi * (y / height - phase))
        b = 0.25 + 0.5 * (x + y) / (width + height)
        rgb = np.stack([r, g, b], axis=-1)
        sx = (3 * i) % max(1, width - side)
        sy = (2 * i) % max(1, height - side)
        rgb[sy:sy + side, sx:sx + side] = (1.0, 0.95, 0.2)
        yield np.rint(np.clip(rgb, 0, 1) * 255).astype(np.uint8)


# -- decoding ------------------------------------------------------------------------------------


@dataclass
class Clip:
    """Decoded input: frames (rgb24, lazily), size, rate and where they came from."""

    frames: Iterator[np.ndarray]
    width: int
    height: int
    fps: Fraction
    source: str


def open_clip(path: str | None, *, frames: int | None, size: tuple[int, int] = (320, 180)) -> Clip:
    """Decode ``path`` with PyAV (at most ``frames`` frames), or synthesize a clip when ``path`` is None."""
    if path is None:
        n = frames if frames is not None else 30
        w, h = size
        return Clip(synthesize_frames(n, w, h), w, h, Fraction(30), f"synthesized {w}x{h}, {n} frames")
    if not os.path.exists(path):
        raise FileNotFoundError(f"input video not found: {path}")
    import av

    container = av.open(path)
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    rate = stream.average_rate or stream.guessed_rate or Fraction(30)

    def decode() -> Iterator[np.ndarray]:
        try:
            for n, frame in enumerate(container.decode(stream)):
                if frames is not None and n >= frames:
                    break
                yield frame.to_ndarray(format="rgb24")
        finally:
            container.close()

    cc = stream.codec_context
    return Clip(decode(), cc.width, cc.height, Fraction(rate), path)


# -- encoding ------------------------------------------------------------------------------------

_CODECS_8 = (("libx264", "yuv420p"), ("mpeg4", "yuv420p"))
_CODECS_10 = (("libx264", "yuv420p10le"),)


class VideoWriter:
    """Encode rgb24 (uint8) or rgb48 (uint16) frames to ``target`` (a path, or None: in memory).

    ``bit_depth=10`` tries a 10-bit H.264 stream first and falls back to 8 bits when the PyAV
    build has no 10-bit encoder; :attr:`bit_depth` says what was chosen.
    """

    def __init__(self, target: str | None, width: int, height: int, fps: Fraction, *, bit_depth: int = 8) -> None:
        import av

        self._av = av
        if target is not None:
            parent = os.path.dirname(os.path.abspath(target))
            os.makedirs(parent, exist_ok=True)
        self.target = target
        self.frames_written = 0
        self._container: Any = None
        candidates = (_CODECS_10 + _CODECS_8) if bit_depth == 10 else _CODECS_8
        errors = []
        for codec, pix_fmt in candidates:
            if codec not in av.codecs_available:
                continue
            sink: Any = target if target is not None else io.BytesIO()
            container = av.open(sink, mode="w", format="mp4")
            try:
                stream = container.add_stream(codec, rate=fps)
                stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
                stream.codec_context.open()
            except Exception as e:  # this build cannot encode that: try the next one
                errors.append(f"{codec}/{pix_fmt}: {e}")
                container.close()
                continue
            self._container, self._stream = container, stream
            self.codec, self.pix_fmt = codec, pix_fmt
            self.bit_depth = 10 if pix_fmt.endswith("10le") else 8
            return
        raise RuntimeError("no usable video encoder in this PyAV build (" + "; ".join(errors or ["none found"]) + ")")

    def write(self, rgb: np.ndarray) -> None:
        """Encode one ``(H, W, 3)`` frame: uint8 rgb24, or uint16 rgb48 (reduced to 8 bits on an 8-bit stream)."""
        if rgb.dtype == np.uint16 and self.bit_depth == 8:
            rgb = (rgb >> 8).astype(np.uint8)
        fmt = "rgb48le" if rgb.dtype == np.uint16 else "rgb24"
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format=fmt)
        for packet in self._stream.encode(frame.reformat(format=self.pix_fmt)):
            self._container.mux(packet)
        self.frames_written += 1

    def close(self) -> None:
        if self._container is None:
            return
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        self._container = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_clip(path: str, frames: Iterator[np.ndarray] | list[np.ndarray], fps: Fraction = Fraction(30)) -> int:
    """Encode rgb24 frames to ``path``; returns how many were written."""
    it = iter(frames)
    first = next(it)
    h, w = first.shape[:2]
    with VideoWriter(path, w, h, fps) as out:
        out.write(first)
        for frame in it:
            out.write(frame)
        return out.frames_written


# -- host-side pixel formats ---------------------------------------------------------------------


def float_to_rgb24(chw: np.ndarray) -> np.ndarray:
    """float32 ``(3, H, W)`` in [0, 1] (the RGB8 encoding) to rgb24 ``(H, W, 3)``."""
    return np.ascontiguousarray(np.rint(np.clip(chw, 0.0, 1.0) * 255.0).astype(np.uint8).transpose(1, 2, 0))


def rgb10a2_codes(packed: np.ndarray) -> np.ndarray:
    """Packed R10G10B10A2 uint32 ``(H, W)`` to 10-bit codes ``(H, W, 3)`` (uint16)."""
    packed = packed.astype(np.uint32, copy=False)
    return np.stack([(packed >> s) & 0x3FF for s in (0, 10, 20)], axis=-1).astype(np.uint16)


def rgb10a2_to_rgb48(packed: np.ndarray) -> np.ndarray:
    """Packed R10G10B10A2 to rgb48 (10-bit codes scaled to the full 16-bit range)."""
    codes = rgb10a2_codes(packed)
    return (codes << 6) | (codes >> 4)


# -- the GPU side (torch) -------------------------------------------------------------------------


def frame_to_tensor(torch: Any, rgb: np.ndarray, encoding: str) -> Any:
    """Upload an rgb24 frame on torch's current stream and convert it to the effect's input.

    RGB8: float32 ``(3, H, W)`` in [0, 1]. RGB10A2: uint32 ``(H, W)``, packed R10G10B10A2
    (10-bit codes ``round(v * 1023 / 255)`` in integer arithmetic, alpha 3).
    """
    t = torch.from_numpy(rgb).cuda()
    if encoding == "RGB8":
        return t.permute(2, 0, 1).float().div(255.0).contiguous()
    codes = (t.to(torch.int32) * 1023 + 127) // 255
    alpha = -(1 << 30)  # 0xC0000000 as int32: alpha = 3 in bits 30-31
    packed = codes[..., 0] | (codes[..., 1] << 10) | (codes[..., 2] << 20) | alpha
    return packed.contiguous().view(torch.uint32)


def download(torch: Any, tensor: Any) -> np.ndarray:
    """Copy a result to the host on torch's current stream (waits for that stream only)."""
    if tensor.dtype == torch.uint32:
        return tensor.view(torch.int32).cpu().numpy().view(np.uint32)
    return tensor.cpu().numpy()


def to_video_frame(host: np.ndarray) -> np.ndarray:
    """A downloaded result (RGB8 float or packed RGB10A2) as rgb24 or rgb48 for :class:`VideoWriter`."""
    return rgb10a2_to_rgb48(host) if host.dtype == np.uint32 else float_to_rgb24(host)


# ===================================================================================================
# TEST ONLY: ``--verify`` and ``--emulation-latency-us``.
#
# Everything below is for testing streamsafe and is meaningful only when ``nvvfx`` is
# streamsafe's emulation (streamsafe.testing.install_fake_nvvfx(), or `streamsafe run
# --fake-nvvfx`): the references are the emulation's arithmetic, not NVIDIA's models.
# ===================================================================================================


def is_emulated(nvvfx: Any) -> bool:
    return bool(getattr(nvvfx, "__streamsafe_fake__", False))


def set_emulation_latency(nvvfx: Any, effect: Any, us: float, program: str) -> None:
    """TEST ONLY. Delay the emulated effect's inference and RGB8 conversion by ``us`` microseconds."""
    if not us:
        return
    if not is_emulated(nvvfx):
        print(f"{program}: --emulation-latency-us ignored: nvvfx is not streamsafe's emulation", file=sys.stderr)
        return
    effect.latency_us = {"conversion": us, "inference": us}


def rgb24_to_float(rgb: np.ndarray) -> np.ndarray:
    """The programs' input conversion, on the host: rgb24 to float32 ``(3, H, W)`` in [0, 1]."""
    return rgb.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0)


def rgb24_to_rgb10a2(rgb: np.ndarray) -> np.ndarray:
    """The programs' 10-bit input packing, on the host (integer rounding of ``v * 1023 / 255``)."""
    codes = (rgb.astype(np.uint32) * 1023 + 127) // 255
    return codes[..., 0] | (codes[..., 1] << 10) | (codes[..., 2] << 20) | np.uint32(3 << 30)


class FrameVerifier:
    """TEST ONLY. Checks each output frame against a NumPy reference of the emulation's math.

    ``kind`` is ``"super_res"``, ``"frame_gen"`` or ``"true_hdr"``; ``encoding`` ``"RGB8"`` or
    ``"RGB10A2"``. A frame is corrupt when any RGB8 value is more than one 8-bit step off, or
    any 10-bit code more than ``code_tolerance`` off (GPU and NumPy transcendental functions
    differ in the last bits, which the steep PQ curve magnifies).
    """

    def __init__(self, kind: str, encoding: str, *, code_tolerance: int = 2, **params: Any) -> None:
        try:
            from streamsafe.testing import _kernels
        except ImportError as e:
            raise SystemExit(f"--verify needs streamsafe (its emulation's reference arithmetic): {e}") from e
        self._k = _kernels
        self.kind = kind
        self.encoding = encoding
        self.params = params
        self.code_tolerance = code_tolerance
        self.checked = 0
        self.corrupt: list[int] = []
        self.worst = 0

    def _input(self, rgb: np.ndarray) -> np.ndarray:
        return rgb24_to_rgb10a2(rgb) if self.encoding == "RGB10A2" else rgb24_to_float(rgb)

    def reference(self, *inputs: np.ndarray, **call: Any) -> np.ndarray:
        """The emulation's output for rgb24 ``inputs`` (one frame, or previous and current)."""
        k, xp = self._k, np
        staged = [self._input(rgb) for rgb in inputs]
        rgb10 = self.encoding == "RGB10A2"
        if self.kind == "super_res":
            src = k.unpack_rgb10a2(xp, staged[0]) if rgb10 else staged[0]
            out = k.resize_bilinear(xp, src, self.params["output_height"], self.params["output_width"])
        elif self.kind == "frame_gen":
            a, b = (k.unpack_rgb10a2(xp, s) for s in staged) if rgb10 else staged
            out = k.blend(xp, a, b, call["timestep"], self.params.get("shot_change_detection", True))
        elif self.kind == "true_hdr":
            return k.tone_map_hdr(xp, staged[0], **self.params)
        else:
            raise ValueError(f"unknown kind {self.kind!r}")
        if rgb10:
            return k.pack_rgb10a2(xp, out)
        result = np.empty(out.shape, np.float32)
        k.from_rgb8(xp, k.to_rgb8(xp, out), result)
        return result

    def check(self, output: np.ndarray, *inputs: np.ndarray, **call: Any) -> bool:
        """Compare one output (as the program downloaded it) with the reference; True if it matches."""
        expected = self.reference(*inputs, **call)
        if output.shape != expected.shape:
            diff = 1 << 30
        elif output.dtype == np.uint32:
            diff = int(np.abs(rgb10a2_codes(output).astype(np.int32) - rgb10a2_codes(expected).astype(np.int32)).max())
            diff = max(diff - self.code_tolerance, 0)
        else:
            with np.errstate(invalid="ignore"):
                steps = np.abs(np.nan_to_num(output.astype(np.float64), nan=-9.0) - expected) * 255.0
            diff = max(int(np.ceil(steps.max() - 1.0 - 1e-3)), 0)  # at most one 8-bit step off is fine
        self.worst = max(self.worst, diff)
        ok = diff == 0
        if not ok:
            self.corrupt.append(self.checked)
        self.checked += 1
        return ok

    def summary(self) -> int:
        """Print ``corrupt frames: K of N``; returns the exit status (1 when K > 0)."""
        shown = ", ".join(map(str, self.corrupt[:10])) + (" ..." if len(self.corrupt) > 10 else "")
        print(f"corrupt frames: {len(self.corrupt)} of {self.checked}" + (f" (output frames {shown})" if shown else ""))
        return 1 if self.corrupt else 0
