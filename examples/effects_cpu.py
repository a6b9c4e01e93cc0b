"""The three video programs' loop on a CPU: VideoSuperRes, VideoFrameGeneration and TrueHDR on the model.

    python examples/effects_cpu.py                       # every effect, guarded: every frame right, no race
    python examples/effects_cpu.py --unguarded           # the same loop without streamsafe: frames wrong, races
    python examples/effects_cpu.py --unguarded --non-blocking --effect true_hdr   # TrueHDR's race (H4)
    python examples/effects_cpu.py --effect true_hdr --frames 16

The CPU twin of ``video_super_resolution.py``, ``video_frame_generation.py`` and ``true_hdr.py`` run with
``--side-stream --copy-stream`` (and ``--non-blocking``, as this takes it; those need PyTorch and a GPU): the SDK runs on a non-blocking side stream and
each result is imported and copied on a second one, the code that races on the SDK. Here the GPU is
``streamsafe.sim.SimBackend`` (CUDA's ordering rules holding NumPy data, with the scheduler that runs every
unordered pair in the order that breaks it) and the effects are ``streamsafe.testing``'s emulations. Frames are
synthesized (no PyAV needed) and each output is checked against a NumPy reference of the emulation's arithmetic.
Exit status 0 when every guarded frame is right and the model found no race.

The GPU code, spelled on the model: ``torch.cuda.Stream()`` is ``sim.create_stream(non_blocking=True)``,
``with torch.cuda.stream(s)`` is ``with sim.use_stream(s)``, ``torch.from_dlpack(out.image).clone()`` on stream
``c`` is ``sim.copy(sim.from_dlpack(out.image, stream=c), c)``, and ``.cpu()`` is ``sim.download(y, c)``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import numpy as np
from _video_io import FrameVerifier, rgb24_to_float, synthesize_frames

import streamsafe as ss
from streamsafe.sim import SimBackend
from streamsafe.testing import TrueHDR, VideoFrameGeneration, VideoSuperRes

EFFECTS = ("super_res", "frame_gen", "true_hdr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="effects_cpu.py", description=(__doc__ or "").splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--effect", default=",".join(EFFECTS), help=f"comma-separated: {', '.join(EFFECTS)}")
    parser.add_argument("--frames", type=int, default=8, help="input frames per effect")
    parser.add_argument("--unguarded", action="store_true", help="run without streamsafe (the SDK's race shows)")
    parser.add_argument("--non-blocking", action="store_true",
                        help="run(..., non_blocking=True): the SDK's host wait goes, and TrueHDR races too")
    return parser


def run_effect(kind: str, frames: list[np.ndarray], guarded: bool, non_blocking: bool = False) -> tuple[int, int, int]:
    """One effect over ``frames`` (rgb24) on a fresh model; returns (frames checked, corrupt, races)."""
    sim = SimBackend(scheduler="adversarial")
    side, copy = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)  # torch.cuda.Stream() x2
    h, w = frames[0].shape[:2]
    effect: Any
    if kind == "super_res":
        effect = VideoSuperRes(backend=sim)
        effect.output_width, effect.output_height = 2 * w, 2 * h
        verifier = FrameVerifier(kind, "RGB8", output_width=2 * w, output_height=2 * h)
    elif kind == "frame_gen":
        effect = VideoFrameGeneration(backend=sim)
        effect.input_width, effect.input_height = w, h
        effect.frame_multiplier = 2
        verifier = FrameVerifier(kind, "RGB8")
    else:
        effect = TrueHDR(backend=sim, luminance=1000)
        verifier = FrameVerifier(kind, "RGB8", contrast=100, saturation=100, middle_gray=50, luminance=1000)
    effect.load()

    def consume(out: Any, *inputs: np.ndarray, **call: Any) -> None:  # with torch.cuda.stream(copy): ....clone().cpu()
        view = sim.from_dlpack(out.image, stream=copy)
        verifier.check(sim.download(sim.copy(view, copy), copy), *inputs, **call)

    guard = ss.stream_contract(effect, side) if guarded else contextlib.nullcontext()
    with sim.use_stream(side), guard:  # with torch.cuda.stream(side):
        previous = None
        for rgb in frames:
            frame = sim.array(rgb24_to_float(rgb), stream=side)  # the decoded frame, uploaded on the side stream
            if kind != "frame_gen":
                consume(effect.run(frame, non_blocking=non_blocking, stream_ptr=side.handle), rgb)
            elif previous is not None:
                out = effect.run(previous[0], frame, frame_index=1, non_blocking=non_blocking, stream_ptr=side.handle)
                consume(out, previous[1], rgb, timestep=0.5)
            previous = (frame, rgb)
    effect.close()
    return verifier.checked, len(verifier.corrupt), len(sim.races)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.effect.split(",") if k.strip()]
    if not kinds or any(k not in EFFECTS for k in kinds):
        parser.error(f"--effect {args.effect}: choose from {', '.join(EFFECTS)}")
    if args.frames < 2:
        parser.error("--frames: at least 2 (frame generation interpolates between two)")
    frames = list(synthesize_frames(args.frames, 64, 36))
    status = 0
    for kind in kinds:
        checked, corrupt, races = run_effect(kind, frames, guarded=not args.unguarded, non_blocking=args.non_blocking)
        print(f"{kind:<10} {'unguarded' if args.unguarded else 'guarded'}: corrupt frames {corrupt} of {checked}, "
              f"races {races}")
        status |= int(bool(corrupt or races))
    return status


if __name__ == "__main__":
    sys.exit(main())
