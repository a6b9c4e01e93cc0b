"""The hazard matrix: each hazard of DESIGN.md section 2, run on the emulated effects.

Every scenario is a short pipeline (producer → effect → consumer) on streams of chosen
kinds. It runs on a lab: the model (:class:`~streamsafe.testing.labs.SimLab`), which
reports every race, or a GPU (:class:`~streamsafe.testing.labs.GpuLab`), which counts
corrupted frames; on a GPU the model's verdict for the same scenario is run beside it.
Each race is attributed to a hazard by the two stages it joins (:func:`classify`).
Control scenarios (``safe=True``) use stream kinds that make the hazard impossible.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .races import Race
from .testing import _kernels as K
from .testing.effects import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from .testing.labs import GpuLab, Lab, SimLab

__all__ = [
    "Scenario",
    "Row",
    "SCENARIOS",
    "STRATEGIES",
    "classify",
    "contract_wrap",
    "run_scenario",
    "run_matrix",
    "format_table",
    "rows_to_json",
    "chrome_trace",
]

_STAGE_PAIRS: dict[tuple[str, str], str] = {
    ("producer.write", "transfer"): "H1",
    ("producer.reuse", "transfer"): "H1",
    ("inference", "conversion"): "H2",
    ("conversion", "consumer.copy"): "H3",
    ("inference", "consumer.copy"): "H4",
    ("consumer.copy", "conversion"): "H5",
    ("consumer.copy", "inference"): "H5",
    ("conversion", "inference"): "H5",  # the next inference overwrites the 8-bit result still being converted
    ("consumer.copy", "release"): "H6",
    ("transfer", "producer.reuse"): "H12",
}


def _stage(op: str) -> str:
    if op.startswith(("producer.", "consumer.")):
        return op
    tail = op.rsplit(".", 1)[-1]
    return "release" if tail.startswith("release") else tail


def classify(race: Race) -> str:
    """The hazard id (``H1``...) a race belongs to, from the stages of its two accesses; ``?`` if none."""
    return _STAGE_PAIRS.get((_stage(race.first.op), _stage(race.second.op)), "?")


@dataclass(frozen=True)
class Scenario:
    """One pipeline configuration. Stream fields are kinds, or ``"sdk"`` for the SDK stream itself."""

    hazard: str
    title: str
    effect: str = "VideoSuperRes"
    encoding: str = "RGB8"
    producer: str = "sdk"
    sdk: str = "non-blocking"
    consumer: str = "sdk"
    non_blocking: bool = False
    consumer_waits_for_conversion: bool = False
    """The consumer fences itself after the conversion stream (isolates H5/H6 from H3)."""
    reuse_input: bool = False
    """The producer drops each input after ``run()``; its allocator recycles the memory for the next frame (H12)."""
    close_each_frame: bool = False
    """A fresh effect per frame, closed right after the consumer's copy is issued (H6)."""
    host_waits_for_copy: bool = False
    """The host waits for the consumer's stream before close (the H6 fix, for a control row)."""
    safe: bool = False
    delays_us: dict[str, float] = field(default_factory=dict)
    """GPU-only spins that widen the race window: producer, transfer, inference, conversion, consumer."""

    @property
    def id(self) -> str:
        return f"{self.hazard}{'-safe' if self.safe else ''}:{self.title}"


SLOW = 5000.0
"""Microseconds of spin on the GPU: longer than the host time between the racing issues
(the emulated run() costs about 2 ms of host time; measured on the H200)."""

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("H1", "producer on another stream", producer="non-blocking", sdk="blocking", delays_us={"producer": SLOW}),
    Scenario("H1", "producer on the SDK stream", producer="sdk", sdk="blocking", safe=True, delays_us={"producer": SLOW}),
    Scenario("H2", "non_blocking=True, non-blocking SDK stream", sdk="non-blocking", consumer="legacy",
             non_blocking=True, delays_us={"inference": SLOW}),
    Scenario("H2", "non_blocking=True, blocking SDK stream", sdk="blocking", consumer="legacy",
             non_blocking=True, safe=True, delays_us={"inference": SLOW}),
    Scenario("H2", "non_blocking=False, non-blocking SDK stream", sdk="non-blocking", consumer="legacy",
             safe=True, delays_us={"inference": SLOW}),
    Scenario("H3", "consumer on the non-blocking SDK stream", sdk="non-blocking", consumer="sdk",
             delays_us={"conversion": SLOW}),
    Scenario("H3", "consumer on the legacy stream", sdk="non-blocking", consumer="legacy", safe=True,
             delays_us={"conversion": SLOW}),
    Scenario("H4", "TrueHDR, consumer on another stream", effect="TrueHDR", encoding="RGB10A2", sdk="blocking",
             consumer="non-blocking", non_blocking=True, delays_us={"inference": SLOW}),
    Scenario("H4", "TrueHDR, consumer on the SDK stream", effect="TrueHDR", encoding="RGB10A2", sdk="blocking",
             consumer="sdk", non_blocking=True, safe=True, delays_us={"inference": SLOW}),
    Scenario("H5", "copy on a non-blocking stream, next run()", sdk="legacy", consumer="non-blocking",
             consumer_waits_for_conversion=True, delays_us={"consumer": SLOW}),
    Scenario("H5", "copy on a blocking stream, next run()", sdk="legacy", consumer="blocking",
             consumer_waits_for_conversion=True, safe=True, delays_us={"consumer": SLOW}),
    Scenario("H6", "copy still running at close()", sdk="legacy", consumer="non-blocking",
             consumer_waits_for_conversion=True, close_each_frame=True, delays_us={"consumer": SLOW}),
    Scenario("H6", "host waits for the copy before close()", sdk="legacy", consumer="non-blocking",
             consumer_waits_for_conversion=True, close_each_frame=True, host_waits_for_copy=True, safe=True,
             delays_us={"consumer": SLOW}),
    Scenario("H12", "producer reuses the input buffer", producer="non-blocking", sdk="blocking",
             non_blocking=True, reuse_input=True, delays_us={"transfer": SLOW}),
    Scenario("-", "everything on the legacy stream", producer="sdk", sdk="legacy", consumer="sdk", safe=True),
)


@dataclass
class Row:
    """One line of the matrix."""

    hazard: str
    scenario: str
    safe: bool
    strategy: str
    effect: str
    encoding: str
    streams: str
    non_blocking: bool
    race_reported: bool
    hazards_reported: list[str]
    frames: int
    corrupt_frames: int
    backend: str
    model_frames: int = 0
    model_corrupt_frames: int = 0
    races: list[str] = field(default_factory=list)


def _frame(i: int, h: int, w: int, encoding: str) -> np.ndarray:
    rng = np.random.default_rng(1000 + i)
    rgb = rng.random((3, h, w), dtype=np.float32)
    if encoding == "RGB10A2":
        return K.pack_rgb10a2(np, rgb)
    return rgb


def _reference(sc: Scenario, data: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    oh, ow = out_hw
    if sc.effect == "TrueHDR":
        return K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)
    if sc.encoding == "RGB10A2":
        return K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, data), oh, ow))
    u8 = K.to_rgb8(np, K.resize_bilinear(np, data, oh, ow))
    out = np.empty(u8.shape, np.float32)
    K.from_rgb8(np, u8, out)
    return out


def _make_effect(sc: Scenario, lab: Lab, hw: tuple[int, int], out_hw: tuple[int, int], gpu: bool) -> Any:
    lat = {k: v for k, v in sc.delays_us.items() if k in ("transfer", "inference", "conversion")} if gpu else None
    if sc.effect == "TrueHDR":
        fx: Any = TrueHDR(backend=lab.backend, latency_us=lat)
    elif sc.effect == "VideoSuperRes":
        fx = VideoSuperRes(backend=lab.backend, latency_us=lat, image_encoding=ImageEncoding[sc.encoding])
        fx.output_height, fx.output_width = out_hw
    else:  # pragma: no cover - no scenario uses it yet
        fx = VideoFrameGeneration(backend=lab.backend, latency_us=lat)
        fx.input_height, fx.input_width = hw
    fx.load()
    return fx


Wrap = Callable[[Any, dict[str, Any], Scenario], Any]
"""``wrap(effect, {"P": ..., "S": ..., "C": ...}, scenario) -> runner``: a strategy's way in."""


def _no_wrap(effect: Any, streams: dict[str, Any], sc: Scenario) -> Any:
    return effect


def contract_wrap(strategy: str) -> Wrap:
    """The way in for ``strategy``: the raw effect for ``none``, else a StreamContract.

    The scenario's producer stream is declared as the contract's ``input_stream`` when it
    differs from the SDK stream (the contract cannot see which stream wrote a frame)."""
    if strategy == "none":
        return _no_wrap

    def wrap(effect: Any, streams: dict[str, Any], sc: Scenario) -> Any:
        from .contract import StreamContract

        producer = streams["P"] if streams["P"] != streams["S"] else None
        return StreamContract(effect, streams["S"], strategy=strategy, input_stream=producer)

    return wrap


STRATEGIES = ("none", "auto", "event", "async", "stream", "device")


def run_scenario(
    sc: Scenario,
    lab: Lab,
    *,
    frames: int,
    size: tuple[int, int] = (16, 16),
    scale: int = 2,
    strategy: str = "none",
    wrap: Wrap = _no_wrap,
) -> Row:
    """Run ``frames`` frames of ``sc`` on ``lab`` and check each copied frame against NumPy."""
    gpu = lab.name != "sim"
    h, w = size
    out_hw = (h, w) if sc.effect == "TrueHDR" else (h * scale, w * scale)
    sdk = lab.stream(sc.sdk)
    producer = sdk if sc.producer == "sdk" else lab.stream(sc.producer)
    consumer = sdk if sc.consumer == "sdk" else lab.stream(sc.consumer)
    legacy = lab.stream("legacy")
    delays = sc.delays_us if gpu else {}
    streams = {"P": producer, "S": sdk, "C": consumer}
    effect = None if sc.close_each_frame else _make_effect(sc, lab, (h, w), out_hw, gpu)
    runner = None if effect is None else wrap(effect, streams, sc)
    copies: list[tuple[int, Any]] = []
    for i in range(frames):
        data = _frame(i, h, w, "RGB10A2" if sc.encoding == "RGB10A2" and sc.effect != "TrueHDR" else "RGB8")
        frame = lab.produce(data, producer, delay_us=delays.get("producer", 0.0), recycle=sc.reuse_input)
        if sc.close_each_frame:
            effect = _make_effect(sc, lab, (h, w), out_hw, gpu)
            runner = wrap(effect, streams, sc)
        assert runner is not None and effect is not None
        out = runner.run(frame, stream_ptr=sdk.ptr, non_blocking=sc.non_blocking)
        del frame  # the pipeline keeps no reference to its input (lets an allocator recycle it)
        if sc.consumer_waits_for_conversion and strategy == "none":
            lab.fence(consumer, legacy)
        copies.append((i, lab.consume(out.image, consumer, delay_us=delays.get("consumer", 0.0))))
        if sc.close_each_frame:
            if sc.host_waits_for_copy:
                lab.host_wait(consumer)
            runner.close() if hasattr(runner, "close") else effect.close()
    lab.synchronize()
    corrupt = 0
    for i, copy in copies:
        data = _frame(i, h, w, "RGB10A2" if sc.encoding == "RGB10A2" and sc.effect != "TrueHDR" else "RGB8")
        want = _reference(sc, data, out_hw)
        got = lab.read(copy)
        if got.shape != want.shape or not _close(got, want, gpu):
            corrupt += 1
    races = lab.races()
    found = sorted({classify(r) for r in races})
    stream_text = f"P={sc.producer} S={sc.sdk} L=legacy C={sc.consumer}"
    if sc.effect == "TrueHDR" or sc.encoding == "RGB10A2":
        stream_text = stream_text.replace(" L=legacy", "")
    return Row(
        hazard=sc.hazard,
        scenario=sc.title,
        safe=sc.safe,
        strategy=strategy,
        effect=sc.effect,
        encoding=sc.encoding,
        streams=stream_text,
        non_blocking=sc.non_blocking,
        race_reported=bool(races) if sc.hazard == "-" else sc.hazard in found,
        hazards_reported=found,
        frames=frames,
        corrupt_frames=corrupt,
        backend=lab.name,
        races=[str(r) for r in races[:3]],
    )


def _close(got: np.ndarray, want: np.ndarray, gpu: bool) -> bool:
    """Exact on the model; on the GPU one code step of float rounding is allowed (a race
    produces another frame's or garbage data, far beyond that)."""
    if got.dtype == np.uint32:
        if not gpu:
            return bool(np.array_equal(got, want))
        diff = [np.abs(((got >> s) & 0x3FF).astype(np.int64) - ((want >> s) & 0x3FF).astype(np.int64)).max() for s in (0, 10, 20)]
        return max(diff) <= 1 and bool(np.array_equal(got >> 30, want >> 30))
    return bool(np.allclose(got, want, atol=1.5 / 255 if gpu else 1e-6, rtol=0))


def run_matrix(
    *,
    backend: str = "sim",
    frames: int | None = None,
    scenarios: Sequence[Scenario] = SCENARIOS,
    strategies: Iterable[str] = ("none",),
    wrap_for: Callable[[str], Wrap] = contract_wrap,
    size: tuple[int, int] | None = None,
    trace: list[dict[str, Any]] | None = None,
) -> list[Row]:
    """Every scenario under every strategy, on the model (``sim``) or the GPU (``cuda``).

    On the GPU each row also carries the model's verdict for the same scenario. With
    ``trace`` (a list), the model's timeline of each scenario is appended to it.
    """
    if backend not in ("sim", "cuda"):
        raise ValueError(f"backend must be 'sim' or 'cuda', got {backend!r}")
    rows = []
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
        wrap = wrap_for(strategy)
        for sc in scenarios:
            lab = SimLab()
            if trace is not None:
                lab.backend.trace = []
            model_frames = (frames or 4) if backend == "sim" else 4
            model = run_scenario(sc, lab, frames=model_frames, strategy=strategy, wrap=wrap)
            model.model_frames, model.model_corrupt_frames = model.frames, model.corrupt_frames
            if trace is not None:
                trace.append({"scenario": sc.id, "strategy": strategy, "ops": lab.backend.trace, "races": model.races})
            if backend == "sim":
                rows.append(model)
                continue
            real = run_scenario(sc, GpuLab(), frames=frames or 100, size=size or (64, 64), strategy=strategy, wrap=wrap)
            real.race_reported, real.hazards_reported, real.races = model.race_reported, model.hazards_reported, model.races
            real.model_frames, real.model_corrupt_frames = model.frames, model.corrupt_frames
            rows.append(real)
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """The matrix as an aligned text table."""
    gpu = any(r.backend != "sim" for r in rows)
    title = (
        "Hazard matrix on the GPU (corrupt = frames whose copy differs from NumPy; race = the model's verdict)"
        if gpu
        else "Hazard matrix on the simulated backend (no GPU; corrupt = frames wrong under the adversarial schedule)"
    )
    head = ["hazard", "scenario", "strategy", "streams", "nb", "enc", "race?", "reported", "corrupt"]
    if gpu:
        head.append("model")
    body = []
    for r in rows:
        line = [
            r.hazard + (" (control)" if r.safe else ""),
            r.scenario,
            r.strategy,
            r.streams,
            "yes" if r.non_blocking else "no",
            r.encoding,
            "RACE" if r.race_reported else "none",
            ",".join(r.hazards_reported) or "-",
            f"{r.corrupt_frames}/{r.frames}",
        ]
        if gpu:
            line.append(f"{r.model_corrupt_frames}/{r.model_frames}")
        body.append(line)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [title, "", fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*line) for line in body]
    return "\n".join(lines)


def rows_to_json(rows: Sequence[Row]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=1)


def chrome_trace(traces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A Chrome/Perfetto trace: one process per scenario, one track per stream (and the host).

    Time is the model's execution order (10 us per operation), not GPU time. Fences are
    the ``event record``/``event wait`` slices, host waits are instants on the host track,
    and each race is an instant on the track of its second access.
    """
    events: list[dict[str, Any]] = []
    for pid, item in enumerate(traces, start=1):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{item['scenario']} [{item['strategy']}]"}})
        tids: dict[str, int] = {}
        for op in item["ops"]:
            tid = tids.setdefault(op["where"], len(tids) + 1)
            ts = op["step"] * 10
            if op["kind"] == "host-wait":
                events.append({"ph": "i", "s": "t", "name": op["name"], "pid": pid, "tid": tid, "ts": ts})
                continue
            cat = "fence" if op["name"].startswith("event ") else "work"
            events.append({"ph": "X", "name": op["name"], "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": 8,
                           "args": {"issued": op["issued"]}})
        for tid_name, tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tid_name}})
        for race in item["races"]:
            events.append({"ph": "i", "s": "p", "name": f"RACE: {race}", "pid": pid, "tid": 0, "ts": 0})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
