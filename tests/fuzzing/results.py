"""One program's result under one strategy, and the totals of many (:func:`summarize`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .program import Program

__all__ = ["Result", "summarize"]


@dataclass
class Result:
    """One program under one strategy on one backend."""

    program: Program
    strategy: str
    backend: str
    frames: int = 0
    """Frames whose copy was checked."""
    corrupt: int = 0
    corrupt_frames: list[int] = field(default_factory=list)
    races: int = 0
    race_samples: list[str] = field(default_factory=list)
    hazards: list[str] = field(default_factory=list)
    """The hazard ids of the races (the model's attribution)."""
    error: str | None = None
    """The exception that stopped the program, with where it was raised."""
    skipped: str | None = None
    """Why the strategy does not apply (``async`` with a conversion stream that is not legacy)."""
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    per_consumer: dict[str, list[int]] = field(default_factory=dict)
    """Consumer label -> [frames, corrupt]."""

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.corrupt == 0 and self.races == 0 and self.error is None)

    def verdict(self) -> str:
        if self.skipped:
            return f"skipped ({self.skipped})"
        parts = [f"{self.corrupt}/{self.frames} corrupt"]
        if self.corrupt_frames:
            parts.append(f"frames {self.corrupt_frames[:8]}")
        if self.races:
            parts.append(f"{self.races} races {','.join(self.hazards)}")
        if self.error:
            parts.append(f"ERROR {self.error}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"[{self.backend} {self.strategy}] {self.verdict()} :: {self.program.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.program.seed,
            "program": self.program.describe(),
            "kind": self.program.kind(),
            "strategy": self.strategy,
            "backend": self.backend,
            "frames": self.frames,
            "corrupt": self.corrupt,
            "corrupt_frames": self.corrupt_frames[:20],
            "races": self.races,
            "hazards": self.hazards,
            "race_samples": self.race_samples,
            "error": self.error,
            "skipped": self.skipped,
            "warnings": self.warnings[:3],
            "seconds": round(self.seconds, 3),
        }


def summarize(results: Sequence[Result]) -> dict[str, Any]:
    """Totals per strategy, per program kind (effect/inputs/guards) and per consumer, and the failures."""
    out: dict[str, Any] = {"strategies": {}, "failures": []}
    for r in results:
        s = out["strategies"].setdefault(
            r.strategy,
            {"programs": 0, "frames": 0, "corrupt": 0, "races": 0, "errors": 0, "skipped": 0, "seconds": 0.0,
             "by_kind": {}, "by_effect": {}, "by_inputs": {}, "by_consumer": {}},
        )
        s["programs"] += 1
        s["frames"] += r.frames
        s["corrupt"] += r.corrupt
        s["races"] += r.races
        s["errors"] += r.error is not None
        s["skipped"] += r.skipped is not None
        s["seconds"] = round(s["seconds"] + r.seconds, 3)
        for table, key in (("by_kind", r.program.kind()), ("by_effect", r.program.effect), ("by_inputs", r.program.inputs)):
            row = s[table].setdefault(key, {"frames": 0, "corrupt": 0, "errors": 0})
            row["frames"] += r.frames
            row["corrupt"] += r.corrupt
            row["errors"] += r.error is not None
        for label, (frames, corrupt) in r.per_consumer.items():
            fw = label.split("-", 1)[0]
            for key in (fw, label):
                row = s["by_consumer"].setdefault(key, {"frames": 0, "corrupt": 0})
                row["frames"] += frames
                row["corrupt"] += corrupt
        if not r.ok:
            out["failures"].append(r.to_dict())
    return out


def _table(results: Sequence[Result]) -> str:
    summary = summarize(results)
    lines = [f"{'strategy':<9} {'programs':>8} {'frames':>7} {'corrupt':>7} {'races':>6} {'errors':>6} {'skipped':>7}"]
    for name, s in summary["strategies"].items():
        lines.append(
            f"{name:<9} {s['programs']:>8} {s['frames']:>7} {s['corrupt']:>7} {s['races']:>6} {s['errors']:>6} {s['skipped']:>7}"
        )
    return "\n".join(lines)
