"""Several GPUs: one pipeline per GPU, each with its own effect, streams, contract and thread (issue 12).

Scenarios, each run under every strategy (and the hand-written rows) by the bench harness:

* ``gpus-1``: one pipeline on GPU 0, on a worker thread: the baseline;
* ``gpus-2``: one pipeline per GPU (0 and 1), a thread each, no coordination but a block's start and end;
* ``gpus-2-sync0``: as ``gpus-2``, but GPU 0's pipeline always uses strategy ``device`` (a device-wide
  synchronisation per frame) whatever the row; GPU 1's runs the row's strategy. GPU 1's frames/s here,
  against its frames/s in ``gpus-2``, measures whether a device sync on one GPU stalls the other GPU's
  pipeline (``cuCtxSynchronize`` waits for one device; only the host, the GIL, is shared).

A lane is the bench's user program (:mod:`streamsafe.bench.pipelines`) on its own device: inputs
uploaded once to that GPU, frames produced and copied on a non-blocking torch side stream of that
GPU, every copy checked against NumPy after its block (untimed). Each worker thread makes its lane's
device current, runs its steps, and waits for its own lane's streams, so a lane's wall time is its own.

Figures (:func:`summarize`): per strategy, the aggregate frames/s of each scenario (every lane's frames
over each block's wall time), frames/s per lane, the **scaling** ``gpus-2 / gpus-1`` (ideal 2.0), and
the **sync0 ratio**: GPU 1's frames/s in ``gpus-2-sync0`` over ``gpus-2`` (1.0: no stall).

On the model (one :class:`~streamsafe.sim.SimBackend` with ``devices=2`` per pipeline, shared by its lanes,
one thread per lane) only counts are meaningful: frames, corrupt frames, fences and host waits per
frame, and every lane's work on its own device. Run it with ``python -m streamsafe.bench.multi_gpu``
(``--backend cuda`` needs ``torch.cuda.device_count() >= 2``, torch and CuPy).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim.backend import SimBackend
from ..tools.cli import non_negative_int, positive_int
from .harness import HAND_ROWS, BenchResult, Row, as_row, run_bench
from .lanes import LaneGroup
from .pipelines import BenchScenario, GpuPipeline, SimPipeline

__all__ = [
    "MultiGpuScenario",
    "SCENARIOS",
    "LANE",
    "SOAK_LANE",
    "GpuLane",
    "SimLane",
    "MultiGpuPipeline",
    "MultiGpuFactory",
    "run_multi_gpu",
    "summarize",
    "format_summary",
    "gpu_count",
    "main",
]

LANE = BenchScenario("mgpu", "540p->1080p, 2 ms inference, 50 us conversion",
                     stage_us={"inference": 2000.0, "conversion": 50.0})
"""One lane's work per frame: the video server's (``server-N``) frame, on its own GPU."""

SOAK_LANE = BenchScenario("mgpu-soak", "270p->540p, 100 us inference, 40 us conversion", size=(270, 480), out=(540, 960),
                          stage_us={"inference": 100.0, "conversion": 40.0})
"""A short frame for the two-GPU soak (many frames per strategy)."""


@dataclass(frozen=True)
class MultiGpuScenario:
    """Lanes on ``devices``, one thread each. ``pinned``: ``(device, row)`` pairs whose lane runs that row
    whatever the bench row is. ``consumers``: per lane (by position), the consumer (``torch``, ``cupy``)
    instead of ``lane.consumer``."""

    key: str
    title: str
    devices: tuple[int, ...]
    pinned: tuple[tuple[int, str], ...] = ()
    lane: BenchScenario = LANE
    consumers: tuple[str, ...] = ()

    def row_for(self, device: int, row: Row) -> Row:
        return as_row(dict(self.pinned).get(device, row))

    def consumer_for(self, index: int) -> str:
        return self.consumers[index] if index < len(self.consumers) else self.lane.consumer


SCENARIOS: tuple[MultiGpuScenario, ...] = (
    MultiGpuScenario("gpus-1", "one pipeline on GPU 0, on its own thread", (0,)),
    MultiGpuScenario("gpus-2", "one pipeline per GPU (0, 1), a thread each", (0, 1)),
    MultiGpuScenario("gpus-2-sync0", "as gpus-2; GPU 0's pipeline device-syncs every frame (strategy device)", (0, 1),
                     pinned=((0, "device"),)),
)


def scenario_by_key(key: str, scenarios: Sequence[MultiGpuScenario] = SCENARIOS) -> MultiGpuScenario:
    for sc in scenarios:
        if sc.key == key:
            return sc
    raise ValueError(f"unknown multi-GPU scenario {key!r}: one of {', '.join(s.key for s in scenarios)}")


def gpu_count() -> int:
    """CUDA devices torch sees (0 without torch or CUDA). Initialises CUDA only when torch finds a GPU."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


# -- lanes --------------------------------------------------------------------------------------------


class GpuLane(GpuPipeline):
    """The bench's user program on GPU ``device`` (:class:`~streamsafe.bench.pipelines.GpuPipeline` there):
    torch produces on a side stream S of that device; the consumer (torch or CuPy) copies on S;
    checks run on that device. The effect launches its stages eagerly, as the two-GPU bench was
    measured (the soak also draws new stage latencies every frame, which a CUDA graph would bake in)."""

    def __init__(self, sc: BenchScenario, row: Row, device: int) -> None:
        if sc.consumer not in ("torch", "cupy"):
            raise ValueError(f"a multi-GPU lane consumes with torch or cupy, not {sc.consumer!r}")
        super().__init__(sc, row, device, launch_mode="eager")


class SimLane(SimPipeline):
    """The same program on device ``device`` of a shared :class:`~streamsafe.sim.SimBackend` (small frames):
    inputs allocated and written on S each frame, the output copied on S, checked exactly."""

    def __init__(self, sc: BenchScenario, row: Row, sim: SimBackend, device: int) -> None:
        super().__init__(sc, row, sim, device)


# -- the pipeline: one thread per lane ----------------------------------------------------------------


@dataclass
class LaneBlock:
    """One lane's share of one block: its own wall time (job received to its streams drained)."""

    first: int
    frames: int
    wall_s: float
    cpu_s: float
    checked: int = 0
    corrupt: int = 0


class MultiGpuPipeline(LaneGroup):
    """Lanes (one per GPU) run by one thread each; a block pipeline for :func:`~streamsafe.bench.run_bench`.

    ``blocks[i]`` holds lane ``i``'s :class:`LaneBlock` per block (warm-up included; see
    :meth:`lane_summary`). ``devices[i]`` and ``rows[i]``: lane ``i``'s device and row. Each worker
    drains its lane at the end of a block, so a lane's wall time covers its own streams."""

    def __init__(self, lanes: list[Any], devices: Sequence[int], rows: Sequence[str]) -> None:
        if not lanes:
            raise ValueError("a multi-GPU pipeline needs at least one lane")
        self.devices = list(devices)
        self.rows = list(rows)
        self.blocks: list[list[LaneBlock]] = [[] for _ in lanes]
        self._latencies: list[float] = []
        super().__init__(lanes, drain_in_worker=True, thread_name="streamsafe-multi-gpu-lane")

    def run_block(self, first: int, count: int) -> float:
        """Every lane runs steps ``first .. first + count - 1`` on its thread and waits for its own streams;
        returns the worker threads' CPU seconds. Re-raises a lane's exception."""
        reports = self._run_on(self._workers, first, count)
        for r in reports:
            self.blocks[r.index].append(LaneBlock(first, count, r.wall_s, r.cpu_s))
            self._latencies += r.latencies
        return sum(r.cpu_s for r in reports)

    def drain(self) -> list[float]:
        latencies = self._latencies + super().drain()  # the workers drained already; this covers step() called directly
        self._latencies = []
        return latencies

    def _checked(self, index: int, checked: int, corrupt: int) -> None:
        if self.blocks[index]:
            self.blocks[index][-1].checked += checked
            self.blocks[index][-1].corrupt += corrupt

    def lane_summary(self, warmup: int = 0) -> list[dict[str, Any]]:
        """Per lane: device, row, frames, frames/s over its own wall time, checked and corrupt frames
        (blocks starting at ``warmup`` or later)."""
        out = []
        for i, blocks in enumerate(self.blocks):
            timed = [b for b in blocks if b.first >= warmup]
            frames = sum(b.frames for b in timed)
            wall = sum(b.wall_s for b in timed)
            out.append({
                "device": self.devices[i],
                "row": self.rows[i],
                "frames": frames,
                "wall_s": wall,
                "fps": frames / wall if wall > 0 else math.nan,
                "checked": sum(b.checked for b in timed),
                "corrupt": sum(b.corrupt for b in timed),
            })
        return out


class MultiGpuFactory:
    """``factory(scenario, row) -> MultiGpuPipeline`` on the GPUs (``gpu=True``) or the model.

    On the model each pipeline gets its own backend from ``make_sim`` (default: an adversarial
    ``SimBackend(devices=2)``), shared by its lanes. Every pipeline made is kept in ``pipelines``
    by ``(scenario, row)`` for :func:`summarize`."""

    references: tuple[str, ...] = HAND_ROWS

    def __init__(
        self,
        gpu: bool,
        *,
        scenarios: Sequence[MultiGpuScenario] = SCENARIOS,
        make_sim: Callable[[], SimBackend] | None = None,
    ) -> None:
        self.gpu = gpu
        self.scenarios = tuple(scenarios)
        self.make_sim = make_sim or (lambda: SimBackend(devices=2, scheduler="adversarial"))
        self.pipelines: dict[tuple[str, str], MultiGpuPipeline] = {}

    def _check_devices(self, sc: MultiGpuScenario, have: int, where: str) -> None:
        need = max(sc.devices) + 1
        if have < need:
            raise ValueError(f"scenario {sc.key} needs {need} CUDA devices; {where} has {have}")

    def __call__(self, scenario: str, strategy: Row | str) -> MultiGpuPipeline:
        sc = scenario_by_key(scenario, self.scenarios)
        row = as_row(strategy)
        rows = [sc.row_for(d, row) for d in sc.devices]
        lanes: list[Any] = []
        try:
            if self.gpu:
                self._check_devices(sc, gpu_count(), "torch")
                for i, (d, r) in enumerate(zip(sc.devices, rows)):
                    lanes.append(GpuLane(_with_consumer(sc.lane, sc.consumer_for(i)), r, d))
            else:
                sim = self.make_sim()
                self._check_devices(sc, sim.device_count(), "the model")
                for d, r in zip(sc.devices, rows):
                    lanes.append(SimLane(sc.lane, r, sim, d))
        except BaseException:
            for lane in lanes:
                lane.close()
            raise
        pipe = MultiGpuPipeline(lanes, sc.devices, [r.value for r in rows])
        self.pipelines[(scenario, row.value)] = pipe
        return pipe

    def __repr__(self) -> str:
        return f"<streamsafe multi-GPU {'gpu' if self.gpu else 'sim'} factory>"


def _with_consumer(sc: BenchScenario, consumer: str) -> BenchScenario:
    if consumer == sc.consumer:
        return sc
    from dataclasses import replace

    return replace(sc, consumer=consumer)


# -- running and figures ------------------------------------------------------------------------------


@dataclass
class MultiGpuRun:
    """A bench result and the factory that made its pipelines (per-lane figures)."""

    result: BenchResult
    factory: MultiGpuFactory
    summary: dict[str, Any] = field(default_factory=dict)


def run_multi_gpu(
    *,
    gpu: bool,
    strategies: Sequence[str] = ("none", "auto", "event", "async", "stream", "device"),
    scenarios: Sequence[str] = ("gpus-1", "gpus-2", "gpus-2-sync0"),
    frames: int | None = None,
    warmup: int | None = None,
    block: int | None = None,
    references: Sequence[str] | None = None,
    make_sim: Callable[[], SimBackend] | None = None,
    environment: dict[str, Any] | None = None,
    progress: Any = None,
) -> MultiGpuRun:
    """Run the multi-GPU scenarios under ``strategies`` (plus ``references``: default the hand rows) on
    the GPUs or the model. Defaults: 200 timed frames per lane, 20 warm-up, blocks of 20 on the GPUs;
    8, 2, 4 on the model. Blocks the host for the whole run."""
    factory = MultiGpuFactory(gpu, make_sim=make_sim)
    defaults = (200, 20, 20) if gpu else (8, 2, 4)  # (a 0 given is run_bench's to refuse, not the default's to replace)
    frames = defaults[0] if frames is None else frames
    warmup = defaults[1] if warmup is None else warmup
    block = defaults[2] if block is None else block
    env = dict(environment or {})
    env.setdefault("gpus", _gpu_names() if gpu else None)
    env.setdefault("lane", {"title": LANE.title, "size": list(LANE.size), "out": list(LANE.out), "stage_us": LANE.stage_us})
    result = run_bench(
        factory, list(scenarios), list(strategies), frames=frames, warmup=warmup, block=block,
        backend="cuda" if gpu else "sim", timed=gpu, progress=progress, environment=env, references=references,
    )
    run = MultiGpuRun(result, factory)
    run.summary = summarize(result, factory)
    return run


def _gpu_names() -> list[str]:
    try:
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # pragma: no cover - reported, not fatal
        return []


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


def summarize(result: BenchResult, factory: MultiGpuFactory) -> dict[str, Any]:
    """Per row: each scenario's aggregate figures and per-lane figures; ``scaling`` (``gpus-2`` over
    ``gpus-1`` aggregate frames/s) and ``sync0_ratio`` (GPU 1's frames/s in ``gpus-2-sync0`` over
    ``gpus-2``). Times are ``None`` on the model."""
    timed = result.timed
    rows: dict[str, Any] = {}
    for strategy in result.strategies:
        entry: dict[str, Any] = {"scenarios": {}}
        for scenario in result.scenarios:
            s = result.samples.get((scenario, strategy))
            if s is None:
                continue
            pipe = factory.pipelines.get((scenario, strategy))
            lanes = pipe.lane_summary(result.warmup) if pipe is not None else []
            for lane in lanes:
                lane["fps"] = _num(lane["fps"]) if timed else None
                lane["wall_s"] = _num(lane["wall_s"]) if timed else None
            entry["scenarios"][scenario] = {
                "fps": _num(s.fps) if timed else None,
                "fps_spread": _num(s.fps_spread) if timed else None,
                "latency_p50_ms": _num(s.latency(0.5)) if timed else None,
                "latency_p99_ms": _num(s.latency(0.99)) if timed else None,
                "frames": s.frames,
                "checked": s.checked,
                "corrupt": s.corrupt,
                "fences_per_frame": _num(s.fences_per_frame),
                "host_waits_per_frame": _num(s.host_waits_per_frame),
                "lanes": lanes,
            }
        cells = entry["scenarios"]
        one, two, sync0 = cells.get("gpus-1"), cells.get("gpus-2"), cells.get("gpus-2-sync0")
        entry["scaling"] = _num(two["fps"] / one["fps"]) if timed and one and two and one["fps"] and two["fps"] else None
        entry["sync0_ratio"] = None
        if timed and two and sync0:
            a = [lane["fps"] for lane in sync0["lanes"] if lane["device"] == 1]
            b = [lane["fps"] for lane in two["lanes"] if lane["device"] == 1]
            if a and b and a[0] and b[0]:
                entry["sync0_ratio"] = _num(a[0] / b[0])
        rows[strategy] = entry
    return {
        "backend": result.backend,
        "timed": timed,
        "frames_per_lane": result.frames,
        "warmup": result.warmup,
        "block": result.block,
        "environment": result.environment,
        "scenarios": {sc.key: {"title": sc.title, "devices": list(sc.devices), "pinned": [list(p) for p in sc.pinned]}
                      for sc in factory.scenarios if sc.key in result.scenarios},
        "rows": rows,
    }


def format_summary(summary: dict[str, Any]) -> str:
    """A table of :func:`summarize`'s figures: frames/s and scaling on the GPUs, counts on the model."""
    timed = summary["timed"]
    lane = summary["environment"].get("lane", {})
    gpus = summary["environment"].get("gpus")
    where = f"GPUs: {', '.join(gpus)}" if gpus else "simulated backend, no GPU: counts only"
    lines = [f"Several GPUs, one pipeline per GPU on its own thread ({where}); lane: {lane.get('title', '?')}; "
             f"{summary['frames_per_lane']} timed frames per lane"]

    def cell(row: dict[str, Any], scenario: str, key: str) -> Any:
        return row["scenarios"].get(scenario, {}).get(key)

    def lane_fps(row: dict[str, Any], scenario: str, device: int) -> Any:
        for lane in row["scenarios"].get(scenario, {}).get("lanes", []):
            if lane["device"] == device:
                return lane["fps"]
        return None

    def f(x: Any, digits: int = 1) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    if timed:
        head = ["row", "1 GPU f/s", "2 GPUs f/s", "scaling", "GPU0 f/s", "GPU1 f/s", "GPU1 f/s, GPU0 device-syncs",
                "sync0 ratio", "corrupt"]
        body = []
        for name, row in summary["rows"].items():
            corrupt = sum(c["corrupt"] for c in row["scenarios"].values())
            checked = sum(c["checked"] for c in row["scenarios"].values())
            body.append([name, f(cell(row, "gpus-1", "fps")), f(cell(row, "gpus-2", "fps")), f(row["scaling"], 2),
                         f(lane_fps(row, "gpus-2", 0)), f(lane_fps(row, "gpus-2", 1)), f(lane_fps(row, "gpus-2-sync0", 1)),
                         f(row["sync0_ratio"], 2), f"{corrupt}/{checked}"])
    else:
        head = ["row", "scenario", "frames", "corrupt", "fences/frame", "host waits/frame", "lanes (device: row)"]
        body = []
        for name, row in summary["rows"].items():
            for scenario, c in row["scenarios"].items():
                lanes = ", ".join(f"{lane['device']}: {lane['row']}" for lane in c["lanes"])
                body.append([name, scenario, str(c["frames"]), f"{c['corrupt']}/{c['checked']}", f(c["fences_per_frame"], 2),
                             f(c["host_waits_per_frame"], 2), lanes])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines.append(fmt.format(*head).rstrip())
    lines += [fmt.format(*line).rstrip() for line in body]
    if timed:
        lines.append("scaling: 2-GPU over 1-GPU aggregate frames/s (ideal 2.00). sync0 ratio: GPU 1's frames/s while GPU 0's "
                     "pipeline device-syncs every frame, over GPU 1's frames/s in gpus-2 (1.00: no stall).")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m streamsafe.bench.multi_gpu``: run the scenarios, print the table, write JSON. Exit 0 when
    every fenced row corrupted no frame, 1 when one did, 2 for a usage error or too few GPUs."""
    parser = argparse.ArgumentParser(prog="python -m streamsafe.bench.multi_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("cuda", "sim", "auto"), default="auto",
                        help="cuda: the GPUs (at least 2); sim: the model with 2 devices; auto: cuda with 2 GPUs, else sim")
    parser.add_argument("--strategy", default="none,auto,event,async,stream,device", help="comma-separated rows")
    parser.add_argument("--scenario", default=",".join(s.key for s in SCENARIOS), help="comma-separated scenario keys")
    parser.add_argument("--frames", type=positive_int, help="timed frames per lane and row (default 200 on cuda, 8 on sim)")
    parser.add_argument("--warmup", type=non_negative_int, help="untimed frames first (default 20 on cuda, 2 on sim)")
    parser.add_argument("--block", type=positive_int, help="frames per block (default 20 on cuda, 4 on sim)")
    parser.add_argument("--no-hand", action="store_true", help="leave out the hand-written rows")
    parser.add_argument("--json", metavar="FILE", help="write the summary and every raw sample here")
    args = parser.parse_args(argv)
    count = gpu_count() if args.backend != "sim" else 0
    if args.backend == "cuda" and count < 2:
        print(f"error: the multi-GPU bench needs 2 CUDA devices; torch sees {count}. "
              "Run it on a machine with two GPUs, or with --backend sim.", file=sys.stderr)
        return 2
    gpu = args.backend == "cuda" or (args.backend == "auto" and count >= 2)
    strategies = [x.strip() for x in args.strategy.split(",") if x.strip()]
    scenarios = [x.strip() for x in args.scenario.split(",") if x.strip()]
    try:
        for key in scenarios:
            scenario_by_key(key)
        run = run_multi_gpu(gpu=gpu, strategies=strategies, scenarios=scenarios, frames=args.frames, warmup=args.warmup,
                            block=args.block, references=() if args.no_hand else None)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_summary(run.summary))
    if args.json:
        from .report import clean_json, to_json

        with open(args.json, "w") as f:
            json.dump(clean_json({"summary": run.summary, "raw": to_json(run.result)}), f, indent=1, default=_json_default)
        print(f"wrote the figures and every raw sample to {args.json}", file=sys.stderr)
    unsafe = {"none"}
    bad = [(name, c["corrupt"]) for name, row in run.summary["rows"].items() if name not in unsafe
           for c in row["scenarios"].values() if c["corrupt"]]
    return 1 if bad else 0


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    return str(obj)


if __name__ == "__main__":
    sys.exit(main())
