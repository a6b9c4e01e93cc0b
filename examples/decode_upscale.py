"""Decode with NVIDIA's video decoder, convert, upscale with VideoSuperRes, consume in torch, encode on the CPU.

    python examples/decode_upscale.py                         # a short test clip, on whatever is there
    python examples/decode_upscale.py -i in.mp4 -o out.mp4 --scale 2
    python examples/decode_upscale.py --unguarded --verify    # the same program without streamsafe: it races

A streamsafe program: every stage has its own stream (the decoder writes on D, the user's colour
conversion and the effect run on U, the consumer copies on C) and nothing waits on the host but the
decoder itself and the encoder. streamsafe orders the buffers: the decoder's next batch waits on the
device for the conversions that read its pool (D5), the effect's input for the conversion (H1), the
consumer's copy for the effect's output (H3), the effect's next run for the copy (H5).

On a GPU it uses NVIDIA's decoder (``pip install 'streamsafe[pynvvideocodec]'``) and nvvfx's
VideoSuperRes (streamsafe's emulated one where nvvfx is not installed); on a CPU both emulations on
the CUDA ordering model (``streamsafe.sim``), whose scheduler runs every unordered pair in the order
that breaks it. Encoding uses PyAV (``pip install 'streamsafe[video]'``); without ``-o`` the result
is encoded in memory. ``--verify`` checks every frame against a reference made with nothing racing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

import streamsafe as ss
from _video_io import positive_count

PROGRAM = "decode_upscale.py"
EXIT_UNAVAILABLE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("-i", "--input", help="input video (H.264/HEVC); without it a test clip is made with PyAV")
    parser.add_argument("-o", "--output", help="output video; without it the result is encoded in memory")
    parser.add_argument("--frames", type=positive_count, default=48, help="frames of the test clip")
    parser.add_argument("--scale", type=int, choices=[2, 3, 4], default=2, help="output size / input size")
    parser.add_argument("--batch", type=positive_count, default=8, help="frames per get_batch_frames() call")
    parser.add_argument("--strategy", default="auto", choices=["auto", "event", "async", "stream", "device"])
    parser.add_argument("--unguarded", action="store_true", help="no streamsafe: the plain program (it races)")
    parser.add_argument("--verify", action="store_true", help="compare every frame with a reference; exit 1 on a wrong one")
    parser.add_argument("--model", action="store_true", help="run on the CUDA ordering model even where there is a GPU")
    return parser


def _unavailable(why: str) -> None:
    print(f"{PROGRAM}: {why}", file=sys.stderr)
    raise SystemExit(EXIT_UNAVAILABLE)


def _gpu_torch() -> Any:
    """torch with a CUDA GPU, or ``None``."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# -- the two machines: a GPU (torch) and the model ---------------------------------------------------


class OnGpu:
    """The real decoder (and nvvfx when installed, else the emulated effect), torch on three streams."""

    name = "GPU"

    def __init__(self, torch: Any) -> None:
        try:
            import PyNvVideoCodec as nvc
        except ImportError:
            _unavailable("a GPU is here but not NVIDIA's decoder: pip install 'streamsafe[pynvvideocodec]' (or run with --model)")
        try:
            import nvvfx
            self.VideoSuperRes = nvvfx.VideoSuperRes
            self.effects = "nvvfx"
        except ImportError:
            from streamsafe.testing import VideoSuperRes
            self.VideoSuperRes = VideoSuperRes
            self.effects = "streamsafe's emulated nvvfx"
        self.torch, self.nvc = torch, nvc
        self.D, self.U, self.C = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
        self.scope: Any = contextlib.nullcontext()

    def decoder(self, path: str) -> Any:
        return self.nvc.SimpleDecoder(path, gpu_id=0, cuda_stream=self.D.cuda_stream, use_device_memory=True,
                                      output_color_type=self.nvc.OutputColorType.RGBP)

    def convert(self, frame: Any, guarded: bool) -> Any:
        """On U: the frame's planes as float32 in [0, 1] (copied with ``frame.torch()``: the decoder's next
        write waits for that copy only), or, unguarded, read in place as the SDK's own recipe shows."""
        torch = self.torch
        with torch.cuda.stream(self.U):
            planes = frame.torch() if guarded else torch.from_dlpack(frame)
            return planes.float().div_(255)

    def upscale(self, sr: Any, x: Any) -> Any:
        with self.torch.cuda.stream(self.U):
            return sr.run(x, stream_ptr=self.U.cuda_stream)

    def consume(self, out: Any) -> Any:
        """On C: a copy of the upscaled frame (the consumer's own tensor)."""
        with self.torch.cuda.stream(self.C):
            return self.torch.from_dlpack(out.image).clone()

    def to_host(self, y: Any) -> np.ndarray:
        with self.torch.cuda.stream(self.C):
            return (y.clamp(0, 1) * 255 + 0.5).to(self.torch.uint8).permute(1, 2, 0).cpu().numpy()  # type: ignore[no-any-return]

    def reference(self, path: str, scale: int, limit: int) -> list[np.ndarray]:
        """The output frames made with nothing racing: one frame at a time, the device idle after each stage."""
        torch = self.torch
        dec = self.nvc.SimpleDecoder(path, gpu_id=0, use_device_memory=True, output_color_type=self.nvc.OutputColorType.RGBP)
        sr = self.VideoSuperRes()
        out: list[np.ndarray] = []
        while len(out) < limit and (frames := dec.get_batch_frames(8)):
            for frame in frames[: limit - len(out)]:
                x = torch.from_dlpack(frame).float().div(255)
                if not out:
                    sr.output_width, sr.output_height = x.shape[2] * scale, x.shape[1] * scale
                    sr.load()
                torch.cuda.synchronize()
                y = torch.from_dlpack(sr.run(x, stream_ptr=torch.cuda.current_stream().cuda_stream).image).clone()
                torch.cuda.synchronize()
                out.append((y.clamp(0, 1) * 255 + 0.5).to(torch.uint8).permute(1, 2, 0).cpu().numpy())
        return out


class OnModel:
    """Both emulations on the CUDA ordering model (an adversarial scheduler: a missing fence shows as wrong data)."""

    name = "the CUDA ordering model (no GPU)"

    def __init__(self) -> None:
        from streamsafe.sim import SimBackend
        from streamsafe.testing import VideoSuperRes, install_fake_pynvvideocodec

        self.sim = sim = SimBackend(scheduler="adversarial")
        self.scope = ss.use_backend(sim)
        install_fake_pynvvideocodec(force=True)
        import PyNvVideoCodec as nvc

        self.nvc, self.VideoSuperRes, self.effects = nvc, VideoSuperRes, "streamsafe's emulated nvvfx"
        self.D, self.U, self.C = (sim.create_stream(non_blocking=True) for _ in range(3))

    def decoder(self, path: str) -> Any:
        return self.nvc.SimpleDecoder(path, cuda_stream=self.D.handle, output_color_type=self.nvc.OutputColorType.RGBP)

    def convert(self, frame: Any, guarded: bool) -> Any:
        sim, U = self.sim, self.U
        planes = frame.copy(U) if guarded else sim.from_dlpack(frame, stream=U)
        out = sim.empty(planes.shape, np.float32, stream=U)
        src, dst = planes.buffer, out.buffer
        sim.launch(U, "to float", lambda: np.divide(src.data, 255, out=dst.data, dtype=np.float32), reads=[planes], writes=[out])
        return out

    def upscale(self, sr: Any, x: Any) -> Any:
        with self.sim.use_stream(self.U):
            return sr.run(x, stream_ptr=self.U.ptr)

    def consume(self, out: Any) -> Any:
        with self.sim.use_stream(self.C):
            return self.sim.copy(self.sim.from_dlpack(out.image), self.C)

    def reference(self, path: str, scale: int, limit: int) -> list[np.ndarray]:
        """The output frames made with nothing racing (on an in-order model, the host waiting after each stage)."""
        from streamsafe.sim import SimBackend
        from streamsafe.testing.fake_pynvvideocodec import decode_reference

        sim = SimBackend()
        sr = self.VideoSuperRes(backend=sim)
        frames = decode_reference(path)[:limit]
        h, w = frames[0].shape[1:]
        sr.output_width, sr.output_height = w * scale, h * scale
        sr.load()
        out = []
        for planes in frames:
            image = sr.run(sim.array(planes / np.float32(255), dtype=np.float32)).image
            host = sim.download(sim.from_dlpack(image))
            out.append((np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))
        return out

    def to_host(self, y: Any) -> np.ndarray:
        host = self.sim.download(y, self.C)
        host = np.nan_to_num(host, nan=0.0)  # (freed or never written memory reads as poison on the model)
        return (np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0)  # type: ignore[no-any-return]


# -- the program ---------------------------------------------------------------------------------------------


def _clip(args: argparse.Namespace) -> str:
    if args.input:
        if not os.path.exists(args.input):
            _unavailable(f"{args.input}: no such file")
        return str(args.input)
    try:
        from streamsafe.testing import make_test_clip
        return make_test_clip(os.path.join(tempfile.mkdtemp(prefix="decode-upscale-"), "clip.mp4"), args.frames, (160, 96))
    except ss.errors.FrameworkUnavailableError:
        _unavailable("needs PyAV to make a test clip and to encode: pip install 'streamsafe[video]' (or pass -i)")
    raise AssertionError


def _writer(args: argparse.Namespace, width: int, height: int) -> Any:
    import io

    try:
        import av
    except ImportError:
        _unavailable("needs PyAV to encode: pip install 'streamsafe[video]'")
    container = av.open(args.output if args.output else io.BytesIO(), mode="w", format="mp4")
    stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=30)
    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
    return av, container, stream


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch = None if args.model else _gpu_torch()
    machine: Any = OnGpu(torch) if torch is not None else OnModel()
    path = _clip(args)
    with machine.scope:
        dec = machine.decoder(path)
        meta = dec.get_stream_metadata()
        width, height = meta.width * args.scale, meta.height * args.scale
        if width % 2 or height % 2:  # (the encoder's yuv420p halves each side)
            _unavailable(f"{meta.width}x{meta.height} x {args.scale} is {width}x{height}: the encoder needs an even width "
                         "and height; give an even --scale")
        sr = machine.VideoSuperRes()
        sr.output_width, sr.output_height = width, height
        sr.load()
        print(f"input:  {path} ({meta.width}x{meta.height}, {len(dec)} frames); on {machine.name}; effects: {machine.effects}")
        av, container, stream = _writer(args, width, height)
        guards = contextlib.ExitStack()
        if not args.unguarded:
            d = guards.enter_context(ss.stream_contract(dec, machine.D, strategy=args.strategy))
            e = guards.enter_context(ss.stream_contract(sr, machine.U, strategy=args.strategy, input_stream=machine.U))
        copies: list[Any] = []
        start = time.perf_counter()
        with guards:
            while frames := dec.get_batch_frames(args.batch):
                for frame in frames:
                    out = machine.upscale(sr, machine.convert(frame, not args.unguarded))
                    copies.append(machine.consume(out))
                for y in copies[-len(frames):]:  # encode the batch on the CPU (the host waits for C here)
                    for packet in stream.encode(av.VideoFrame.from_ndarray(machine.to_host(y), format="rgb24")):
                        container.mux(packet)
            fences = (dict(d.stats), dict(e.stats)) if not args.unguarded else ()
        elapsed = time.perf_counter() - start
        for packet in stream.encode(None):
            container.mux(packet)
        container.close()
        print(f"output: {args.output or '(in memory)'} {width}x{height}; {len(copies)} frames in {elapsed:.2f} s")
        if fences:
            print(f"decoder: {fences[0]['runs']} calls, {fences[0].get('D5', 0)} device fences, "
                  f"{fences[0]['host_waits']} host waits of streamsafe's; effect: {fences[1]['runs']} runs, "
                  f"{fences[1]['fences']} device fences, {fences[1]['host_waits']} host waits")
        if not args.verify:
            return 0
        reference = machine.reference(path, args.scale, len(copies))
        wrong = sum(np.abs(machine.to_host(y).astype(int) - want).max() > 2 for y, want in zip(copies, reference))
        print(f"verify: {wrong} of {len(copies)} frames wrong" + (" (the unguarded program races)" if wrong and args.unguarded else ""))
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
