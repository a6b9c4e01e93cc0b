"""One guarded frame by each way out of it, side by side, and whether every frame was replayed.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/frame_paths.py [auto|event ...] [--rounds 2] [--no-gc]

``contract_overhead.py``'s null effect and bench scenario (a)'s streams (torch's current stream is
a non-blocking side stream). Each row is the best of 7 blocks of 4,000 frames, host microseconds
per frame, with the count of frames the steady-state replay took (``streamsafe.steady.replays``):
a row that switches the effect to a new state plans its first frame, and every later frame must
replay, whatever the rows before it left behind (all rows run twice, in one order). Two rows take
``torch.from_dlpack(out.image)`` apart: its ``torch.cuda.current_stream()`` read beside the
``__dlpack__`` call, and the import of the capsule ``__dlpack__`` returns. The ``raw``
rows run the effect's own ``run()`` (no streamsafe), with the three ways torch imports a capsule,
and two of them again after the ``event`` strategy's one fence written by hand (an event record
and a stream wait through ``cuda.bindings``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _interleave import best_us  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("strategies", nargs="*", default=["auto", "event"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-gc", action="store_true", help="with Python's cyclic garbage collector off")
    args = parser.parse_args()
    if args.no_gc:
        import gc

        gc.disable()

    import torch
    from contract_overhead import NullSuperRes, PlainNullSuperRes, _Producer

    import streamsafe as ss
    from streamsafe import steady
    from streamsafe.bench.hand import RawFences
    from streamsafe.streams import LEGACY_HANDLE, as_stream

    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    torch.cuda.set_stream(side)
    x = torch.zeros(3, 16, 16, device="cuda")
    h = side.cuda_stream
    from_dlpack = torch.from_dlpack
    current_stream = torch.cuda.current_stream
    import_capsule = torch.utils.dlpack.from_dlpack  # (a raw capsule: no current-stream read)
    raw = PlainNullSuperRes(torch.zeros(3, 32, 32, device="cuda"))
    be = ss.CudaBackend()
    fence = RawFences(0).site(as_stream(side, backend=be), as_stream(LEGACY_HANDLE, device=0, backend=be))

    def raw_run() -> Any:
        return raw.run(x, stream_ptr=h, non_blocking=True)

    def fenced_run() -> Any:  # the event strategy's one fence, by hand (two driver calls)
        image = raw_run().image
        fence()
        return image

    for strategy in args.strategies:
        c = ss.StreamContract(NullSuperRes(torch.zeros(3, 32, 32, device="cuda")), side, strategy=strategy)
        rows: dict[str, Callable[[], Any]] = {
            "c.run(x)": lambda c=c: c.run(x),
            "c.run(x).image.__dlpack__(stream=h)": lambda c=c: c.run(x).image.__dlpack__(stream=h),
            "torch.from_dlpack(c.run(x).image)": lambda c=c: from_dlpack(c.run(x).image),
            "c.run(x).torch()": lambda c=c: c.run(x).torch(),
            "c.run(x).torch(copy=False)": lambda c=c: c.run(x).torch(copy=False),
            # torch.from_dlpack's two steps around __dlpack__, each alone: its current-stream read, its import
            "current_stream() + c.run(x).image.__dlpack__(stream=h)":
                lambda c=c: (current_stream("cuda:0"), c.run(x).image.__dlpack__(stream=h)),
            "import(c.run(x).image.__dlpack__(stream=h))": lambda c=c: import_capsule(c.run(x).image.__dlpack__(stream=h)),
            "raw run": raw_run,
            "raw run + torch.from_dlpack(capsule)": lambda: from_dlpack(raw_run().image),
            "raw run + torch.from_dlpack(producer object)": lambda: from_dlpack(_Producer(raw_run().image)),
            "raw run + torch.from_dlpack(capsule).clone()": lambda: from_dlpack(raw_run().image).clone(),
            # the same imports after a hand fence: do the driver's calls make torch's own steps dearer?
            "raw run + hand fence + torch.from_dlpack(capsule)": lambda: from_dlpack(fenced_run()),
            "raw run + hand fence + torch.from_dlpack(producer object)": lambda: from_dlpack(_Producer(fenced_run())),
        }
        for r in range(args.rounds):
            for name, fn in rows.items():
                for _ in range(300):
                    fn()
                before = steady.replays
                us = best_us(fn, torch.cuda.synchronize)
                replayed = steady.replays - before
                tail = "" if name.startswith("raw") else f"   replayed {replayed} of {7 * 4000}"
                print(f"{strategy:<6} round {r + 1}  {name:<46} {us:>7.2f} us{tail}")
        c.close()


if __name__ == "__main__":
    main()
