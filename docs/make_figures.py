"""Draw docs/img/<hazard>.png: the model's timeline of each hazard, unfenced and fenced.

    python3 docs/make_figures.py        (needs matplotlib; runs on the model, no GPU)

Each operation is a box on its stream's row, in the order the adversarial scheduler ran it;
red arrows join the two accesses of each race the model reported.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from streamsafe.hazards import SCENARIOS, contract_wrap, run_scenario  # noqa: E402
from streamsafe.testing.labs import SimLab  # noqa: E402

OUT = Path(__file__).parent / "img"
COLORS = {"transfer": "#a6cee3", "inference": "#1f78b4", "conversion": "#33a02c", "copy": "#ff7f00",
          "producer": "#b15928", "release": "#e31a1c", "event": "#cccccc", "host": "#6a3d9a"}


def _label(name: str) -> tuple[str, str]:
    short = name.split(".")[-1] if "." in name else name
    for key in ("transfer", "inference", "conversion", "release"):
        if key in name:
            return key, "release" if key == "release" else key
    if name.startswith("consumer"):
        return "copy", "copy"
    if name.startswith("producer"):
        return "write" if "write" in name else "reuse", "producer"
    if name.startswith("event"):
        return "rec" if "record" in name else "wait", "event"
    if name == "host wait":
        return "wait", "host"
    if name.startswith("download"):
        return "read", "event"
    return short[:8], "event"


def _short(where: str) -> str:
    if where == "host":
        return "host"
    kind = where.split(" stream")[0]
    return f"{kind} {where.split()[2][-4:]}" if where.split()[0] in ("blocking", "non-blocking") else kind


def draw(ax: plt.Axes, trace: list[dict], races: list, title: str) -> None:
    rows: dict[str, int] = {}
    steps: dict[int, tuple[int, int]] = {}
    for op in trace:
        row = rows.setdefault(op["where"], len(rows))
        label, kind = _label(op["name"])
        x = op["step"]
        ax.add_patch(plt.Rectangle((x, row - 0.35), 0.9, 0.7, color=COLORS[kind], ec="black", lw=0.4))
        ax.text(x + 0.45, row, label, ha="center", va="center", fontsize=6, rotation=90 if len(label) > 4 else 0)
        if op["issued"] >= 0:
            steps[op["issued"]] = (x, row)
    for race in races:
        a, b = steps.get(race.first.op_index), steps.get(race.second.op_index)
        if a and b:
            ax.annotate("", xy=(b[0] + 0.45, b[1]), xytext=(a[0] + 0.45, a[1]),
                        arrowprops={"arrowstyle": "->", "color": "red", "lw": 1.4})
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_short(w) for w in rows], fontsize=7)
    ax.set_xlim(-0.5, max(1, len(trace)) + 0.5)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("order the operations ran in (model)", fontsize=7)
    ax.set_title(title, fontsize=8)
    ax.tick_params(axis="x", labelsize=6)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for hazard in ("H1", "H2", "H3", "H4", "H5", "H6", "H12"):
        sc = next(s for s in SCENARIOS if s.hazard == hazard and not s.safe)
        fig, axes = plt.subplots(1, 2, figsize=(12, 2.8), sharey=False)
        for ax, strategy in zip(axes, ("none", "event")):
            lab = SimLab()
            lab.backend.trace = []
            row = run_scenario(sc, lab, frames=2, strategy=strategy, wrap=contract_wrap(strategy))
            verdict = f"races: {', '.join(row.hazards_reported)}" if row.hazards_reported else "no race"
            draw(ax, lab.backend.trace, lab.races(), f"{hazard} {sc.title} - strategy={strategy}: {verdict}, corrupt {row.corrupt_frames}/2")
        fig.tight_layout()
        fig.savefig(OUT / f"{hazard}.png", dpi=100)
        plt.close(fig)
        print("wrote", OUT / f"{hazard}.png")


if __name__ == "__main__":
    main()
