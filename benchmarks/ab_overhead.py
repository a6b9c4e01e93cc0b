"""Two trees' own cost a frame, side by side in one process: before/after figures a shared host cannot blur.

Run on a GPU machine, from this tree (the "new" one):

    git archive REV streamsafe | tar -x -C /tmp/base        # the tree to compare with
    PYTHONPATH=. python3 benchmarks/ab_overhead.py /tmp/base [--blocks N] [--per-block N]

``contract_overhead.py`` run once per tree, in turn, moves with the host by more than a change of a few
microseconds (on the lent H200, 11-20 us for the same tree in one hour). Here the other tree is loaded
beside this one under another package name (a copy with ``streamsafe`` renamed ``streamsafe_base``), and
the rows of both run in interleaved blocks in one process: ``c.run(x).torch(copy=False)`` on each tree's
contract (a declared input stream, ``contract_overhead.py``'s null effect, a class of its own per tree),
beside the same fences by hand (``contract_overhead.py``'s ``hand, same fences + raw capsule import``).
Printed: each row's median host microseconds a frame, each tree's cost over the hand row, and the new
tree's less the base's with the spread of that difference over the blocks.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _timing import interleave
from contract_overhead import LEGACY_HANDLE, NullSuperRes, PlainNullSuperRes, hand_fences

BASE_NAME = "streamsafe_base"


def load_renamed(tree: Path, into: Path) -> Any:
    """The package ``streamsafe`` of ``tree`` imported as :data:`BASE_NAME` (a copy under ``into``)."""
    source = tree / "streamsafe"
    if not (source / "__init__.py").is_file():
        sys.exit(f"ab_overhead.py: {tree} has no streamsafe package (make one with: git archive REV streamsafe | tar -x -C {tree})")
    target = into / BASE_NAME
    shutil.copytree(source, target)
    word = re.compile(r"\bstreamsafe\b")
    for path in target.rglob("*.py"):
        path.write_text(word.sub(BASE_NAME, path.read_text()))
    sys.path.insert(0, str(into))
    return importlib.import_module(BASE_NAME)


def null_effect_class(name: str) -> type:
    """``contract_overhead.NullSuperRes`` (its functions, taken before any guard) in a class of its own: each tree
    installs its dispatchers on its own class."""
    return type(name, (), {"device": 0, "image_encoding": "RGB8", "__init__": NullSuperRes.__init__, "run": NullSuperRes.run,
                           "close": NullSuperRes.close})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="a directory holding the other tree's streamsafe package")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=400)
    args = parser.parse_args()

    import torch

    import streamsafe as new
    from streamsafe.bench import RawFences

    with tempfile.TemporaryDirectory() as tmp:
        base = load_renamed(args.base, Path(tmp))
        trees = {"base": base, "new": new}
        torch.cuda.set_device(0)
        be = new.CudaBackend()
        side = torch.cuda.Stream()
        x = torch.zeros(3, 16, 16, device="cuda")
        out_buf = torch.zeros(3, 32, 32, device="cuda")
        S = new.as_stream(side, backend=be)
        L = new.as_stream(LEGACY_HANDLE, device=0, backend=be)
        raw = RawFences(0)
        from_dlpack = torch.from_dlpack
        rows: dict[str, Any] = {}
        keep: list[Any] = []
        for strategy in ("event", "auto"):
            hand_fx = PlainNullSuperRes(out_buf)
            before, after, at_import, run_ptr, nb, protect = hand_fences(torch, raw, strategy, S, L)

            def hand(before: Any = before, after: Any = after, at_import: Any = at_import, run_ptr: int = run_ptr, nb: bool = nb,
                     protect: Any = protect, fx: Any = hand_fx) -> None:
                for f in before:
                    f()
                image = fx.run(x, stream_ptr=run_ptr, non_blocking=nb).image
                for f in after:
                    f()
                if protect is not None:
                    x.record_stream(protect)
                for f in at_import:
                    f()
                from_dlpack(image)

            rows[f"hand [{strategy}]"] = hand
            for name, ss in trees.items():
                fx = null_effect_class(f"Null_{name}_{strategy}")(out_buf)
                with torch.cuda.stream(side):
                    c = ss.StreamContract(fx, side, strategy=strategy, input_stream=side)
                keep += [fx, c]
                rows[f"{name} [{strategy}]"] = lambda c=c: c.run(x).torch(copy=False)

        def sync() -> None:
            torch.cuda.synchronize()

        with torch.cuda.stream(side):
            samples = interleave(rows, blocks=args.blocks, per_block=args.per_block, warmup=2000, sync=sync)
        torch.cuda.synchronize()
        for c in keep[1::2]:
            c.close()
        raw.close()

    print(f"host us a frame, c.run(x).torch(copy=False), median of {args.blocks} interleaved blocks of {args.per_block}")
    for name, xs in samples.items():
        print(f"  {name:<16} {statistics.median(xs):8.2f}")
    for strategy in ("event", "auto"):
        hand = samples[f"hand [{strategy}]"]
        over = {t: [a - h for a, h in zip(samples[f"{t} [{strategy}]"], hand)] for t in ("base", "new")}
        diff = [n - b for n, b in zip(over["new"], over["base"])]
        print(f"{strategy}: over the hand row, base {statistics.median(over['base']):.2f} us, new {statistics.median(over['new']):.2f} us; "
              f"new - base {statistics.median(diff):+.2f} us (blocks: {min(diff):+.2f} .. {max(diff):+.2f})")


if __name__ == "__main__":
    main()
