"""Host time of one fence: CudaBackend (pooled driver event) vs a fresh torch.cuda.Event.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/fence_overhead.py [--json PATH]
Target (issue 2): CudaBackend median <= 5 us on an H200. Strategies are interleaved in
blocks so drift hits both alike; the result keeps every raw sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from _interleave import interleave


@dataclass
class FenceResult:
    """Raw per-fence host times in microseconds, per strategy."""

    samples_us: dict[str, list[float]] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, xs in self.samples_us.items():
            ordered = sorted(xs)
            out[name] = {
                "median_us": statistics.median(xs),
                "p90_us": ordered[int(0.9 * (len(ordered) - 1))],
                "mean_us": statistics.fmean(xs),
                "n": len(xs),
            }
        return out


def measure_fence_overhead(*, blocks: int = 50, per_block: int = 200, warmup: int = 2000) -> FenceResult:
    """Interleave blocks of each strategy; each sample is one block's mean time per fence."""
    import torch

    import streamsafe as ss

    backend = ss.CudaBackend()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a, b = ss.as_stream(s1, backend=backend), ss.as_stream(s2, backend=backend)

    def streamsafe_fence() -> None:
        backend.fence(b, a)

    def torch_event_fence() -> None:
        ev = torch.cuda.Event()
        ev.record(s1)
        s2.wait_event(ev)

    def torch_synchronize() -> None:
        torch.cuda.synchronize()

    strategies: dict[str, Callable[[], None]] = {
        "streamsafe CudaBackend.fence": streamsafe_fence,
        "torch.cuda.Event record+wait (fresh event)": torch_event_fence,
        "torch.cuda.synchronize (idle device)": torch_synchronize,
    }
    return FenceResult(interleave(strategies, blocks=blocks, per_block=per_block, warmup=warmup, sync=torch.cuda.synchronize))


def format_result(result: FenceResult) -> str:
    lines = [f"{'strategy':<46} {'median us':>10} {'p90 us':>9} {'samples':>8}"]
    for name, s in result.summary().items():
        lines.append(f"{name:<46} {s['median_us']:>10.2f} {s['p90_us']:>9.2f} {s['n']:>8}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write raw samples and summary here")
    parser.add_argument("--blocks", type=int, default=50)
    parser.add_argument("--per-block", type=int, default=200)
    args = parser.parse_args()
    result = measure_fence_overhead(blocks=args.blocks, per_block=args.per_block)
    print(format_result(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": result.summary(), **asdict(result)}, f, indent=1)


if __name__ == "__main__":
    main()
