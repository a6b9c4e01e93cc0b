"""Decode on NVDEC through PyAV, convert NV12 to RGB, upscale with VideoSuperRes, consume in torch, encode on the CPU.

    python examples/pyav_nvdec_upscale.py                          # a short test clip, on whatever is there
    python examples/pyav_nvdec_upscale.py -i in.mp4 -o out.mp4 --scale 2
    python examples/pyav_nvdec_upscale.py --unguarded --verify     # the same program without streamsafe: it races

A streamsafe program: PyAV decodes on NVDEC (``av.open(path, hwaccel=HWAccel(device_type="cuda", ...,
is_hw_owned=True))``) and hands out each frame in a CUDA surface of FFmpeg's pool; the program imports the two NV12
planes zero-copy on its stream U (``torch.from_dlpack(frame.planes[0])``: PyAV's own planes refuse a stream, the
guarded ones take it), converts them to RGB there, drops the views at once, upscales on U and copies the result on
C. Nothing waits on the host but the decoder itself and the encoder. The surface goes back to FFmpeg when the frame
goes, with no stream order of PyAV's: unguarded, a later frame is decoded into it while the conversion may still
be queued. Guarded, the dropped frame is kept until an event recorded on U after the conversion completes (D7);
the effect's input is ordered after the conversion (H1), the copy after the effect (H3), the next run after the
copy (H5).

On a GPU it uses PyAV's NVDEC (PyAV with CUDA hardware acceleration; ``pip install 'streamsafe[video]'``) and
nvvfx's VideoSuperRes (streamsafe's emulated one where nvvfx is not installed); on a CPU the emulated NVDEC and
VideoSuperRes on the CUDA ordering model (``streamsafe.sim``), whose scheduler runs every unordered pair in the
order that breaks it. Without ``-o`` the result is encoded in memory. ``--verify`` checks every frame against a
reference made with nothing racing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

import streamsafe as ss
from _video_io import positive_count

PROGRAM = "pyav_nvdec_upscale.py"
EXIT_UNAVAILABLE = 2
US = 1980  # GPU cycles a microsecond (an H200 under load), for --consumer-delay-us


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("-i", "--input", help="input video (H.264/HEVC); without it a test clip is made with PyAV")
    parser.add_argument("-o", "--output", help="output video; without it the result is encoded in memory")
    parser.add_argument("--frames", type=positive_count, default=48, help="frames to process (and of the test clip)")
    parser.add_argument("--scale", type=int, choices=[2, 3, 4], default=2, help="output size / input size")
    parser.add_argument("--batch", type=positive_count, default=8, help="frames encoded together (the host waits for C once a batch)")
    parser.add_argument("--strategy", default="auto", choices=["auto", "event", "async", "stream", "device"])
    parser.add_argument("--unguarded", action="store_true", help="no streamsafe: the plain program (it races)")
    parser.add_argument("--verify", action="store_true", help="compare every frame with a reference; exit 1 on a wrong one")
    parser.add_argument("--model", action="store_true", help="run on the CUDA ordering model even where there is a GPU")
    parser.add_argument("--consumer-delay-us", type=int, default=0,
                        help="GPU only: spin this long on U before each conversion (widens the race window)")
    return parser


def _unavailable(why: str) -> None:
    print(f"{PROGRAM}: {why}", file=sys.stderr)
    raise SystemExit(EXIT_UNAVAILABLE)


def _av() -> Any:
    try:
        import av
    except ImportError:
        _unavailable("needs PyAV to decode and encode: pip install 'streamsafe[video]'")
    return av


def _gpu_torch() -> Any:
    """torch with a CUDA GPU, or ``None``."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _hwaccel(av: Any) -> Any:
    from av.codec.hwaccel import HWAccel

    return HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True)


# -- NV12 to RGB: BT.601, limited range (what libx264 and swscale use by default) -----------------------------------


def nv12_to_rgb_numpy(y: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """Y ``(H, W)`` and UV ``(H/2, W/2, 2)`` uint8 to RGB float32 ``(3, H, W)`` in [0, 1] (on the host, or in a model
    kernel)."""
    c = (y.astype(np.float32) - 16) * np.float32(1.164)
    full = uv.astype(np.float32).repeat(2, axis=0).repeat(2, axis=1) - 128
    u, v = full[..., 0], full[..., 1]
    rgb = np.stack([c + np.float32(1.596) * v, c - np.float32(0.392) * u - np.float32(0.813) * v, c + np.float32(2.017) * u])
    return np.clip(rgb / np.float32(255), 0, 1).astype(np.float32)  # type: ignore[no-any-return]


def nv12_to_rgb_torch(torch: Any, y: Any, uv: Any) -> Any:
    """The same on the GPU, on torch's current stream: a new tensor (the planes are read, not kept)."""
    c = (y.float() - 16) * 1.164
    full = uv.float().repeat_interleave(2, dim=0).repeat_interleave(2, dim=1) - 128
    u, v = full[..., 0], full[..., 1]
    rgb = torch.stack([c + 1.596 * v, c - 0.392 * u - 0.813 * v, c + 2.017 * u])
    return (rgb / 255).clamp_(0, 1)


# -- the two machines: a GPU (torch) and the model ---------------------------------------------------------


def open_on_nvdec(av: Any, path: str) -> Any:
    """``av.open`` on NVDEC. Open the first container before torch's first CUDA call: FFmpeg sets the flags of the
    GPU's primary context when it makes its CUDA device, and fails (OSError: Operation not supported) once torch
    has made that context with others (measured on an H200 with PyAV 19)."""
    try:
        return av.open(path, hwaccel=_hwaccel(av))
    except Exception as e:  # noqa: BLE001  (no NVDEC in this PyAV build, or for this codec)
        _unavailable(f"PyAV cannot decode {path} on NVDEC here ({type(e).__name__}: {e}); run with --model")


class OnGpu:
    """PyAV's NVDEC (and nvvfx when installed, else the emulated effect), torch on two streams."""

    name = "GPU"

    def __init__(self, torch: Any, delay_us: int) -> None:
        try:
            import nvvfx
            self.VideoSuperRes = nvvfx.VideoSuperRes
            self.effects = "nvvfx"
        except ImportError:
            from streamsafe.testing import VideoSuperRes
            self.VideoSuperRes = VideoSuperRes
            self.effects = "streamsafe's emulated nvvfx"
        self.torch, self.delay = torch, delay_us * US
        self.U, self.C = torch.cuda.Stream(), torch.cuda.Stream()
        self.scope: Any = contextlib.nullcontext()

    def open(self, av: Any, path: str) -> Any:
        return open_on_nvdec(av, path)

    def convert(self, frame: Any, guarded: bool) -> Any:
        """On U: the frame's NV12 planes imported zero-copy (guarded: the planes take U's stream; unguarded: PyAV's
        recipe, a capsule with no stream) and converted; the views are dropped at once."""
        torch = self.torch
        with torch.cuda.stream(self.U):
            if self.delay:
                torch.cuda._sleep(self.delay)
            if guarded:
                y, uv = (torch.from_dlpack(p) for p in frame.planes)
            else:
                y, uv = (torch.utils.dlpack.from_dlpack(p.__dlpack__()) for p in frame.planes)
            return nv12_to_rgb_torch(torch, y, uv)

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

    def reference(self, av: Any, path: str, scale: int, limit: int) -> list[np.ndarray]:
        """The output frames made with nothing racing: every stage on the current stream, the device idle after each."""
        torch = self.torch
        sr = self.VideoSuperRes()
        out: list[np.ndarray] = []
        with av.open(path, hwaccel=_hwaccel(av)) as container:
            for frame in container.decode(video=0):
                if len(out) == limit:
                    break
                torch.cuda.synchronize()
                y, uv = (torch.utils.dlpack.from_dlpack(p.__dlpack__()) for p in frame.planes)
                x = nv12_to_rgb_torch(torch, y, uv)
                if not out:
                    sr.output_width, sr.output_height = x.shape[2] * scale, x.shape[1] * scale
                    sr.load()
                torch.cuda.synchronize()
                z = torch.from_dlpack(sr.run(x, stream_ptr=torch.cuda.current_stream().cuda_stream).image).clone()
                torch.cuda.synchronize()
                out.append((z.clamp(0, 1) * 255 + 0.5).to(torch.uint8).permute(1, 2, 0).cpu().numpy())
        return out


class OnModel:
    """The emulated NVDEC and VideoSuperRes on the CUDA ordering model (an adversarial scheduler: a missing fence
    shows as wrong data)."""

    name = "the CUDA ordering model (no GPU)"

    def __init__(self) -> None:
        from streamsafe.sim import SimBackend
        from streamsafe.testing import VideoSuperRes, install_fake_pyav_hw

        self.sim = sim = SimBackend(scheduler="adversarial")
        self.scope = ss.use_backend(sim)
        install_fake_pyav_hw()
        self.VideoSuperRes, self.effects = VideoSuperRes, "streamsafe's emulated nvvfx"
        self.U, self.C = (sim.create_stream(non_blocking=True) for _ in range(2))

    def open(self, av: Any, path: str) -> Any:
        return av.open(path, hwaccel=_hwaccel(av))

    def convert(self, frame: Any, guarded: bool) -> Any:
        sim, U = self.sim, self.U
        if guarded:
            y, uv = (sim.from_dlpack(p, stream=U) for p in frame.planes)
        else:
            y, uv = (sim.from_dlpack(p.__dlpack__()) for p in frame.planes)
        out = sim.empty((3, *y.shape), np.float32, stream=U)
        src_y, src_uv, dst = y.buffer, uv.buffer, out.buffer
        sim.launch(U, "NV12 to RGB", lambda: np.copyto(dst.data, nv12_to_rgb_numpy(src_y.data, src_uv.data)),
                   reads=[y, uv], writes=[out])
        return out

    def upscale(self, sr: Any, x: Any) -> Any:
        with self.sim.use_stream(self.U):
            return sr.run(x, stream_ptr=self.U.ptr)

    def consume(self, out: Any) -> Any:
        with self.sim.use_stream(self.C):
            return self.sim.copy(self.sim.from_dlpack(out.image), self.C)

    def to_host(self, y: Any) -> np.ndarray:
        host = self.sim.download(y, self.C)
        host = np.nan_to_num(host, nan=0.0)  # (freed or never written memory reads as poison on the model)
        return (np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0)  # type: ignore[no-any-return]

    def reference(self, av: Any, path: str, scale: int, limit: int) -> list[np.ndarray]:
        """The output frames made with nothing racing (on an in-order model, the host waiting after each stage)."""
        from streamsafe.sim import SimBackend
        from streamsafe.testing.fake_pyav import decode_nv12

        sim = SimBackend()
        sr = self.VideoSuperRes(backend=sim)
        out = []
        for nv12 in decode_nv12(path)[:limit]:
            h = nv12.shape[0] * 2 // 3
            x = nv12_to_rgb_numpy(nv12[:h], nv12[h:].reshape(h // 2, -1, 2))
            if not out:
                sr.output_width, sr.output_height = x.shape[2] * scale, x.shape[1] * scale
                sr.load()
            host = sim.download(sim.from_dlpack(sr.run(sim.array(x, dtype=np.float32)).image))
            out.append((np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))
        return out


# -- the program ---------------------------------------------------------------------------------------------


def _clip(args: argparse.Namespace) -> str:
    if args.input:
        if not os.path.exists(args.input):
            _unavailable(f"{args.input}: no such file")
        return str(args.input)
    from streamsafe.testing import make_test_clip

    return make_test_clip(os.path.join(tempfile.mkdtemp(prefix="pyav-nvdec-"), "clip.mp4"), args.frames, (160, 96))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    av = _av()
    torch = None if args.model else _gpu_torch()
    path = _clip(args)
    first = open_on_nvdec(av, path) if torch is not None else None  # (before torch's first CUDA call: see open_on_nvdec)
    machine: Any = OnGpu(torch, args.consumer_delay_us) if torch is not None else OnModel()
    with machine.scope:
        container = first if first is not None else machine.open(av, path)
        video = container.streams.video[0]
        if video.width % 2 or video.height % 2:  # (NV12 halves each side for its chroma)
            _unavailable(f"{path} is {video.width}x{video.height}: NV12 frames need an even width and height; give a clip of even size")
        guards = contextlib.ExitStack()
        if not args.unguarded:
            d = guards.enter_context(ss.stream_contract(container, strategy=args.strategy))
        sr = writer = stream = None
        copies: list[Any] = []
        pending: list[Any] = []
        start = time.perf_counter()
        with guards:
            for frame in container.decode(video=0):
                if len(copies) == args.frames:
                    break
                x = machine.convert(frame, not args.unguarded)
                if sr is None:  # (the first frame says the size)
                    height, width = x.shape[1] * args.scale, x.shape[2] * args.scale
                    sr = machine.VideoSuperRes()
                    sr.output_width, sr.output_height = width, height
                    sr.load()
                    if not args.unguarded:
                        e = guards.enter_context(ss.stream_contract(sr, machine.U, strategy=args.strategy,
                                                                    input_stream=machine.U))
                    writer = av.open(args.output if args.output else io.BytesIO(), mode="w", format="mp4")
                    stream = writer.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=30)
                    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
                    print(f"input:  {path} ({x.shape[2]}x{x.shape[1]}); on {machine.name}; effects: {machine.effects}")
                copies.append(machine.consume(machine.upscale(sr, x)))
                pending.append(copies[-1])
                if len(pending) == args.batch:  # encode the batch on the CPU (the host waits for C here)
                    _encode(av, writer, stream, machine, pending)
            _encode(av, writer, stream, machine, pending)
            stats = (dict(d.stats), dict(e.stats)) if not args.unguarded and sr is not None else ()
        elapsed = time.perf_counter() - start
        container.close()
        if writer is None:
            _unavailable(f"{path}: no video frames")
        for packet in stream.encode(None):  # type: ignore[union-attr]
            writer.mux(packet)
        writer.close()
        print(f"output: {args.output or '(in memory)'} {stream.width}x{stream.height}; {len(copies)} frames in "  # type: ignore[union-attr]
              f"{elapsed:.2f} s")
        if stats:
            print(f"decoder: {stats[0]['runs']} frames, {stats[0].get('D7', 0)} fences before a surface went back (D7), "
                  f"{stats[0]['host_waits']} host waits of streamsafe's; effect: {stats[1]['runs']} runs, "
                  f"{stats[1]['fences']} device fences, {stats[1]['host_waits']} host waits")
        if not args.verify:
            return 0
        reference = machine.reference(av, path, args.scale, len(copies))
        wrong = sum(np.abs(machine.to_host(y).astype(int) - want).max() > 2 for y, want in zip(copies, reference))
        print(f"verify: {wrong} of {len(copies)} frames wrong" + (" (the unguarded program races)" if wrong and args.unguarded else ""))
        return 1 if wrong else 0


def _encode(av: Any, writer: Any, stream: Any, machine: Any, pending: list[Any]) -> None:
    for y in pending:
        for packet in stream.encode(av.VideoFrame.from_ndarray(machine.to_host(y), format="rgb24")):
            writer.mux(packet)
    pending.clear()


if __name__ == "__main__":
    sys.exit(main())
