"""Reading a benchmark: the terminal table, the JSON file and the PNG chart."""

from __future__ import annotations

import json
import math
from typing import Any

from .harness import BenchResult

__all__ = ["format_table", "to_json", "write_json", "write_png", "progress_bar"]


def _f(x: float, digits: int = 2) -> str:
    return "-" if x != x or math.isinf(x) else f"{x:.{digits}f}"


def format_table(result: BenchResult) -> str:
    """One row per scenario and strategy. On the model, times are shown as '-'."""
    if result.timed:
        title = f"streamsafe bench on {result.environment.get('gpu', result.backend)}: {result.frames} timed frames per cell, interleaved blocks of {result.block}"
    else:
        title = (
            "streamsafe bench on the SIMULATED backend (no GPU): fences, host waits and corrupted frames are real; "
            "times are not measured"
        )
    head = ["scenario", "strategy", "frames/s", "p50 ms", "p99 ms", "CPU ms/frame", "fences/frame", "host waits/frame",
            "corrupt", "x none", "x device", "spread"]
    rows = []
    for scenario in result.scenarios:
        for strategy in result.strategies:
            s = result.get(scenario, strategy)
            timed = result.timed
            rows.append([
                scenario, strategy,
                _f(s.fps, 1) if timed else "-",
                _f(s.latency(0.5)) if timed else "-",
                _f(s.latency(0.99)) if timed else "-",
                _f(s.cpu_ms_per_frame, 3) if timed else "-",
                _f(s.fences_per_frame, 1),
                _f(s.host_waits_per_frame, 1),
                f"{s.corrupt}/{s.checked}",
                _f(result.ratio(scenario, strategy, "none")),
                _f(result.ratio(scenario, strategy, "device")),
                f"{100 * s.fps_spread:.1f}%" if timed else "-",
            ])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:>{w}}}" if i >= 2 else f"{{:<{w}}}" for i, w in enumerate(widths))
    lines = [title, "", fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    if result.timed:
        lines += ["", "x none / x device: frames/s relative to the unfenced floor / the vendor's device-sync fallback. "
                  "spread: stdev of per-block frames/s over its mean; a difference smaller than that is noise."]
    return "\n".join(lines)


def to_json(result: BenchResult) -> dict[str, Any]:
    """Everything: environment, configuration, per-cell summary and every raw sample."""
    cells = []
    for (scenario, strategy), s in result.samples.items():
        cells.append({
            "scenario": scenario,
            "strategy": strategy,
            "summary": {
                "fps": s.fps if result.timed else None,
                "latency_p50_ms": s.latency(0.5) if result.timed else None,
                "latency_p99_ms": s.latency(0.99) if result.timed else None,
                "cpu_ms_per_frame": s.cpu_ms_per_frame if result.timed else None,
                "fences_per_frame": s.fences_per_frame,
                "host_waits_per_frame": s.host_waits_per_frame,
                "corrupt": s.corrupt,
                "checked": s.checked,
                "ratio_to_none": result.ratio(scenario, strategy, "none") if result.timed else None,
                "ratio_to_device": result.ratio(scenario, strategy, "device") if result.timed else None,
            },
            "samples": {
                "block_wall_s": s.block_wall_s,
                "block_cpu_s": s.block_cpu_s,
                "block_frames": s.block_frames,
                "latency_ms": s.latency_ms,
            },
        })
    return {
        "backend": result.backend,
        "timed": result.timed,
        "environment": result.environment,
        "config": {"scenarios": result.scenarios, "strategies": result.strategies, "frames": result.frames,
                   "warmup": result.warmup, "block": result.block},
        "order": [list(x) for x in result.order],
        "cells": cells,
    }


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def write_json(result: BenchResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump(_clean(to_json(result)), f, indent=1)


def write_png(result: BenchResult, path: str) -> str | None:
    """A grouped bar chart of frames/s per strategy per scenario, the unfenced floor marked.

    Returns why nothing was written (no matplotlib, or the model: no times), else ``None``.
    """
    if not result.timed:
        return "the simulated backend measures no time, so there is no frames/s chart"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'streamsafe[bench]')"
    scenarios, strategies = result.scenarios, [s for s in result.strategies]
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(scenarios) * max(1, len(strategies)) / 3), 4.8))
    width = 0.8 / len(strategies)
    colors = {"none": "#bbbbbb", "auto": "#1b9e77", "event": "#66a61e", "async": "#7570b3", "stream": "#e6ab02", "device": "#d95f02"}
    for j, strategy in enumerate(strategies):
        xs = [i + (j - (len(strategies) - 1) / 2) * width for i in range(len(scenarios))]
        ys = [result.get(sc, strategy).fps for sc in scenarios]
        bars = ax.bar(xs, ys, width, label=strategy, color=colors.get(strategy, None))
        for bar, sc in zip(bars, scenarios):
            if result.get(sc, strategy).corrupt:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), "x", ha="center", va="bottom", color="red", fontsize=9)
    if "none" in strategies:
        for i, sc in enumerate(scenarios):
            floor = result.get(sc, "none").fps
            ax.hlines(floor, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1)
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels(scenarios)
    ax.set_ylabel("frames/s (higher is better)")
    ax.set_title(f"streamsafe bench, {result.environment.get('gpu', result.backend)} (dashed: unfenced floor; red x: corrupted frames)")
    ax.legend(ncols=min(6, len(strategies)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def progress_bar(stream: Any) -> Any:
    """A progress callback that draws ``[#####.....] 12/40 scenario / strategy`` on ``stream``."""

    def show(done: int, total: int, label: str) -> None:
        width = 30
        filled = int(width * done / total) if total else width
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<32}")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show
