"""Reading a benchmark: the terminal table, the JSON file and the PNG chart."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import replace
from typing import Any

from .harness import HAND_ROWS, UNSAFE_ROWS, BenchResult, Samples

__all__ = ["format_table", "to_json", "read_json", "chosen_cells", "write_json", "write_png", "progress_bar"]


def _f(x: float, digits: int = 2) -> str:
    return "-" if x != x or math.isinf(x) else f"{x:.{digits}f}"


def _label(strategy: str) -> str:
    return f"{strategy} (unsafe)" if strategy in UNSAFE_ROWS else strategy


def format_table(result: BenchResult) -> str:
    """One row per scenario and strategy. On the model, times are shown as '-'. ``x hand`` is relative
    to the faster hand-written row of the scenario; ``none`` is marked unsafe (it corrupts frames)."""
    if result.timed:
        title = f"streamsafe bench on {result.environment.get('gpu', result.backend)}: {result.frames} timed frames per cell, interleaved blocks of {result.block}"
    else:
        title = (
            "streamsafe bench on the SIMULATED backend (no GPU): fences, host waits and corrupted frames are real; "
            "times are not measured"
        )
    head = ["scenario", "strategy", "frames/s", "p50 ms", "p99 ms", "CPU ms/frame", "fences/frame", "host waits/frame",
            "corrupt", "x hand", "x device", "spread"]
    rows = []
    for scenario in result.scenarios:
        for strategy in result.strategies:
            if (scenario, strategy) not in result.samples:
                continue
            s = result.get(scenario, strategy)
            timed = result.timed
            rows.append([
                scenario, _label(strategy),
                _f(s.fps, 1) if timed else "-",
                _f(s.latency(0.5)) if timed else "-",
                _f(s.latency(0.99)) if timed else "-",
                _f(s.cpu_ms_per_frame, 3) if timed else "-",
                _f(s.fences_per_frame, 1),
                _f(s.host_waits_per_frame, 1),
                f"{s.corrupt}/{s.checked}" + (f" +{s.warmup_corrupt} warm-up" if s.warmup_corrupt else ""),
                _f(result.hand_ratio(scenario, strategy)),
                _f(result.ratio(scenario, strategy, "device")),
                f"{100 * s.fps_spread:.1f}%" if timed else "-",
            ])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:>{w}}}" if i >= 2 else f"{{:<{w}}}" for i, w in enumerate(widths))
    lines = [title, "", fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    notes = []
    if any(h in result.strategies for h in HAND_ROWS):
        notes.append("hand, hand-sync: the fences an expert writes for these streams with raw events, no streamsafe "
                     "(hand: no host wait where possible; hand-sync: non_blocking=False).")
    if "readme" in result.strategies:
        notes.append("readme: the README's first example as written (a block of ss.stream_contract(sr, stream), nothing "
                     "declared): auto copies each input on a stream of its own and the host waits for the copies; "
                     "declaring input_stream= (the other rows) drops the copies and that host wait.")
    if any(u in result.strategies for u in UNSAFE_ROWS):
        notes.append("none (unsafe): no fences at all; shown for what races cost, not a floor: it corrupts frames.")
    if result.timed:
        notes.append("x hand / x device: frames/s relative to the faster hand row / the vendor's device-sync fallback. "
                     "spread: stdev of per-block frames/s over its mean; a difference smaller than that is noise.")
        notes.append("server-N: N effects, each with its own stream and thread; frames/s is the aggregate, "
                     "CPU ms/frame sums every thread.")
    if notes:
        lines += ["", *notes]
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
                "warmup_corrupt": s.warmup_corrupt,
                "warmup_checked": s.warmup_checked,
                "ratio_to_hand": result.hand_ratio(scenario, strategy) if result.timed else None,
                "hand_row": result.best_hand(scenario),
                "ratio_to_device": result.ratio(scenario, strategy, "device") if result.timed else None,
                "ratio_to_none": result.ratio(scenario, strategy, "none") if result.timed else None,
                "unsafe": strategy in UNSAFE_ROWS,
                "runs": s.runs,
                "fences": s.fences,
                "host_waits": s.host_waits,
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


def clean_json(obj: Any) -> Any:
    """``obj`` (dicts and lists of numbers) with every NaN and infinity as ``None``: strict JSON."""
    if isinstance(obj, float) and (obj != obj or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean_json(v) for v in obj]
    return obj


def write_json(result: BenchResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump(clean_json(to_json(result)), f, indent=1)


_SAMPLE_LISTS = {"block_wall_s": float, "block_cpu_s": float, "block_frames": int, "latency_ms": float}
_SAMPLE_COUNTS = ("runs", "fences", "host_waits", "corrupt", "checked")
_WARMUP_COUNTS = ("warmup_corrupt", "warmup_checked")


class _NotARun(ValueError):
    """What makes a file no ``--json`` of ``streamsafe bench``: the field and the rule it breaks."""


def _field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _NotARun(f"{where} has no {key!r}")
    return obj[key]


def _number(value: Any, kind: type, where: str) -> Any:
    """``value`` as an int or a float, else why not: JSON's null, a bool, a string or a fraction of a count."""
    ok = (isinstance(value, int) and not isinstance(value, bool)) or (kind is float and isinstance(value, float))
    if not ok:
        raise _NotARun(f"{where} is {value!r}, not {'a whole number' if kind is int else 'a number'}")
    return kind(value)


def read_json(path: str) -> BenchResult:
    """The run a ``--json`` file holds (written by :func:`write_json`), to print or chart again.

    Raises ``ValueError`` naming the file, the field and the rule it breaks when it is not such a file."""
    try:
        with open(path) as f:
            data = json.load(f)
    except ValueError as e:  # (not JSON, or not text)
        raise ValueError(f"{path} is not JSON ({e}); give the file that `streamsafe bench --json` wrote") from None
    try:
        if isinstance(data, dict) and "summary" in data and "raw" in data and "cells" not in data:
            raise _NotARun("it is the JSON of the two-GPU bench (python -m streamsafe.bench.multi_gpu), which this "
                           "command does not read")
        config = _field(data, "config", "the file")
        timed = _field(data, "timed", "the file")
        if not isinstance(timed, bool):
            raise _NotARun(f"'timed' is {timed!r}, not true or false")
        scenarios, strategies = (_field(config, k, "'config'") for k in ("scenarios", "strategies"))
        for name, names in (("scenarios", scenarios), ("strategies", strategies)):
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                raise _NotARun(f"'config.{name}' is {names!r}, not a list of names")
        samples: dict[tuple[str, str], Samples] = {}
        cells = _field(data, "cells", "the file")
        if not isinstance(cells, list):
            raise _NotARun(f"'cells' is {type(cells).__name__}, not a list")
        for i, cell in enumerate(cells):
            where = f"cell {i}"
            scenario, strategy = _field(cell, "scenario", where), _field(cell, "strategy", where)
            where = f"cell {i} ({scenario} / {strategy})"
            if (scenario, strategy) in samples:
                raise _NotARun(f"{where} comes twice")
            if scenario not in scenarios or strategy not in strategies:
                raise _NotARun(f"{where} is not among 'config.scenarios' and 'config.strategies'")
            raw, summary = _field(cell, "samples", where), _field(cell, "summary", where)
            s = Samples(scenario, strategy)
            for key, kind in _SAMPLE_LISTS.items():
                values = _field(raw, key, f"{where}'s samples")
                if not isinstance(values, list):
                    raise _NotARun(f"{where}'s samples.{key} is {values!r}, not a list")
                setattr(s, key, [_number(v, kind, f"{where}'s samples.{key}[{j}]") for j, v in enumerate(values)])
            for key in _SAMPLE_COUNTS:
                setattr(s, key, _number(_field(summary, key, f"{where}'s summary"), int, f"{where}'s summary.{key}"))
            for key in _WARMUP_COUNTS:  # (absent from the files of earlier versions: 0)
                setattr(s, key, _number(summary.get(key, 0), int, f"{where}'s summary.{key}"))
            if len(s.block_wall_s) != len(s.block_frames) or len(s.block_cpu_s) != len(s.block_frames):
                raise _NotARun(f"{where}'s samples have {len(s.block_frames)} blocks of frames but "
                               f"{len(s.block_wall_s)} wall times and {len(s.block_cpu_s)} CPU times")
            s.frames = sum(s.block_frames)
            samples[(scenario, strategy)] = s
        order = data.get("order", [])
        if not isinstance(order, list) or not all(isinstance(o, list) and len(o) == 2 for o in order):
            raise _NotARun("'order' is not a list of [scenario, strategy] pairs")
        counts = {k: _number(_field(config, k, "'config'"), int, f"'config.{k}'") for k in ("frames", "warmup", "block")}
        environment = data.get("environment") or {}
        if not isinstance(environment, dict):
            raise _NotARun(f"'environment' is {type(environment).__name__}, not an object")
        return BenchResult(
            backend=str(_field(data, "backend", "the file")), timed=timed, scenarios=list(scenarios),
            strategies=list(strategies), frames=counts["frames"], warmup=counts["warmup"], block=counts["block"],
            samples=samples, order=[(a, b) for a, b in order], environment=dict(environment),
        )
    except _NotARun as e:
        raise ValueError(f"{path} is not a file that `streamsafe bench --json` wrote: {e}; give the JSON of a "
                         "bench run (streamsafe bench --json FILE)") from None


def chosen_cells(result: BenchResult, scenarios: list[str], strategies: list[str]) -> BenchResult:
    """``result`` with only these scenarios and strategies, and the hand-written rows of those
    scenarios (a bench run always has them: ``x hand`` is over them). Raises ``ValueError`` when no
    cell is left."""
    keep = [s for s in result.strategies if s in strategies or s in HAND_ROWS]
    cells = {k: v for k, v in result.samples.items() if k[0] in scenarios and k[1] in keep}
    if not any(k[1] in strategies for k in cells):
        raise ValueError(f"that run has no cell of scenario {', '.join(scenarios)} and strategy {', '.join(strategies)}; "
                         f"it has {', '.join(sorted({f'{a}/{b}' for a, b in result.samples})) or 'none'}")
    return replace(result, scenarios=[s for s in result.scenarios if s in scenarios],
                   strategies=[s for s in keep if any(k[1] == s for k in cells)], samples=cells,
                   order=[o for o in result.order if o in cells])


def write_png(result: BenchResult, path: str) -> str | None:
    """A grouped bar chart per scenario of each strategy's frames/s over the faster hand-written row's
    (1.0: as fast as the hand-written fences), so every scenario reads on one scale; each scenario's
    label gives that row's frames/s. The video server has its own panel.

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
    strategies = list(result.strategies)
    groups = [g for g in ([sc for sc in result.scenarios if not sc.startswith("server-")],
                          [sc for sc in result.scenarios if sc.startswith("server-")]) if g]
    widths = [max(3.0, 0.2 * len(g) * len(strategies)) for g in groups]
    fig, axes = plt.subplots(1, len(groups), figsize=(min(22.0, sum(widths) + 1), 5.5), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, scenarios in zip(axes[0], groups):
        _bars(ax, result, scenarios, strategies)
    for ax, scenarios in zip(axes[0], groups):
        server = scenarios[0].startswith("server-")
        ax.set_ylabel(f"{'aggregate ' if server else ''}frames/s over the faster hand-written row's")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncols=min(8, len(strategies)), fontsize=8)
    title = (f"streamsafe bench, {result.environment.get('gpu', result.backend)}: frames/s per strategy over the "
             "faster hand-written row (dashed, 1.0; its frames/s under each scenario); hatched: unsafe, no fences; "
             "red x: corrupted frames")
    fig.suptitle(textwrap.fill(title, width=max(30, int(9.5 * fig.get_figwidth()))), fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


_COLORS = {"none": "#bbbbbb", "auto": "#1b9e77", "event": "#66a61e", "async": "#7570b3", "stream": "#e6ab02",
           "device": "#d95f02", "hand": "#333333", "hand-sync": "#888888"}


def _bars(ax: Any, result: BenchResult, scenarios: list[str], strategies: list[str]) -> None:
    width = 0.8 / len(strategies)
    for j, strategy in enumerate(strategies):
        xs = [i + (j - (len(strategies) - 1) / 2) * width for i in range(len(scenarios))]
        ys = [result.hand_ratio(sc, strategy) if (sc, strategy) in result.samples else math.nan for sc in scenarios]
        ys = [0.0 if y != y else y for y in ys]  # (no hand row, or no such cell: no bar)
        bars = ax.bar(xs, ys, width, label=_label(strategy), color=_COLORS.get(strategy, None),
                      hatch="//" if strategy in UNSAFE_ROWS else None)
        for bar, sc in zip(bars, scenarios):
            if (sc, strategy) in result.samples and result.get(sc, strategy).corrupted:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), "x", ha="center", va="bottom", color="red", fontsize=9)
    ax.axhline(1.0, color="black", linestyle="dashed", linewidth=1)
    labels = []
    for sc in scenarios:
        best = result.best_hand(sc)
        labels.append(sc if best is None else f"{sc}\n{best} {result.get(sc, best).fps:,.0f}/s")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, max(1.25, *(b.get_height() for b in ax.patches)) * 1.08)


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
