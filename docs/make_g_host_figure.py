"""Draw a figure of where a host-bound step's time goes, by row (and, from an older run, by C section).

    python3 docs/make_g_host_figure.py SPLIT_JSON [SECTIONS_JSON] [--png PNG]     (needs matplotlib; no GPU)

SPLIT_JSON is what ``PYTHONPATH=. python3 benchmarks/profile.py g-host --json SPLIT_JSON`` writes on a GPU
machine (no such file is committed): one step of bench scenario ``g-host`` per row, split into the
bench's loop, the effect's own ``run()``, the row's own frame (fences, checks, bookkeeping) and the
consumer (import and copy), the medians of interleaved blocks; drawn as the left (or only) panel.
SECTIONS_JSON, optional, is a JSON of the removed C extension's section timers (``frame_sections.py
--json`` of an older tree): each section's host microseconds a step, drawn on the right. PNG defaults to
``docs/bench/g-host-h200.png``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent

PARTS = [  # (key in the split's medians, label, colour)
    ("loop", "bench loop (events, stream context)", "#d9d9d9"),
    ("effect run", "the effect's own run()", "#bdbdbd"),
    ("frame", "the row's own frame (fences, checks, bookkeeping)", "#1f78b4"),
    ("consumer", "the consumer (import, copy)", "#33a02c"),
]

KINDS = [  # (label, words a section's name holds, colour)
    ("driver calls: fences", ("the fences",), "#1f78b4"),
    ("torch: the input's record_stream (H12)", ("record_stream",), "#e31a1c"),
    ("checks and bookkeeping", ("",), "#a6cee3"),
]


def _kind(name: str) -> tuple[str, str]:
    for label, words, colour in KINDS:
        if any(w in name for w in words):
            return label, colour
    raise AssertionError(name)


def draw(split: dict, sections: dict | None, png: Path) -> None:
    medians = split["medians_us"]
    rows = list(medians)
    if sections is None:
        fig, left = plt.subplots(1, 1, figsize=(8, 4.5))
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1.1, 1]})
    hand = medians[rows[0]]["step"]
    for y, row in enumerate(rows):
        x = 0.0
        for key, label, colour in PARTS:
            w = medians[row][key]
            left.barh(y, w, left=x, color=colour, edgecolor="white", label=label if y == 0 else None)
            if w > 6:
                left.text(x + w / 2, y, f"{w:.1f}", ha="center", va="center", fontsize=8)
            x += w
        step = medians[row]["step"]
        left.text(x + 1, y, f"{step:.1f} us ({hand / step:.2f}x {rows[0]})", va="center", fontsize=9)
    left.set_yticks(range(len(rows)), rows)
    left.invert_yaxis()
    left.set_xlim(0, max(medians[r]["step"] for r in rows) * 1.35)
    left.set_xlabel("host microseconds a step (median of interleaved blocks)")
    left.set_title(f"{split['scenario']}: one step, by part", fontsize=11)
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    if sections is not None:
        _sections(right, sections)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def _sections(right: Any, sections: dict) -> None:
    names = [n for n in sections["medians_us"] if "effect's run()" not in n]
    per_step = [sections["medians_us"][n] * sections["calls_a_step"][n] for n in names]
    seen: set[str] = set()
    for y, (name, us) in enumerate(zip(names, per_step)):
        label, colour = _kind(name)
        right.barh(y, us, color=colour, label=None if label in seen else label)
        seen.add(label)
        right.text(us + 0.03, y, f"{us:.2f}", va="center", fontsize=7)
    right.set_yticks(range(len(names)), names, fontsize=7)
    right.invert_yaxis()
    right.set_xlabel("host microseconds a step")
    total = sum(per_step)
    right.set_title(f"{sections['row']}: the C frame by section, {total:.1f} us a step\n(the effect's own run left out)", fontsize=11)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("split_json", type=Path, help="benchmarks/profile.py g-host --json's output")
    parser.add_argument("sections_json", type=Path, nargs="?", help="an older run's C-frame sections (optional)")
    parser.add_argument("--png", type=Path, default=HERE / "bench" / "g-host-h200.png")
    args = parser.parse_args()
    split = json.loads(args.split_json.read_text())
    sections = json.loads(args.sections_json.read_text()) if args.sections_json else None
    draw(split, sections, args.png)


if __name__ == "__main__":
    main()
