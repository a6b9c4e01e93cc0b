"""Draw docs/bench/multi-gpu-h200.png from a multi-GPU bench JSON (``python -m streamsafe.bench.multi_gpu --json``).

    python3 docs/make_multi_gpu_figure.py [JSON] [PNG]     (needs matplotlib; no GPU)

JSON defaults to the committed run, ``docs/bench/multi-gpu-h200.json``; PNG to ``docs/bench/multi-gpu-h200.png``.
A new run: ``PYTHONPATH=. python3 -m streamsafe.bench.multi_gpu --backend cuda --json multi-gpu.json`` on a
machine with two GPUs, then ``python3 docs/make_multi_gpu_figure.py multi-gpu.json multi-gpu.png``.

Per row: aggregate frames/s with one pipeline on one GPU, one pipeline per GPU on two, and GPU 1's
frames/s while GPU 0's pipeline device-syncs every frame, beside GPU 1's in the plain two-GPU run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "bench/multi-gpu-h200.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "bench/multi-gpu-h200.png"
    summary = json.loads(src.read_text())["summary"]
    rows = list(summary["rows"])
    one = [summary["rows"][r]["scenarios"]["gpus-1"]["fps"] for r in rows]
    two = [summary["rows"][r]["scenarios"]["gpus-2"]["fps"] for r in rows]
    gpu1 = [summary["rows"][r]["scenarios"]["gpus-2"]["lanes"][1]["fps"] for r in rows]
    gpu1_sync0 = [summary["rows"][r]["scenarios"]["gpus-2-sync0"]["lanes"][1]["fps"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    x = range(len(rows))
    w = 0.38
    left.bar([i - w / 2 for i in x], one, w, label="1 GPU", color="#9ecae1")
    left.bar([i + w / 2 for i in x], two, w, label="2 GPUs (a pipeline and a thread each)", color="#3182bd")
    for i, (a, b) in enumerate(zip(one, two)):
        left.text(i + w / 2, b, f"{b / a:.2f}x", ha="center", va="bottom", fontsize=8)
    left.set_xticks(list(x), rows)
    left.set_ylabel("aggregate frames/s")
    left.set_title("scaling from one H200 to two (labels: 2-GPU over 1-GPU)")
    left.set_ylim(0, max(two) * 1.3)
    left.legend(fontsize=8, loc="upper left", ncol=2)
    right.bar([i - w / 2 for i in x], gpu1, w, label="GPU 1, GPU 0 as the row", color="#a1d99b")
    right.bar([i + w / 2 for i in x], gpu1_sync0, w, label="GPU 1, GPU 0 device-syncs every frame", color="#31a354")
    right.set_xticks(list(x), rows, rotation=30)
    right.set_ylabel("GPU 1 pipeline frames/s")
    right.set_title("a device-wide sync on GPU 0 does not stall GPU 1")
    right.legend(fontsize=8, loc="lower left")
    env = summary["environment"]
    fig.suptitle(f"streamsafe multi-GPU bench: {' + '.join(env['gpus'])}; lane {env['lane']['title']}; "
                 f"{summary['frames_per_lane']} timed frames per lane ('none' corrupts frames)", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
