"""Benchmark scenarios and the pipelines that run them, on the GPU or on the model.

Every pipeline is the same user program: frames produced on the user's stream S (a
torch side stream, non-blocking), the effect called through a contract with the
strategy under test (``none``: the raw effect with ``non_blocking=True``, no fence at all:
the unsafe reference), or with the fences an expert writes by hand (``hand``,
``hand-sync``: :mod:`streamsafe.bench.hand`), each output copied by the scenario's
consumer, and every copy checked against a NumPy reference after its block (untimed). A torch
consumer copies a streamsafe output with ``out.torch()`` and a raw capsule with
``torch.from_dlpack(capsule).clone()`` (:func:`torch_clone`).
The emulated effects' stage costs are set with their latency knob, so the GPU work per
frame is realistic and known. The video-server scenarios (``server-N``) run N such
pipelines, each with its own effect, stream and thread (:mod:`streamsafe.bench.server`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim.backend import SimBackend
from ..contract import StreamContract
from ..frameworks import cupy_external_stream
from ..outputs import SafeImage
from ..strategy import Strategy
from ..streams import LEGACY_HANDLE, Stream
from ..testing import _kernels as K
from ..testing.effects import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from .hand import FenceSites, HandRunner, RawFences, SimFences, own_method
from .harness import HAND_ROWS, USAGE_ROWS, Hand, Pipeline, Row, Usage, as_row

__all__ = ["BenchScenario", "SCENARIOS", "SERVER_SIZES", "scenario_by_key", "GpuPipeline", "SimPipeline", "gpu_factory",
           "sim_factory"]


@dataclass(frozen=True)
class BenchScenario:
    key: str
    title: str
    effect: str = "sr"  # sr | vfg | hdr
    encoding: str = "RGB8"
    size: tuple[int, int] = (540, 960)
    out: tuple[int, int] = (1080, 1920)
    consumer: str = "torch"  # torch | cupy | jax
    unrelated_gpu_ms: float = 0.0
    cpu_ms: float = 0.0
    stage_us: dict[str, float] = field(default_factory=lambda: {"inference": 800.0, "conversion": 100.0})
    multiplier: int = 4
    effects: int = 0
    """Video server: this many effects, each with its own stream and thread (0: one pipeline on the main thread)."""

    @property
    def conversion(self) -> bool:
        """The output has the RGB8 conversion stage on stream 0."""
        return self.effect != "hdr" and self.encoding == "RGB8"


SERVER_SIZES = (1, 2, 4, 8)
_SERVER_STAGES = {"inference": 2000.0, "conversion": 50.0}


SCENARIOS: tuple[BenchScenario, ...] = (
    BenchScenario("a", "plain loop, 540p->1080p"),
    BenchScenario("b", "+2 ms unrelated GPU work on another stream", unrelated_gpu_ms=2.0),
    BenchScenario("c", "+0.8 ms CPU work, 1.0 ms GPU", cpu_ms=0.8, stage_us={"inference": 900.0, "conversion": 100.0}),
    BenchScenario("c-gpu", "c without its CPU work: c's GPU time per frame", stage_us={"inference": 900.0, "conversion": 100.0}),
    BenchScenario("d-cupy", "CuPy consumer", consumer="cupy"),
    BenchScenario("d-jax", "JAX consumer", consumer="jax"),
    BenchScenario("e-4k", "1080p->4K", size=(1080, 1920), out=(2160, 3840), stage_us={"inference": 1500.0, "conversion": 200.0}),
    BenchScenario("e-rgb10", "RGB10A2, 540p->1080p", encoding="RGB10A2"),
    BenchScenario("f-vfg", "VideoFrameGeneration x4, 1080p", effect="vfg", size=(1080, 1920), out=(1080, 1920),
                  stage_us={"inference": 300.0, "conversion": 60.0}),
    BenchScenario("f-hdr", "TrueHDR, 1080p", effect="hdr", encoding="RGB10A2", size=(1080, 1920), out=(1080, 1920),
                  stage_us={"inference": 800.0}),
    BenchScenario("g-host", "host-bound: 144p->288p, no added GPU time", size=(144, 256), out=(288, 512),
                  stage_us={"inference": 0.0, "conversion": 0.0}),
    *(
        BenchScenario(f"server-{n}", f"video server: {n} x (540p->1080p, 2 ms inference), a stream and a thread each",
                      effects=n, stage_us=dict(_SERVER_STAGES))
        for n in SERVER_SIZES
    ),
)


def scenario_by_key(key: str) -> BenchScenario:
    for sc in SCENARIOS:
        if sc.key == key:
            return sc
    raise ValueError(f"unknown scenario {key!r}: one of {', '.join(s.key for s in SCENARIOS)}")


# -- inputs and references (NumPy; shared by both backends) ----------------------------------------

_REFS: dict[tuple[Any, ...], list[tuple[list[np.ndarray], list[np.ndarray]]]] = {}
POOL = 4  # distinct input frames, so that a stale frame never equals the right one


def _inputs_and_refs(sc: BenchScenario, size: tuple[int, int], out: tuple[int, int]) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """For each pool slot: the inputs of one step and the references of its outputs."""
    key = (sc.key, size, out)
    if key in _REFS:
        return _REFS[key]
    rng = np.random.default_rng(42)
    h, w = size
    base = [rng.random((3, h, w), dtype=np.float32) for _ in range(POOL)]
    slots = []
    for i in range(POOL):
        x = base[i]
        if sc.effect == "hdr":
            slots.append(([x], [K.tone_map_hdr(np, x, contrast=100, saturation=100, middle_gray=50, luminance=650)]))
        elif sc.effect == "sr":
            if sc.encoding == "RGB10A2":
                packed = K.pack_rgb10a2(np, x)
                ref = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, packed), *out))
                slots.append(([packed], [ref]))
            else:
                ref = K.to_rgb8(np, K.resize_bilinear(np, x, *out)).astype(np.float32) / np.float32(255)
                slots.append(([x], [ref]))
        else:
            nxt = base[(i + 1) % POOL]
            refs = []
            for j in range(1, sc.multiplier):
                mixed = K.blend(np, x, nxt, j / sc.multiplier, True)
                refs.append(K.to_rgb8(np, mixed).astype(np.float32) / np.float32(255))
            slots.append(([x, nxt], refs))
    _REFS[key] = slots
    return slots


LAUNCH_MODE = "graph"
"""How the bench's emulated effects reach the GPU (``streamsafe.testing`` effects' ``launch_mode``):
CUDA graphs, so ``run()`` costs the host tens of microseconds as the real SDK's TensorRT engines do."""
HOST_COST_US = 0.0
"""Extra host microseconds per ``run()`` (the effects' ``host_cost_us`` knob)."""


def _make_effect(
    sc: BenchScenario, backend: Any, size: tuple[int, int], out: tuple[int, int], gpu: bool, device: int = 0,
    launch_mode: str | None = None,
) -> Any:
    lat = dict(sc.stage_us) if gpu else None
    knobs: dict[str, Any] = {"launch_mode": launch_mode or LAUNCH_MODE, "host_cost_us": HOST_COST_US} if gpu else {}
    if sc.effect == "hdr":
        fx: Any = TrueHDR(backend=backend, latency_us=lat, device=device, **knobs)
    elif sc.effect == "sr":
        fx = VideoSuperRes(backend=backend, latency_us=lat, image_encoding=ImageEncoding[sc.encoding], device=device, **knobs)
        fx.output_height, fx.output_width = out
    else:
        fx = VideoFrameGeneration(backend=backend, latency_us=lat, device=device, **knobs)
        fx.input_height, fx.input_width = size
        fx.frame_multiplier = sc.multiplier
    fx.load()
    return fx


class _Runner:
    """Calls the effect the way the row says: raw (``none``), through a contract, or with the
    hand-written fences of :mod:`streamsafe.bench.hand` (``hand_sites`` given)."""

    def __init__(
        self,
        effect: Any,
        stream: Stream,
        row: Row,
        *,
        sc: BenchScenario | None = None,
        hand_sites: FenceSites | None = None,
        legacy: Stream | None = None,
        consumer_on_sdk: bool = True,
    ) -> None:
        self.effect = effect
        self.strategy = row
        self.stream = stream
        self.runs = 0
        self.contract: StreamContract | None = None
        self.block: Any = None
        """The README row's guard block, once entered (left by :meth:`close`, maybe in another thread)."""
        self.hand: HandRunner | None = None
        if isinstance(row, Hand):
            if hand_sites is None or legacy is None or sc is None:
                raise ValueError(f"row {row.value!r} needs fence sites, the legacy stream and the scenario")
            self.hand = HandRunner(effect, stream, row, hand_sites, conversion=sc.conversion, legacy=legacy,
                                   consumer_on_sdk=consumer_on_sdk)
        elif row is Usage.README:  # the README's first example: nothing declared
            self.contract = StreamContract(effect, stream)
        elif row is not Strategy.NONE:
            self.contract = StreamContract(effect, stream, strategy=row, input_stream=stream)  # (the inputs are written on S)

    def run(self, sc: BenchScenario, inputs: list[Any], consume: Any) -> list[Any]:
        """One step: one output (three for frame generation x4), each consumed before the next
        run overwrites the SDK's single output buffer. Returns the consumer's copies."""
        calls: list[dict[str, Any]] = (
            [{"frame_index": j} for j in range(1, sc.multiplier)] if sc.effect == "vfg" else [{}]
        )
        if self.hand is not None:
            return self.hand.run(calls, inputs, consume)
        copies = []
        for kw in calls:
            self.runs += 1
            if self.contract is None:  # the unsafe reference: the effect's own run(), no dispatcher
                out = own_method(self.effect, "run")(self.effect, *inputs, stream_ptr=self.stream.ptr, non_blocking=True, **kw)
            elif self.strategy is Usage.README:
                if self.block is None:  # (as the README writes it: the loop inside the contract's block, plain sr.run())
                    self.block = self.contract.guarded()
                    self.block.__enter__()
                out = self.effect.run(*inputs, **kw)
            else:
                out = self.contract.run(*inputs, **kw)
            copies.append(consume(out.image))
        return copies

    def counters(self) -> dict[str, int]:
        if self.hand is not None:
            return self.hand.counters()
        if self.contract is None:
            return {"fences": 0, "host_waits": 0, "runs": self.runs}
        st = self.contract.stats
        return {"fences": st["fences"], "host_waits": st["host_waits"] + st["device_syncs"] + st["sdk_waits"], "runs": self.runs,
                "input_copies": st["input_copies"]}

    def close(self) -> None:
        if self.hand is not None:
            self.hand.close()
        elif self.contract is not None:
            if self.block is not None:  # (the block knows the stack frame it guards: left from any thread)
                self.block.__exit__(None, None, None)
            self.contract.close()
        else:
            self.effect.close()


class GpuPipeline:
    """The scenario on GPU ``device``: torch produces on a side stream S; the consumer copies on S.
    The current device is left as it was (each call that needs ``device`` makes it current for itself).
    ``launch_mode``: the emulated effect's (default :data:`LAUNCH_MODE`)."""

    def __init__(self, sc: BenchScenario, strategy: Row, device: int = 0, *, launch_mode: str | None = None) -> None:
        import torch

        from ..backend.cuda import CudaBackend
        from ..backend.naming import as_stream
        from ..testing._engines import spin_cycles_per_us

        self.sc, self.torch, self.device = sc, torch, device
        self.backend = CudaBackend()
        with torch.cuda.device(device):
            torch.cuda.synchronize(device)  # the primary context current on this thread (hand rows' raw calls)
            self.side = torch.cuda.Stream(device)
            self.stream = as_stream(self.side, device=device, backend=self.backend)
            self.unrelated = torch.cuda.Stream(device) if sc.unrelated_gpu_ms else None
            self.cycles = spin_cycles_per_us(device)
            self.effect = _make_effect(sc, self.backend, sc.size, sc.out, True, device, launch_mode)
            row = as_row(strategy)
            hand = RawFences(device) if isinstance(row, Hand) else None
            legacy = as_stream(LEGACY_HANDLE, device=device, backend=self.backend)
            self.runner = _Runner(self.effect, self.stream, row, sc=sc, hand_sites=hand, legacy=legacy,
                                  consumer_on_sdk=sc.consumer != "jax")
            slots = _inputs_and_refs(sc, sc.size, sc.out)
            self.inputs = [[self._upload(x) for x in xs] for xs, _ in slots]
            self.refs = [[torch.from_numpy(_as_signed(r)).to(f"cuda:{device}") for r in rs] for _, rs in slots]
            self.cupy_stream: Any = None
            if sc.consumer == "cupy":
                import cupy

                self.cupy_stream = cupy_external_stream(cupy, self.stream)  # (the device is current here)
            torch.cuda.synchronize(device)
        self.events: list[tuple[Any, Any]] = []
        self.kept: list[tuple[Any, Any]] = []

    def _upload(self, x: np.ndarray) -> Any:
        t = self.torch.from_numpy(_as_signed(x)).to(f"cuda:{self.device}")
        return t.view(self.torch.uint32) if x.dtype == np.uint32 else t

    def _consume(self, image: Any) -> Any:
        sc = self.sc
        if sc.consumer == "torch":
            return torch_clone(self.torch, image)  # torch's current stream of the output's device: S
        if sc.consumer == "cupy":
            import cupy

            with cupy.cuda.Device(self.device), self.cupy_stream:
                return cupy.from_dlpack(image).copy()
        import jax
        import jax.numpy as jnp

        from ..outputs import JaxDLPackAdapter

        view = jax.dlpack.from_dlpack(image if not _is_raw(image) else JaxDLPackAdapter(image, self.device), copy=False)
        out = jnp.array(view, copy=True)
        out.block_until_ready()
        if isinstance(image, SafeImage):
            image.reader_done()
        return out

    def step(self, frame: int) -> None:
        torch, sc = self.torch, self.sc
        if self.unrelated is not None:
            with torch.cuda.stream(self.unrelated):
                torch.cuda._sleep(int(sc.unrelated_gpu_ms * 1000 * self.cycles))
        if sc.cpu_ms:
            end = time.perf_counter() + sc.cpu_ms / 1000
            while time.perf_counter() < end:
                pass
        slot = frame % POOL
        with torch.cuda.stream(self.side):  # (torch makes the stream's device current for the block)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for k, copy in enumerate(self.runner.run(sc, self.inputs[slot], self._consume)):
                self.kept.append((copy, self.refs[slot][k]))
            stop.record()
        self.events.append((start, stop))

    def drain(self) -> list[float]:
        """Wait for this pipeline's streams: S (producer, consumer), stream 0 of its device (the conversion;
        it also covers the blocking shadow stream of ``async`` and the hand row's blocking stream). Not
        for the unrelated stream."""
        self.side.synchronize()
        self.torch.cuda.default_stream(self.device).synchronize()
        latencies = [a.elapsed_time(b) for a, b in self.events]
        self.events.clear()
        return latencies

    def settle(self) -> None:
        if self.unrelated is not None:
            self.unrelated.synchronize()

    def check(self) -> tuple[int, int]:
        with self.torch.cuda.device(self.device):
            checked, corrupt = len(self.kept), count_corrupt(self.torch, self.kept, self.sc.consumer)
        self.kept.clear()
        return checked, corrupt

    def counters(self) -> dict[str, int]:
        return self.runner.counters()

    def thread_init(self) -> None:
        """On a worker thread, before its first step: the pipeline's device (and its primary context) current,
        for the raw driver calls of the hand rows (``cudaDeviceSynchronize`` binds the context to the thread)."""
        self.torch.cuda.set_device(self.device)
        self.torch.cuda.synchronize(self.device)

    def close(self) -> None:
        self.torch.cuda.synchronize(self.device)
        with self.torch.cuda.device(self.device):
            self.runner.close()


class SimPipeline:
    """The scenario on the model, with small frames: fences, host waits and corruption are real; times are not.

    Inputs are allocated and written on S each frame (so a recycled allocation races like a
    decoder's); the consumer copies on S, except JAX's, which imports and copies on a stream of
    its own and makes the host wait for the copy (``block_until_ready``). ``device``: the model's
    device the pipeline runs on (its drain waits for that device only)."""

    SIZE = (16, 16)

    def __init__(self, sc: BenchScenario, strategy: Row, sim: SimBackend | None = None, device: int = 0) -> None:
        self.sc, self.device = sc, device
        self.sim = sim = sim if sim is not None else SimBackend(scheduler="adversarial")
        h, w = self.SIZE
        out = self.SIZE if sc.effect in ("hdr", "vfg") else (2 * h, 2 * w)
        with sim.device(device):
            self.stream = sim.create_stream(non_blocking=True, device=device)
            self.unrelated = sim.create_stream(non_blocking=True, device=device) if sc.unrelated_gpu_ms else None
            self.effect = _make_effect(sc, sim, self.SIZE, out, False, device)
            row = as_row(strategy)
            hand = SimFences(sim) if isinstance(row, Hand) else None
            self.consumer = sim.create_stream(non_blocking=True, device=device) if sc.consumer == "jax" else self.stream
            self.runner = _Runner(self.effect, self.stream, row, sc=sc, hand_sites=hand, legacy=sim.legacy_stream(device),
                                  consumer_on_sdk=sc.consumer != "jax")
            self._scratch = sim.empty(4, name="unrelated work", device=device)
        self.slots = _inputs_and_refs(sc, self.SIZE, out)
        self.kept: list[tuple[Any, np.ndarray]] = []

    def step(self, frame: int) -> None:
        sim, sc = self.sim, self.sc
        with sim.device(self.device):
            if self.unrelated is not None:
                sim.launch(self.unrelated, "unrelated work", writes=[self._scratch])
            xs, refs = self.slots[frame % POOL]
            with sim.use_stream(self.stream):
                inputs = sim_inputs(sim, self.stream, xs)
                for k, copy in enumerate(self.runner.run(sc, inputs, self._consume)):
                    self.kept.append((copy, refs[k]))

    def _consume(self, image: Any) -> Any:
        sim, consumer = self.sim, self.consumer
        copy = sim.copy(sim.from_dlpack(image, stream=consumer), consumer, name="consumer.copy")
        if consumer != self.stream:  # JAX: jnp.array(view, copy=True).block_until_ready()
            sim.synchronize_stream(consumer)
            if isinstance(image, SafeImage):
                image.reader_done()
        return copy

    def drain(self) -> list[float]:
        self.sim.synchronize_device(self.device)  # this device only: other pipelines' devices stay pending
        return []

    def settle(self) -> None:
        pass

    def check(self) -> tuple[int, int]:
        checked, corrupt = len(self.kept), count_corrupt_sim(self.sim, self.kept)
        self.kept.clear()
        return checked, corrupt

    def counters(self) -> dict[str, int]:
        return self.runner.counters()

    def thread_init(self) -> None:
        pass

    def close(self) -> None:
        with self.sim.device(self.device):
            self.runner.close()


def _as_signed(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32) if x.dtype == np.uint32 else x


def torch_clone(torch: Any, image: Any) -> Any:
    """The torch consumer's copy on torch's current stream (S): ``out.torch()`` for a streamsafe output
    (the guide's way into torch), ``torch.from_dlpack(capsule).clone()`` for a raw capsule (``none``,
    the hand rows). ``torch.from_dlpack(out.image)`` costs torch's producer-object path on top
    (``benchmarks/contract_overhead.py`` measures both)."""
    if type(image) is SafeImage:
        return image.torch()
    return torch.from_dlpack(image).clone()


def _is_raw(image: Any) -> bool:
    return not hasattr(image, "__dlpack__")


class _Factory:
    """``factory(scenario, row) -> Pipeline`` on the GPU or on the model; builds the hand rows too."""

    references: tuple[str, ...] = (*HAND_ROWS, *USAGE_ROWS)

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu

    def __call__(self, scenario: str, strategy: Row | str) -> Pipeline:
        from .server import ServerPipeline

        sc = scenario_by_key(scenario)
        row = as_row(strategy)
        if sc.effects:  # a video server: sc.effects lanes, on the GPU or on one shared model
            if self.gpu:
                return ServerPipeline.build(sc.effects, lambda: GpuPipeline(sc, row))
            sim = SimBackend(scheduler="adversarial")
            return ServerPipeline.build(sc.effects, lambda: SimPipeline(sc, row, sim=sim))
        return GpuPipeline(sc, row) if self.gpu else SimPipeline(sc, row)

    def __repr__(self) -> str:
        return f"<streamsafe bench {'gpu' if self.gpu else 'sim'}_factory>"


gpu_factory = _Factory(gpu=True)
"""Pipelines on the GPU (torch, CuPy, JAX, cuda.bindings)."""
sim_factory = _Factory(gpu=False)
"""Pipelines on :class:`~streamsafe.sim.SimBackend`: counts and corruption only."""


def count_corrupt_sim(sim: Any, pairs: list[tuple[Any, Any]]) -> int:
    """How many (copy, reference) pairs of a model pipeline differ at all (the model's data is exact)."""
    return sum(not np.array_equal(sim.download(copy), ref) for copy, ref in pairs)


def count_corrupt(torch: Any, pairs: list[tuple[Any, Any]], consumer: str) -> int:
    """How many (copy, reference) pairs differ: by more than one 10-bit code per channel (RGB10A2),
    else by more than 1.5/255 (RGB8). Copies from CuPy or JAX consumers are brought to torch first."""
    corrupt = 0
    for got, ref in pairs:
        if consumer == "jax":
            got = torch.from_numpy(_as_signed(np.array(got))).cuda(ref.device)  # (a copy: JAX gives a read-only view)
        elif consumer == "cupy":
            got = torch.from_dlpack(got)
        if got.dtype == torch.uint32:
            got = got.view(torch.int32)
        if got.dtype == torch.int32:
            g, r = got.to(torch.int64) & 0xFFFFFFFF, ref.to(torch.int64) & 0xFFFFFFFF
            diff = max(int(((g >> s & 0x3FF) - (r >> s & 0x3FF)).abs().max()) for s in (0, 10, 20))
            corrupt += diff > 1
        else:
            corrupt += float((got - ref).abs().max()) > 1.5 / 255
    return corrupt


def sim_inputs(sim: Any, stream: Any, frames: Any) -> list[Any]:
    """Fresh model arrays for one step's inputs, each written on ``stream`` (nothing else keeps them)."""
    inputs = []
    for x in frames:
        arr = sim.empty(x.shape, x.dtype, name="input")
        buf = arr.buffer

        def write(buf: Any = buf, x: np.ndarray = x) -> None:
            np.copyto(buf.data, x)

        sim.launch(stream, "producer.write", write, writes=[buf])
        inputs.append(arr)
    return inputs
