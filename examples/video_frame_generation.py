"""Raise a video's frame rate with nvvfx.VideoFrameGeneration: decode with PyAV, interpolate, encode.

    python examples/video_frame_generation.py -i in.mp4 -o out.mp4 --multiplier 2
    python examples/video_frame_generation.py --timestep 0.5       # run_at_timestep() instead of run()
    streamsafe run --fake-nvvfx examples/video_frame_generation.py --side-stream   # a GPU and torch too
    python examples/effects_cpu.py --effect frame_gen   # without a GPU: this loop on streamsafe's model

Between each pair of decoded frames it generates ``multiplier - 1`` frames with
``run(previous, current, frame_index=i)`` (or one frame with ``run_at_timestep(previous,
current, t)``), and writes the original and generated frames in order, at ``multiplier``
times the input rate. The SDK writes every generated frame to the same output buffer, so each
one is imported with ``torch.from_dlpack(out.image).clone()`` before the next call.

A plain nvvfx program: the SDK stream is torch's current stream and the device is never
synchronised; with ``--side-stream`` it has the SDK's RGB8 race (see video_super_resolution.py).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
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

PROGRAM = "video_frame_generation.py"


def _timestep(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Frame-rate up-conversion with nvvfx.VideoFrameGeneration (PyAV in and out).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    effect = parser.add_argument_group("effect")
    effect.add_argument("--mode", default="MEDIUM", help="a VideoFrameGeneration.Mode name: LOW, MEDIUM or HIGH")
    effect.add_argument("--multiplier", type=int, default=2, help="frame_multiplier, 2 to 8: output rate / input rate")
    effect.add_argument("--timestep", type=_timestep,
                        help="generate one frame per pair at this position with run_at_timestep() (doubles the rate)")
    effect.add_argument("--no-shot-change-detection", action="store_true",
                        help="automatic_shot_change_detection_enabled=False")
    effect.add_argument("--encoding", choices=["RGB8", "RGB10A2"], default="RGB8",
                        help="RGB8: float32 (3, H, W) frames; RGB10A2: packed uint32 (H, W), encoded as 10-bit video")
    add_common_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    torch, nvvfx = prepare(PROGRAM, parser, args)
    VideoFrameGeneration = nvvfx.VideoFrameGeneration
    try:
        mode = VideoFrameGeneration.Mode[args.mode]
    except KeyError:
        parser.error(f"--mode {args.mode}: not one of {', '.join(VideoFrameGeneration.Mode.__members__)}")

    clip = load_clip(PROGRAM, args)
    multiplier = 2 if args.timestep is not None else args.multiplier
    how = f"run_at_timestep({args.timestep})" if args.timestep is not None else f"run(frame_index=1..{multiplier - 1})"
    print(f"effect: VideoFrameGeneration {mode.name} x{multiplier} with {how}, {args.encoding}")

    vfg = VideoFrameGeneration(
        mode=mode,
        automatic_shot_change_detection_enabled=not args.no_shot_change_detection,
        image_encoding=VideoFrameGeneration.ImageEncoding[args.encoding],
    )
    vfg.input_width, vfg.input_height = clip.width, clip.height
    try:
        if args.timestep is None:
            vfg.frame_multiplier = multiplier
        vfg.load()
    except ValueError as e:
        print(f"{PROGRAM}: cannot configure VideoFrameGeneration: {e}", file=sys.stderr)
        return 2
    set_emulation_latency(nvvfx, vfg, args.emulation_latency_us, PROGRAM)
    verifier = (FrameVerifier("frame_gen", args.encoding, shot_change_detection=not args.no_shot_change_detection)
                if args.verify else None)
    steps = [(None, args.timestep)] if args.timestep is not None else [(i, i / multiplier) for i in range(1, multiplier)]

    ten_bit = args.encoding == "RGB10A2"
    writer = VideoWriter(args.output, clip.width, clip.height, clip.fps * multiplier, bit_depth=10 if ten_bit else 8)
    print(f"output: {args.output or '(in memory)'} ({writer.codec}, {writer.pix_fmt}) at {float(clip.fps * multiplier):g} fps")
    side_stream = torch.cuda.Stream() if args.side_stream else None
    copy_stream = torch.cuda.Stream() if args.copy_stream else None
    generated = 0
    start = time.perf_counter()
    with torch.cuda.stream(side_stream):  # None: stay on the current (default) stream
        previous = previous_rgb = None
        for rgb in clip.frames:
            current = frame_to_tensor(torch, rgb, args.encoding)
            if previous is not None:
                for index, t in steps:
                    stream_ptr = torch.cuda.current_stream().cuda_stream
                    if index is None:
                        out = vfg.run_at_timestep(previous, current, t, non_blocking=args.non_blocking,
                                                  stream_ptr=stream_ptr)
                    else:
                        out = vfg.run(previous, current, frame_index=index, non_blocking=args.non_blocking,
                                      stream_ptr=stream_ptr)
                    with torch.cuda.stream(copy_stream):
                        middle = torch.from_dlpack(out.image).clone()
                        host = download(torch, middle)
                    writer.write(to_video_frame(host))
                    generated += 1
                    if verifier is not None:
                        verifier.check(host, previous_rgb, rgb, timestep=t)
            writer.write(rgb.astype(np.uint16) * 257 if ten_bit else rgb)
            previous, previous_rgb = current, rgb
    elapsed = time.perf_counter() - start
    vfg.close()
    writer.close()
    print(f"frames: {writer.frames_written} written ({generated} generated) in {elapsed:.2f} s")
    return verifier.summary() if verifier is not None else 0


if __name__ == "__main__":
    sys.exit(main())
