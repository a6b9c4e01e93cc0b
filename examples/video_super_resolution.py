"""Upscale a video with nvvfx.VideoSuperRes: decode with PyAV, upscale on the GPU, encode.

    python examples/video_super_resolution.py -i in.mp4 -o out.mp4 --scale 2
    streamsafe run --fake-nvvfx examples/video_super_resolution.py --side-stream -o sr.mp4   # a GPU and torch too
    python examples/effects_cpu.py --effect super_res   # without a GPU: this loop on streamsafe's model

A plain nvvfx program, written the way the SDK's documentation shows: the SDK stream is
torch's current stream (``stream_ptr=torch.cuda.current_stream().cuda_stream``), each result
is imported with ``torch.from_dlpack(out.image).clone()``, and the device is never
synchronised. Without an input it synthesizes a short clip, so it needs no assets.

Note: with ``--side-stream`` (a non-blocking current stream) this is exactly the code that
races on the SDK: the RGB8 result is converted on the legacy stream, which a non-blocking
stream does not wait for. ``streamsafe run`` fixes it without editing the program.
"""

from __future__ import annotations

import argparse
import sys
import time

from _video_io import (
    FrameVerifier,
    VideoWriter,
    add_common_options,
    download,
    frame_to_tensor,
    load_clip,
    prepare,
    set_emulation_latency,
    to_video_frame,
)

PROGRAM = "video_super_resolution.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Video super resolution with nvvfx.VideoSuperRes (PyAV in and out).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    effect = parser.add_argument_group("effect")
    effect.add_argument("--scale", type=int, choices=[1, 2, 3, 4], default=2,
                        help="output size / input size; 1 only with the DENOISE_* and DEBLUR_* qualities")
    effect.add_argument("--quality", default="HIGH", help="a VideoSuperRes.QualityLevel name, e.g. HIGH or DENOISE_HIGH")
    effect.add_argument("--strength", type=float, default=1.0, help="effect strength in [0, 1]")
    effect.add_argument("--encoding", choices=["RGB8", "RGB10A2"], default="RGB8",
                        help="RGB8: float32 (3, H, W) frames; RGB10A2: packed uint32 (H, W), encoded as 10-bit video")
    add_common_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    torch, nvvfx = prepare(PROGRAM, parser, args)
    VideoSuperRes = nvvfx.VideoSuperRes
    try:
        quality = VideoSuperRes.QualityLevel[args.quality]
    except KeyError:
        parser.error(f"--quality {args.quality}: not one of {', '.join(VideoSuperRes.QualityLevel.__members__)}")

    clip = load_clip(PROGRAM, args)
    out_w, out_h = clip.width * args.scale, clip.height * args.scale
    print(f"effect: VideoSuperRes {quality.name} {args.scale}x -> {out_w}x{out_h}, {args.encoding}")

    sr = VideoSuperRes(quality=quality, strength=args.strength, image_encoding=VideoSuperRes.ImageEncoding[args.encoding])
    sr.input_width, sr.input_height = clip.width, clip.height
    sr.output_width, sr.output_height = out_w, out_h
    try:
        sr.load()
    except ValueError as e:
        print(f"{PROGRAM}: cannot configure VideoSuperRes: {e}", file=sys.stderr)
        return 2
    set_emulation_latency(nvvfx, sr, args.emulation_latency_us, PROGRAM)
    verifier = (FrameVerifier("super_res", args.encoding, output_width=out_w, output_height=out_h)
                if args.verify else None)

    writer = VideoWriter(args.output, out_w, out_h, clip.fps, bit_depth=10 if args.encoding == "RGB10A2" else 8)
    print(f"output: {args.output or '(in memory)'} ({writer.codec}, {writer.pix_fmt})")
    side_stream = torch.cuda.Stream() if args.side_stream else None
    copy_stream = torch.cuda.Stream() if args.copy_stream else None
    start = time.perf_counter()
    with torch.cuda.stream(side_stream):  # None: stay on the current (default) stream
        for rgb in clip.frames:
            frame = frame_to_tensor(torch, rgb, args.encoding)
            out = sr.run(frame, non_blocking=args.non_blocking, stream_ptr=torch.cuda.current_stream().cuda_stream)
            with torch.cuda.stream(copy_stream):
                upscaled = torch.from_dlpack(out.image).clone()
                host = download(torch, upscaled)
            writer.write(to_video_frame(host))
            if verifier is not None:
                verifier.check(host, rgb)
    elapsed = time.perf_counter() - start
    sr.close()
    writer.close()
    n = writer.frames_written
    print(f"frames: {n} in {elapsed:.2f} s ({n / elapsed if elapsed else 0:.1f} fps)")
    return verifier.summary() if verifier is not None else 0


if __name__ == "__main__":
    sys.exit(main())
