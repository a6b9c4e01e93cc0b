"""The GPU timing fuzzer: the model fuzzer's seeded programs on real kernels, with random delays.

The same programs as ``tests/test_fuzz_model.py`` (``tests.fuzzing.generate``), longer,
run by :class:`tests.fuzzing.GpuRunner`: fresh inputs from torch's caching allocator and
CuPy's pool that the program drops after ``run()``, or surfaces rewritten in place; random spin
delays on the producer stream, the SDK's transfer and inference, the RGB8 conversion and the
consumer; torch, CuPy, JAX and NumPy consumers (helpers and raw ``from_dlpack`` + copy). Each copy
is compared with NumPy. At least ``STREAMSAFE_FUZZ_FRAMES`` frames per strategy must be clean, and
the unfenced control (``none``) must corrupt some. A JSON summary goes to the lane output
(``fuzz-gpu.json``: per strategy, per program kind, per consumer, and every failing program).

Environment (defaults in brackets): ``STREAMSAFE_FUZZ_FRAMES`` frames per strategy [10000],
``STREAMSAFE_FUZZ_PROGRAM_FRAMES`` frames per program [50], ``STREAMSAFE_FUZZ_CONTROL_FRAMES``
frames of the ``none`` control [1000], ``STREAMSAFE_FUZZ_SEED`` first program seed [9000],
``STREAMSAFE_FUZZ_MAX_DELAY_US`` per-stage delay bound [400], ``STREAMSAFE_FUZZ_LATE_US`` other
work a late consumer enqueues [1000], ``STREAMSAFE_FUZZ_STRATEGIES`` [auto,event,async,stream,device],
``STREAMSAFE_FUZZ_PRODUCERS`` frameworks that write inputs [torch,cupy].
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from typing import Any

import pytest

from _lane import lane_output

pytestmark = pytest.mark.gpu

FRAMES = int(os.environ.get("STREAMSAFE_FUZZ_FRAMES", "10000"))
PROGRAM_FRAMES = int(os.environ.get("STREAMSAFE_FUZZ_PROGRAM_FRAMES", "50"))
CONTROL_FRAMES = int(os.environ.get("STREAMSAFE_FUZZ_CONTROL_FRAMES", "1000"))
SEED = int(os.environ.get("STREAMSAFE_FUZZ_SEED", "9000"))
MAX_DELAY_US = float(os.environ.get("STREAMSAFE_FUZZ_MAX_DELAY_US", "400"))
LATE_US = float(os.environ.get("STREAMSAFE_FUZZ_LATE_US", "1000"))
STRATEGIES = tuple(s for s in os.environ.get("STREAMSAFE_FUZZ_STRATEGIES", "auto,event,async,stream,device").split(",") if s)
PRODUCERS = tuple(s for s in os.environ.get("STREAMSAFE_FUZZ_PRODUCERS", "torch,cupy").split(",") if s)


def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for name in ("torch", "cupy", "jax", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:  # pragma: no cover - reported, not fatal
            out[name] = f"unavailable: {type(e).__name__}"
    return out


def test_gpu_timing_fuzzer(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with torch and CuPy
    pytest.importorskip("cupy")
    pytest.importorskip("jax")
    from tests import fuzzing as fuzz

    runner = fuzz.GpuRunner(max_delay_us=MAX_DELAY_US, late_us=LATE_US, producers=PRODUCERS)
    count = max(1, math.ceil(FRAMES / PROGRAM_FRAMES))
    programs = fuzz.programs(count, seed=SEED, frames=PROGRAM_FRAMES)
    control_programs = programs[: max(1, math.ceil(CONTROL_FRAMES / PROGRAM_FRAMES))]

    start = time.perf_counter()
    control = [runner.run(p, "none") for p in control_programs]
    results: list[fuzz.Result] = []
    for strategy in STRATEGIES:
        t0 = time.perf_counter()
        batch = [runner.run(p, strategy) for p in programs]
        results += batch
        frames = sum(r.frames for r in batch)
        corrupt = sum(r.corrupt for r in batch)
        errors = sum(r.error is not None for r in batch)
        print(f"fuzz {strategy}: {corrupt} corrupted of {frames} frames, {errors} errors, {time.perf_counter() - t0:.1f} s")
    wall = time.perf_counter() - start
    print(f"fuzz none (control): {sum(r.corrupt for r in control)} corrupted of {sum(r.frames for r in control)} frames")

    summary = fuzz.summarize(control + results)
    summary["config"] = {
        "frames_per_strategy": FRAMES, "frames_per_program": PROGRAM_FRAMES, "programs": count,
        "control_programs": len(control_programs), "first_seed": SEED, "max_delay_us": MAX_DELAY_US,
        "late_us": LATE_US, "producers": PRODUCERS, "scale": runner.scale, "cycles_per_us": round(runner.cycles_per_us, 1),
        "torch_uint32": runner.torch_uint32, "wall_s": round(wall, 1), "versions": _versions(),
    }
    for strategy in ("none", *STRATEGIES):
        failing = [r for r in control + results if r.strategy == strategy and (r.error or (strategy != "none" and r.corrupt))]
        for r in failing[:8]:
            print(r)
        if len(failing) > 8:
            print(f"... and {len(failing) - 8} more failing programs under {strategy}")
    if (path := lane_output("fuzz-gpu.json")) is not None:
        path.write_text(json.dumps(summary, indent=1))

    per = summary["strategies"]
    assert per["none"]["corrupt"] > 0, "the unfenced control corrupted no frame: the delays are too short to show races"
    assert per["none"]["errors"] == 0, [f for f in summary["failures"] if f["error"]]
    for strategy in STRATEGIES:
        s = per[strategy]
        consumers = s["by_consumer"]
        assert all(consumers.get(fw, {}).get("frames", 0) > 0 for fw in ("torch", "cupy", "jax")), consumers.keys()
        bad = [f for f in summary["failures"] if f["strategy"] == strategy]
        assert s["corrupt"] == 0 and s["errors"] == 0, (strategy, s["corrupt"], s["errors"], bad[:5])
        assert s["frames"] >= FRAMES, (strategy, s["frames"], s["skipped"])
