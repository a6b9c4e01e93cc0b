"""Draw docs/img/<hazard>.png: the model's timeline of each hazard, unfenced and fenced (and H11.png:
two threads' per-thread streams, fenced the old way and streamsafe's; D5.png: NVIDIA's decoder
rewriting a frame a consumer still copies, unguarded and guarded; D7.png: PyAV's NVDEC decoding into the
surface of a dropped frame a consumer still copies, unguarded and guarded).

    python3 docs/make_figures.py        (needs matplotlib; runs on the model, no GPU)

Each operation is a box on its stream's row, in the order the adversarial scheduler ran it;
red arrows join the two accesses of each race the model reported.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from streamsafe.tools.hazards import SCENARIOS, contract_wrap, run_scenario  # noqa: E402
from streamsafe.testing.labs import SimLab  # noqa: E402

OUT = Path(__file__).parent / "img"
COLORS = {"transfer": "#a6cee3", "inference": "#1f78b4", "conversion": "#33a02c", "copy": "#ff7f00",
          "producer": "#b15928", "release": "#e31a1c", "event": "#cccccc", "host": "#6a3d9a"}


def _label(name: str) -> tuple[str, str]:
    short = name.split(".")[-1] if "." in name else name
    if name.startswith("decode frame"):
        return "dec " + name.split()[-1], "producer"
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
    if where.startswith("per-thread stream of thread "):
        return f"per-thread {where.split(chr(39))[1]}"  # the thread's name
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


def _two_threads(old: bool) -> tuple[list[dict], list]:
    """One TrueHDR shared by threads T0 and T1 taking turns (3 frames), each copying its output on its own
    per-thread stream; ``old``: the fence's event recorded on "2" in the next run's thread (its own stream).
    Returns the model's trace and races."""
    import threading

    import numpy as np

    import streamsafe as ss
    from streamsafe import ledger as ledger_module, program as program_module
    from streamsafe.testing import TrueHDR

    sim = ss.sim.SimBackend(scheduler="adversarial")
    saved = (program_module.issuable, ledger_module.issuable)
    if old:
        program_module.issuable = ledger_module.issuable = lambda s: s  # type: ignore[assignment]
    try:
        fx = TrueHDR(backend=sim)
        fx.load()
        c = ss.StreamContract(fx, sim.create_stream(non_blocking=True), strategy="event")
        sim.trace = []
        turns = [threading.Event() for _ in range(4)]

        def worker(parity: int) -> None:
            for i in range(parity, 3, 2):
                turns[i].wait()
                try:
                    pt = sim.per_thread_stream()
                    with sim.use_stream(pt):
                        x = sim.empty((3, 16, 16), np.float32, name=f"frame{i}")
                        sim.launch(pt, "producer.write", lambda x=x: x.buffer.data.fill(0.5), writes=[x])
                        sim.copy(sim.from_dlpack(c.run(x).image, stream=pt), pt, name="consumer.copy")
                finally:
                    turns[i + 1].set()

        threads = [threading.Thread(target=worker, args=(p,), name=f"T{p}") for p in (0, 1)]
        for t in threads:
            t.start()
        turns[0].set()
        for t in threads:
            t.join()
        sim.synchronize_device()
    finally:
        program_module.issuable, ledger_module.issuable = saved
    return sim.trace, sim.races


def per_thread_figure() -> None:
    """H11 across threads: the next run, in the other thread, must wait for the last copy."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.2), sharey=False)
    for ax, old in zip(axes, (True, False)):
        trace, races = _two_threads(old)
        how = "the wait recorded on 2 in the next run's thread" if old else "streamsafe: through the legacy stream"
        verdict = f"{len(races)} race(s)" if races else "no race"
        draw(ax, trace, races, f"H11, two threads' per-thread streams - {how}: {verdict}")
    fig.tight_layout()
    fig.savefig(OUT / "H11.png", dpi=100)
    plt.close(fig)
    print("wrote", OUT / "H11.png")


def decoder_figure() -> None:
    """D5: a decoder's next batch rewrites the buffers of the last one while a consumer on another stream
    still copies them; guarded, the decoder's stream waits for the copies on the device."""
    import contextlib

    import streamsafe as ss
    from streamsafe.testing.fake_pynvvideocodec import OutputColorType, SimpleDecoder, sample_clip

    clip = sample_clip(8, (32, 16))
    fig, axes = plt.subplots(1, 2, figsize=(12, 2.8), sharey=False)
    for ax, guarded in zip(axes, (False, True)):
        sim = ss.sim.SimBackend(scheduler="adversarial")
        with ss.use_backend(sim):
            dec = SimpleDecoder(clip, cuda_stream=sim.create_stream(non_blocking=True).handle, output_color_type=OutputColorType.RGBP)
            consumer = sim.create_stream(non_blocking=True)
            sim.trace = []
            with ss.stream_contract(dec) if guarded else contextlib.nullcontext():
                for _ in range(2):
                    for frame in dec.get_batch_frames(2):
                        sim.copy(sim.from_dlpack(frame, stream=consumer), consumer, name="consumer.copy")
            sim.synchronize_device()
        verdict = f"{len(sim.races)} race(s)" if sim.races else "no race"
        how = "guarded: the decoder's stream waits for the copies" if guarded else "unguarded: the next batch overwrites them"
        draw(ax, sim.trace, sim.races, f"D5 - {how}: {verdict}")
    fig.tight_layout()
    fig.savefig(OUT / "D5.png", dpi=100)
    plt.close(fig)
    print("wrote", OUT / "D5.png")


def pyav_figure() -> None:
    """D7: PyAV's NVDEC decodes the frame after next into the surface of a frame the program dropped while a
    consumer on another stream still copies it; guarded, the dropped frame is kept until an event after the copy
    has completed (the adversarial model never runs it early: every frame gets a surface of its own)."""
    import contextlib

    from av.codec.hwaccel import HWAccel

    import streamsafe as ss
    from streamsafe.testing import sample_clip
    from streamsafe.testing.fake_pyav import EmulatedInputContainer

    clip = sample_clip(8, (32, 16))
    fig, axes = plt.subplots(1, 2, figsize=(12, 2.8), sharey=False)
    for ax, guarded in zip(axes, (False, True)):
        sim = ss.sim.SimBackend(scheduler="adversarial")
        with ss.use_backend(sim):
            container = EmulatedInputContainer(clip, HWAccel(device_type="cuda", is_hw_owned=True))
            consumer = sim.create_stream(non_blocking=True)
            sim.trace = []
            with ss.stream_contract(container) if guarded else contextlib.nullcontext():
                for i, frame in enumerate(container.decode(video=0)):
                    plane = frame.planes[0]
                    view = sim.from_dlpack(plane, stream=consumer) if guarded else sim.from_dlpack(plane.__dlpack__())
                    sim.copy(view, consumer, name="consumer.copy")
                    del view, plane
                    if i == 3:
                        break
            sim.synchronize_device()
        verdict = f"{len(sim.races)} race(s)" if sim.races else "no race"
        how = ("guarded: a dropped frame is kept until an event after its copy" if guarded
               else "unguarded: a dropped frame's surface is decoded into again")
        draw(ax, sim.trace, sim.races, f"D7 - {how}: {verdict}")
    fig.tight_layout()
    fig.savefig(OUT / "D7.png", dpi=100)
    plt.close(fig)
    print("wrote", OUT / "D7.png")


if __name__ == "__main__":
    main()
    per_thread_figure()
    decoder_figure()
    pyav_figure()
