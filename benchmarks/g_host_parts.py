"""Where g-host's gap between ``hand`` and ``auto`` goes: rows with parts of a frame's work left out.

GPU machine:  PYTHONPATH=. python3 benchmarks/g_host_parts.py [--blocks N] [--split [--json PATH]]

Bench scenario ``g-host`` (144p -> 288p, no added GPU time: each frame is host work only), every row's
pipeline made first, the rows timed interleaved in blocks of 200 steps (median host microseconds a step):

* ``hand``: the hand-written fences (``streamsafe.bench.hand``);
* ``auto``: the contract, its steady-state frame in C;
* ``auto, Python frame``: the same with the frame in Python (the C extension's replay and import off);
* ``auto, Python frame, no record_stream``: that, with the input's ``record_stream`` left out (the H12
  protection the hand row's pooled inputs do not need, and a general library cannot leave out);
* ``auto, Python frame, no config read``: that, with the read of the effect's output-size and encoding
  attributes left out (the emulator's are Python properties; the SDK's are C).

The last two rows are for attribution only: they leave out a safety step, so the difference between
each and ``auto, Python frame`` is what that step costs a frame. Not a test: nothing is checked beyond
the frames' copies.

``--split`` times the parts of a step directly instead, in the rows ``hand``, ``auto`` and ``auto,
Python frame``: a timing wrapper (the same in every row) around the effect's own ``run()``, around the
consumer's import and copy, and around the row's runner, so that each row's step splits into the
effect's run, the consumer, the row's own frame (fences, checks, bookkeeping: the runner less the
other two) and the bench's loop (the step less the runner). A part that differs between ``hand`` and
``auto`` is where the gap is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from contract_overhead import python_replay  # noqa: E402


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--split", action="store_true", help="time the parts of a step directly (see above)")
    parser.add_argument("--json", help="with --split: every block's parts, host us a step, to this file")
    args = parser.parse_args()
    if args.split:
        split(args.blocks, args.json)
        return
    from streamsafe import contract
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.pipelines import GpuPipeline, scenario_by_key

    sc = scenario_by_key("g-host")
    no_protect = contextlib.contextmanager(lambda: _patched(contract.StreamContract, "_protect_inputs", lambda self, *a, **k: None))
    no_config = contextlib.contextmanager(lambda: _patched_config())
    rows: list[tuple[str, str, Callable[[], Any]]] = [
        ("hand", "hand", _nothing),
        ("auto", "auto", _nothing),
        ("auto, Python frame", "auto", python_replay),
        ("auto, Python frame, no record_stream", "auto", lambda: _chain(python_replay(), no_protect())),
        ("auto, Python frame, no config read", "auto", lambda: _chain(python_replay(), no_config())),
    ]
    pipes = {name: GpuPipeline(sc, as_row(row)) for name, row, _ in rows}
    try:
        frame = _warm_up(pipes, rows)
        samples: dict[str, list[float]] = {name: [] for name, _, _ in rows}
        corrupt = dict.fromkeys(samples, 0)
        for _ in range(args.blocks):
            for name, _, ctx in rows:
                pipe = pipes[name]
                with ctx():
                    t0 = time.perf_counter()
                    for i in range(frame, frame + 200):
                        pipe.step(i)
                    samples[name].append((time.perf_counter() - t0) / 200 * 1e6)
                pipe.drain()
                corrupt[name] += pipe.check()[1]
            frame += 200
    finally:
        for pipe in pipes.values():
            pipe.close()
    hand = statistics.median(samples["hand"])
    print(f"g-host, host us a step, median of {args.blocks} interleaved blocks of 200 steps")
    for name, xs in samples.items():
        m = statistics.median(xs)
        print(f"  {name:<40} {m:8.1f}  (+{m - hand:5.1f} over hand, {hand / m:.2f}x)  corrupt {corrupt[name]}")


_PARTS = ("step", "runner", "effect run", "consumer")


def split(blocks: int, json_path: str | None = None) -> None:
    """Each row's step split by a timing wrapper around its parts (the wrappers' own cost lands in every
    row alike: about the same few hundred nanoseconds per wrapped call)."""
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.hand import own_method
    from streamsafe.bench.pipelines import GpuPipeline, scenario_by_key
    from streamsafe.testing import VideoSuperRes

    sc = scenario_by_key("g-host")
    rows: list[tuple[str, str, Callable[[], Any]]] = [
        ("hand", "hand", _nothing), ("auto", "auto", _nothing), ("auto, Python frame", "auto", python_replay),
    ]
    clock = time.perf_counter_ns
    spent = {part: 0 for part in _PARTS}

    def timed(fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += clock() - t0
        return wrapper

    pipes: dict[str, Any] = {}
    cls = VideoSuperRes  # g-host's effect; wrapped before any row is made (the hand row binds its run() then)
    saved = cls.__dict__["run"]
    wrapped = cls.run = timed(saved, "effect run")  # type: ignore[method-assign]
    try:
        for name, row, _ in rows:
            pipe = pipes[name] = GpuPipeline(sc, as_row(row))
            if own_method(pipe.effect, "run") is not wrapped:
                raise RuntimeError("the effect's run() is not the timed one: the split would be wrong")
            pipe._consume = timed(pipe._consume, "consumer")  # type: ignore[method-assign]
            pipe.runner.run = timed(pipe.runner.run, "runner")  # type: ignore[method-assign]
        frame = _warm_up(pipes, rows)
        samples: dict[str, dict[str, list[float]]] = {name: {part: [] for part in _PARTS} for name, _, _ in rows}
        for _ in range(blocks):
            for name, _, ctx in rows:
                pipe = pipes[name]
                with ctx():
                    for part in _PARTS:
                        spent[part] = 0
                    t0 = clock()
                    for i in range(frame, frame + 200):
                        pipe.step(i)
                    spent["step"] = clock() - t0
                for part in _PARTS:
                    samples[name][part].append(spent[part] / 200 / 1000)
                pipe.drain()
                pipe.check()
            frame += 200
    finally:
        for pipe in pipes.values():
            pipe.close()
        if cls.__dict__.get("run") is wrapped:
            cls.run = saved  # type: ignore[method-assign]
    print(f"g-host, host us a step split by part, median of {blocks} interleaved blocks of 200 steps")
    print(f"  {'row':<22} {'step':>8} {'loop':>8} {'frame':>8} {'effect':>8} {'consumer':>9}")
    medians: dict[str, dict[str, float]] = {}
    for name, parts in samples.items():
        m = {part: statistics.median(xs) for part, xs in parts.items()}
        m["loop"] = statistics.median(s - r for s, r in zip(parts["step"], parts["runner"]))
        m["frame"] = statistics.median(r - e - c for r, e, c in zip(parts["runner"], parts["effect run"], parts["consumer"]))
        medians[name] = m
        print(f"  {name:<22} {m['step']:8.1f} {m['loop']:8.1f} {m['frame']:8.1f} {m['effect run']:8.1f} {m['consumer']:9.1f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"scenario": "g-host", "unit": "host us a step", "blocks_us": samples, "medians_us": medians}, f, indent=1)
    print("loop: the bench's step less the runner; frame: the runner less the effect's run and the consumer "
          "(fences, checks, bookkeeping); effect: its own run(); consumer: the import and the copy")


def _warm_up(pipes: dict[str, Any], rows: list[tuple[str, str, Callable[[], Any]]]) -> int:
    """100 untimed steps of each row's pipeline in its context, checked; returns the next frame number."""
    for name, _, ctx in rows:
        with ctx():
            for i in range(100):
                pipes[name].step(i)
        pipes[name].drain()
        pipes[name].check()
    return 100


@contextlib.contextmanager
def _chain(*contexts: Any) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = owner.__dict__[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _patched_config() -> Iterator[None]:
    """Every contract's config read answers what it answered last, without reading the effect."""
    from streamsafe import contract

    saved = contract.StreamContract._config
    memo: dict[int, Any] = {}

    def remembered(self: Any) -> Any:
        key = id(self)
        if key not in memo:
            memo[key] = saved(self)
        return memo[key]

    contract.StreamContract._config = remembered  # type: ignore[method-assign]
    try:
        yield
    finally:
        contract.StreamContract._config = saved  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
