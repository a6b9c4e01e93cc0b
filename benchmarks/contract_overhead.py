"""Host time streamsafe adds to one frame, side by side with the same fences written by hand.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/contract_overhead.py [--json PATH]

A null effect (nvvfx's run() signature, RGB8, issues no GPU work, returns a fresh raw DLPack
capsule of a pre-allocated buffer, as the SDK does) isolates streamsafe's own cost. The
streams are those of bench scenario (a): the user's torch side stream S (non-blocking)
produces the input, is the SDK stream, and imports the output (torch's current stream);
stream 0 converts. For each strategy (``event``; ``auto``, which picks ``async`` here) the rows are:

* ``contract.run()`` (no import, as before) and ``contract.run() + out.image import``
  (``torch.from_dlpack(out.image)``);
* ``hand, same fences + raw capsule import``: the fences the contract places per frame (the
  count is checked against the contract's counters), issued by hand with raw ``cuda.bindings``
  events bound once per site (no streamsafe), then ``torch.from_dlpack`` of the SDK's raw capsule;
* ``hand, minimal + raw capsule import``: the fewest fences that are correct for these streams
  (:mod:`streamsafe.bench.hand`: ``hand-sync`` beside ``event``, ``hand`` beside ``auto``);
* ``contract.run() + out.torch(copy=False) view`` beside ``hand, same fences + raw capsule import``:
  the zero-copy helper, ordered as ``torch.from_dlpack(out.image)`` is, importing a raw capsule;
* ``contract.run() + out.torch() copy`` beside ``hand, same fences + raw capsule import + clone``:
  the copy helper, which asks for the capsule on torch's current stream itself and imports it as a
  raw capsule (no producer object for torch to ask its current stream of).

Plus ``raw effect.run()`` and ``raw capsule import`` (no fences: unsafe, the floor of the calls), and
``raw run + producer-object import``: ``torch.from_dlpack`` of a bare producer object that returns
the capsule and orders nothing, torch's own cost for any object with ``__dlpack__`` (it asks for
its current stream first), which ``out.image`` pays too.
The import step alone is also timed inside each frame: ``torch.from_dlpack(out.image)`` vs the
hand's import fence + ``torch.from_dlpack(capsule)`` vs a bare ``torch.from_dlpack(capsule)``.
Targets (issue 10): streamsafe's own cost at most 5 us over the hand row (the summary's
``contract + out.torch(copy=False) - hand, same fences + import``, and ``contract + import - hand,
same fences + import`` for ``torch.from_dlpack(out.image)``); an ``out.image`` import as cheap as a raw
capsule's. Interleaved blocks; every raw sample kept.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from _timing import interleave

LEGACY_HANDLE = 1  # CUDA's legacy default stream (stream 0 as the SDK's conversion sees it)


class NullSuperRes:
    """nvvfx.VideoSuperRes's run() signature and RGB8 encoding; no GPU work, a fresh raw capsule per run."""

    device = 0
    image_encoding = "RGB8"

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:
        return _Out(self._buffer.__dlpack__(stream=-1))  # the SDK's plain (unversioned) capsule, no stream sync

    def close(self) -> None:
        pass


class PlainNullSuperRes:
    """:class:`NullSuperRes` in a class no contract guards: its ``run()`` goes through no streamsafe
    dispatcher, as in a program with hand-written fences (which does not import streamsafe). The hand
    and raw rows use it; before, they ran instances of the guarded class and paid the dispatcher
    (about 1.4 us a call on the CI machine)."""

    device = 0
    image_encoding = "RGB8"
    __init__ = NullSuperRes.__init__
    run = NullSuperRes.run  # the plain functions, taken before any contract installs dispatchers
    close = NullSuperRes.close


class _Out:
    __slots__ = ("image",)

    def __init__(self, image: Any) -> None:
        self.image = image


class _Producer:
    """The least a DLPack producer object can be: hands over the capsule, orders nothing. torch's
    from_dlpack of an object (any producer, out.image included) asks torch for its current stream
    first; this row is that floor, torch's own cost."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        return self._capsule


@dataclass
class OverheadResult:
    samples_us: dict[str, list[float]] = field(default_factory=dict)
    """Per row, one sample per block: host microseconds per frame."""
    import_samples_us: dict[str, list[float]] = field(default_factory=dict)
    """The import step alone (timed inside the frame), one sample per block: microseconds per import."""
    fences_per_frame: dict[str, float] = field(default_factory=dict)
    plans: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    def median(self, name: str) -> float:
        xs = self.samples_us.get(name) or self.import_samples_us[name]
        return statistics.median(xs)

    def summary(self) -> dict[str, float]:
        """streamsafe over hand, in median microseconds per frame (the issue-10 targets), and ratios."""
        m = self.median
        out: dict[str, float] = {}
        for s in ("event", "auto"):
            ours = m(f"contract.run() + out.image import [{s}]")
            out[f"contract + import - hand, same fences + import [{s}] (us)"] = ours - m(f"hand, same fences + raw capsule import [{s}]")
            out[f"contract + import - hand, minimal + import [{s}] (us)"] = ours - m(f"hand, minimal + raw capsule import [{s}]")
            out[f"contract + import / hand, same fences + import [{s}]"] = ours / m(f"hand, same fences + raw capsule import [{s}]")
            out[f"out.image import - (hand fence + raw capsule import) [{s}] (us)"] = (
                m(f"import: out.image [{s}]") - m(f"import: hand fence + raw capsule [{s}]")
            )
            out[f"contract + out.torch(copy=False) - hand, same fences + import [{s}] (us)"] = (
                m(f"contract.run() + out.torch(copy=False) view [{s}]") - m(f"hand, same fences + raw capsule import [{s}]")
            )
            out[f"contract + out.torch() - hand, same fences + import + clone [{s}] (us)"] = (
                m(f"contract.run() + out.torch() copy [{s}]") - m(f"hand, same fences + raw capsule import + clone [{s}]")
            )
            out[f"out.image import - raw capsule import [{s}] (us)"] = m(f"import: out.image [{s}]") - m("import: raw capsule")
            out[f"out.image import - producer-object import (torch's floor) [{s}] (us)"] = (
                m(f"import: out.image [{s}]") - m("import: DLPack producer object, no streamsafe")
            )
        return out


def measure_contract_overhead(*, blocks: int = 40, per_block: int = 500, warmup: int = 2000) -> OverheadResult:
    """Interleave every row in blocks; each sample is one block's mean host time per frame (us)."""
    import torch

    return _measure(torch, blocks=blocks, per_block=per_block, warmup=warmup)


class _Timers:
    """Side-channel timers for the import step inside a frame, flushed to one sample per block."""

    def __init__(self) -> None:
        self.acc: dict[str, list[int]] = {}
        self.samples: dict[str, list[float]] = {}
        self.flushes = 0

    def add(self, name: str, ns: int) -> None:
        acc = self.acc.get(name)
        if acc is None:
            acc = self.acc[name] = [0, 0]
            self.samples[name] = []
        acc[0] += ns
        acc[1] += 1

    def flush(self) -> None:
        """Called by the interleave loop's sync after the warm-up and after every block: the first is dropped."""
        self.flushes += 1
        for name, acc in self.acc.items():
            if acc[1] and self.flushes > 1:
                self.samples[name].append(acc[0] / acc[1] / 1000)
            acc[0] = acc[1] = 0


def hand_fences(torch: Any, raw: Any, strategy: str, S: Any, L: Any) -> tuple[list[Any], list[Any], list[Any], int, bool, Any]:
    """The fences the contract's plan places per frame under ``strategy`` (``event``, or ``auto``, which picks
    ``async`` here) with the input written on ``S`` and ``L`` the legacy stream, as raw fence sites of ``raw`` (a
    :class:`~streamsafe.bench.RawFences`): ``(before the run, after it, at the import, the run's stream_ptr, its
    non_blocking, the torch stream the input is record_stream'ed on or None)``."""
    if strategy == "event":
        # run(non_blocking=False) (its host wait orders the copy on S before the next conversion, and
        # S waited for L at the import, so no H5 fence is left); at import (H3): S waits L.
        return [], [], [raw.site(S, L)], S.ptr, False, None
    # auto -> async: the SDK on a blocking stream B. Before run: B waits S (H1; stream 0 follows B, so
    # its H5 wait is given); after run: S waits L (H12: stream 0 converts after B read the input,
    # so this also orders the import) and the input is record_stream'ed on B; at import: nothing.
    B = raw.blocking_stream()
    return [raw.site(B, S)], [raw.site(S, L)], [], B.ptr, True, torch.cuda.ExternalStream(B.handle, device=0)


def _measure(torch: Any, *, blocks: int, per_block: int, warmup: int) -> OverheadResult:
    import time

    import streamsafe as ss
    from streamsafe.bench import RawFences

    as_stream = ss.as_stream

    torch.cuda.set_device(0)
    be = ss.CudaBackend()
    side = torch.cuda.Stream()
    x = torch.zeros(3, 16, 16, device="cuda")
    out_buf = torch.zeros(3, 32, 32, device="cuda")
    S = as_stream(side, backend=be)
    L = as_stream(LEGACY_HANDLE, device=0, backend=be)
    raw = RawFences(0)
    timers = _Timers()
    clock = time.perf_counter_ns
    rows: dict[str, Callable[[], None]] = {}
    fences: dict[str, float] = {}
    result = OverheadResult()
    result.environment = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    keep: list[Any] = []
    from_dlpack = torch.from_dlpack

    raw_fx = PlainNullSuperRes(out_buf)
    ptr = S.ptr

    def raw_run() -> None:
        raw_fx.run(x, stream_ptr=ptr, non_blocking=True)

    def raw_import() -> None:
        image = raw_fx.run(x, stream_ptr=ptr, non_blocking=True).image
        t0 = clock()
        from_dlpack(image)
        timers.add("import: raw capsule", clock() - t0)

    def protocol_import() -> None:
        image = _Producer(raw_fx.run(x, stream_ptr=ptr, non_blocking=True).image)
        t0 = clock()
        from_dlpack(image)
        timers.add("import: DLPack producer object, no streamsafe", clock() - t0)

    rows["raw effect.run()"] = raw_run
    rows["raw capsule import"] = raw_import
    rows["raw run + producer-object import"] = protocol_import
    fences["raw effect.run()"] = fences["raw capsule import"] = fences["raw run + producer-object import"] = 0

    for strategy in ("event", "auto"):
        fx, fx_import, fx_copy, fx_view = (NullSuperRes(out_buf) for _ in range(4))
        with torch.cuda.stream(side):  # (the input is written on the side stream: declared, as the hand row knows)
            c = ss.StreamContract(fx, side, strategy=strategy, input_stream=side)
            c_import = ss.StreamContract(fx_import, side, strategy=strategy, input_stream=side)
            c_copy = ss.StreamContract(fx_copy, side, strategy=strategy, input_stream=side)
            c_view = ss.StreamContract(fx_view, side, strategy=strategy, input_stream=side)
        keep += [fx, fx_import, fx_copy, fx_view, c, c_import, c_copy, c_view]
        result.plans[strategy] = str(c.plan)
        import_name = f"import: out.image [{strategy}]"

        def contract_run(c: Any = c) -> None:
            c.run(x)

        def contract_import(c: Any = c_import, name: str = import_name) -> None:
            image = c.run(x).image
            t0 = clock()
            from_dlpack(image)
            timers.add(name, clock() - t0)

        before, after, at_import, run_ptr, nb, protect = hand_fences(torch, raw, strategy, S, L)
        if strategy == "event":
            minimal = [], [raw.site(S, L)]  # hand-sync
            min_ptr, min_nb = S.ptr, False
        else:
            minimal = before, after  # hand (without the input's record_stream)
            min_ptr, min_nb = run_ptr, nb
        hand_fx = PlainNullSuperRes(out_buf)
        hand_import_name = f"import: hand fence + raw capsule [{strategy}]"

        def hand_same(before: Any = before, after: Any = after, at_import: Any = at_import, run_ptr: int = run_ptr, nb: bool = nb,
                      protect: Any = protect, fx: Any = hand_fx, name: str = hand_import_name, copy: bool = False) -> None:
            for f in before:
                f()
            image = fx.run(x, stream_ptr=run_ptr, non_blocking=nb).image
            for f in after:
                f()
            if protect is not None:
                x.record_stream(protect)
            t0 = clock()
            for f in at_import:
                f()
            if copy:
                from_dlpack(image).clone()
                return
            from_dlpack(image)
            timers.add(name, clock() - t0)

        def contract_copy(c: Any = c_copy) -> None:
            c.run(x).torch()

        def contract_view(c: Any = c_view) -> None:
            c.run(x).torch(copy=False)

        def hand_minimal(before: Any = minimal[0], after: Any = minimal[1], run_ptr: int = min_ptr, nb: bool = min_nb,
                         fx: Any = hand_fx) -> None:
            for f in before:
                f()
            image = fx.run(x, stream_ptr=run_ptr, non_blocking=nb).image
            for f in after:
                f()
            from_dlpack(image)

        rows[f"contract.run() [{strategy}]"] = contract_run
        rows[f"contract.run() + out.image import [{strategy}]"] = contract_import
        rows[f"hand, same fences + raw capsule import [{strategy}]"] = hand_same
        rows[f"hand, minimal + raw capsule import [{strategy}]"] = hand_minimal
        rows[f"contract.run() + out.torch(copy=False) view [{strategy}]"] = contract_view
        rows[f"contract.run() + out.torch() copy [{strategy}]"] = contract_copy
        rows[f"hand, same fences + raw capsule import + clone [{strategy}]"] = functools.partial(hand_same, copy=True)
        fences[f"hand, same fences + raw capsule import + clone [{strategy}]"] = len(before) + len(after) + len(at_import)
        hand_count = len(before) + len(after) + len(at_import)
        fences[f"hand, same fences + raw capsule import [{strategy}]"] = hand_count
        fences[f"hand, minimal + raw capsule import [{strategy}]"] = len(minimal[0]) + len(minimal[1])

        # The contract's fences per frame in steady state (its counters), to check the hand row matches.
        with torch.cuda.stream(side):
            for row, contract, label in ((contract_run, c, "contract.run()"), (contract_import, c_import, "contract.run() + out.image import"),
                                         (contract_copy, c_copy, "contract.run() + out.torch() copy"),
                                         (contract_view, c_view, "contract.run() + out.torch(copy=False) view")):
                for _ in range(3):
                    row()
                start = contract.stats["fences"]
                for _ in range(10):
                    row()
                fences[f"{label} [{strategy}]"] = (contract.stats["fences"] - start) / 10
        torch.cuda.synchronize()
        per_frame = fences[f"contract.run() + out.image import [{strategy}]"]
        if per_frame != hand_count:
            print(f"warning: contract + import [{strategy}] places {per_frame} fences per frame, the hand row "
                  f"{hand_count}: update the hand row to the plan:\n{c.plan}")

    def sync() -> None:
        torch.cuda.synchronize()
        timers.flush()

    with torch.cuda.stream(side):
        timers.flush()  # drop the checks' timings
        timers.flushes = 0
        result.samples_us = interleave(rows, blocks=blocks, per_block=per_block, warmup=warmup, sync=sync)
    result.import_samples_us = timers.samples
    result.fences_per_frame = fences
    torch.cuda.synchronize()
    raw.close()
    return result


def format_result(result: OverheadResult) -> str:
    base = result.median("raw effect.run()")
    lines = [f"{'per frame':<50} {'median us':>10} {'over raw run()':>15} {'fences':>7}"]
    for name in result.samples_us:
        m = result.median(name)
        lines.append(f"{name:<50} {m:>10.2f} {m - base:>15.2f} {result.fences_per_frame.get(name, float('nan')):>7.1f}")
    lines += ["", f"{'the import step alone (timed inside the frame)':<50} {'median us':>10}"]
    for name in result.import_samples_us:
        lines.append(f"{name:<50} {result.median(name):>10.2f}")
    lines += ["", "streamsafe vs hand (medians)"]
    for name, value in result.summary().items():
        lines.append(f"{name:<72} {value:>8.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write raw samples here")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--per-block", type=int, default=500)
    args = parser.parse_args()
    result = measure_contract_overhead(blocks=args.blocks, per_block=args.per_block)
    print(format_result(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians_us": {k: result.median(k) for k in result.samples_us}, "summary": result.summary(),
                       **asdict(result)}, f, indent=1)


if __name__ == "__main__":
    main()
