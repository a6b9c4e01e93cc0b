"""PyAV's NVDEC frames, guarded: the emulated NVDEC (``install_fake_pyav_hw``) on the adversarial model.

The measured hazard (D7): a consumer imports a plane zero-copy, queues its read on its own stream and drops the
view at once; the frame's surface goes back to FFmpeg's pool while the read is queued, and the frame after next
is decoded into it. Each fence test shows the race without the guard (wrong frames, and a race the model
reports) and its absence with it, under every strategy and every way in, with the views dropped at once; then
the frame's copies, planes, close() and staleness, container.close(), the generic lazy call, and the errors.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.errors import ExportError, ProfileError, StaleOutputError
from streamsafe.profile import PoolProfile, register, unregister
from streamsafe.sim import SimBackend
from streamsafe.testing import sample_clip
from streamsafe.testing.fake_pyav import EmulatedInputContainer, decode_nv12, pyav_hw_for_test

av = pytest.importorskip("av")
from av.codec.hwaccel import HWAccel  # noqa: E402

FRAMES = 40
SIZE = (64, 48)
STRATEGIES = ["auto", "event", "async", "stream", "device"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clip() -> str:
    return sample_clip(FRAMES, SIZE)


@pytest.fixture
def pyav(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``av`` with ``av.open(..., hwaccel=...)`` routed to the emulated NVDEC for the test."""
    return pyav_hw_for_test(monkeypatch)


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


def _open(pyav: Any, clip: str) -> Any:
    return pyav.open(clip, hwaccel=HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True))


def _index(frame: Any) -> int:
    return (frame.raw if isinstance(frame, ss.SafeFrame) else frame).index  # type: ignore[no-any-return]


class Consumer:
    """Imports each frame's Y plane zero-copy on its own non-blocking stream, queues a copy there and drops the view
    at once (the measured program): the host moves on to the next decode without waiting."""

    def __init__(self, sim: SimBackend, clip: str) -> None:
        self.sim = sim
        self.stream = sim.create_stream(non_blocking=True)
        self.copies: list[tuple[int, Any]] = []
        h = SIZE[1]
        self.reference = [nv12[:h] for nv12 in decode_nv12(clip)]

    def take(self, frame: Any) -> None:
        plane = frame.planes[0]
        if isinstance(frame, ss.SafeFrame):
            view = self.sim.from_dlpack(plane, stream=self.stream)  # (the guarded plane takes the consumer's stream)
        else:
            view = self.sim.from_dlpack(plane.__dlpack__())  # PyAV's recipe: no stream (it refuses one)
        self.copies.append((_index(frame), self.sim.copy(view, self.stream)))
        del view  # dropped at once

    def wrong(self) -> int:
        self.sim.synchronize_device()
        return sum(not np.array_equal(self.sim.download(c), self.reference[i]) for i, c in self.copies)


# -- the race, and its fence -----------------------------------------------------------------------------------


def test_the_emulation_behaves_as_pyav_s_nvdec(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    assert isinstance(container, EmulatedInputContainer)
    frame = next(container.decode(video=0))
    assert frame.format.name == "cuda" and frame.sw_format.name == "nv12"
    y, uv = frame.planes
    assert (y.height, y.width, uv.height, uv.width) == (SIZE[1], SIZE[0], SIZE[1] // 2, SIZE[0] // 2)
    assert y.__dlpack_device__() == (2, 0)
    with pytest.raises(NotImplementedError, match="CUDA stream synchronization is not supported"):
        y.__dlpack__(stream=1)
    with pytest.raises(NotImplementedError):  # what torch.from_dlpack(plane) meets: it always passes a stream
        sim.from_dlpack(y)
    assert sim.from_dlpack(uv.__dlpack__()).shape == (SIZE[1] // 2, SIZE[0] // 2, 2)
    assert np.array_equal(frame.to_ndarray(), decode_nv12(clip)[0])
    plain = pyav.open(clip)  # without hwaccel: PyAV's own container, frames in host memory
    assert not isinstance(plain, EmulatedInputContainer) and next(plain.decode(video=0)).format.name == "yuv420p"


def test_the_race_shows_unguarded_with_the_measured_pool(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    for frame in container.decode(video=0):
        consumer.take(frame)
    assert consumer.wrong() > FRAMES // 2
    assert sim.races
    assert container.pool.made == 2  # FFmpeg's pool held 2 surfaces


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_guard_block_orders_every_frame(pyav: Any, sim: SimBackend, clip: str, strategy: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    with ss.stream_contract(container, strategy=strategy) as c:
        for frame in container.decode(video=0):
            assert isinstance(frame, ss.SafeFrame)
            consumer.take(frame)
        inside = dict(c.stats)  # (leaving the block waits for the last reads, as the end of any block does)
    assert consumer.wrong() == 0
    assert sim.races == []
    assert inside["runs"] == FRAMES and inside["fences"] == 0  # no call is fenced: no buffer is rewritten
    if strategy in ("auto", "event", "async"):
        assert inside["host_waits"] == 0 and inside["device_syncs"] == 0
        assert inside["D7"] >= FRAMES - 2  # each dropped frame kept until events on its readers completed
    elif strategy == "stream":
        assert inside["host_waits"] >= FRAMES - 2
    else:
        assert inside["device_syncs"] >= FRAMES - 2


@pytest.mark.parametrize("guarded", [True, False], ids=["block", "control-no-block"])
def test_frames_of_a_decode_made_before_the_block_are_guarded_in_it(pyav: Any, sim: SimBackend, clip: str,
                                                                     guarded: bool) -> None:
    """``frames = container.decode(video=0)`` before the block, iterated inside it: each step is guarded by the block
    open when it is taken (it gave PyAV's raw frames: 38 of 40 wrong). The control iterates with no block: it races."""
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    frames = container.decode(video=0)
    if guarded:
        with ss.stream_contract(container) as c:
            for frame in frames:
                assert isinstance(frame, ss.SafeFrame)
                consumer.take(frame)
        assert c.stats["runs"] == FRAMES
        assert (consumer.wrong(), sim.races) == (0, [])
    else:
        for frame in frames:
            assert not isinstance(frame, ss.SafeFrame)
            consumer.take(frame)
        assert consumer.wrong() > FRAMES // 2 and sim.races


@pytest.mark.parametrize("scheduler", ["in-order", "random"])
def test_a_surface_goes_back_once_its_reads_are_done(pyav: Any, clip: str, scheduler: str) -> None:
    """Where the reads complete as the program goes (not the adversarial order), surfaces are reused: the release is
    ordered by the completed queries, and the model, which saw them, finds no race."""
    sim = SimBackend(scheduler=scheduler, seed=3)
    with ss.use_backend(sim):
        container = _open(pyav, clip)
        consumer = Consumer(sim, clip)
        with ss.stream_contract(container) as c:
            for frame in container.decode(video=0):
                consumer.take(frame)
            inside = dict(c.stats)
        assert consumer.wrong() == 0 and sim.races == []
        assert inside["host_waits"] == 0
        assert container.pool.made < FRAMES // 2


def test_strategy_none_shows_the_race(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    with ss.stream_contract(container, strategy="none", allow_none=True):
        for frame in container.decode(video=0):
            consumer.take(frame)
    assert consumer.wrong() > 0 and sim.races


def test_the_decorator_guards_a_generator_function(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)

    @ss.stream_safe(container)
    def frames() -> Iterator[Any]:
        yield from container.decode(video=0)

    for frame in frames():
        assert isinstance(frame, ss.SafeFrame)
        consumer.take(frame)
    assert consumer.wrong() == 0 and sim.races == []


def test_a_class_guard_on_av_guards_every_container(pyav: Any, sim: SimBackend, clip: str) -> None:
    consumer = Consumer(sim, clip)
    with ss.guard(pyav) as cg:
        for _ in range(2):
            container = _open(pyav, clip)
            for frame in container.decode(video=0):
                consumer.take(frame)
            container.close()
    assert consumer.wrong() == 0 and sim.races == []
    assert [c.effect_name for c in cg.pool_contracts] == ["EmulatedInputContainer"] * 2
    assert ss.profile.profile_of(av.container.InputContainer).name.startswith("av.InputContainer")


def test_a_contract_called_directly(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    c = ss.PoolContract(container, strategy="event")
    consumer = Consumer(sim, clip)
    for frame in c.decode(video=0):
        consumer.take(frame)
    c.close()
    assert consumer.wrong() == 0 and sim.races == []
    assert "D7" in c.plan.reason and "no host wait" in c.plan.reason


def test_a_new_consumer_stream_per_frame(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    with ss.stream_contract(container):
        for frame in container.decode(video=0):
            consumer.stream = sim.create_stream(non_blocking=True)
            consumer.take(frame)
    assert consumer.wrong() == 0 and sim.races == []


def test_leaving_the_loop_early_closes_pyav_s_generator(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    consumer = Consumer(sim, clip)
    with ss.stream_contract(container) as c:
        frames = container.decode(video=0)
        for frame in frames:
            consumer.take(frame)
            if len(consumer.copies) == 5:
                break
        frames.close()
        assert c.stats["runs"] == 5
        for frame in container.decode(video=0):  # (a new generator goes on from where PyAV is)
            consumer.take(frame)
    assert consumer.wrong() == 0 and sim.races == []


# -- copies, planes, staleness ----------------------------------------------------------------------------------


def test_copies_of_a_frame_and_of_its_planes(pyav: Any, sim: SimBackend, clip: str) -> None:
    truth = decode_nv12(clip)
    h, w = SIZE[1], SIZE[0]
    C = sim.create_stream(non_blocking=True)
    container = _open(pyav, clip)
    with ss.stream_contract(container):
        for i, frame in enumerate(container.decode(video=0)):
            if i == 3:
                break
            assert np.array_equal(frame.numpy(), truth[i])  # NV12: Y rows, then the interleaved UV rows
            assert np.array_equal(sim.download(frame.copy(C), C), truth[i])
            y, uv = frame.planes
            assert np.array_equal(y.numpy(), truth[i][:h])
            assert np.array_equal(sim.download(uv.copy(C), C).reshape(h // 2, w), truth[i][h:])
            assert (y.width, uv.width) == (w, w // 2)  # (the SDK plane's attributes)
            assert frame.pts == frame.raw.pts and frame.generation == 1
    assert sim.races == []


def test_a_frame_of_planes_is_not_one_array(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    with ss.stream_contract(container):
        frame = next(container.decode(video=0))
        with pytest.raises(ExportError, match=r"planes, not one array.*frame.planes\[0\]"):
            sim.from_dlpack(frame)
        with pytest.raises(ExportError, match="copy=True"):
            frame.planes[0].__dlpack__(copy=True)


def test_a_closed_frame_is_stale_and_goes_back_at_once(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    C = sim.create_stream(non_blocking=True)
    with ss.stream_contract(container) as c:
        frames = container.decode(video=0)
        frame = next(frames)
        copy = sim.copy(sim.from_dlpack(frame.planes[0], stream=C), C)
        with frame:
            assert not frame.stale
        assert frame.stale and c.stats["D7"] == 1  # given back at close, once the copy's event completes
        with pytest.raises(StaleOutputError, match=r"frame.close\(\).*Copy what you keep"):
            sim.from_dlpack(frame.planes[1], stream=C)
        with pytest.raises(StaleOutputError):
            frame.numpy()
        with pytest.raises(StaleOutputError):
            frame.pts  # noqa: B018  (its SDK frame went back: nothing of it is read any more)
        frame.close()  # (twice: nothing)
        for _ in frames:
            pass
    assert np.array_equal(sim.download(copy), decode_nv12(clip)[0][:SIZE[1]])
    assert sim.races == []


def test_a_view_used_after_its_frame_closed_is_reported(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    C = sim.create_stream(non_blocking=True)
    with ss.stream_contract(container):
        frames = container.decode(video=0)
        frame = next(frames)
        view = sim.from_dlpack(frame.planes[0], stream=C)
        frame.close()
        sim.copy(view, C)  # (read after the frame went back: not ordered before the surface's next decode)
        del view
    assert any("stale view" in str(r) for r in sim.races)


def test_a_view_that_outlives_its_frame_is_not_ordered(pyav: Any, clip: str) -> None:
    """The documented limit: a view holds its surface (the capsule's reference), but when it goes, the surface goes
    back with no stream order; streamsafe orders what it saw read while the frame lived. The model reports the rest."""
    sim = SimBackend(scheduler="in-order")
    with ss.use_backend(sim):
        container = _open(pyav, clip)
        C = sim.create_stream(non_blocking=True)
        with ss.stream_contract(container):
            frames = container.decode(video=0)
            view = sim.from_dlpack(next(frames).planes[0], stream=C)  # the frame itself is dropped at once
            next(frames)
            next(frames)  # (the dropped frame is given back at the next call; the view still holds its surface)
            sim.copy(view, C)
            del view  # the surface goes back to the pool now, with the copy queued
            for _ in frames:
                pass
    assert sim.races


def test_frames_stay_valid_after_the_container_closes(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = _open(pyav, clip)
    with ss.stream_contract(container) as c:
        frames = list(container.decode(video=0))[:3]
        container.close()  # a release: the host waits for the readers once; the frames hold their surfaces
        assert not any(f.stale for f in frames)
        assert np.array_equal(frames[2].numpy(), decode_nv12(clip)[2])
        frames[1].close()
        with pytest.raises(StaleOutputError):
            frames[1].numpy()
    assert c.ledger.closed and sim.races == []


def test_frames_in_host_memory_pass_through(pyav: Any, sim: SimBackend, clip: str) -> None:
    container = pyav.open(clip, hwaccel=HWAccel(device_type="cuda", is_hw_owned=False))  # PyAV copies them out
    with ss.stream_contract(container) as c:
        frame = next(container.decode(video=0))
    assert isinstance(frame, av.VideoFrame) and c.stats["runs"] == 1


# -- a lazy call of another SDK: the generic part ---------------------------------------------------------------


class LazyRing:
    """A toy SDK: ``frames(n)`` is a generator that writes each frame into the next of 2 buffers it reuses (on the
    legacy stream, waited for), as PyNvVideoCodec's ``decoder[i]`` does: a rewrite pool, fenced before each step."""

    def __init__(self, sim: SimBackend) -> None:
        self.sim = sim
        self.ring = [sim.malloc((4,), np.int32, name=f"ring {i}") for i in range(2)]

    def frames(self, n: int) -> Iterator[Any]:
        legacy = self.sim.legacy_stream()
        for i in range(n):
            array = self.ring[i % 2]
            buf = array.buffer
            self.sim.launch(legacy, f"write {i}", lambda buf=buf, i=i: buf.data.fill(i), writes=[array])
            self.sim.synchronize_stream(legacy)
            yield array


@pytest.fixture
def lazy_ring() -> Iterator[Any]:
    profile = register(PoolProfile(
        name="LazyRing", classes=(LazyRing,), calls=("frames",), lazy=("frames",),
        frames_of=lambda raw: [raw] if hasattr(raw, "__dlpack__") else [], buffer_key=lambda f: f.buffer,
    ))
    yield LazyRing
    unregister(profile)


def test_a_lazy_call_of_a_rewrite_pool_fences_each_step(lazy_ring: Any, sim: SimBackend) -> None:
    def run(guarded: bool) -> tuple[list[int], Any]:
        sdk = lazy_ring(sim)
        C = sim.create_stream(non_blocking=True)
        copies = []
        c = ss.stream_contract(sdk) if guarded else None
        for array in (c.frames(8) if c is not None else sdk.frames(8)):
            copies.append(sim.copy(sim.from_dlpack(array, stream=C), C))
        sim.synchronize_device()
        return [int(sim.download(x)[0]) for x in copies], c

    got, _ = run(False)
    assert got != list(range(8)) and sim.races
    sim.races.clear()
    got, c = run(True)
    assert got == list(range(8)) and sim.races == []
    assert c.stats["runs"] == 8 and c.stats["D5"] > 0


def test_profile_fields_of_lazy_calls_and_held_frames_are_checked() -> None:
    with pytest.raises(ProfileError, match="lazy"):
        PoolProfile(name="x.Y", classes=("x.Y",), calls=("decode",), lazy=("frames",))
    with pytest.raises(ProfileError, match="planes"):
        PoolProfile(name="x.Y", classes=("x.Y",), calls=("decode",), planes="not a name")
    with pytest.raises(ProfileError, match="frames_hold_buffers"):
        PoolProfile(name="x.Y", classes=("x.Y",), calls=("decode",), frames_hold_buffers=True, prefetches=True)
    with pytest.raises(ProfileError, match="export_stream"):
        PoolProfile(name="x.Y", classes=("x.Y",), calls=("decode",), export_stream="no")  # type: ignore[arg-type]


# -- streamsafe run ---------------------------------------------------------------------------------------------


def test_streamsafe_run_guards_a_pyav_program(tmp_path: Path, clip: str) -> None:
    program = tmp_path / "nvdec.py"
    program.write_text(
        "import av, numpy as np, streamsafe as ss\n"
        "from av.codec.hwaccel import HWAccel\n"
        f"container = av.open({clip!r}, hwaccel=HWAccel(device_type='cuda', allow_software_fallback=False, is_hw_owned=True))\n"
        "sim = ss.current_backend()\n"
        "C = sim.create_stream(non_blocking=True)\n"
        "copies = []\n"
        "for frame in container.decode(video=0):\n"
        "    view = sim.from_dlpack(frame.planes[0], stream=C)\n"
        "    copies.append(sim.copy(view, C))\n"
        "    del view\n"
        "container.close()\n"
        "sim.synchronize_device()\n"
        "print('decoded', len(copies), type(frame).__name__)\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "--sanitize", str(program)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"decoded {FRAMES} SafeFrame" in result.stdout
    assert "EmulatedInputContainer" in result.stderr and "sanitize: no race found" in result.stderr


# -- examples/pyav_nvdec_upscale.py on the model ------------------------------------------------------------------


def _example(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "examples" / "pyav_nvdec_upscale.py"), "--model", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("strategy", ["auto", "stream"])
def test_the_example_runs_on_the_model_and_every_frame_is_right(strategy: str) -> None:
    result = _example("--verify", "--frames", "16", "--strategy", strategy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: 0 of 16 frames wrong" in result.stdout
    if strategy == "auto":
        assert "0 host waits of streamsafe's" in result.stdout


def test_the_example_unguarded_races_on_the_model() -> None:
    result = _example("--verify", "--unguarded", "--frames", "16")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the unguarded program races" in result.stdout


def test_the_example_writes_a_video(tmp_path: Path) -> None:
    out = tmp_path / "up.mp4"
    result = _example("--frames", "8", "--scale", "2", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    with av.open(str(out)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 8 and (frames[0].width, frames[0].height) == (320, 192)


def test_the_benchmark_says_what_it_needs_without_a_gpu() -> None:
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pyav_nvdec.py"), "--rounds", "1"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and "pyav_nvdec.py: needs" in result.stderr, result.stdout + result.stderr
