"""Two GPUs (issue 12): the hazard matrix on device 1 with real kernels, every fence and host wait on
device 1 and the current device left alone; two pipelines, one per GPU, each on its own thread, every
fence on its lane's device; and the two-pipeline soak (``STREAMSAFE_MULTI_GPU_SOAK_FRAMES`` frames per
lane and strategy, default 10000, 0 corrupt). Skipped unless torch sees at least two GPUs.

JSON to the lane output: ``hazards-dev1.json`` (+ ``.txt``), ``multi-gpu-fences.json``,
``multi-gpu-soak.json``.

Environment (defaults in brackets): ``STREAMSAFE_MULTI_GPU_SOAK_FRAMES`` [10000],
``STREAMSAFE_MULTI_GPU_MATRIX_FRAMES`` frames per matrix row on the GPU [100],
``STREAMSAFE_MULTI_GPU_STRATEGIES`` [auto,event,async,stream,device], ``STREAMSAFE_MULTI_GPU_JITTER_US``
the bound of the soak's random delays, drawn every frame: spins on each lane's user stream and stream 0,
and the emulated SDK's stage latencies [300].
"""

from __future__ import annotations

import collections
import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from _lane import lane_output
from streamsafe import hooks

pytestmark = pytest.mark.gpu

SOAK = int(os.environ.get("STREAMSAFE_MULTI_GPU_SOAK_FRAMES", "10000"))
MATRIX_FRAMES = int(os.environ.get("STREAMSAFE_MULTI_GPU_MATRIX_FRAMES", "100"))
STRATEGIES = tuple(s for s in os.environ.get("STREAMSAFE_MULTI_GPU_STRATEGIES", "auto,event,async,stream,device").split(",") if s)
BLOCK = 100
JITTER_US = float(os.environ.get("STREAMSAFE_MULTI_GPU_JITTER_US", "300"))


@pytest.fixture(scope="module")
def two_gpus(torch_cuda):  # type: ignore[no-untyped-def]
    if torch_cuda.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs; torch sees {torch_cuda.cuda.device_count()}")
    pytest.importorskip("cupy")
    return torch_cuda


class DeviceSeen(hooks.Observer):
    """The devices of every stream, event and host wait streamsafe and the emulation report, per thread."""

    def __init__(self) -> None:
        self.seen: dict[int, set[int]] = collections.defaultdict(set)
        self.calls: collections.Counter[str] = collections.Counter()
        self.cross: list[str] = []

    def _add(self, call: str, *devices: int) -> None:
        self.seen[threading.get_ident()].update(devices)
        self.calls[call] += 1
        if len(set(devices)) > 1:
            self.cross.append(f"{call} {devices}")

    def on_fence(self, waiter: Any, signaller: Any) -> None:
        self._add("fence", waiter.device, signaller.device)

    def on_record(self, event: Any, stream: Any) -> None:
        self._add("record", event.device, stream.device)

    def on_wait(self, stream: Any, event: Any) -> None:
        self._add("wait", stream.device, event.device)

    def on_stream_synchronize(self, stream: Any) -> None:
        self._add("stream sync", stream.device)

    def on_device_synchronize(self, device: int) -> None:
        self._add("device sync", device)

    def on_launch(self, stream: Any, name: str, reads: list[Any], writes: list[Any], device: int) -> None:
        self._add("launch", stream.device, device)

    def on_output_read(self, key: Any, consumer: Any, device: int) -> None:
        self._add("output read", consumer.device, device)

    def on_input_write(self, key: Any, producer: Any, device: int) -> None:
        self._add("input write", producer.device, device)


@contextmanager
def observing(observer: hooks.Observer) -> Iterator[hooks.Observer]:
    hooks.register(observer)
    try:
        yield observer
    finally:
        hooks.unregister(observer)


@contextmanager
def hazard_effects_on(device: int) -> Iterator[None]:
    """``hazards._make_effect`` builds its effects with no ``device=``: give them ``device``."""
    from streamsafe.tools import hazards
    from streamsafe.testing import TrueHDR, VideoFrameGeneration, VideoSuperRes

    saved = {name: getattr(hazards, name) for name in ("VideoSuperRes", "TrueHDR", "VideoFrameGeneration")}
    try:
        for name, cls in (("VideoSuperRes", VideoSuperRes), ("TrueHDR", TrueHDR), ("VideoFrameGeneration", VideoFrameGeneration)):
            setattr(hazards, name, functools.partial(cls, device=device))
        yield
    finally:
        for name, cls in saved.items():
            setattr(hazards, name, cls)


def test_hazard_matrix_on_device_1_with_real_kernels(two_gpus) -> None:  # type: ignore[no-untyped-def]
    import cupy

    torch = two_gpus
    from streamsafe.tools import hazards
    from streamsafe.testing.labs import GpuLab, SimLab

    torch.cuda.set_device(0)
    rows, moved = [], []
    seen = DeviceSeen()
    start = time.perf_counter()
    for strategy in ("none", *STRATEGIES):
        wrap = hazards.contract_wrap(strategy)
        for sc in hazards.SCENARIOS:
            model = hazards.run_scenario(sc, SimLab(), frames=4, strategy=strategy, wrap=wrap)
            with hazard_effects_on(1), observing(seen):
                real = hazards.run_scenario(sc, GpuLab(device=1), frames=MATRIX_FRAMES, size=(64, 64), strategy=strategy, wrap=wrap)
            real.race_reported, real.hazards_reported, real.races = model.race_reported, model.hazards_reported, model.races
            real.model_frames, real.model_corrupt_frames = model.frames, model.corrupt_frames
            rows.append(real)
            now = (torch.cuda.current_device(), cupy.cuda.runtime.getDevice())
            if now != (0, 0):
                moved.append(f"{strategy} {sc.id}: current device (torch, CuPy) is {now}")
                torch.cuda.set_device(0)
                cupy.cuda.runtime.setDevice(0)
    table = hazards.format_table(rows)
    print(table)
    devices = sorted(set().union(*seen.seen.values())) if seen.seen else []
    if (path := lane_output("hazards-dev1.json")) is not None:
        path.write_text(hazards.rows_to_json(rows))
        path.with_suffix(".txt").write_text(
            table + f"\n\ndevices seen: {devices}; calls: {dict(seen.calls)}; cross-device: {seen.cross[:10]}; "
            f"current device moved: {moved[:10]}; {time.perf_counter() - start:.1f} s\n"
        )
    assert devices == [1], (devices, seen.cross[:10])
    assert not seen.cross, seen.cross[:10]
    assert not moved, moved[:10]
    for row in rows:
        if row.strategy != "none":
            assert row.corrupt_frames == 0 and not row.hazards_reported, row
        elif not row.hazards_reported:
            assert row.corrupt_frames == 0, row
    unfenced = [r for r in rows if r.strategy == "none" and r.race_reported]
    assert unfenced and all(r.corrupt_frames > 0 for r in unfenced)


def _two_lanes(strategy: str, lane: Any = None, *, jitter_us: float = 0.0) -> Any:
    from streamsafe.bench.multi_gpu import SOAK_LANE, GpuLane, MultiGpuPipeline

    sc = lane or SOAK_LANE
    lanes: list[Any] = []
    try:
        lanes.append(GpuLane(sc, strategy, 0))
        lanes.append(GpuLane(replace(sc, consumer="cupy"), strategy, 1))
    except BaseException:
        for x in lanes:
            x.close()
        raise
    if jitter_us:
        for seed, x in enumerate(lanes):
            _jitter(x, jitter_us, seed)
    return MultiGpuPipeline(lanes, [0, 1], [strategy, strategy])


def _jitter(lane: Any, max_us: float, seed: int) -> None:
    """Random delays on every stream of the lane, new each frame, as the GPU fuzzer draws them: a spin on
    its user stream S and on its device's stream 0 before the frame, and the emulated SDK's transfer,
    inference and conversion latencies. The fenced strategies meet a different overlap of the streams
    every frame; the unfenced control races whatever the host's speed (the lane's effect launches
    eagerly: without the random stages, a slow host's launch time alone kept its inference ahead of
    the conversion on stream 0, and the control saw between 0 and 239 corrupt frames of 2,000, by host)."""
    import numpy as np

    from streamsafe.testing._engines import spin_cycles_per_us

    torch, rng, step, effect = lane.torch, np.random.default_rng(seed), lane.step, lane.effect
    cycles_per_us = spin_cycles_per_us(lane.device)

    def jittered(frame: int) -> None:
        s_us, legacy_us, transfer, inference, conversion = rng.uniform(0, max_us, 5)
        effect.latency_us = {"transfer": transfer, "inference": inference, "conversion": conversion}
        with torch.cuda.device(lane.device):
            with torch.cuda.stream(lane.side):
                torch.cuda._sleep(int(s_us * cycles_per_us))
            with torch.cuda.stream(torch.cuda.default_stream(lane.device)):
                torch.cuda._sleep(int(legacy_us * cycles_per_us))
        step(frame)

    lane.step = jittered


def test_two_pipelines_fence_on_their_own_device(two_gpus) -> None:  # type: ignore[no-untyped-def]
    report: dict[str, Any] = {}
    for strategy in (*STRATEGIES, "hand"):
        seen = DeviceSeen()
        pipe = _two_lanes(strategy)
        try:
            with observing(seen):
                pipe.run_block(0, 40)
                pipe.drain()
            checked, corrupt = pipe.check()
        finally:
            pipe.close()
        lanes = {ident: sorted(devs) for ident, devs in seen.seen.items() if ident != threading.get_ident()}
        report[strategy] = {"checked": checked, "corrupt": corrupt, "lane_threads": list(lanes.values()),
                            "calls": dict(seen.calls), "cross": seen.cross[:10]}
    if (path := lane_output("multi-gpu-fences.json")) is not None:
        path.write_text(json.dumps(report, indent=1))
    for strategy, r in report.items():
        assert r["corrupt"] == 0 and r["checked"] == 80, (strategy, r)
        assert sorted(r["lane_threads"]) == [[0], [1]], (strategy, r)
        assert not r["cross"], (strategy, r)


def test_two_pipeline_soak(two_gpus) -> None:  # type: ignore[no-untyped-def]
    summary: dict[str, Any] = {"frames_per_lane": SOAK, "block": BLOCK}
    for strategy in (*STRATEGIES, "none"):
        frames = SOAK if strategy != "none" else min(SOAK, 1000)  # the unfenced control: shows the soak sees corruption
        pipe = _two_lanes(strategy, jitter_us=JITTER_US)
        start = time.perf_counter()
        checked = corrupt = 0
        try:
            first = 0
            while first < frames:
                n = min(BLOCK, frames - first)
                pipe.run_block(first, n)
                pipe.drain()
                a, b = pipe.check()
                checked, corrupt = checked + a, corrupt + b
                first += n
            lanes = pipe.lane_summary()
            counters = pipe.counters()
        finally:
            pipe.close()
        seconds = time.perf_counter() - start
        summary[strategy] = {"frames": checked, "corrupt": corrupt, "seconds": round(seconds, 2),
                             "fps": round(checked / seconds, 1), "counters": counters,
                             "lanes": [{k: v for k, v in lane.items() if k != "wall_s"} for lane in lanes]}
        print(f"two-GPU soak {strategy}: {corrupt} corrupt of {checked} frames ({seconds:.1f} s)")
    if (path := lane_output("multi-gpu-soak.json")) is not None:
        path.write_text(json.dumps(summary, indent=1, default=str))
    for strategy in STRATEGIES:
        result = summary[strategy]
        assert result["frames"] >= 2 * SOAK and result["corrupt"] == 0, (strategy, result)
        assert [lane["device"] for lane in result["lanes"]] == [0, 1]
        assert all(lane["frames"] >= SOAK for lane in result["lanes"])
    assert summary["none"]["corrupt"] > 0, summary["none"]


def test_copy_helpers_take_streams_of_the_outputs_gpu_and_refuse_the_other(two_gpus) -> None:  # type: ignore[no-untyped-def]
    """``out.torch(stream)`` / ``out.cupy(stream)`` with a real stream of the output's GPU copy (no driver
    query for the stream's device); a stream of the other GPU raises ``DeviceMismatchError`` before the
    import, and the output stays importable."""
    import cupy
    import numpy as np

    import streamsafe as ss
    from streamsafe.testing import VideoSuperRes

    torch = two_gpus
    be = ss.CudaBackend()
    sr = VideoSuperRes(backend=be, device=0)
    sr.output_width, sr.output_height = 64, 64
    sr.load()
    x = torch.rand(3, 32, 32, device="cuda:0")
    side = torch.cuda.Stream(device=0)
    c = ss.StreamContract(sr, side)
    with torch.cuda.device(0), cupy.cuda.Device(0):
        want = c.run(x).torch().cpu().numpy()
        got_torch = c.run(x).torch(torch.cuda.Stream(device=0))
        got_cupy = c.run(x).cupy(cupy.cuda.Stream(non_blocking=True))
        torch.cuda.synchronize(0)
        assert np.array_equal(got_torch.cpu().numpy(), want) and np.array_equal(cupy.asnumpy(got_cupy), want)
        out = c.run(x)
        with pytest.raises(ss.errors.DeviceMismatchError, match="device 0"):
            out.torch(torch.cuda.Stream(device=1))
        with pytest.raises(ss.errors.DeviceMismatchError, match="device 0"):
            out.torch(torch.cuda.Stream(device=1), copy=False)
        with cupy.cuda.Device(1):
            other = cupy.cuda.Stream(non_blocking=True)
        with pytest.raises(ss.errors.DeviceMismatchError, match="device 0"):
            out.cupy(other)
        assert np.array_equal(out.torch().cpu().numpy(), want)
    c.close()


def test_jax_adapter_on_the_second_gpu_imports_the_outputs_own_device(two_gpus) -> None:  # type: ignore[no-untyped-def]
    """The vendor's JAX adapter with its default device_id, given an output of GPU 1: it says device 1,
    JAX imports it there, fenced, and every frame matches the output streamsafe copies with torch
    (before, the adapter said device 0 for GPU 1's memory)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    import streamsafe as ss
    from streamsafe.testing import VideoSuperRes

    torch = two_gpus
    with _restores_torch_device(torch):  # (JAX's start-up leaves the thread's current CUDA device at its last GPU)
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if len(gpus) < 2:
        pytest.skip(f"needs 2 GPUs in JAX; it sees {len(gpus)}")
    be = ss.CudaBackend()
    sr = VideoSuperRes(backend=be, device=1, latency_us={"inference": 300, "conversion": 300})
    sr.output_width, sr.output_height = 64, 64
    sr.load()
    side = torch.cuda.Stream(device=1)
    c = ss.StreamContract(sr, side)
    bad = 0
    before = torch.cuda.current_device()
    try:
        with torch.cuda.device(1):
            for i in range(20):
                x = torch.rand(3, 32, 32, device="cuda:1", generator=torch.Generator("cuda:1").manual_seed(i))
                want = c.run(x).torch().cpu().numpy()  # (the reference: the same input's output, copied by torch)
                adapter = ss.JaxDLPackAdapter(c.run(x).image)
                assert adapter.__dlpack_device__() == (2, 1)
                view = jax.dlpack.from_dlpack(adapter, copy=False)
                assert view.devices() == {gpus[1]}
                got = np.asarray(jnp.array(view, copy=True).block_until_ready())
                bad += not np.array_equal(got, want)
            with pytest.raises(ss.errors.DeviceMismatchError, match="pass device_id=1"):
                ss.JaxDLPackAdapter(c.run(x).image, device_id=0)
    finally:
        c.close()
    assert bad == 0 and torch.cuda.current_device() == before


@contextmanager
def _restores_torch_device(torch: Any) -> Iterator[None]:
    """JAX's start-up (its first ``jax.devices()``) makes its last GPU the thread's current CUDA device,
    and the tests after this one make streams and tensors without naming a device: set torch's back."""
    device = torch.cuda.current_device()
    try:
        yield
    finally:
        torch.cuda.set_device(device)
