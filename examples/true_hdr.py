"""Convert an SDR video to HDR with nvvfx.TrueHDR: decode with PyAV, tone-map on the GPU, encode.

    python examples/true_hdr.py -i sdr.mp4 -o hdr.mp4 --luminance 1000
    streamsafe run --fake-nvvfx examples/true_hdr.py --side-stream --non-blocking --copy-stream   # a GPU and torch too
    python examples/effects_cpu.py --effect true_hdr --non-blocking   # without a GPU: this loop on streamsafe's model

TrueHDR takes float32 RGB ``(3, H, W)`` and returns PQ-coded (SMPTE ST 2084) packed RGB10A2
``(H, W)``. The result is written as 10-bit H.264 (yuv420p10le) when the PyAV build can, else
as 8-bit (the top 8 bits of each code); either way the file carries PQ code values and no HDR
colour tags (BT.2020 / PQ): this is a demonstration, not a mastering tool.

A plain nvvfx program: the SDK stream is torch's current stream, each result is imported with
``torch.from_dlpack(out.image).clone()`` and the device is never synchronised. TrueHDR has
no conversion on the legacy stream, so on one stream it is ordered; it races when the output
is consumed on another stream than the SDK's while the host does not wait for the SDK
(``--copy-stream --non-blocking``: the raw DLPack capsule ignores the consumer's stream).
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

PROGRAM = "true_hdr.py"
TUNABLES = ("contrast", "saturation", "middle_gray", "luminance", "debanding_off")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="SDR to HDR (PQ) with nvvfx.TrueHDR (PyAV in and out).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    effect = parser.add_argument_group("effect")
    effect.add_argument("--contrast", type=int, default=100, help="0-200, 100 is neutral")
    effect.add_argument("--saturation", type=int, default=100, help="0-200, 100 is neutral")
    effect.add_argument("--middle-gray", type=int, default=50, help="10-100, where SDR middle gray lands")
    effect.add_argument("--luminance", type=int, default=650, help="400-2000, the target display's peak in nits")
    effect.add_argument("--debanding-off", type=int, choices=[0, 1], default=0, help="1 skips the debanding pass")
    add_common_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    torch, nvvfx = prepare(PROGRAM, parser, args)
    tunables = {name: getattr(args, name) for name in TUNABLES}

    clip = load_clip(PROGRAM, args)
    print("effect: TrueHDR " + ", ".join(f"{k}={v}" for k, v in tunables.items()))
    try:
        hdr = nvvfx.TrueHDR(**tunables)
        hdr.load()
    except ValueError as e:
        print(f"{PROGRAM}: cannot configure TrueHDR: {e}", file=sys.stderr)
        return 2
    set_emulation_latency(nvvfx, hdr, args.emulation_latency_us, PROGRAM)
    curve = {k: v for k, v in tunables.items() if k != "debanding_off"}
    verifier = FrameVerifier("true_hdr", "RGB8", code_tolerance=3, **curve) if args.verify else None

    writer = VideoWriter(args.output, clip.width, clip.height, clip.fps, bit_depth=10)
    print(f"output: {args.output or '(in memory)'} ({writer.codec}, {writer.pix_fmt}, {writer.bit_depth}-bit PQ codes)")
    side_stream = torch.cuda.Stream() if args.side_stream else None
    copy_stream = torch.cuda.Stream() if args.copy_stream else None
    start = time.perf_counter()
    with torch.cuda.stream(side_stream):  # None: stay on the current (default) stream
        for rgb in clip.frames:
            sdr = frame_to_tensor(torch, rgb, "RGB8")
            out = hdr.run(sdr, non_blocking=args.non_blocking, stream_ptr=torch.cuda.current_stream().cuda_stream)
            with torch.cuda.stream(copy_stream):
                packed = torch.from_dlpack(out.image).clone()
                host = download(torch, packed)
            writer.write(to_video_frame(host))
            if verifier is not None:
                verifier.check(host, rgb)
    elapsed = time.perf_counter() - start
    hdr.close()
    writer.close()
    n = writer.frames_written
    print(f"frames: {n} in {elapsed:.2f} s ({n / elapsed if elapsed else 0:.1f} fps)")
    return verifier.summary() if verifier is not None else 0


if __name__ == "__main__":
    sys.exit(main())
