"""The benchmarks' shared timing loops: callables timed in interleaved blocks (every raw sample kept),
and the best block of one callable."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable


def interleave(
    strategies: dict[str, Callable[[], None]], *, blocks: int, per_block: int, warmup: int, sync: Callable[[], None],
    contexts: dict[str, Callable[[], contextlib.AbstractContextManager[object]]] | None = None,
) -> dict[str, list[float]]:
    """Warm each callable up, then time ``blocks`` rounds of ``per_block`` calls each, A B C A B C ...

    Returns, per name, one sample per block: host microseconds per call. ``sync`` runs
    between blocks (untimed) so no block inherits another's GPU work. ``contexts``: for some
    names, a context that the row's warm-up and each of its blocks run in, entered and left
    outside the timing (e.g. a setting changed for that row only).
    """
    if blocks < 1 or per_block < 1 or warmup < 0:
        raise ValueError(f"blocks and per_block must be >= 1 and warmup >= 0, got {blocks}, {per_block}, {warmup}")
    contexts = contexts or {}
    for name, fn in strategies.items():
        with contexts.get(name, contextlib.nullcontext)():
            for _ in range(warmup):
                fn()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in strategies}
    for _ in range(blocks):
        for name, fn in strategies.items():
            with contexts.get(name, contextlib.nullcontext)():
                t0 = time.perf_counter_ns()
                for _ in range(per_block):
                    fn()
                samples[name].append((time.perf_counter_ns() - t0) / per_block / 1000)
            sync()
    return samples


def best_us(fn: Callable[[], object], sync: Callable[[], None], *, n: int = 4000, blocks: int = 7) -> float:
    """The best over ``blocks`` blocks of the mean host microseconds of ``fn()`` over ``n`` calls;
    ``sync`` runs (untimed) before each block."""
    best = float("inf")
    for _ in range(blocks):
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n / 1000)
    return best
