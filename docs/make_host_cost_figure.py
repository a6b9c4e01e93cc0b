"""Draw docs/bench/host-cost-h200.png: where the host time of a guarded frame and of an emulated run goes.

    python3 docs/make_host_cost_figure.py [PARTS_JSON] [EFFECT_JSON] [PNG]     (needs matplotlib; no GPU)

Left: one steady-state frame (``contract.run()`` + ``torch.from_dlpack(out.image)``, null effect) per
strategy, from ``benchmarks/hot_path_parts.py --json``: each part timed alone, hatched where a loop
with hand-written fences pays it too, and the rest of the frame (what no part timed alone holds).
Right: one graph-mode emulated ``run()`` per effect, from ``benchmarks/effect_host_cost.py --calls
--json``: the driver calls and exports it makes, each timed alone, and the rest of its measured host
time (the emulator's Python).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent

GROUPS = [  # (label, parts whose names start with any of these, colour)
    ("fence programs (driver calls)", ("fence programs",), "#1f78b4"),
    ("facts, recipe, state, lock", ("call facts", "config read", "effect lock", "thread check"), "#a6cee3"),
    ("ledger, views, outputs", ("ledger update", "input views", "view registry", "output objects", "import bookkeeping",
                                "capsule key"), "#b2df8a"),
    ("calling the effect, record_stream", ("calling the effect", "input protection"), "#33a02c"),
    ("the rest of the frame", ("the replay's own lines",), "#fdbf6f"),
    ("the effect's run, torch's import (hand too)", ("the effect's own run", "torch.from_dlpack"), "#cccccc"),
]


def _frame_bars(ax: object, parts_json: Path) -> None:
    results = json.loads(parts_json.read_text())["results"]
    names = [r["strategy"] for r in results]
    left = [0.0] * len(results)
    for label, prefixes, colour in GROUPS:
        widths = [sum(v for k, v in r["parts_us"].items() if k.startswith(prefixes)) for r in results]
        hatch = "//" if "hand too" in label else None
        ax.barh(names, widths, left=left, color=colour, hatch=hatch, edgecolor="white", label=label)  # type: ignore[attr-defined]
        left = [a + b for a, b in zip(left, widths)]
    for i, r in enumerate(results):
        ax.text(r["frame_us"] + 0.5, i, f"{r['frame_us']:.1f} us", va="center", fontsize=8)  # type: ignore[attr-defined]
    ax.set_xlabel("host microseconds per frame")  # type: ignore[attr-defined]
    ax.set_title("a guarded frame, part by part (null effect)", fontsize=10)  # type: ignore[attr-defined]
    ax.set_xlim(0, max(r["frame_us"] for r in results) * 1.15)  # type: ignore[attr-defined]
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # type: ignore[attr-defined]


def _effect_bars(ax: object, effect_json: Path) -> None:
    data = json.loads(effect_json.read_text())
    calls, runs = data["calls"], data["runs"]
    export = calls["torch x.__dlpack__() + read_capsule"]
    copy1 = calls["cuLaunchKernel (the input copy, 6 MB)"]
    copy2 = calls.get("cuLaunchKernel (two inputs' copy, 2 x 6 MB)", 2 * copy1)  # (runs before one launch copied both)
    graph, graph0 = calls["cuGraphLaunch (one kernel, SDK stream)"], calls["cuGraphLaunch (one kernel, legacy stream)"]
    out = calls["cupy buf.__dlpack__(stream=-1)"]
    effects = {  # the calls one graph-mode run makes (RGB8: a second graph, on stream 0); its own-work
        # events are record nodes inside its graphs, so it makes no cuEventRecord of its own
        "TrueHDR 540p": (1, False),
        "VideoSuperRes RGB10A2 540p->1080p": (1, False),
        "VideoSuperRes RGB8 540p->1080p": (1, True),
        "VideoFrameGeneration 540p": (2, True),
    }
    names = list(effects)
    pieces = {
        "input export and read (torch, capsule)": [n * export for n, _ in effects.values()],
        "input copy (one kernel launch for all inputs)": [copy1 if n == 1 else copy2 for n, _ in effects.values()],
        "graph launches": [graph + (graph0 if rgb8 else 0) for _, rgb8 in effects.values()],
        "output export": [out for _ in effects.values()],
    }
    colours = ["#cab2d6", "#6a3d9a", "#1f78b4", "#a6cee3"]
    total = [statistics.median(runs[k]["graph"]) for k in names]
    left = [0.0] * len(names)
    for (label, widths), colour in zip(pieces.items(), colours):
        ax.barh(names, widths, left=left, color=colour, edgecolor="white", label=label)  # type: ignore[attr-defined]
        left = [a + b for a, b in zip(left, widths)]
    rest = [max(0.0, t - a) for t, a in zip(total, left)]
    ax.barh(names, rest, left=left, color="#fdbf6f", edgecolor="white", label="the rest: the emulator's Python")  # type: ignore[attr-defined]
    for i, t in enumerate(total):
        ax.text(t + 0.8, i, f"{t:.1f} us", va="center", fontsize=8)  # type: ignore[attr-defined]
    ax.axvline(30, color="#e31a1c", linestyle="--", linewidth=1)  # type: ignore[attr-defined]
    ax.text(30.5, -0.55, "30 us target", color="#e31a1c", fontsize=8)  # type: ignore[attr-defined]
    ax.set_xlim(0, max(total) * 1.12)  # type: ignore[attr-defined]
    ax.set_xlabel("host microseconds per run()")  # type: ignore[attr-defined]
    ax.set_title("an emulated run() in graph mode", fontsize=10)  # type: ignore[attr-defined]
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # type: ignore[attr-defined]


def main() -> None:
    parts = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "runs/2026-11-30-closing-check/hot_path_parts.json"
    effect = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "runs/2026-11-30-closing-check/effect_calls.json"
    dst = Path(sys.argv[3]) if len(sys.argv) > 3 else HERE / "bench/host-cost-h200.png"
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1, 1.2]})
    _frame_bars(a, parts)
    _effect_bars(b, effect)
    runs = sorted({parts.parent.name, effect.parent.name})
    fig.suptitle(f"Host time on an H200 host, each call timed alone (run {' and '.join(runs)})", fontsize=11)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
