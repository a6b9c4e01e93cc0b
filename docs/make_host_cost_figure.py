"""Draw a figure of where the host time of a guarded frame and of an emulated run goes.

    python3 docs/make_host_cost_figure.py FRAME_JSON EFFECT_JSON [--png PNG]     (needs matplotlib; no GPU)

Both JSON files come from a GPU machine (none is committed):

* FRAME_JSON: ``PYTHONPATH=. python3 benchmarks/contract_overhead.py --json FRAME_JSON``. Left: per
  strategy, one frame with the null effect written by hand (the same fences, raw events, a raw capsule's
  import) beside ``contract.run()`` + ``out.torch(copy=False)`` and ``contract.run()`` +
  ``torch.from_dlpack(out.image)``, medians of interleaved blocks, each labelled with what it costs over
  the hand row (streamsafe's own cost). A JSON of the removed ``hot_path_parts.py`` (an older tree's:
  the frame's parts, each timed alone) is drawn as those parts instead.
* EFFECT_JSON: ``PYTHONPATH=. python3 benchmarks/effect_host_cost.py --calls --json EFFECT_JSON``. Right:
  one graph-mode emulated ``run()`` per effect: the driver calls and exports it makes, each timed alone,
  and the rest of its measured host time (the emulator's Python), against issue 10's 30 us.

PNG defaults to ``docs/bench/host-cost-h200.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def _frame_bars(ax: object, frame_json: Path) -> None:
    data = json.loads(frame_json.read_text())
    if "medians_us" in data:
        _overhead_bars(ax, data["medians_us"])
        return
    results = data["results"]  # (an older tree's hot_path_parts.py --json: the frame's parts)
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


_FRAME_ROWS = [  # (label, contract_overhead.py's row, colour)
    ("hand: the same fences, a raw capsule's import", "hand, same fences + raw capsule import [{s}]", "#cccccc"),
    ("contract.run() + out.torch(copy=False)", "contract.run() + out.torch(copy=False) view [{s}]", "#1f78b4"),
    ("contract.run() + torch.from_dlpack(out.image)", "contract.run() + out.image import [{s}]", "#a6cee3"),
]


def _overhead_bars(ax: object, medians: dict[str, float]) -> None:
    """contract_overhead.py's rows, per strategy: the hand row and streamsafe's, labelled over the hand row."""
    strategies = [s for s in ("event", "auto") if f"hand, same fences + raw capsule import [{s}]" in medians]
    height = 0.8 / len(_FRAME_ROWS)
    top = 0.0
    for i, s in enumerate(strategies):
        hand = medians[f"hand, same fences + raw capsule import [{s}]"]
        for j, (label, row, colour) in enumerate(_FRAME_ROWS):
            us = medians[row.format(s=s)]
            y = i + (j - 1) * height
            ax.barh(y, us, height=height * 0.9, color=colour, label=label if i == 0 else None)  # type: ignore[attr-defined]
            text = f"{us:.1f} us" if j == 0 else f"{us:.1f} us (+{us - hand:.1f} over hand)"
            ax.text(us + 0.3, y, text, va="center", fontsize=8)  # type: ignore[attr-defined]
            top = max(top, us)
    ax.set_yticks(range(len(strategies)), strategies)  # type: ignore[attr-defined]
    ax.invert_yaxis()  # type: ignore[attr-defined]
    ax.set_xlim(0, top * 1.45)  # type: ignore[attr-defined]
    ax.set_xlabel("host microseconds per frame (median of interleaved blocks)")  # type: ignore[attr-defined]
    ax.set_title("a guarded frame against the same fences by hand (null effect)", fontsize=10)  # type: ignore[attr-defined]
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)  # type: ignore[attr-defined]


def _effect_bars(ax: object, effect_json: Path) -> None:
    data = json.loads(effect_json.read_text())
    calls, runs = data["calls"], data["runs"]
    export = calls.get("torch x.__dlpack__() + read_capsule")  # (an older tree's row: read in place)
    if export is None:
        export = calls["torch x.__dlpack__() + cupy.from_dlpack"]
    copy1 = calls["cuLaunchKernel (the input copy, 6 MB)"]
    copy2 = calls.get("cuLaunchKernel (two inputs' copy, 2 x 6 MB)",  # (the emulator's one launch for two inputs, older trees)
                      calls.get("cuLaunchKernel x2 (two inputs' copies, 2 x 6 MB)", 2 * copy1))
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
    ax.set_xlim(0, max(max(total) * 1.12, 33))  # type: ignore[attr-defined]
    ax.set_xlabel("host microseconds per run()")  # type: ignore[attr-defined]
    ax.set_title("an emulated run() in graph mode", fontsize=10)  # type: ignore[attr-defined]
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frame_json", type=Path, help="benchmarks/contract_overhead.py --json's output")
    parser.add_argument("effect_json", type=Path, help="benchmarks/effect_host_cost.py --calls --json's output")
    parser.add_argument("--png", type=Path, default=HERE / "bench/host-cost-h200.png")
    args = parser.parse_args()
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1, 1.2]})
    _frame_bars(a, args.frame_json)
    _effect_bars(b, args.effect_json)
    gpu = json.loads(args.frame_json.read_text()).get("environment", {}).get("gpu", "a GPU")
    fig.suptitle(f"Host time on {gpu} ({args.frame_json.name}, {args.effect_json.name})", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
