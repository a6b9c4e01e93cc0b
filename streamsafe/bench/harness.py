"""The benchmark harness: strategies side by side, interleaved, with every raw sample kept.

:func:`run_bench` checks its arguments and hands over to :func:`_loop`, which, for each
scenario, warms every strategy's pipeline up (untimed), then runs blocks of frames in
turn, A B C A B C ..., so that drift (clocks, thermals, other tenants) hits all alike.
Each block ends when its pipeline has drained (the host waited for its GPU work), so a
block's wall time is its own. Per frame it keeps the device latency a pipeline reports,
and per block the wall time and the host's CPU time. Clocks are injectable, so the
harness itself is tested without a GPU.

Rows are the library's strategies plus the hand-written references (:class:`Hand`): the
fences an expert writes for the exact streams of a scenario, with raw events and no
streamsafe. A factory that can build them says so with a ``references`` attribute, and
:func:`run_bench` then adds them to every scenario. A pipeline that runs several effects on
threads (the video server) implements ``run_block`` and ``frames_per_step``.
"""

from __future__ import annotations

import enum
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..strategy import Strategy, as_strategy

__all__ = ["Pipeline", "BlockPipeline", "PipelineFactory", "Samples", "BenchResult", "run_bench", "ProgressFn", "Hand", "Usage", "Row", "as_row",
           "HAND_ROWS", "USAGE_ROWS", "UNSAFE_ROWS"]


class Hand(str, enum.Enum):
    """The hand-written references: raw events placed by an expert for the scenario's exact streams.

    * ``hand``: the fastest correct recipe: the SDK on a *blocking* stream with ``non_blocking=True``
      where stream 0 converts (the documented async trick), else ``non_blocking=True`` on the SDK stream.
    * ``hand-sync``: the blocking recipe: ``non_blocking=False`` on the user's stream, with event fences.
    """

    HAND = "hand"
    HAND_SYNC = "hand-sync"

    def __str__(self) -> str:
        return self.value


class Usage(str, enum.Enum):
    """streamsafe as users write it: ``readme``, the README's first example verbatim, a block
    ``with ss.stream_contract(sr, stream):`` with nothing declared and plain ``sr.run(frame)`` inside (``auto``: with
    no ``input_stream``, it copies each input on a stream of its own and waits on the host for the copies)."""

    README = "readme"

    def __str__(self) -> str:
        return self.value


Row = Strategy | Hand | Usage
"""One row of the bench: a library strategy, a hand-written reference, or streamsafe as users write it."""
HAND_ROWS: tuple[str, ...] = tuple(h.value for h in Hand)
USAGE_ROWS: tuple[str, ...] = tuple(u.value for u in Usage)
UNSAFE_ROWS: tuple[str, ...] = ("none",)
"""Rows that place no fences: the unsafe reference, shown for what races cost, never a floor to reach."""


def as_row(value: Row | str) -> Row:
    """A bench row name as a :class:`Hand` or a :class:`~streamsafe.Strategy` (``none`` allowed)."""
    if isinstance(value, (Hand, Usage)):
        return value
    if isinstance(value, str) and value.lower() in HAND_ROWS:
        return Hand(value.lower())
    if isinstance(value, str) and value.lower() in USAGE_ROWS:
        return Usage(value.lower())
    return as_strategy(value, allow_none=True)


class Pipeline(Protocol):
    """One strategy's pipeline for one scenario."""

    def step(self, frame: int) -> None:
        """Produce, run and consume one frame (issue its work; may block where the strategy does)."""
        ...

    def drain(self) -> list[float]:
        """Wait for the pipeline's own work (not for unrelated load); return the device latency (ms)
        of each frame since the last drain (empty where the backend has no clock)."""
        ...

    def settle(self) -> None:
        """Untimed, before each block: let unrelated load issued by earlier blocks finish."""
        ...

    def check(self) -> tuple[int, int]:
        """Verify the frames since the last check against the reference: (checked, corrupt). Untimed."""
        ...

    def counters(self) -> dict[str, int]:
        """Running totals: ``fences``, ``host_waits``, ``runs`` (and ``input_copies``, where ``auto`` copied inputs)."""
        ...

    def close(self) -> None: ...


class BlockPipeline(Pipeline, Protocol):
    """A pipeline that runs a whole block itself (e.g. several effects, each on its own thread)."""

    frames_per_step: int
    """Frames one step produces (the video server: one per effect)."""

    def run_block(self, first: int, count: int) -> float:
        """Run steps ``first .. first + count - 1``; return the CPU seconds its worker threads used."""
        ...


PipelineFactory = Callable[[str, Row], Pipeline]
"""``factory(scenario, row) -> Pipeline``; ``factory.references`` (optional): the hand rows it can build."""
ProgressFn = Callable[[int, int, str], None]
"""``progress(done_blocks, total_blocks, label)``."""


@dataclass
class Samples:
    """Raw measurements of one strategy in one scenario."""

    scenario: str
    strategy: str
    frames: int = 0
    block_wall_s: list[float] = field(default_factory=list)
    block_frames: list[int] = field(default_factory=list)
    block_cpu_s: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    fences: int = 0
    host_waits: int = 0
    runs: int = 0
    checked: int = 0
    corrupt: int = 0
    warmup_checked: int = 0
    warmup_corrupt: int = 0
    """Frames checked and found corrupted in the untimed warm-up (a corrupt frame is one, timed or not)."""

    @property
    def corrupted(self) -> bool:
        """Whether any frame it checked, timed or in the warm-up, was corrupt."""
        return bool(self.corrupt or self.warmup_corrupt)

    @property
    def fps(self) -> float:
        wall = sum(self.block_wall_s)
        return self.frames / wall if wall > 0 else float("nan")

    @property
    def cpu_ms_per_frame(self) -> float:
        return 1000 * sum(self.block_cpu_s) / self.frames if self.frames else float("nan")

    def latency(self, q: float) -> float:
        """The ``q``-quantile (0..1) of per-frame device latency in ms; NaN without samples."""
        xs = sorted(self.latency_ms)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]

    @property
    def fences_per_frame(self) -> float:
        return self.fences / self.runs if self.runs else 0.0

    @property
    def host_waits_per_frame(self) -> float:
        return self.host_waits / self.runs if self.runs else 0.0

    @property
    def block_fps(self) -> list[float]:
        return [n / w for n, w in zip(self.block_frames, self.block_wall_s) if w > 0]

    @property
    def fps_spread(self) -> float:
        """Relative spread of per-block frames/s (stdev / mean): a difference smaller than this is noise."""
        xs = self.block_fps
        return statistics.pstdev(xs) / statistics.fmean(xs) if len(xs) > 1 else 0.0


@dataclass
class BenchResult:
    """Every sample of a run, with where it ran."""

    backend: str
    timed: bool
    """False on the model: counts are meaningful there, times are not."""
    scenarios: list[str]
    strategies: list[str]
    frames: int
    warmup: int
    block: int
    samples: dict[tuple[str, str], Samples]
    order: list[tuple[str, str]] = field(default_factory=list)
    """The (scenario, strategy) of each timed block, in the order they ran."""
    environment: dict[str, Any] = field(default_factory=dict)

    def get(self, scenario: str, strategy: str) -> Samples:
        return self.samples[(scenario, strategy)]

    def ratio(self, scenario: str, strategy: str, to: str) -> float:
        """frames/s of ``strategy`` over frames/s of ``to`` in ``scenario`` (NaN if either is missing)."""
        a, b = self.samples.get((scenario, strategy)), self.samples.get((scenario, to))
        if a is None or b is None or not self.timed or not b.fps:  # (NaN: no frames; 0: none in its time)
            return float("nan")
        return a.fps / b.fps

    def best_hand(self, scenario: str) -> str | None:
        """The faster hand-written row of ``scenario`` that corrupted no frame (the honest floor), if any."""
        rows = [h for h in HAND_ROWS if (scenario, h) in self.samples and not self.samples[(scenario, h)].corrupted]
        if not rows:
            return None
        if not self.timed:
            return rows[0]
        return max(rows, key=lambda h: self.samples[(scenario, h)].fps)

    def hand_ratio(self, scenario: str, strategy: str) -> float:
        """frames/s of ``strategy`` over the best hand-written row's (NaN without one)."""
        best = self.best_hand(scenario)
        return float("nan") if best is None else self.ratio(scenario, strategy, best)


def run_bench(
    factory: PipelineFactory,
    scenarios: Sequence[str],
    strategies: Iterable[Strategy | str],
    *,
    frames: int = 200,
    warmup: int = 20,
    block: int = 20,
    backend: str = "cuda",
    timed: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.thread_time,
    progress: ProgressFn | None = None,
    environment: dict[str, Any] | None = None,
    references: Sequence[str] | None = None,
) -> BenchResult:
    """Run every scenario with every strategy, interleaved in blocks of ``block`` frames.

    ``frames`` timed frames per strategy and scenario (a multiple of ``block``), after
    ``warmup`` untimed ones. ``references``: hand-written rows added to every scenario
    (default: ``factory.references``, if the factory has it); rows already named are not
    added twice. Blocks the host for the whole run.
    """
    names = [as_row(s).value for s in strategies]
    if not names:
        raise ValueError("strategies is empty: name at least one (e.g. 'none', 'event', 'device')")
    if len(set(names)) != len(names):
        raise ValueError(f"strategies repeat: {names}")
    if not scenarios:
        raise ValueError("scenarios is empty")
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be a positive integer, got {frames!r}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    if frames % block:
        raise ValueError(f"frames ({frames}) must be a multiple of block ({block}) so every strategy runs whole blocks")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}: give 0 or more (0: no untimed frames)")
    extra = getattr(factory, "references", ()) if references is None else references
    names += [r for r in (as_row(x).value for x in extra) if r not in names]
    return _loop(factory, list(scenarios), names, frames, warmup, block, backend, timed, clock, cpu_clock, progress, environment or {})


def _loop(
    factory: PipelineFactory,
    scenarios: list[str],
    strategies: list[str],
    frames: int,
    warmup: int,
    block: int,
    backend: str,
    timed: bool,
    clock: Callable[[], float],
    cpu_clock: Callable[[], float],
    progress: ProgressFn | None,
    environment: dict[str, Any],
) -> BenchResult:
    result = BenchResult(backend, timed, scenarios, strategies, frames, warmup, block, {}, [], environment)
    total = len(scenarios) * len(strategies) * (frames // block)
    done = 0
    for scenario in scenarios:
        pipelines: dict[str, Pipeline] = {}
        try:
            for name in strategies:
                pipelines[name] = factory(scenario, as_row(name))
            for name in strategies:
                result.samples[(scenario, name)] = Samples(scenario, name)
            for name, pipe in pipelines.items():  # warm-up: untimed, its frames checked apart
                _steps(pipe, 0, warmup)
                pipe.drain()
                samples = result.samples[(scenario, name)]
                samples.warmup_checked, samples.warmup_corrupt = pipe.check()
            base = {name: pipe.counters() for name, pipe in pipelines.items()}
            next_frame = {name: warmup for name in strategies}
            for _ in range(frames // block):
                for name, pipe in pipelines.items():
                    samples = result.samples[(scenario, name)]
                    for other in pipelines.values():  # (every row's unrelated load from earlier blocks finishes first)
                        other.settle()
                    c0, t0 = cpu_clock(), clock()
                    workers_cpu = _steps(pipe, next_frame[name], block)
                    next_frame[name] += block
                    samples.latency_ms += pipe.drain()
                    t1, c1 = clock(), cpu_clock()
                    per_step = int(getattr(pipe, "frames_per_step", 1))
                    samples.block_wall_s.append(t1 - t0)
                    samples.block_cpu_s.append(c1 - c0 + workers_cpu)
                    samples.block_frames.append(block * per_step)
                    samples.frames += block * per_step
                    checked, corrupt = pipe.check()
                    samples.checked += checked
                    samples.corrupt += corrupt
                    result.order.append((scenario, name))
                    done += 1
                    if progress is not None:
                        progress(done, total, f"{scenario} / {name}")
            for name, pipe in pipelines.items():
                now, start = pipe.counters(), base[name]
                samples = result.samples[(scenario, name)]
                samples.fences = now.get("fences", 0) - start.get("fences", 0)
                samples.host_waits = now.get("host_waits", 0) - start.get("host_waits", 0)
                samples.runs = now.get("runs", 0) - start.get("runs", 0)
        finally:
            for pipe in pipelines.values():
                pipe.close()
    return result


def _steps(pipe: Pipeline, first: int, count: int) -> float:
    """Steps ``first .. first + count - 1``: the pipeline's own block runner if it has one (returns the
    CPU seconds of its worker threads), else one ``step`` after another on this thread (returns 0)."""
    run_block = getattr(pipe, "run_block", None)
    if run_block is not None:
        return float(run_block(first, count)) if count else 0.0
    for i in range(first, first + count):
        pipe.step(i)
    return 0.0
