"""Host time a StreamContract adds to one run(), ``event`` strategy (issue 4 target: <= 25 us median).

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/contract_overhead.py [--json PATH]

A null effect (same signature as nvvfx's run(), returns a pre-built output, issues no
GPU work) isolates streamsafe's own cost: the plan lookup, the input checks and the
fences. Measured for the SDK stream a torch side stream (non-blocking: the most fences),
with and without a consumer import each frame. Interleaved blocks; raw samples kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from _interleave import interleave
from typing import Any


class NullSuperRes:
    """nvvfx.VideoSuperRes's run() signature and RGB8 encoding; does nothing."""

    device = 0
    image_encoding = "RGB8"

    def __init__(self) -> None:
        self._out = type("Out", (), {"image": object()})()

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:
        return self._out

    def close(self) -> None:
        pass


@dataclass
class OverheadResult:
    samples_us: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples_us[name])


def measure_contract_overhead(*, blocks: int = 40, per_block: int = 500, warmup: int = 2000) -> OverheadResult:
    import torch

    import streamsafe as ss

    side = torch.cuda.Stream()
    x = torch.zeros(3, 16, 16, device="cuda")
    raw_fx, fx, fx_import = NullSuperRes(), NullSuperRes(), NullSuperRes()
    c = ss.StreamContract(fx, side, strategy="event")
    c_import = ss.StreamContract(fx_import, side, strategy="event")
    ptr = side.cuda_stream

    def raw() -> None:
        raw_fx.run(x, stream_ptr=ptr, non_blocking=False)

    def contract() -> None:
        c.run(x)

    def contract_and_import() -> None:
        c_import.run(x).image.__dlpack__(stream=ptr)

    strategies: dict[str, Callable[[], None]] = {
        "raw effect.run()": raw,
        "contract.run() [event]": contract,
        "contract.run() + import [event]": contract_and_import,
    }
    return OverheadResult(interleave(strategies, blocks=blocks, per_block=per_block, warmup=warmup, sync=torch.cuda.synchronize))


def format_result(result: OverheadResult) -> str:
    base = result.median("raw effect.run()")
    lines = [f"{'':<34} {'median us/run':>14} {'added by streamsafe':>20}"]
    for name in result.samples_us:
        m = result.median(name)
        lines.append(f"{name:<34} {m:>14.2f} {m - base:>20.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write raw samples here")
    args = parser.parse_args()
    result = measure_contract_overhead()
    print(format_result(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians_us": {k: result.median(k) for k in result.samples_us}, **asdict(result)}, f, indent=1)


if __name__ == "__main__":
    main()
