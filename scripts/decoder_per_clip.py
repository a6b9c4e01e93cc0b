"""A decoder per clip, 5,000 frames, under ``streamsafe run``: the number of live decoders stays constant.

Issue 39 item 1: every decoder made under a class guard (``ss.guard(PyNvVideoCodec)``, ``streamsafe run``) lived
forever. This program makes a new emulated ``SimpleDecoder`` for each short clip (on the CUDA ordering model),
decodes it in batches, copies every frame on its own non-blocking stream, drops the decoder, and every
``--every`` frames counts the decoders still alive after ``gc.collect()`` (by weak references). Run it as::

    python -m streamsafe run --fake-nvvfx scripts/decoder_per_clip.py [--frames 5000] [--clip-frames 10]

(``python scripts/decoder_per_clip.py --guard`` runs it under ``ss.guard(PyNvVideoCodec)`` instead.) It prints the
counts, and exits 1 when they grow or a frame came out wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
import weakref

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=5000)
    parser.add_argument("--clip-frames", type=int, default=10)
    parser.add_argument("--every", type=int, default=500, help="count the live decoders every this many frames")
    parser.add_argument("--guard", action="store_true", help="guard with ss.guard(PyNvVideoCodec) (not streamsafe run)")
    args = parser.parse_args(argv)

    import streamsafe as ss
    from streamsafe.testing import install_fake_pynvvideocodec, sample_clip
    from streamsafe.testing.fake_pynvvideocodec import decode_reference

    nvc = install_fake_pynvvideocodec()
    clip = sample_clip(args.clip_frames, (32, 16))
    reference = decode_reference(clip)
    sim = ss.current_backend()
    made: weakref.WeakSet[object] = weakref.WeakSet()
    counts: list[tuple[int, int]] = []
    wrong = frames = decoders = 0
    t0 = time.perf_counter()
    with ss.guard(nvc) if args.guard else contextlib.nullcontext():
        while frames < args.frames:
            dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
            made.add(dec)
            decoders += 1
            C = sim.create_stream(non_blocking=True)  # type: ignore[attr-defined]
            copies = []
            while batch := dec.get_batch_frames(4):
                for f in batch:
                    copies.append((f.index, sim.copy(sim.from_dlpack(f, stream=C), C)))  # type: ignore[attr-defined]
            sim.synchronize_stream(C)  # type: ignore[attr-defined]
            wrong += sum(not np.array_equal(sim.download(c), reference[i]) for i, c in copies)  # type: ignore[attr-defined]
            before = frames
            frames += len(copies)
            del dec, batch, copies, C, f
            if frames // args.every != before // args.every:
                gc.collect()
                counts.append((frames, len(made)))
    gc.collect()
    counts.append((frames, len(made)))
    print(f"{frames} frames, {decoders} decoders made, {wrong} wrong frames, {time.perf_counter() - t0:.1f} s")
    print("live decoders after gc.collect(), by frames decoded: " + ", ".join(f"{n}: {live}" for n, live in counts))
    grows = max(live for _, live in counts) > 0
    return 1 if grows or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
