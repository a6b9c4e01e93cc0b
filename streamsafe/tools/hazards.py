"""The hazard matrix: each hazard of the hazard table (docs/design.md), run on the emulated effects.

Every scenario is a short pipeline (producer → effect → consumer) on streams of chosen
kinds. It runs on a lab: the model (:class:`~streamsafe.testing.labs.SimLab`), which
reports every race, or a GPU (:class:`~streamsafe.testing.labs.GpuLab`), which counts
corrupted frames; on a GPU the model's verdict for the same scenario is run beside it.
Each race is attributed to a hazard by the two stages it joins (:func:`classify`).
Control scenarios (``safe=True``) use stream kinds that make the hazard impossible.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import HostWaitWarning
from ..sim.races import Race
from ..testing import _kernels as K
from ..testing.effects import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from ..testing.labs import GpuLab, Lab, SimLab

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
    "format_summary",
    "format_verdict",
    "failures",
    "auto_fence",
    "HAZARD_EDGES",
    "LEGEND",
    "LEGEND_FULL",
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
    ("release", "consumer.copy"): "H7",  # a read of released memory (a view kept across close or a resize)
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
    dev = getattr(lab, "device", 0)
    if sc.effect == "TrueHDR":
        fx: Any = TrueHDR(backend=lab.backend, latency_us=lat, device=dev)
    elif sc.effect == "VideoSuperRes":
        fx = VideoSuperRes(backend=lab.backend, latency_us=lat, image_encoding=ImageEncoding[sc.encoding], device=dev)
        fx.output_height, fx.output_width = out_hw
    else:  # pragma: no cover - no scenario uses it yet
        fx = VideoFrameGeneration(backend=lab.backend, latency_us=lat, device=dev)
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
        from ..contract import StreamContract
        from ..strategy import as_strategy

        producer = streams["P"] if streams["P"] != streams["S"] else None
        return StreamContract(effect, streams["S"], strategy=as_strategy(strategy), input_stream=producer)

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
    with warnings.catch_warnings():  # (the scenarios are streamsafe's own: no declaration of the user's to advise)
        warnings.simplefilter("ignore", HostWaitWarning)
        return _run_matrix(backend, frames, scenarios, strategies, wrap_for, size, trace)


def _run_matrix(backend: str, frames: int | None, scenarios: Sequence[Scenario], strategies: Iterable[str],
                wrap_for: Callable[[str], Wrap], size: tuple[int, int] | None, trace: list[dict[str, Any]] | None) -> list[Row]:
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


# -- presentation ------------------------------------------------------------------------------
# Everything below reads Row fields only (plus the contract's printable plan for the fence
# column), so it holds whatever numbers the matrix produces.

HAZARD_EDGES: dict[str, str] = {
    "H1": "the SDK reads the input on S before P has written it",
    "H2": "the RGB8 conversion on L reads before inference on S wrote (inside run())",
    "H3": "the copy on C reads before the conversion on L wrote",
    "H4": "the copy on C reads before inference on S wrote (RGB10A2, TrueHDR)",
    "H5": "the next run() overwrites the output while C still copies it",
    "H6": "close()/resize frees the output while C still copies it",
    "H12": "P writes the input again (allocator reuse) while S still reads it",
    "-": "no hazard: every stream is the legacy stream",
}
"""One line per hazard id: what goes wrong without a fence (P, S, L, C as in the legend)."""

_KIND_LETTER = {"legacy": "0", "per-thread": "t", "blocking": "b", "non-blocking": "n", "sdk": "S"}

LEGEND = """\
Legend
  P S L C  streams: P input producer, S the SDK's stream_ptr, L the RGB8 conversion (stream 0),
           C the consumer that imports and copies the output
  race?    without streamsafe (strategy none), did the model see this row's hazard race? It checks
           every pair of accesses (happens-before), so a race counts even when timing hides it
  corrupt  frames whose copy differs from a NumPy reference, of the frames run
  auto event async stream device
           the fenced strategies: auto picks the cheapest sound plan; event = device-side event
           fences, run(non_blocking=False); async = SDK on a blocking shadow stream,
           non_blocking=True; stream = host waits for each stream involved; device = host waits
           for the whole device (the vendor's documented fallback)
  ok       no corrupt frame and no race: the strategy fixed it
  2/4 H3   2 of 4 frames corrupt; H3 = a race of hazard H3 the fence missed. Any such cell FAILs
  control  stream kinds that make the hazard impossible: they show no fence is needed there.
           Another hazard may still corrupt frames there without streamsafe (its name follows the
           count, e.g. "3/4 (H5)"): not a failure
  fence    what auto does for this hazard on that row's streams ("X waits on Y": a device-side
           event wait, the host does not block)"""

LEGEND_FULL = """\
  --full matrix columns:
  hazard   the hazard a scenario provokes; "ctl" = its control
  P S L C  stream kinds: 0 legacy default stream (stream 0), t per-thread default stream,
           b blocking stream, n non-blocking stream, S the SDK stream itself, - not used
           (RGB10A2 output has no conversion)
  nb       run(non_blocking=...) the pipeline asks for (a fenced strategy may override it)
  enc      output encoding: RGB8 (float32 3xHxW, converted on L) or RGB10A2 (packed uint32)
  races    hazards of every race the model reported ("-": none)
  model    on a GPU: corrupt frames on the model for the same scenario (the GPU count is timing)"""


def _stream_letters(streams: str) -> str:
    kinds = dict(part.split("=", 1) for part in streams.split())
    return " ".join(_KIND_LETTER.get(kinds[k], "?") if k in kinds else "-" for k in "PSLC")


def _align(head: Sequence[str], body: Sequence[Sequence[str]], indent: str = "") -> tuple[str, list[str]]:
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return indent + fmt.format(*head).rstrip(), [indent + fmt.format(*line).rstrip() for line in body]


def _title(rows: Sequence[Row]) -> str:
    n = "/".join(map(str, sorted({r.frames for r in rows})))
    if any(r.backend != "sim" for r in rows):
        return f"(GPU: {n} frames per scenario; corrupt: on the GPU; race: the model's verdict)"
    return f"(simulated backend, no GPU: {n} frames per scenario, adversarial schedule)"


def format_table(rows: Sequence[Row]) -> str:
    """Every row of the matrix, grouped by strategy (``streamsafe hazards --full``)."""
    gpu = any(r.backend != "sim" for r in rows)
    head = ["hazard", "scenario", "P S L C", "nb", "enc", "races", "corrupt"] + (["model"] if gpu else [])
    lines = [f"Hazard matrix {_title(rows)}"]
    for strategy in dict.fromkeys(r.strategy for r in rows):
        body = []
        for r in rows:
            if r.strategy != strategy:
                continue
            line = [
                r.hazard + (" ctl" if r.safe and r.hazard != "-" else ""),
                r.scenario,
                _stream_letters(r.streams),
                "yes" if r.non_blocking else "no",
                r.encoding,
                ",".join(r.hazards_reported) or "-",
                f"{r.corrupt_frames}/{r.frames}",
            ]
            if gpu:
                line.append(f"{r.model_corrupt_frames}/{r.model_frames}")
            body.append(line)
        what = "no streamsafe: the raw effect" if strategy == "none" else "streamsafe with this strategy"
        header, text = _align(head, body, "  ")
        lines += ["", f"strategy {strategy} ({what})", header, *text]
    return "\n".join(lines)


def failures(rows: Sequence[Row]) -> list[Row]:
    """Rows where a fenced strategy (anything but ``none``) corrupted a frame or left a race."""
    return [
        r for r in rows
        if r.strategy != "none"
        and (r.corrupt_frames > 0 or r.model_corrupt_frames > 0 or r.race_reported or bool(r.hazards_reported))
    ]


def _cell(r: Row) -> str:
    if r.corrupt_frames == 0 and not r.race_reported and not r.hazards_reported:
        return "ok"
    races = ",".join(r.hazards_reported) or (r.hazard if r.race_reported else "")
    return f"{r.corrupt_frames}/{r.frames}" + (f" {races}" if races else "")


def _letter(stream: Any, named: dict[str, Any], shadow: Any, prefer: str) -> str:
    """``stream`` as P/S/L/C (or ``shadow``); where two names are one stream, ``prefer`` wins."""
    if stream is not None and stream == shadow and shadow != named["S"]:
        return "shadow"
    for letter in dict.fromkeys(prefer + "SPCL"):
        if named.get(letter) is not None and stream == named[letter]:
            return letter
    return str(stream)


# Which name a fence's (waiter, signaller) most likely means, by when it happens.
_ROLES = {"before run": ("S", "P"), "inside run": ("L", "S"), "after run": ("P", "S"), "at import": ("C", "L"),
          "before next run": ("S", "C"), "before release": ("S", "C")}


def _fence_text(fence: Any, named: dict[str, Any], shadow: Any) -> str:
    wp, sp = _ROLES.get(fence.when, ("S", "S"))
    w, s = _letter(fence.waiter, named, shadow, wp), _letter(fence.signaller, named, shadow, sp)
    text = {
        "device-wait": f"{w} waits on {s}",
        "host-wait": f"host waits for {s}",
        "device-sync": "host waits for the device",
        "forward-dlpack": f"__dlpack__(stream={w})",
        "sdk-blocking": "run(non_blocking=False)",
        "shadow-stream": "SDK on a blocking shadow stream, non_blocking=True",
        "protect-input": f"input kept from reuse until {s} read it",
    }.get(fence.action, fence.action)
    when = {"before next run": " before the next run()", "before release": " before close()"}.get(fence.when, "")
    return text + when


def auto_fence(sc: Scenario) -> str:
    """What ``strategy="auto"`` plans for ``sc.hazard`` on ``sc``'s streams, in P/S/L/C terms."""
    from ..contract import StreamContract

    try:
        lab = SimLab()
        sdk = lab.stream(sc.sdk)
        named = {
            "S": sdk,
            "P": sdk if sc.producer == "sdk" else lab.stream(sc.producer),
            "C": sdk if sc.consumer == "sdk" else lab.stream(sc.consumer),
            "L": None if sc.encoding == "RGB10A2" or sc.effect == "TrueHDR" else lab.stream("legacy"),
        }
        effect = _make_effect(sc, lab, (16, 16), (32, 32), False)
        contract = StreamContract(
            effect, sdk, strategy="auto", input_stream=named["P"] if named["P"] != sdk else None,
            consumer_stream=named["C"],
        )
        plan = contract.plan
        effect.close()
    except Exception as e:  # the fence column is informative only; the matrix itself has run
        return f"(no plan: {type(e).__name__})"
    fences = [f for f in (*plan.fences, *plan.on_release) if f.hazard == sc.hazard]
    resolved = plan.strategy.value
    label = "auto" if resolved == "auto" else f"auto = {resolved}"
    texts = list(dict.fromkeys(_fence_text(f, named, plan.run_stream) for f in fences))
    return f"fence ({label}): " + ("; ".join(texts) if texts else "no fence of its own: the plan's other fences order this edge")


def format_summary(rows: Sequence[Row], scenarios: Sequence[Scenario] = SCENARIOS) -> str:
    """One short table per hazard: does it race without streamsafe, and what each strategy leaves."""
    by_cell = {(r.hazard, r.scenario, r.safe, r.strategy): r for r in rows}
    strategies = [s for s in dict.fromkeys(r.strategy for r in rows) if s != "none"]
    keys = list(dict.fromkeys((r.hazard, r.scenario, r.safe) for r in rows))
    known = {(sc.hazard, sc.title, sc.safe): sc for sc in scenarios}
    head = ["scenario", "race?", "corrupt", *strategies]
    body: list[list[str]] = []
    notes: dict[int, str] = {}  # body index -> footnote, for controls corrupted by another hazard
    for hazard, title, safe in keys:
        base = by_cell.get((hazard, title, safe, "none"))
        race, corrupt = "-", "-"
        if base is not None:
            race = "yes" if base.race_reported else "no"
            corrupt = f"{base.corrupt_frames}/{base.frames}"
            others = [h for h in base.hazards_reported if h != hazard]
            if safe and not base.race_reported and (base.corrupt_frames or others):
                corrupt += f" ({', '.join(others)})" if others else " (other)"
                culprit = ", ".join(others) or "another hazard"
                notes[len(body)] = f"({culprit} corrupts these frames without streamsafe; {hazard} does not race: the control passes)"
            elif not safe and hazard != "-" and not base.race_reported:
                notes[len(body)] = "! this scenario did not show its hazard without streamsafe"
        cells = [_cell(by_cell[(hazard, title, safe, s)]) if (hazard, title, safe, s) in by_cell else "-" for s in strategies]
        body.append([title, race, corrupt, *cells])
    header, text = _align(head, body, "  ")
    over = " " * header.index("race?") + "no streamsafe"
    if strategies:
        over = f"{over:<{header.index(strategies[0], header.index('corrupt'))}}with streamsafe, per strategy"
    lines = [f"Verdict per hazard {_title(rows)}", "", over, header]
    for hazard in dict.fromkeys(k[0] for k in keys):
        group = [(j, k) for j, k in enumerate(keys) if k[0] == hazard]
        lines += ["", f"{hazard:<4}{HAZARD_EDGES.get(hazard, '')}"]
        hazard_rows = [j for j, k in group if not k[2]]
        controls = [j for j, k in group if k[2]]
        for j in hazard_rows:
            if keys[j] in known:
                lines.append(f"    {auto_fence(known[keys[j]])}")
        for j in hazard_rows:
            lines += [text[j], *([f"    {notes[j]}"] if j in notes else [])]
        if controls and hazard != "-":
            lines.append(f"  controls (these stream kinds make {hazard} impossible):")
        for j in controls:
            lines += [text[j], *([f"    {notes[j]}"] if j in notes else [])]
    lines += ["", "Not in this matrix (tested in the suite; the guide's hazard table explains each): H7 a zero-copy",
              "view kept past the next run (StaleOutputError), H8 JAX's import, H9 a capsule imported twice, H10",
              "several GPUs, H11 the per-thread default stream, H13 several guards on one effect; D1, D5, D6",
              "NVIDIA's decoder (tests/test_decoder.py)."]
    return "\n".join(lines)


def format_verdict(rows: Sequence[Row]) -> str:
    """The last word: PASS, or FAIL with each fenced row that corrupted a frame or missed a race."""
    bad = failures(rows)
    fenced = [r for r in rows if r.strategy != "none"]
    names = ", ".join(dict.fromkeys(r.strategy for r in fenced))
    if not fenced:
        return ("VERDICT: nothing to judge: only strategy none ran (no streamsafe). "
                "Run without --strategy to compare the fenced strategies.")
    if not bad:
        total = sum(r.frames for r in fenced)
        scenarios = len({(r.hazard, r.scenario, r.safe) for r in fenced})
        return (f"VERDICT: PASS. Every fenced strategy ({names}) copied all {total} frames\n"
                f"intact, and the model found no race, in {scenarios} scenarios.")
    lines = [f"VERDICT: FAIL. {len(bad)} fenced run(s) corrupted frames or missed a race:"]
    for r in bad:
        races = ",".join(r.hazards_reported) or (r.hazard if r.race_reported else "")
        what = [f"{r.corrupt_frames}/{r.frames} frames corrupt"] + ([f"race {races} missed"] if races else [])
        lines.append(f"  {r.strategy:<6}  {r.hazard:<3}  {r.scenario}: {', '.join(what)}")
    lines.append("See every row with --full, and the model's timelines with --trace FILE.")
    return "\n".join(lines)


def rows_to_json(rows: Sequence[Row]) -> str:
    """Every row as one JSON array of objects (the fields of :class:`Row`)."""
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
