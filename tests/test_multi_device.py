"""Several devices on the model (issue 12): effects on device 1 with their own streams, inputs and
consumers; two effects on devices 0 and 1 at once; every fence on the effect's device; the hazard
matrix on device 1 gives device 0's verdicts; clear errors for an input, a stream or a consumer of
another device, and for host arrays; the multi-GPU bench on SimBackend(devices=2)."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.tools import hazards
from streamsafe._dlpack import DLPACK_CPU, DLPACK_CUDA, check_input_device, describe_array
from streamsafe.backend.naming import stream_on_device
from streamsafe.sim.backend import Op, SimEvent
from streamsafe.errors import HostArrayError, InputDeviceError
from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _kernels as K
from streamsafe.testing.labs import SimLab

STRATEGIES = ["auto", "event", "async", "stream", "device"]
KINDS = ["legacy", "per-thread", "blocking", "non-blocking"]


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No garbage collection in the block: finalizers of earlier tests' objects (a contract's
    shadow stream, an effect's inputs) would otherwise run in whichever thread triggers it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class DeviceLog(ss.sim.SimBackend):
    """The model, logging the device of every stream operation (kernels, copies, event records and
    waits, the fences' own) and every host synchronisation, with the calling thread."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("devices", 2)
        kw.setdefault("scheduler", "adversarial")
        super().__init__(**kw)
        self.log: list[tuple[int, str, str, int, int | None]] = []  # (thread, what, name, stream device, event device)
        self._freeing = threading.local()  # per thread: another thread's drain must not end this one's

    def _issue(self, stream: ss.Stream, name: str, fn: Any, reads: Any = (), writes: Any = (), *, after: SimEvent | None = None) -> Op:
        what = "free" if getattr(self._freeing, "on", False) else "op"
        self.log.append((threading.get_ident(), what, name, stream.device, None if after is None else after.device))
        return super()._issue(stream, name, fn, reads, writes, after=after)

    def _drain_released(self) -> None:
        # The caching allocator takes back blocks whose arrays are gone, at the start of any later call
        # (on any device): the events it records belong to the freed block's streams, not to that call.
        self._freeing.on = True
        try:
            super()._drain_released()
        finally:
            self._freeing.on = False

    def synchronize_stream(self, stream: ss.Stream) -> None:
        self.log.append((threading.get_ident(), "sync", "stream", stream.device, None))
        super().synchronize_stream(stream)

    def synchronize_device(self, device: int = 0) -> None:
        self.log.append((threading.get_ident(), "sync", "device", device, None))
        super().synchronize_device(device)

    def synchronize_event(self, event: SimEvent) -> None:
        self.log.append((threading.get_ident(), "sync", "event", event.device, None))
        super().synchronize_event(event)

    def acquire_event(self, device: int) -> SimEvent:
        self.log.append((threading.get_ident(), "event", "acquire", device, device))
        return super().acquire_event(device)

    def devices(self, entries: list[tuple[int, str, str, int, int | None]] | None = None) -> set[int]:
        """Every device named in ``entries`` (default: the whole log): streams and events alike."""
        found: set[int] = set()
        for _, _, _, stream_dev, event_dev in self.log if entries is None else entries:
            found.add(stream_dev)
            if event_dev is not None:
                found.add(event_dev)
        return found


@contextmanager
def only_on(sim: DeviceLog, device: int) -> Iterator[None]:
    """Every operation, event and host wait issued inside the block is on ``device`` (the allocator's
    records for blocks freed earlier, of any device, aside; each of those is on its own stream's device)."""
    start = len(sim.log)
    yield
    issued = sim.log[start:]
    assert all(e[4] in (None, e[3]) for e in issued), issued  # no cross-device wait or record
    mine = [e for e in issued if e[1] != "free"]
    assert mine, "nothing was issued"
    assert sim.devices(mine) == {device}, [e for e in mine if e[3] != device]


def stream_of(sim: ss.sim.SimBackend, kind: str, device: int) -> ss.Stream:
    if kind == "legacy":
        return sim.legacy_stream(device)
    if kind == "per-thread":
        return sim.per_thread_stream(device)
    return sim.create_stream(non_blocking=kind == "non-blocking", device=device)


def make_effect(sim: ss.sim.SimBackend, device: int, kind: str = "sr") -> Any:
    fx: Any = TrueHDR(backend=sim, device=device) if kind == "hdr" else VideoSuperRes(backend=sim, device=device)
    if kind == "sr":
        fx.output_width, fx.output_height = 32, 32
    fx.load()
    return fx


def produce(sim: ss.sim.SimBackend, stream: ss.Stream, seed: int, kind: str = "sr") -> tuple[Any, np.ndarray]:
    data = np.random.default_rng(seed).random((3, 16, 16), dtype=np.float32)
    arr = sim.empty((3, 16, 16), np.float32, stream=stream, name=f"frame{seed}")
    buf = arr.buffer
    sim.launch(stream, "producer.write", lambda: np.copyto(buf.data, data), writes=[buf])
    return arr, data


def reference(data: np.ndarray, kind: str = "sr") -> np.ndarray:
    if kind == "hdr":
        return K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)
    return K.to_rgb8(np, K.resize_bilinear(np, data, 32, 32)).astype(np.float32) / np.float32(255)


def pipeline(sim: ss.sim.SimBackend, device: int, strategy: str, sdk_kind: str, *, kind: str = "sr", frames: int = 4,
             close: bool = True) -> tuple[int, ss.StreamContract]:
    """Frames produced on a producer stream, run on an SDK stream, copied on a consumer stream, all of
    ``device``; returns the corrupt frames and the contract."""
    producer = sim.create_stream(non_blocking=True, device=device)
    consumer = sim.create_stream(non_blocking=True, device=device)
    c = ss.StreamContract(make_effect(sim, device, kind), stream_of(sim, sdk_kind, device), strategy=strategy,
                          input_stream=producer)
    copies = []
    for i in range(frames):
        arr, data = produce(sim, producer, i, kind)
        out = c.run(arr)
        del arr
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer, name="consumer.copy"), data))
    sim.synchronize_device(device)
    corrupt = sum(not np.allclose(sim.download(x), reference(d, kind), atol=1e-6) for x, d in copies)
    if close:
        c.close()
    return corrupt, c


# -- effects on device 1 ------------------------------------------------------------------------------


@pytest.mark.parametrize("sdk_kind", KINDS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_effect_on_device_1_every_strategy_no_race_right_frames_every_fence_on_device_1(strategy: str, sdk_kind: str) -> None:
    sim = DeviceLog()
    with only_on(sim, 1):
        corrupt, c = pipeline(sim, 1, strategy, sdk_kind)
    assert corrupt == 0 and sim.races == [], sim.races
    assert c.stats["runs"] == 4
    assert sim.current_device() == 0  # the current device is left as it was
    assert sim.pool_stats(0).created == 0 and sim.pool_stats(1).created > 0  # events come from device 1's pool


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_truehdr_on_device_1(strategy: str) -> None:
    sim = DeviceLog()
    with only_on(sim, 1):
        corrupt, _ = pipeline(sim, 1, strategy, "blocking", kind="hdr")
    assert corrupt == 0 and sim.races == []


def test_unfenced_effect_on_device_1_races_on_device_1() -> None:
    """The control: without streamsafe the model sees device 1's hazards, named on cuda:1."""
    sim = DeviceLog()
    fx = make_effect(sim, 1)
    producer, sdk, consumer = (sim.create_stream(non_blocking=True, device=1) for _ in range(3))
    copies = []
    for i in range(3):
        arr, data = produce(sim, producer, i)
        out = fx.run(arr, stream_ptr=sdk.ptr, non_blocking=True)
        copies.append((sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer), data))
    sim.synchronize_device(1)
    assert sim.races and all("cuda:1" in str(r) and "cuda:0" not in str(r) for r in sim.races)
    assert sum(not np.allclose(sim.download(x), reference(d)) for x, d in copies) > 0
    assert sim.devices() == {1}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_effect_on_device_1_with_default_streams_and_the_current_device_0(strategy: str) -> None:
    """No stream named: the SDK stream is device 1's current stream, whatever device is current."""
    sim = DeviceLog()
    fx = make_effect(sim, 1)
    with only_on(sim, 1):
        c = ss.StreamContract(fx, strategy=strategy)
        arr, data = produce(sim, sim.current_stream(1), 0)
        assert c.plan.sdk == sim.legacy_stream(1)
        out = c.run(arr)
        got = out.numpy()
        c.close()
    assert np.allclose(got, reference(data)) and sim.races == []


def test_a_device_sync_on_device_1_leaves_device_0_work_pending() -> None:
    sim = DeviceLog()
    other = sim.create_stream(non_blocking=True, device=0)
    scratch = sim.empty(4, device=0)
    op = sim.launch(other, "device 0 work", writes=[scratch])
    corrupt, c = pipeline(sim, 1, "device", "non-blocking")
    assert corrupt == 0 and c.stats["device_syncs"] > 0
    assert not op.done  # device 1's syncs did not wait for device 0's work
    assert all(d == 1 for _, what, _, d, _ in sim.log if what == "sync")


def test_the_model_allows_cross_device_waits_as_cuda_does() -> None:
    """An event of device 1 may be waited on by a stream of device 0 (not recorded on it)."""
    sim = DeviceLog()
    s1, s0 = sim.create_stream(non_blocking=True, device=1), sim.create_stream(non_blocking=True, device=0)
    first = sim.launch(s1, "device 1 work")
    sim.fence(s0, s1)
    later = sim.launch(s0, "device 0 work")
    sim.synchronize_stream(s0)
    assert first.done and later.done
    event = sim.acquire_event(1)
    with pytest.raises(ss.errors.DeviceMismatchError, match="event"):
        sim.record(event, s0)


# -- two effects at once -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_effects_on_devices_0_and_1_interleaved(strategy: str) -> None:
    sim = DeviceLog()
    lanes = {}
    for dev in (0, 1):
        producer = sim.create_stream(non_blocking=True, device=dev)
        consumer = sim.create_stream(non_blocking=True, device=dev)
        c = ss.StreamContract(make_effect(sim, dev), sim.create_stream(non_blocking=True, device=dev), strategy=strategy,
                              input_stream=producer)
        lanes[dev] = (c, producer, consumer, [])
    for i in range(4):
        for dev, (c, producer, consumer, copies) in lanes.items():
            with only_on(sim, dev):
                arr, data = produce(sim, producer, 10 * dev + i)
                out = c.run(arr)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer), data))
    for dev, (c, _, _, copies) in lanes.items():
        with only_on(sim, dev):
            c.synchronize()
        sim.synchronize_device(dev)
        assert all(np.allclose(sim.download(x), reference(d)) for x, d in copies), dev
        with only_on(sim, dev):
            c.close()
    assert sim.races == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_effects_on_two_devices_on_two_threads(strategy: str) -> None:
    sim = DeviceLog()
    results: dict[int, tuple[int, int]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def lane(dev: int) -> None:
        try:
            barrier.wait()
            corrupt, c = pipeline(sim, dev, strategy, "non-blocking", frames=8)
            results[dev] = (corrupt, threading.get_ident())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=lane, args=(dev,)) for dev in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sim.races == []
    for dev, (corrupt, ident) in results.items():
        assert corrupt == 0
        mine = [e for e in sim.log if e[0] == ident and e[1] != "free"]  # the allocator's records aside
        assert mine and sim.devices(mine) == {dev}


# -- the hazard matrix on device 1 ---------------------------------------------------------------------


class SimLabOn(SimLab):
    """A SimLab whose streams (and so inputs, copies and effects) are on ``device``.

    Stand-in until ``SimLab(device=)`` exists: ``stream()`` and ``synchronize()`` are the only
    device-dependent parts (inputs are allocated on their producer stream, copies on the consumer's)."""

    def __init__(self, device: int, backend: ss.sim.SimBackend | None = None) -> None:
        super().__init__(backend if backend is not None else ss.sim.SimBackend(scheduler="adversarial", devices=device + 1))
        self.device = device

    def stream(self, kind: str) -> ss.Stream:
        if kind not in ("legacy", "per-thread", "blocking", "non-blocking"):
            return super().stream(kind)  # the same error
        return stream_of(self.backend, kind, self.device)

    def synchronize(self) -> None:
        self.backend.synchronize_device(self.device)


@contextmanager
def hazard_effects_on(device: int) -> Iterator[None]:
    """``hazards._make_effect`` builds its effects with no ``device=``: give them ``device``."""
    saved = {name: getattr(hazards, name) for name in ("VideoSuperRes", "TrueHDR", "VideoFrameGeneration")}
    try:
        for name, cls in (("VideoSuperRes", VideoSuperRes), ("TrueHDR", TrueHDR), ("VideoFrameGeneration", VideoFrameGeneration)):
            setattr(hazards, name, functools.partial(cls, device=device))
        yield
    finally:
        for name, cls in saved.items():
            setattr(hazards, name, cls)


def verdict(row: hazards.Row) -> tuple[Any, ...]:
    return (row.hazard, row.scenario, row.strategy, row.race_reported, tuple(row.hazards_reported), row.frames,
            row.corrupt_frames)


@pytest.mark.parametrize("strategy", ["none", *STRATEGIES])
def test_hazard_matrix_on_device_1_gives_device_0_verdicts(strategy: str) -> None:
    wrap = hazards.contract_wrap(strategy)
    for sc in hazards.SCENARIOS:
        on0 = hazards.run_scenario(sc, SimLab(), frames=4, strategy=strategy, wrap=wrap)
        lab = SimLabOn(1, DeviceLog())
        with hazard_effects_on(1):
            on1 = hazards.run_scenario(sc, lab, frames=4, strategy=strategy, wrap=wrap)
        assert verdict(on1) == verdict(on0), sc.id
        assert lab.backend.devices() == {1}, sc.id  # every stream operation, event and host wait on device 1
        assert all("cuda:0" not in r for r in on1.races), on1.races
        assert [r.replace("cuda:1", "cuda:0") for r in on1.races] == on0.races
        if strategy != "none":
            assert on1.hazards_reported == [] and on1.corrupt_frames == 0, sc.id


def test_hazard_rows_on_device_1_race_without_streamsafe() -> None:
    with hazard_effects_on(1):
        for sc in (s for s in hazards.SCENARIOS if not s.safe):
            row = hazards.run_scenario(sc, SimLabOn(1), frames=4)
            assert row.race_reported and sc.hazard in row.hazards_reported and row.corrupt_frames >= 3, sc.id


# -- errors: inputs, streams and consumers of another device --------------------------------------------


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial", devices=2)


def test_input_of_another_device_is_a_device_mismatch_and_an_input_error(sim: ss.sim.SimBackend) -> None:
    c = ss.StreamContract(make_effect(sim, 0), sim.create_stream(non_blocking=True))
    other = sim.array(np.zeros((3, 16, 16), np.float32), device=1)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        c.run(other)
    err = info.value
    assert isinstance(err, InputDeviceError) and isinstance(err, ss.errors.InputArrayError)
    assert isinstance(err, TypeError) and isinstance(err, ValueError)
    assert (err.actual, err.expected, err.what) == (1, 0, "input")
    text = str(err)
    assert "is on CUDA device 1 but the effect runs on device 0" in text
    assert "Copy it to device 0 first" in text and "device=1" in text
    assert "SimArray (shape (3, 16, 16), dtype float32)" in text
    try:  # existing handlers keep working
        c.run(other)
    except ss.errors.InputArrayError as e:
        assert e.rule == "it is on CUDA device 1 but the effect runs on device 0"
    assert c.stats["runs"] == 0


def test_raw_effect_refuses_an_input_of_another_device(sim: ss.sim.SimBackend) -> None:
    fx = make_effect(sim, 1)
    with pytest.raises(InputDeviceError, match="is on CUDA device 0 but the effect runs on device 1"):
        fx.run(sim.array(np.zeros((3, 16, 16), np.float32), device=0))


class _Fake:
    """An array-like of a given framework (by module name) on a given DLPack device."""

    def __init__(self, dev: tuple[int, int], shape: tuple[int, ...] = (3, 1080, 1920), dtype: str = "float32") -> None:
        self._dev, self.shape, self.dtype = dev, shape, dtype

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._dev

    def __dlpack__(self, **kw: Any) -> Any:  # pragma: no cover - refused before
        raise AssertionError("not imported")

    def __repr__(self) -> str:
        return "FAKE(" + "9" * 10_000 + ")"


def fake(module: str, name: str, dev: tuple[int, int], **kw: Any) -> Any:
    cls = type(name, (_Fake,), {"__module__": module})
    return cls(dev, **kw)


@pytest.mark.parametrize(
    "module,name,dev,effect_device,wants",
    [
        ("torch", "Tensor", (DLPACK_CUDA, 0), 1, ["torch.Tensor (shape (3, 1080, 1920), dtype float32)", "x.to('cuda:1')"]),
        ("cupy", "ndarray", (DLPACK_CUDA, 1), 0, ["cupy.ndarray", "cupy.copy(x) inside `with cupy.cuda.Device(0):`"]),
        ("jaxlib.xla_extension", "ArrayImpl", (DLPACK_CUDA, 1), 0, ["jax.device_put(x, jax.devices('gpu')[0])"]),
        ("mylib", "Image", (DLPACK_CUDA, 1), 0, ["mylib.Image", "with the framework that made it"]),
        ("streamsafe.sim.backend", "SimArray", (DLPACK_CUDA, 0), 1, ["backend.array(backend.download(x), device=1)", "backend.empty(..., device=1)"]),
    ],
)
def test_wrong_device_message_per_framework(module: str, name: str, dev: tuple[int, int], effect_device: int, wants: list[str]) -> None:
    arr = fake(module, name, dev)
    with pytest.raises(InputDeviceError) as info:
        check_input_device("input", arr, *dev, effect_device)
    text = str(info.value)
    assert f"is on CUDA device {dev[1]} but the effect runs on device {effect_device}" in text
    assert f"device={dev[1]}" in text
    for want in wants:
        assert want in text, text
    assert "999" not in text and len(text) < 400


@pytest.mark.parametrize(
    "module,name,wants",
    [
        ("torch", "Tensor", ["torch.Tensor (shape (3, 1080, 1920), dtype float32)", "x.to('cuda:1') (or x.cuda(1))"]),
        ("numpy", "ndarray", ["torch.from_numpy(x).to('cuda:1')", "cupy.asarray(x) inside `with cupy.cuda.Device(1):`"]),
        ("jax", "Array", ["jax.device_put(x, jax.devices('gpu')[1])"]),
        ("mylib", "Image", ["a torch or CuPy array on cuda:1"]),
    ],
)
def test_host_array_message_is_short_and_framework_appropriate(module: str, name: str, wants: list[str]) -> None:
    arr = fake(module, name, (DLPACK_CPU, 0))
    with pytest.raises(HostArrayError) as info:
        check_input_device("input", arr, DLPACK_CPU, 0, 1)
    err = info.value
    assert isinstance(err, ss.errors.InputArrayError) and isinstance(err, TypeError)
    text = str(err)
    assert "999" not in text and len(text) < 400, text  # no repr of the array
    assert "host memory (CPU)" in text and "not CUDA (2). Move it to the GPU first" in text
    for want in wants:
        assert want in text, text
    if module != "torch":
        assert ".to('cuda:1') (or" not in text  # torch's own method is offered for torch tensors only


def test_numpy_input_message_has_no_data(sim: ss.sim.SimBackend) -> None:
    fx = make_effect(sim, 1)
    c = ss.StreamContract(fx, sim.create_stream(device=1))
    big = np.arange(3 * 16 * 16, dtype=np.float32).reshape(3, 16, 16) + 12345.5
    for call in (c.run, fx.run):
        with pytest.raises(HostArrayError) as info:
            call(big)
        text = str(info.value)
        assert re.match(r"input(_array)? numpy\.ndarray \(shape \(3, 16, 16\), dtype float32\) is not on a GPU", text), text
        assert "12345" not in text and "array([" not in text
        assert "torch.from_numpy(x).to('cuda:1')" in text and "cupy.cuda.Device(1)" in text


def test_other_dlpack_devices_are_named() -> None:
    for dev_type, words in ((3, "pinned host memory"), (13, "CUDA managed memory"), (10, "ROCm"), (99, "not CUDA")):
        with pytest.raises(HostArrayError, match=words):
            check_input_device("input", fake("mylib", "Image", (dev_type, 0)), dev_type, 0, 0)


def test_describe_array() -> None:
    assert describe_array(np.zeros((2, 3), np.uint8)) == "numpy.ndarray (shape (2, 3), dtype uint8)"
    assert describe_array([1, 2]) == "list"
    assert describe_array(fake("torch", "Tensor", (2, 0), shape=(4,), dtype="torch.float16")) == "torch.Tensor (shape (4,), dtype torch.float16)"


def test_sdk_stream_of_another_device(sim: ss.sim.SimBackend) -> None:
    fx = make_effect(sim, 1)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        ss.StreamContract(fx, sim.create_stream(device=0))
    err = info.value
    assert (err.actual, err.expected) == (0, 1)
    assert "is on CUDA device 0, but device 1 is required" in str(err) and "device 1" in err.fix
    c = ss.StreamContract(fx, sim.create_stream(device=1))
    arr, _ = produce(sim, sim.legacy_stream(1), 0)
    with pytest.raises(ss.errors.DeviceMismatchError, match="is on CUDA device 0, but device 1 is required"):
        c.run(arr, stream_ptr=sim.create_stream(non_blocking=True, device=0).ptr)
    assert c.stats["runs"] == 0


def test_consumer_stream_of_another_device(sim: ss.sim.SimBackend) -> None:
    """``torch.from_dlpack(out.image)`` from a consumer on device 1 passes its stream to
    ``out.image.__dlpack__(stream=...)``; the model's ``from_dlpack`` does the same."""
    fx = make_effect(sim, 0)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        ss.StreamContract(fx, sim.create_stream(), consumer_stream=sim.create_stream(device=1))
    assert (info.value.actual, info.value.expected) == (1, 0)
    c = ss.StreamContract(fx, sim.create_stream(non_blocking=True))
    arr, data = produce(sim, sim.legacy_stream(0), 0)
    out = c.run(arr)
    on1 = sim.create_stream(non_blocking=True, device=1)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        sim.from_dlpack(out.image, stream=on1)
    err = info.value
    assert (err.actual, err.expected) == (1, 0)
    assert "is on CUDA device 1, but device 0 is required" in str(err)
    with pytest.raises(ss.errors.DeviceMismatchError):
        out.image.__dlpack__(stream=on1.dlpack)
    with pytest.raises(ss.errors.DeviceMismatchError):
        out.record_stream(on1)
    assert not out.image.consumed  # refused before anything happened: import it on device 0 instead
    on0 = sim.create_stream(non_blocking=True, device=0)
    copy = sim.copy(sim.from_dlpack(out.image, stream=on0), on0)
    assert np.allclose(sim.download(copy, stream=on0), reference(data)) and sim.races == []
    c.close()


@pytest.mark.parametrize(
    "role,words",
    [
        ("sdk", ["the SDK stream", "Pass a stream of device 0", "torch.cuda.Stream(0)", "device=1"]),
        ("input", ["the input's producer stream", "of device 0", "device=1"]),
        ("consumer", ["the consumer's stream", "The output lives on device 0", "import it on a stream of device 0",
                      "y.to('cuda:1')"]),
        ("conversion", ["the conversion stream", "leave conversion_stream unset"]),
    ],
)
def test_stream_on_device_names_the_role_both_devices_and_the_fix(sim: ss.sim.SimBackend, role: str, words: list[str]) -> None:
    s1 = sim.create_stream(device=1)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        stream_on_device(s1, 0, sim, role)
    err = info.value
    assert (err.actual, err.expected) == (1, 0)
    assert "is on CUDA device 1, but device 0 is required" in str(err)
    for w in words:
        assert w in str(err), str(err)
    assert stream_on_device(sim.create_stream(device=0), 0, sim, role).device == 0
    assert stream_on_device(None, 1, sim, role) == sim.legacy_stream(1)


def test_encoding_rgb10a2_on_device_1(sim: ss.sim.SimBackend) -> None:
    fx = VideoSuperRes(backend=sim, device=1, image_encoding=ImageEncoding.RGB10A2)
    fx.output_width, fx.output_height = 32, 32
    fx.load()
    s = sim.create_stream(non_blocking=True, device=1)
    c = ss.StreamContract(fx, s)
    data = K.pack_rgb10a2(np, np.random.default_rng(3).random((3, 16, 16), dtype=np.float32))
    arr = sim.array(data, device=1, stream=s)
    got = c.run(arr).numpy()
    assert np.array_equal(got, K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, data), 32, 32)))
    assert sim.races == []


# -- the multi-GPU bench on the model ---------------------------------------------------------------------


def test_multi_gpu_bench_on_the_model_counts_only() -> None:
    from streamsafe.bench.multi_gpu import format_summary, run_multi_gpu

    backends: list[DeviceLog] = []

    def make_sim() -> ss.sim.SimBackend:
        backends.append(DeviceLog())
        return backends[-1]

    with _no_gc():  # a collection in a lane thread would run other objects' finalizers there
        run = run_multi_gpu(gpu=False, make_sim=make_sim)
    s = run.summary
    assert s["timed"] is False and s["frames_per_lane"] == 8
    rows = s["rows"]
    assert set(rows) == {"none", "auto", "event", "async", "stream", "device", "hand", "hand-sync"}
    for name, row in rows.items():
        assert row["scaling"] is None and row["sync0_ratio"] is None  # no times on the model
        cells = row["scenarios"]
        assert [c["frames"] for c in cells.values()] == [8, 16, 16]
        assert [len(c["lanes"]) for c in cells.values()] == [1, 2, 2]
        assert cells["gpus-2-sync0"]["lanes"][0]["row"] == "device"
        assert cells["gpus-2-sync0"]["lanes"][1]["row"] == name
        if name != "none":
            assert all(c["corrupt"] == 0 and c["checked"] == c["frames"] for c in cells.values()), (name, cells)
        for c in cells.values():
            assert all(lane["frames"] == 8 and lane["fps"] is None for lane in c["lanes"])
    # the unsafe row corrupts on each GPU's lane
    assert all(lane["corrupt"] > 0 for lane in rows["none"]["scenarios"]["gpus-2"]["lanes"])
    # fences per frame do not depend on how many GPUs run: each lane's plan is its own
    for name in ("auto", "event", "async", "hand"):
        cells = rows[name]["scenarios"]
        assert cells["gpus-1"]["fences_per_frame"] == cells["gpus-2"]["fences_per_frame"] > 0
    # every lane's work stayed on its own device: each worker thread logged one device only
    main = threading.get_ident()
    assert len(backends) == len(run.factory.pipelines)
    for be, pipe in zip(backends, run.factory.pipelines.values()):
        by_thread: dict[int, set[int]] = {}
        for entry in be.log:
            if entry[0] != main and entry[1] != "free":  # the allocator's records for freed blocks aside
                by_thread.setdefault(entry[0], set()).update(be.devices([entry]))
        assert sorted(by_thread.values(), key=min) == [{d} for d in pipe.devices], (pipe.rows, by_thread)
        if "none" not in pipe.rows:
            assert be.races == [], pipe.rows
    assert "gpus-2-sync0" in format_summary(s)


def test_multi_gpu_bench_lane_threads_stay_on_their_device() -> None:
    from streamsafe.bench.multi_gpu import MultiGpuFactory

    sim = DeviceLog()
    factory = MultiGpuFactory(False, make_sim=lambda: sim)
    pipe = factory("gpus-2", "auto")
    try:
        assert [lane.device for lane in pipe.lanes] == [0, 1]
        start = len(sim.log)
        with _no_gc():  # a collection in a lane thread would run other objects' finalizers there
            pipe.run_block(0, 4)
        mine = sim.log[start:]
        idents = {e[0] for e in mine}
        assert len(idents) == 2 and threading.get_ident() not in idents  # one worker thread per lane
        # (the allocator's records for blocks freed earlier, of either device, are drained by whichever call comes next)
        assert sorted(tuple(sim.devices([e for e in mine if e[0] == t and e[1] != "free"])) for t in idents) == [(0,), (1,)]
        assert pipe.check() == (8, 0)
        assert sim.races == []
    finally:
        pipe.close()


def test_multi_gpu_cli_on_the_model(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from streamsafe.bench.multi_gpu import main

    out = tmp_path / "mgpu.json"
    assert main(["--backend", "sim", "--strategy", "none,auto,device", "--no-hand", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "simulated backend" in text and "gpus-2-sync0" in text
    data = json.loads(out.read_text())
    assert set(data["summary"]["rows"]) == {"none", "auto", "device"}
    assert {(c["scenario"], c["strategy"]) for c in data["raw"]["cells"]} >= {("gpus-2", "auto"), ("gpus-1", "device")}


def test_multi_gpu_cli_errors(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from streamsafe.bench import multi_gpu

    monkeypatch.setattr(multi_gpu, "gpu_count", lambda: 1)
    assert multi_gpu.main(["--backend", "cuda"]) == 2
    assert "needs 2 CUDA devices; torch sees 1" in capsys.readouterr().err
    assert multi_gpu.main(["--backend", "sim", "--scenario", "gpus-9"]) == 2
    assert "unknown multi-GPU scenario 'gpus-9'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs 3 CUDA devices; the model has 2"):
        multi_gpu.MultiGpuFactory(False, scenarios=[multi_gpu.MultiGpuScenario("x", "x", (0, 2))])("x", "auto")


@pytest.mark.parametrize("option", ["--frames", "--block"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_multi_gpu_cli_refuses_frames_below_one(option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from streamsafe.bench import multi_gpu

    with pytest.raises(SystemExit) as exc:
        multi_gpu.main(["--backend", "sim", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected a positive integer, got {value}: give 1 or more" in err


@pytest.mark.parametrize("what", ["frames", "block"])
def test_multi_gpu_bench_refuses_zero_frames_not_runs_the_default(what: str) -> None:
    from streamsafe.bench.multi_gpu import run_multi_gpu

    with pytest.raises(ValueError, match=f"{what} must be a positive integer, got 0"):
        run_multi_gpu(gpu=False, **{what: 0})


def test_multi_gpu_cli_refuses_a_negative_warmup(capsys: pytest.CaptureFixture[str]) -> None:
    from streamsafe.bench import multi_gpu

    with pytest.raises(SystemExit) as exc:
        multi_gpu.main(["--backend", "sim", "--warmup", "-1"])
    assert exc.value.code == 2 and "argument --warmup" in capsys.readouterr().err
