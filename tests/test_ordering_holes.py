"""Regression tests: the seven ordering holes found by hunting on the model (issue 8), each by name.

Every test runs a pipeline a user can write on the model with the adversarial scheduler (an
unordered pair is run in the order that breaks it) and checks each frame against NumPy and the
race report. Each one failed before the per-effect ledger; the controls show the race is real.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.streams import implicitly_ordered
from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
from streamsafe.testing import _kernels as K

FENCED = ["auto", "event", "async", "stream", "device"]


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial")


def make_sr(sim: ss.sim.SimBackend, size: int = 32, cls: type = VideoSuperRes, *, input_size: int | None = None, **kw: Any) -> Any:
    """A loaded ``cls`` (the emulated ``VideoSuperRes`` or a subclass of it), upscaling to ``size`` (from
    ``input_size`` square inputs only, when given)."""
    sr = cls(backend=sim, **kw)
    sr.output_width, sr.output_height = size, size
    if input_size is not None:
        sr.input_width = sr.input_height = input_size
    sr.load()
    return sr


def data_of(seed: int, h: int = 16, w: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).random((3, h, w), dtype=np.float32)


def write(sim: ss.sim.SimBackend, arr: Any, data: np.ndarray, stream: ss.Stream) -> None:
    sim.launch(stream, "producer.write", lambda: np.copyto(arr.buffer.data, data), writes=[arr])


def fresh(sim: ss.sim.SimBackend, seed: int, stream: ss.Stream, h: int = 16, w: int = 16) -> tuple[Any, np.ndarray]:
    data = data_of(seed, h, w)
    arr = sim.empty((3, h, w), np.float32, name=f"frame{seed}")
    write(sim, arr, data, stream)
    return arr, data


def sr_expected(data: np.ndarray, size: int = 32) -> np.ndarray:
    return K.to_rgb8(np, K.resize_bilinear(np, data, size, size)).astype(np.float32) / np.float32(255)


def hdr_expected(data: np.ndarray) -> np.ndarray:
    return K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)


def import_copy(sim: ss.sim.SimBackend, out: Any, stream: ss.Stream) -> Any:
    """``torch.from_dlpack(out.image).clone()`` on ``stream``, spelled for the model."""
    return sim.copy(sim.from_dlpack(out.image, stream=stream), stream, name="consumer.copy")


def verify(sim: ss.sim.SimBackend, copies: list[tuple[Any, np.ndarray]]) -> int:
    """Wait for everything, then count wrong frames."""
    sim.synchronize_device()
    return sum(not np.array_equal(sim.download(copy, sim.legacy_stream()), want) for copy, want in copies)


def contract(sr: Any, stream: Any, strategy: str, **kw: Any) -> ss.StreamContract:
    try:
        return ss.StreamContract(sr, stream, strategy=strategy, allow_none=strategy == "none", **kw)
    except ss.errors.StrategyError:
        pytest.skip(f"{strategy} is refused for these streams")


# -- 1. a decoder surface rewritten in place every frame ---------------------------------------------


def in_place_surface(sim: ss.sim.SimBackend, strategy: str, sdk_kind: str) -> tuple[int, int]:
    s = sim.legacy_stream() if sdk_kind == "legacy" else sim.create_stream(non_blocking=sdk_kind == "non-blocking")
    consumer = sim.create_stream(non_blocking=True)
    c = contract(make_sr(sim), s, strategy)
    surface = sim.empty((3, 16, 16), np.float32, name="decoder surface")
    outs = []
    with sim.use_stream(s):
        for i in range(4):
            data = data_of(i)
            write(sim, surface, data, s)
            outs.append((c.run(surface), data))
    copies = [(import_copy(sim, outs[-1][0], consumer), sr_expected(outs[-1][1]))]
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("sdk_kind", ["blocking", "legacy", "non-blocking"])
@pytest.mark.parametrize("strategy", FENCED)
def test_hole1_surface_rewritten_in_place(sim: ss.sim.SimBackend, strategy: str, sdk_kind: str) -> None:
    assert in_place_surface(sim, strategy, sdk_kind) == (0, 0)


def test_hole1_control_the_rewrite_races_without_fences(sim: ss.sim.SimBackend) -> None:
    corrupt, races = in_place_surface(sim, "none", "blocking")
    assert races > 0


def test_hole1_blocking_stream_rewrite_waits_for_the_shadow_stream(sim: ss.sim.SimBackend) -> None:
    """The case the issue measured: auto resolves to async (a blocking shadow stream), and the
    producer's next write on the blocking SDK stream is not ordered after the shadow's read."""
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), s, input_stream=s)
    assert c.plan.strategy is ss.Strategy.ASYNC
    h12 = [f for f in c.plan.fences if f.hazard == "H12" and f.action == "device-wait"]
    # S waits for stream 0's conversion, which stream 0 issues after the shadow's read (it waits for blocking streams)
    assert [(f.waiter, f.signaller) for f in h12] == [(s, c.plan.conversion)]
    assert implicitly_ordered(c.plan.run_stream, c.plan.conversion)
    assert not c.plan.import_fences(s)  # that wait also orders the import on S


# -- 2. allocator reuse: the input is made on S while another stream is current at run() ------------


def allocator_reuse(sim: ss.sim.SimBackend, strategy: str) -> tuple[int, int]:
    s = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    c = contract(make_sr(sim), s, strategy)
    copies = []
    for i in range(4):
        data = data_of(i)
        x = sim.empty((3, 16, 16), np.float32, stream=s, name="fresh input")  # from S's pool
        write(sim, x, data, s)
        out = c.run(x)  # the current stream is the legacy stream here
        del x  # freed: the allocator hands the block to the next allocation on S
        copies.append((import_copy(sim, out, consumer), sr_expected(data)))
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("strategy", FENCED)
def test_hole2_allocator_reuse_of_a_freed_input(sim: ss.sim.SimBackend, strategy: str) -> None:
    assert allocator_reuse(sim, strategy) == (0, 0)


def test_hole2_control_reuse_races_without_fences(sim: ss.sim.SimBackend) -> None:
    assert allocator_reuse(sim, "none")[1] > 0


# -- 3. consumers forgotten while the output is still valid ----------------------------------------------


def _view_then(sim: ss.sim.SimBackend, strategy: str, between: str) -> tuple[int, int]:
    s = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    sr = make_sr(sim)
    c = contract(sr, s, strategy)
    with c:
        x, data = fresh(sim, 0, s)
        out = sr.run(x)
        view = sim.from_dlpack(out.image, stream=consumer)  # a zero-copy view, kept
        if between == "rejected run":
            with pytest.raises(ss.errors.EffectConfigError):
                sr.run(sim.empty((3, 16, 16), np.float64))  # the SDK rejects the dtype: the output stays valid
        elif between == "synchronize":
            c.synchronize()
    if between == "re-enter":
        c.__enter__()
    copy = sim.copy(view, consumer, name="consumer.copy")  # issued only now, from the kept view
    y, _ = fresh(sim, 1, s)
    c.run(y)  # must wait for the copy
    if between == "re-enter":
        c.__exit__(None, None, None)
    return verify(sim, [(copy, sr_expected(data))]), len(sim.races)


@pytest.mark.parametrize("between", ["rejected run", "synchronize", "re-enter"])
@pytest.mark.parametrize("strategy", FENCED)
def test_hole3_readers_survive_until_the_next_run(sim: ss.sim.SimBackend, strategy: str, between: str) -> None:
    assert _view_then(sim, strategy, between) == (0, 0)


def test_hole3_control(sim: ss.sim.SimBackend) -> None:
    assert _view_then(sim, "none", "synchronize")[1] > 0


# -- 4. TrueHDR: an input-size change reallocates the output inside run() ----------------------------------


def hdr_resize(sim: ss.sim.SimBackend, strategy: str) -> tuple[int, int]:
    s = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    hdr = TrueHDR(backend=sim)
    hdr.load()
    c = contract(hdr, s, strategy)
    x, data = fresh(sim, 0, s, 16, 16)
    copy = import_copy(sim, c.run(x), consumer)  # pending
    y, _ = fresh(sim, 1, s, 32, 32)
    c.run(y)  # the SDK frees and reallocates its output from the host
    return verify(sim, [(copy, hdr_expected(data))]), len(sim.races)


@pytest.mark.parametrize("strategy", FENCED)
def test_hole4_truehdr_resolution_change_waits_for_pending_copies(sim: ss.sim.SimBackend, strategy: str) -> None:
    assert hdr_resize(sim, strategy) == (0, 0)


def test_hole4_control(sim: ss.sim.SimBackend) -> None:
    assert hdr_resize(sim, "none")[1] > 0


# -- 5. auto, RGB10A2, the SDK stream changes between calls, outputs not imported ----------------------------


def changing_sdk_stream(sim: ss.sim.SimBackend, strategy: str) -> tuple[int, int]:
    streams = [sim.create_stream(non_blocking=True) for _ in range(2)]
    consumer = sim.create_stream(non_blocking=True)
    sr = make_sr(sim, image_encoding=ImageEncoding.RGB10A2)
    c = contract(sr, None, strategy)
    last = None
    for i in range(4):
        with sim.use_stream(streams[i % 2]):
            data = data_of(i)
            x = sim.empty((16, 16), np.uint32, name=f"frame{i}")
            write(sim, x, K.pack_rgb10a2(np, data), streams[i % 2])
            last = (c.run(x, non_blocking=True), data)  # the caller's non_blocking counts only under none
    assert last is not None
    want = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, K.pack_rgb10a2(np, last[1])), 32, 32))
    return verify(sim, [(import_copy(sim, last[0], consumer), want)]), len(sim.races)


@pytest.mark.parametrize("strategy", FENCED)
def test_hole5_sdk_stream_changes_between_runs(sim: ss.sim.SimBackend, strategy: str) -> None:
    assert changing_sdk_stream(sim, strategy) == (0, 0)


def test_hole5_control(sim: ss.sim.SimBackend) -> None:
    assert changing_sdk_stream(sim, "none")[1] > 0


# -- 6. state per effect, not per contract ---------------------------------------------------------------------


def guards_mixed(sim: ss.sim.SimBackend, strategy: str, how: str) -> tuple[int, int]:
    s = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    sr = make_sr(sim)
    none_ok = {"allow_none": strategy == "none"}
    main = contract(sr, s, strategy)
    other = contract(sr, sim.create_stream(non_blocking=True), strategy)
    decorated = ss.stream_safe(sr, s, strategy=strategy, **none_ok)(lambda a: sr.run(a))
    copies = []
    for i in range(4):
        x, data = fresh(sim, i, s)
        with sim.use_stream(s):  # the input's producer is the current stream at run()
            if how == "block per frame":
                with ss.stream_contract(sr, s, strategy=strategy, **none_ok):
                    out = sr.run(x)
            elif how == "second contract":
                out = (main if i % 2 else other).run(x)
            elif how == "decorator":
                out = main.run(x) if i % 2 else decorated(x)
            else:
                out = main.run(x)
        copies.append((import_copy(sim, out, consumer), sr_expected(data)))  # after the block / guard
        if how == "unguarded run":  # a raw run in between: still ordered after the copy; raw output
            with sim.use_stream(s):
                raw = sr.run(fresh(sim, 100 + i, s)[0], stream_ptr=s.ptr)
            assert not isinstance(raw, ss.SafeOutput)
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("how", ["block per frame", "second contract", "decorator", "unguarded run"])
@pytest.mark.parametrize("strategy", FENCED)
def test_hole6_every_guard_shares_the_effect_state(sim: ss.sim.SimBackend, strategy: str, how: str) -> None:
    assert guards_mixed(sim, strategy, how) == (0, 0)


def test_hole6_control(sim: ss.sim.SimBackend) -> None:
    assert guards_mixed(sim, "none", "second contract")[1] > 0


@pytest.mark.parametrize("second", ["contract", "decorator", "unguarded"])
def test_hole6_an_output_of_one_guard_is_stale_after_another_ran(sim: ss.sim.SimBackend, second: str) -> None:
    sr = make_sr(sim)
    c1 = ss.StreamContract(sr)
    out = c1.run(fresh(sim, 0, sim.legacy_stream())[0])
    x = fresh(sim, 1, sim.legacy_stream())[0]
    if second == "contract":
        ss.StreamContract(sr).run(x)
    elif second == "decorator":
        ss.stream_safe(sr)(lambda a: sr.run(a))(x)
    else:
        sr.run(x)
    with pytest.raises(ss.errors.StaleOutputError, match="came from run #1"):
        sim.from_dlpack(out.image)


def test_hole6_a_second_guard_inside_an_open_block_does_not_recurse(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    consumer = sim.create_stream(non_blocking=True)
    copies = []
    with ss.stream_contract(sr):
        c2 = ss.stream_contract(sr, sim.create_stream(non_blocking=True))
        deco = ss.stream_safe(sr)(lambda a: sr.run(a))
        for run in (c2.run, deco, sr.run):
            x, data = fresh(sim, len(copies), sim.legacy_stream())
            copies.append((import_copy(sim, run(x), consumer), sr_expected(data)))
        with c2:
            x, data = fresh(sim, 9, sim.legacy_stream())
            copies.append((import_copy(sim, sr.run(x), consumer), sr_expected(data)))
    assert verify(sim, copies) == 0 and sim.races == []


class SlottedSuperRes(VideoSuperRes):
    """An effect class whose instances have no ``__dict__`` (as a compiled binding may)."""

    __slots__ = ()


def test_hole6_effects_without_dict_are_guarded(sim: ss.sim.SimBackend) -> None:
    sr = SlottedSuperRes.__new__(SlottedSuperRes)
    VideoSuperRes.__init__(sr, backend=sim)
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    consumer = sim.create_stream(non_blocking=True)
    copies = []
    with ss.stream_contract(sr, sim.create_stream(non_blocking=True)):
        for i in range(3):
            x, data = fresh(sim, i, sim.legacy_stream())
            out = sr.run(x)
            assert isinstance(out, ss.SafeOutput)
            copies.append((import_copy(sim, out, consumer), sr_expected(data)))
    assert verify(sim, copies) == 0 and sim.races == []


# -- 7. a view read on another stream than the one it was imported on ------------------------------------------


def view_on_second_stream(sim: ss.sim.SimBackend, strategy: str, declare: str) -> tuple[int, int]:
    s = sim.create_stream(non_blocking=True)
    c1, c2 = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = contract(make_sr(sim), s, strategy, input_stream=s)
    copies = []
    current = sim.use_stream(c2) if declare == "current" else sim.use_stream(sim.legacy_stream())
    with current:  # "current": the reading stream is the framework's current stream at the next run
        for i in range(3):
            x, data = fresh(sim, i, s)
            out = c.run(x)
            view = sim.from_dlpack(out.image, stream=c1)
            sim.fence(c2, c1)  # the user's correct fence: C2 waits for the import stream
            if declare == "record_stream":
                out.record_stream(c2)
            copies.append((sim.copy(view, c2, name="consumer.copy"), sr_expected(data)))
        c.run(fresh(sim, 50, s)[0])
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("declare", ["record_stream", "current"])
@pytest.mark.parametrize("strategy", FENCED)
def test_hole7_view_read_on_a_declared_or_current_stream(sim: ss.sim.SimBackend, strategy: str, declare: str) -> None:
    assert view_on_second_stream(sim, strategy, declare) == (0, 0)


def test_hole7_an_undeclared_stream_is_reported_by_the_model(sim: ss.sim.SimBackend) -> None:
    """A stream streamsafe cannot see must be declared; the model (and sanitize mode) names the race."""
    with ss.sanitize(sim), pytest.raises(ss.errors.RaceError, match="consumer.copy"):
        view_on_second_stream(sim, "event", "nothing")


def test_hole7_effects_chained_through_a_view(sim: ss.sim.SimBackend) -> None:
    """TrueHDR's output, imported as a view, is VideoSuperRes's input: TrueHDR's next run waits for it."""
    s1, s2 = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    hdr = TrueHDR(backend=sim)
    hdr.load()
    sr = make_sr(sim, image_encoding=ImageEncoding.RGB10A2)
    c_hdr, c_sr = ss.StreamContract(hdr, s1), ss.StreamContract(sr, s2)
    consumer = sim.create_stream(non_blocking=True)
    copies = []
    for i in range(3):
        x, data = fresh(sim, i, s1)
        view = sim.from_dlpack(c_hdr.run(x).image, stream=s2)
        with sim.use_stream(s2):
            out = c_sr.run(view)
        want = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, hdr_expected(data)), 32, 32))
        copies.append((import_copy(sim, out, consumer), want))
    assert verify(sim, copies) == 0 and sim.races == []


# -- H7 detection and the thread rule ------------------------------------------------------------------------------


def test_a_view_read_after_close_is_reported(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr)
    view = sim.from_dlpack(c.run(fresh(sim, 0, sim.legacy_stream())[0]).image)
    c.close()
    with ss.sanitize(sim), pytest.raises(ss.errors.RaceError):
        sim.copy(view, sim.legacy_stream())


def test_two_threads_on_one_effect_at_once_raise_a_clear_error(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr)
    inside, release = threading.Event(), threading.Event()

    def busy() -> None:  # another thread in the middle of a call on the same effect
        c.ledger.turns.run("run", lambda: (inside.set(), release.wait(5)))

    t = threading.Thread(target=busy, name="decoder-thread")
    t.start()
    inside.wait(5)
    try:
        with pytest.raises(ss.errors.ConcurrentUseError, match="'decoder-thread' is inside a call on the same effect"):
            c.run(fresh(sim, 0, sim.legacy_stream())[0])
        with pytest.raises(ss.errors.ConcurrentUseError, match="one thread at a time"):
            sr.run(fresh(sim, 0, sim.legacy_stream())[0])
    finally:
        release.set()
        t.join()
    c.run(fresh(sim, 1, sim.legacy_stream())[0])  # serialised use is fine


def test_one_contract_per_thread_on_one_model(sim: ss.sim.SimBackend) -> None:
    wrong: list[int] = []

    def pipeline(seed: int) -> None:
        s, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        c = ss.StreamContract(make_sr(sim), s)
        copies = []
        for i in range(20):
            x, data = fresh(sim, seed * 100 + i, s)
            copies.append((import_copy(sim, c.run(x), consumer), sr_expected(data)))
        sim.synchronize_stream(consumer)
        wrong.append(sum(not np.array_equal(sim.download(cp, consumer), want) for cp, want in copies))
        c.close()

    threads = [threading.Thread(target=pipeline, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [0, 0, 0, 0] and sim.races == []


# -- found by trying to break it (a reviewer's programs, each obeying the documented rules) ----------


@pytest.mark.parametrize("release", ["TrueHDR input size", "close", "configure"])
@pytest.mark.parametrize("strategy", [*FENCED, "none"])
def test_a_view_read_on_the_current_stream_is_waited_for_before_a_release(sim: ss.sim.SimBackend, strategy: str, release: str) -> None:
    s, c1, q = (sim.create_stream(non_blocking=True) for _ in range(3))
    if release == "TrueHDR input size":
        fx: Any = TrueHDR(backend=sim)
        fx.load()
        want = hdr_expected
    else:
        fx = make_sr(sim)
        want = sr_expected
    c = contract(fx, s, strategy)
    with sim.use_stream(q):
        x, data = fresh(sim, 0, q)
        view = sim.from_dlpack(c.run(x).image, stream=c1)  # a zero-copy view
        sim.fence(q, c1)
        copy = sim.copy(view, q, name="consumer.copy")  # read on the current stream
        if release == "TrueHDR input size":
            c.run(fresh(sim, 1, q, 24, 24)[0])  # the SDK reallocates its output inside run()
        elif release == "close":
            c.close()
        else:
            c.configure(output_width=48)
    corrupt = verify(sim, [(copy, want(data))])
    if strategy == "none":  # the control: without the release wait the copy races the release
        assert sim.races
    else:
        assert corrupt == 0 and sim.races == []


@pytest.mark.parametrize("strategy", [*FENCED, "none"])
def test_with_input_stream_declared_an_input_written_on_the_current_stream_is_ordered_too(sim: ss.sim.SimBackend, strategy: str) -> None:
    from streamsafe.testing import VideoFrameGeneration

    s, p1, p2 = (sim.create_stream(non_blocking=True) for _ in range(3))
    g = VideoFrameGeneration(backend=sim, automatic_shot_change_detection_enabled=False)
    g.input_width = g.input_height = 16
    g.load()
    c = contract(g, s, strategy, input_stream=p2)
    with sim.use_stream(p1):
        prev, d0 = fresh(sim, 0, p1)  # written on the current stream
        cur, d1 = fresh(sim, 1, p2)  # written on the declared stream
        copy = import_copy(sim, c.run(prev, cur, frame_index=1), sim.legacy_stream())
    want = K.to_rgb8(np, K.blend(np, d0, d1, 0.5, False)).astype(np.float32) / np.float32(255)
    corrupt = verify(sim, [(copy, want)])
    if strategy == "none":  # the control: nothing orders the run after the current stream's write
        assert sim.races
    else:
        assert corrupt == 0 and sim.races == []


def test_guard_blocks_belong_to_the_thread_that_opened_them(sim: ss.sim.SimBackend) -> None:
    """One effect shared by two threads, each in its own block, calls serialised by the program."""
    sr = make_sr(sim)
    lock = threading.Lock()
    routed: list[bool] = []
    wrong: list[int] = []

    def worker(k: int) -> None:
        s, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        copies = []
        with lock:
            block = ss.stream_contract(sr, s, strategy="event")
            block.__enter__()
        for i in range(10):
            x, data = fresh(sim, k * 100 + i, s)
            with lock, sim.use_stream(s):
                copies.append((import_copy(sim, sr.run(x), consumer), sr_expected(data)))
                routed.append(ss.guarding.active_contract(sr) is block)
        with lock:
            block.__exit__(None, None, None)
        sim.synchronize_stream(consumer)
        wrong.append(sum(not np.array_equal(sim.download(cp, consumer), w) for cp, w in copies))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(routed) and wrong == [0, 0] and sim.races == []


def test_a_class_guard_does_not_keep_effects_alive(sim: ss.sim.SimBackend) -> None:
    import gc
    import weakref

    refs = []
    with ss.guard(VideoSuperRes):
        for i in range(3):
            sr = make_sr(sim)
            sr.run(fresh(sim, i, sim.legacy_stream())[0])
            refs.append(weakref.ref(sr))
            del sr
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_setting_a_size_for_the_first_time_releases_nothing(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr)
    out = c.run(fresh(sim, 0, sim.legacy_stream())[0])
    sr.input_width, sr.input_height = 16, 16  # first set, to the size it already runs at
    assert out.numpy().shape == (3, 32, 32)


def test_numpy_scalars_are_not_taken_for_inputs(sim: ss.sim.SimBackend) -> None:
    """A NumPy scalar timestep reaches the SDK (whose own error names it), not the input check."""
    from streamsafe.testing import VideoFrameGeneration

    g = VideoFrameGeneration(backend=sim)
    g.input_width = g.input_height = 16
    g.load()
    c = ss.StreamContract(g)
    a, b = fresh(sim, 0, sim.legacy_stream())[0], fresh(sim, 1, sim.legacy_stream())[0]
    with pytest.raises(ss.errors.EffectConfigError, match="timestep"):
        c.run_at_timestep(a, b, np.float32(0.5))
    assert isinstance(c.run_at_timestep(a, b, 0.5), ss.SafeOutput)


# -- found by a second review --------------------------------------------------------------------------


def test_blocks_and_decorators_that_are_never_closed_give_their_shadow_stream_back() -> None:
    import gc

    sim = ss.sim.SimBackend(scheduler="adversarial")
    sr = make_sr(sim)
    side = sim.create_stream(non_blocking=True)
    made = []
    real_create = sim.create_stream

    def counting_create(**kw: Any) -> ss.Stream:
        made.append(kw)
        return real_create(**kw)

    sim.create_stream = counting_create  # type: ignore[method-assign]
    for i in range(20):
        with ss.stream_contract(sr, side):  # auto -> async: a shadow stream per contract
            sr.run(fresh(sim, i, side)[0])
        ss.stream_safe(sr, side)(lambda a: sr.run(a))(fresh(sim, 100 + i, side)[0])
        gc.collect()
    assert len(made) <= 2, made  # from the pool again and again, not one new stream per contract


def test_an_output_keeps_its_effect_alive_until_it_is_imported(sim: ss.sim.SimBackend) -> None:
    import gc

    s, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)

    def clip(seed: int) -> tuple[Any, np.ndarray]:
        sr = make_sr(sim)
        with sim.use_stream(s), ss.stream_contract(sr, s, strategy="event"):
            x, data = fresh(sim, seed, s)
            return sr.run(x), data

    out, data = clip(0)
    gc.collect()
    clip(1)  # another effect, whose buffers may come from the allocator
    assert verify(sim, [(import_copy(sim, out, consumer), sr_expected(data))]) == 0 and sim.races == []


def test_a_class_guard_releases_the_inputs_of_collected_effects() -> None:
    import gc
    import weakref

    sim = ss.sim.SimBackend(scheduler="adversarial")

    class Opaque:  # a producer streamsafe cannot see: kept alive until the SDK read it
        def __init__(self, arr: Any) -> None:
            self.arr = arr

        def __dlpack__(self, **kw: Any) -> Any:
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self) -> Any:
            return self.arr.__dlpack_device__()

    refs = []
    with ss.guard(VideoSuperRes):
        for i in range(5):
            sr = make_sr(sim)
            x = Opaque(fresh(sim, i, sim.legacy_stream())[0])
            sr.run(x)
            refs.append(weakref.ref(x))
            del sr, x
        gc.collect()
        assert [r() for r in refs] == [None] * 5


def test_a_run_while_another_thread_leaves_its_block_waits_for_it(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr)
    inside, release = threading.Event(), threading.Event()

    def leaving() -> None:  # another thread in its block's closing host wait
        c.ledger.turns.run("synchronize", lambda: (inside.set(), release.wait(5)), wait=True)

    t = threading.Thread(target=leaving)
    t.start()
    inside.wait(5)
    threading.Timer(0.2, release.set).start()
    c.run(fresh(sim, 0, sim.legacy_stream())[0])  # waits for the closing wait, does not raise
    t.join()


# -- a third review's finding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_plain_run_waits_for_a_copy_on_its_own_stream_whatever_its_non_blocking(sim: ss.sim.SimBackend, non_blocking: bool) -> None:
    """A plain run() outside the guard, on the stream a guarded output is being copied on: its conversion
    on stream 0 must wait for the copy. With non_blocking=False the SDK's host wait gives that; with
    non_blocking=True only a fence does (a plan once counted on the host wait for both)."""
    s = sim.create_stream(non_blocking=True)
    sr = make_sr(sim)
    c = ss.StreamContract(sr, s, strategy="event")
    with sim.use_stream(s):
        x, data = fresh(sim, 0, s)
        copy = import_copy(sim, c.run(x), s)
        sr.run(fresh(sim, 1, s)[0], stream_ptr=s.ptr, non_blocking=non_blocking)
    sim.synchronize_device()
    assert [r for r in sim.races if "consumer.copy" in str(r)] == []
    assert np.array_equal(copy.buffer.data, sr_expected(data))


def test_a_plain_run_control_without_its_fence_the_copy_races(sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamsafe import ledger as ledger_mod

    s = sim.create_stream(non_blocking=True)
    sr = make_sr(sim)
    c = ss.StreamContract(sr, s, strategy="event")
    monkeypatch.setattr(ledger_mod.EffectLedger, "reuse_fences", lambda self, plan, shapes, current: [])
    with sim.use_stream(s):
        x, _ = fresh(sim, 0, s)
        import_copy(sim, c.run(x), s)
        sr.run(fresh(sim, 1, s)[0], stream_ptr=s.ptr, non_blocking=True)
    sim.synchronize_device()
    assert [r for r in sim.races if "consumer.copy" in str(r)]


def check_plain_run(sim: ss.sim.SimBackend, fx: Any, stream: ss.Stream, seed: int) -> None:
    """An unguarded ``fx.run()`` on ``stream``, with everything before and after it waited for: right output."""
    x, data = fresh(sim, seed, stream)
    sim.synchronize_device()
    out = fx.run(x, stream_ptr=stream.ptr)
    sim.synchronize_device()
    np.testing.assert_allclose(sim.download(sim.from_dlpack(out.image)), sr_expected(data), atol=1e-6)


@pytest.mark.parametrize("strategy", FENCED)
def test_a_subclass_that_calls_super_run_is_guarded_once_and_does_not_recurse(sim: ss.sim.SimBackend, strategy: str) -> None:
    """A user's subclass of an SDK class whose ``run()`` adds its own step around ``super().run()``, after
    an instance of the SDK class was guarded (its class has streamsafe's dispatchers): the base class's
    dispatcher, reached from inside the subclass's method, calls the base's own ``run()``, not the
    subclass's again (which recursed forever). Unguarded, the subclass runs plainly; guarded, once, fenced."""

    class Annotated(VideoSuperRes):
        calls = 0

        def run(self, input_array: Any, **kw: Any) -> Any:
            type(self).calls += 1
            return super().run(input_array, **kw)

    s = sim.create_stream(non_blocking=True)
    ss.StreamContract(make_sr(sim), s, strategy=strategy)  # VideoSuperRes now has the dispatchers
    with sim.use_stream(s):
        check_plain_run(sim, make_sr(sim, cls=Annotated), s, 1)  # unguarded: the SDK's call, as written
        assert Annotated.calls == 1
        c = ss.StreamContract(make_sr(sim, cls=Annotated), s, strategy=strategy)
        for i in range(4):
            x, data = fresh(sim, 10 + i, s)
            got = sim.download(import_copy(sim, c.run(x), s), s)
            np.testing.assert_allclose(got, sr_expected(data), atol=1e-6)
        assert Annotated.calls == 5 and c.stats["runs"] == 4  # each guarded run called the subclass's run() once
        c.close()
    assert sim.races == []


def test_a_mixin_between_a_guarded_class_and_the_sdk_class_still_runs(sim: ss.sim.SimBackend) -> None:
    """Multiple inheritance: Z(X, Y) with X guarded (its dispatcher) and Y's run() and __setattr__ adding a
    step: a plain z.run() reaches X's dispatcher, which must go on along Z's MRO (to Y, as super() would),
    not along X's (straight to the SDK class, skipping Y)."""
    seen: list[str] = []

    class X(VideoSuperRes):
        pass

    class Y(VideoSuperRes):
        def run(self, input_array: Any, **kw: Any) -> Any:
            seen.append("Y.run")
            return super().run(input_array, **kw)

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "tag":
                seen.append("Y.__setattr__")
            super().__setattr__(name, value)

    class Z(X, Y):
        pass

    s = sim.create_stream(non_blocking=True)
    ss.StreamContract(make_sr(sim, cls=X), s)  # X has the dispatchers now
    z = make_sr(sim, cls=Z)
    z.tag = "mine"
    with sim.use_stream(s):
        check_plain_run(sim, z, s, 3)
    assert seen == ["Y.__setattr__", "Y.run"]


def test_a_class_guard_runs_a_subclass_s_own_run_once_from_its_first_call(sim: ss.sim.SimBackend) -> None:
    """ss.guard(VideoSuperRes), then a subclass instance whose run() wraps super().run(): its first call
    reaches the base's dispatcher from inside its own (unwrapped) method; the guard's contract must run the
    base's run() there, not the subclass's again (its own step ran twice on the first frame)."""
    calls = []

    class Stepped(VideoSuperRes):
        def run(self, input_array: Any, **kw: Any) -> Any:
            calls.append(1)
            return super().run(input_array, **kw)

    s = sim.create_stream(non_blocking=True)
    fx = make_sr(sim, cls=Stepped)
    guard = ss.guard(VideoSuperRes)
    try:
        with sim.use_stream(s):
            copies = []
            for i in range(3):
                x, data = fresh(sim, 20 + i, s)
                copies.append((import_copy(sim, fx.run(x, stream_ptr=s.ptr), s), sr_expected(data)))
                assert len(calls) == i + 1
            assert verify(sim, copies) == 0
        assert [c.stats["runs"] for c in guard.contracts] == [3]
    finally:
        ss.unguard(VideoSuperRes)
    assert sim.races == []


def test_a_subclass_whose_run_wraps_the_guarded_dispatcher_with_functools_wraps(sim: ss.sim.SimBackend) -> None:
    """A subclass made after its base got dispatchers, with run = decorator(Base.run) where the decorator uses
    functools.wraps: the wrapper carries the dispatcher's attributes (our mark among them) but is the user's
    method; it runs plainly and through a contract, once per call (it raised KeyError)."""
    import functools

    calls = []

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            calls.append(1)
            return fn(*a, **kw)

        return wrapper

    s = sim.create_stream(non_blocking=True)
    ss.StreamContract(make_sr(sim), s)  # VideoSuperRes has the dispatchers

    class Logged(VideoSuperRes):
        run = logged(VideoSuperRes.run)

    fx = make_sr(sim, cls=Logged)
    with sim.use_stream(s):
        check_plain_run(sim, fx, s, 5)
        c = ss.StreamContract(fx, s)
        x, data = fresh(sim, 6, s)
        copies = [(import_copy(sim, c.run(x), s), sr_expected(data))]
        assert verify(sim, copies) == 0
    assert len(calls) == 2 and sim.races == []


# -- found by the seventh session's review ---------------------------------------------------------


def size_set_and_set_back(sim: ss.sim.SimBackend, strategy: str, how: str, encoding: Any, next_on_another_stream: bool) -> tuple[int, int]:
    """An input size set and set back between two runs, with no run at the other size: the SDK released
    nothing and waited for nothing, so the next run must still be ordered after the previous one (its
    conversion on stream 0 reads the 8-bit result the next inference writes; on another SDK stream, the
    input staging buffer and the output)."""
    s, s2 = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    sr = make_sr(sim, input_size=16, image_encoding=encoding)
    c = contract(sr, s, strategy)
    rgb10 = encoding is ImageEncoding.RGB10A2

    def frame(seed: int, stream: ss.Stream) -> tuple[Any, np.ndarray]:
        data = data_of(seed)
        if not rgb10:
            return fresh(sim, seed, stream)
        packed = K.pack_rgb10a2(np, data)
        arr = sim.empty((16, 16), np.uint32, name=f"frame{seed}")
        write(sim, arr, packed, stream)
        return arr, K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, packed), 32, 32))

    with sim.use_stream(s):
        x, _ = frame(0, s)
        c.run(x)  # its output is never read: only the SDK's own buffers link the two runs
    if how == "configure":
        c.configure(input_width=24)
        c.configure(input_width=16)
    else:  # plain attribute sets outside any guard (streamsafe tracks them)
        sr.input_width = 24
        sr.input_width = 16
    nxt = s2 if next_on_another_stream else s
    with sim.use_stream(nxt):
        x, data = frame(1, nxt)
        out = (contract(sr, nxt, strategy) if next_on_another_stream else c).run(x)  # (a contract of that stream, same ledger)
        want = data if rgb10 else sr_expected(data)
        copies = [(import_copy(sim, out, nxt), want)]
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("how", ["configure", "setattr"])
@pytest.mark.parametrize("strategy", ["event", "stream", "device"])
def test_a_size_set_and_set_back_keeps_the_next_run_after_the_previous_one(sim: ss.sim.SimBackend, strategy: str, how: str) -> None:
    """The ledger forgot the previous run's SDK streams on any size change (as if the SDK had waited for its
    own work), so the next inference raced the previous conversion on stream 0."""
    assert size_set_and_set_back(sim, strategy, how, ImageEncoding.RGB8, False) == (0, 0)


def test_a_size_set_and_set_back_then_a_run_on_another_stream(sim: ss.sim.SimBackend) -> None:
    """(RGB10A2 under auto runs with non_blocking=True; event's SDK waits on the host and async's runs share
    one shadow stream, so only auto shows it.)"""
    assert size_set_and_set_back(sim, "auto", "configure", ImageEncoding.RGB10A2, True) == (0, 0)


def test_a_size_set_and_set_back_control_races_without_fences(sim: ss.sim.SimBackend) -> None:
    assert size_set_and_set_back(sim, "none", "configure", ImageEncoding.RGB8, False)[1] > 0


def freed_into_a_decoders_pool(sim: ss.sim.SimBackend, strategy: str, sdk_kind: str, encoding: Any) -> tuple[int, int]:
    """A decoder stream allocates and writes each frame; the user makes the SDK stream (current at
    ``run()``) wait for it, runs, and frees the frame: its memory goes back to the decoder's pool, and
    the decoder's next frame may take it while the SDK still reads it. Every writer the plan knows of
    (producer, SDK stream, current stream) is the run stream itself or ordered with it."""
    decoder = sim.create_stream(non_blocking=True)
    s = {"legacy": sim.legacy_stream, "blocking": lambda: sim.create_stream(non_blocking=False),
         "non-blocking": lambda: sim.create_stream(non_blocking=True)}[sdk_kind]()
    consumer = sim.create_stream(non_blocking=True)
    c = contract(make_sr(sim, image_encoding=encoding), s, strategy)
    rgb10 = encoding is ImageEncoding.RGB10A2
    copies = []
    for i in range(3):
        data = data_of(i)
        if rgb10:
            values = K.pack_rgb10a2(np, data)
            x = sim.empty((16, 16), np.uint32, stream=decoder, name=f"frame{i}")
            want = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, values), 32, 32))
        else:
            values, want = data, sr_expected(data)
            x = sim.empty((3, 16, 16), np.float32, stream=decoder, name=f"frame{i}")
        sim.launch(decoder, "decoder.write", lambda buf=x.buffer, v=values: np.copyto(buf.data, v), writes=[x])
        sim.fence(s, decoder)  # the user's own fence
        with sim.use_stream(s):
            out = c.run(x, non_blocking=True) if strategy == "none" else c.run(x)
        del x  # freed: back to the decoder's pool
        copies.append((import_copy(sim, out, consumer), want))
    return verify(sim, copies), len(sim.races)


@pytest.mark.parametrize("strategy,sdk_kind,encoding", [
    ("auto", "legacy", ImageEncoding.RGB8),
    ("auto", "blocking", ImageEncoding.RGB8),
    ("async", "legacy", ImageEncoding.RGB8),
    ("auto", "non-blocking", ImageEncoding.RGB10A2),
    ("auto", "legacy", ImageEncoding.RGB10A2),
], ids=["auto-legacy", "auto-blocking", "async-legacy", "auto-non-blocking-rgb10", "auto-legacy-rgb10"])
def test_an_input_freed_into_another_streams_pool_after_an_asynchronous_run(
    sim: ss.sim.SimBackend, strategy: str, sdk_kind: str, encoding: Any
) -> None:
    """The input was protected (``record_stream``) only when a writer the plan knew of was not ordered with
    the run stream: 2 of 3 frames came out wrong where they all were (auto on stream 0 or a blocking stream,
    RGB10A2)."""
    assert freed_into_a_decoders_pool(sim, strategy, sdk_kind, encoding) == (0, 0)


@pytest.mark.parametrize("strategy,sdk_kind", [("auto", "non-blocking"), ("event", "legacy")])
def test_an_input_freed_into_another_streams_pool_where_it_was_already_safe(sim: ss.sim.SimBackend, strategy: str, sdk_kind: str) -> None:
    """The same program where the shadow stream's protection (auto -> async) or the SDK's host wait (event)
    already kept the input: still clean (not a regression test of the fix: these passed before it)."""
    assert freed_into_a_decoders_pool(sim, strategy, sdk_kind, ImageEncoding.RGB8) == (0, 0)


def test_an_input_freed_into_another_streams_pool_control_races(sim: ss.sim.SimBackend) -> None:
    corrupt, races = freed_into_a_decoders_pool(sim, "none", "legacy", ImageEncoding.RGB8)
    assert corrupt > 0 and races > 0


def view_used_after_the_next_run(sim: ss.sim.SimBackend, strategy: str, drained: bool, *, late: bool = True) -> tuple[float, list[Any]]:
    """A zero-copy view of frame 1's output read after the effect's next run (``late``), or before it.
    Every fence orders the next run after the view's import, so the late read is ordered and raceless:
    it just sees frame 2 (H7). Returns the value read and the model's reports."""
    sr = make_sr(sim)
    s = sim.create_stream(non_blocking=True)
    with sim.use_stream(s), ss.stream_contract(sr, s, strategy=strategy, allow_none=strategy == "none"):
        out = sr.run(sim.array(np.full((3, 16, 16), 0.25, np.float32)))
        view = sim.from_dlpack(out.image)
        if not late:
            early = sim.copy(view)
        sr.run(sim.array(np.full((3, 16, 16), 0.75, np.float32)))
        if drained:
            sim.synchronize_device()
        got = sim.copy(view) if late else early
        sim.synchronize_device()
        return float(sim.download(got).mean()), list(sim.races)


@pytest.mark.parametrize("drained", [False, True])
@pytest.mark.parametrize("strategy", FENCED)
def test_a_view_used_after_the_next_run_is_reported_as_stale(sim: ss.sim.SimBackend, strategy: str, drained: bool) -> None:
    """The guide promised the model reports it; where the next run was ordered after the view (every fenced
    strategy, or a drained device) nothing did, and the read silently saw the next frame."""
    value, races = view_used_after_the_next_run(sim, strategy, drained)
    stale = [r for r in races if r.kind == "stale-view"]
    assert len(stale) == 1, [str(r) for r in races]
    if len(races) == 1:  # (else the late read also raced the next conversion, unfenced for it: reported too)
        assert abs(value - 0.749) < 0.01
    assert "VideoSuperRes's run #2 (the view is of run #1)" in str(stale[0]) and "H7" in str(stale[0])
    assert stale[0].second.kind == "read" and "out.torch()" in stale[0].fix


@pytest.mark.parametrize("strategy", FENCED)
def test_a_view_used_before_the_next_run_is_not_stale(sim: ss.sim.SimBackend, strategy: str) -> None:
    value, races = view_used_after_the_next_run(sim, strategy, False, late=False)
    assert races == [] and abs(value - 0.251) < 0.01


def test_a_view_of_a_view_is_stale_too(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    s = sim.create_stream(non_blocking=True)
    with sim.use_stream(s), ss.stream_contract(sr, s, input_stream=s):
        view = sim.from_dlpack(sim.from_dlpack(sr.run(sim.array(np.zeros((3, 16, 16), np.float32))).image))
        sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))
        sim.fill(view, 1.0)  # a write through it
    assert [(r.kind, r.second.kind) for r in sim.races] == [("stale-view", "write")]


def test_a_release_waits_for_the_previous_runs_sdk_streams_then_forgets_them(sim: ss.sim.SimBackend) -> None:
    """After configure(), close() or synchronize() the host has waited for the SDK's own last work, so no
    later run orders after (records an event on) a stream the program may since have destroyed."""
    s = sim.create_stream(non_blocking=True)
    sr = make_sr(sim, input_size=16)
    c = ss.StreamContract(sr, s, strategy="event")
    with sim.use_stream(s):
        c.run(sim.array(np.zeros((3, 16, 16), np.float32)))  # never imported: no reader
    assert set(c.ledger.previous_sdk) == {s, sim.legacy_stream()}
    waits = c.stats["host_waits"]
    c.configure(output_width=48)
    assert c.ledger.previous_sdk == () and c.stats["host_waits"] == waits + 2
    c.configure(output_width=32)
    with sim.use_stream(s):
        c.run(sim.array(np.zeros((3, 16, 16), np.float32)))
    c.synchronize()
    assert c.ledger.previous_sdk == () and sim.races == []


def test_the_plan_says_why_auto_picks_event_when_threads_share_the_device(sim: ss.sim.SimBackend) -> None:
    import threading

    from streamsafe import occupancy

    occupancy.forget()
    reasons: dict[int, set[tuple[str, str]]] = {}
    start = threading.Barrier(2)

    def pipeline(k: int) -> None:
        s = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(make_sr(sim), s, input_stream=sim.legacy_stream())  # (sim.array writes on stream 0)
        for _ in range(6):
            start.wait()  # frame by frame, the two pipelines interleave
            c.run(sim.array(np.zeros((3, 16, 16), np.float32))).numpy()
            plan = c.last_plan
            reasons.setdefault(k, set()).add((plan.strategy.value, plan.reason))

    threads = [threading.Thread(target=pipeline, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    occupancy.forget()
    event = {why for found in reasons.values() for strategy, why in found if strategy == "event"}
    assert event, reasons
    for why in event:
        assert "other threads drive effects on this device" in why and "not the legacy stream" not in why


def test_a_view_used_after_close_is_one_use_after_free_not_also_stale(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, s)
    with sim.use_stream(s):
        view = sim.from_dlpack(c.run(sim.array(np.zeros((3, 16, 16), np.float32))).image)
    c.close()
    sim.copy(view, s)
    assert [r.kind for r in sim.races] == ["use-after-free"]


def test_an_input_size_change_of_super_res_leaves_its_output_valid(sim: ss.sim.SimBackend) -> None:
    """VideoSuperRes has an output size of its own: a change of its input size releases nothing. Its output
    was made stale (a stale-view report, StaleOutputError on import) though the guide keeps it valid until
    the next run, close() or an output-size or encoding change."""
    s = sim.create_stream(non_blocking=True)
    sr = make_sr(sim, 64, input_size=16)
    c = ss.StreamContract(sr, s, strategy="event")
    with sim.use_stream(s):
        viewed = c.run(sim.array(np.full((3, 16, 16), 0.25, np.float32)))
        view = sim.from_dlpack(viewed.image)
        c.configure(input_width=24, input_height=24)
        assert abs(float(sim.download(sim.copy(view)).mean()) - 0.251) < 0.01  # the view: still run 1's, valid
        copied = c.run(sim.array(np.full((3, 24, 24), 0.75, np.float32)))
        sr.input_width = sr.input_height = 16  # (plain, tracked sets this time)
        assert abs(float(copied.numpy().mean()) - 0.749) < 0.01  # still importable
    assert sim.races == []


class LoggedFrameGeneration(VideoFrameGeneration):
    """A subclass with an output size to show (read-only): its input size is still its output size."""

    @property
    def output_width(self) -> Any:
        return self.input_width


@pytest.mark.parametrize("cls", [VideoFrameGeneration, LoggedFrameGeneration])
def test_an_input_size_change_of_frame_generation_releases_its_output(sim: ss.sim.SimBackend, cls: type) -> None:
    """VideoFrameGeneration's output size is its input size: that change does make the output stale (also for
    a subclass with an output_width of its own, which the first rule took for a VideoSuperRes)."""
    s = sim.create_stream(non_blocking=True)
    fx = cls(backend=sim)
    fx.input_width, fx.input_height = 16, 16
    fx.load()
    c = ss.StreamContract(fx, s)
    with sim.use_stream(s):
        a, b = sim.array(np.zeros((3, 16, 16), np.float32)), sim.array(np.ones((3, 16, 16), np.float32))
        out = c.run(a, b, frame_index=1)
        c.configure(input_width=24)
        with pytest.raises(ss.errors.StaleOutputError):
            out.numpy()


@pytest.mark.parametrize("strategy", ["event", "async", "auto"])
def test_threads_sharing_one_effect_with_a_block_per_frame_and_their_own_lock(strategy: str) -> None:
    """The guide: serialising calls yourself is fine, and leaving a block waits for another thread's call.
    A thread whose call came while another's block was about to begin its closing wait raised
    ConcurrentUseError (most trials), and the model's import waited for the effect while holding the model,
    whose host wait the closing thread needed (a deadlock once the first was fixed)."""
    import threading

    for _ in range(5):
        sim = ss.sim.SimBackend(scheduler="adversarial")
        sr = make_sr(sim)
        lock, errors = threading.Lock(), []

        def worker(sim: ss.sim.SimBackend = sim, sr: Any = sr, lock: Any = lock, errors: list[Any] = errors) -> None:
            try:
                cur, cons = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
                for _ in range(6):
                    with sim.use_stream(cur), ss.stream_contract(sr, cur, strategy=strategy):
                        frame = sim.empty((3, 16, 16), np.float32)
                        sim.fill(frame, 0.5)
                        with lock:  # run() and the copy of its output, serialised by the program
                            y = sim.copy(sim.from_dlpack(sr.run(frame).image, stream=cons), cons)
                        sim.download(y, cons)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert errors == [] and sim.races == [], (errors, [str(r) for r in sim.races])


def test_a_concurrent_call_still_raises_while_a_third_threads_closing_wait_is_queued() -> None:
    """The closing-wait announcement must not hide a call made while another thread is inside run(): it
    raises ConcurrentUseError as the guide says (it waited instead, a review found)."""
    import threading
    import time

    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim, host_cost_us=300_000)  # a run that holds the effect for 0.3 s
    sr.output_width = sr.output_height = 32
    sr.load()
    result: dict[str, str] = {}

    def long_run() -> None:
        s = sim.create_stream(non_blocking=True)
        with sim.use_stream(s), ss.stream_contract(sr, s):
            sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))

    def closing() -> None:  # ends a block: its closing wait queues behind the long run
        with ss.stream_contract(sr, sim.create_stream(non_blocking=True)):
            pass

    def concurrent() -> None:
        s = sim.create_stream(non_blocking=True)
        try:
            with sim.use_stream(s), ss.stream_contract(sr, s):
                sr.run(sim.array(np.zeros((3, 16, 16), np.float32)))
            result["call"] = "ran"
        except ss.errors.ConcurrentUseError:
            result["call"] = "ConcurrentUseError"

    first = threading.Thread(target=long_run)
    first.start()
    time.sleep(0.08)
    second = threading.Thread(target=closing)
    second.start()
    time.sleep(0.04)
    third = threading.Thread(target=concurrent)
    third.start()
    for t in (first, second, third):
        t.join(timeout=30)
    assert result == {"call": "ConcurrentUseError"}


class _ForeignProducer:
    """An array of a framework streamsafe does not know (as a JAX array): written on its own stream, and
    ``__dlpack__(stream=s)`` makes ``s`` wait for that stream, as the DLPack protocol says."""

    def __init__(self, sim: ss.sim.SimBackend, stream: ss.Stream, data: np.ndarray) -> None:
        self.sim, self.stream = sim, stream
        self.arr = sim.empty(data.shape, data.dtype, stream=stream, name="foreign input")
        write(sim, self.arr, data, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.arr.__dlpack_device__()  # type: ignore[no-any-return]

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        if stream is not None and stream != -1:
            s = ss.as_stream(stream, backend=self.sim)
            if s != self.stream:
                self.sim.fence(s, self.stream)
        return self.arr.__dlpack__(stream=-1)


def _first_run_after_freeing_scratch(sim: ss.sim.SimBackend, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    """The program frees a scratch block on its current stream with its fill still pending, then the
    effect's first run (which allocates the SDK's buffers) takes an input of an unknown producer."""
    import gc

    foreign_stream, current, sdk, consumer = (sim.create_stream(non_blocking=True) for _ in range(4))
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sdk, strategy=strategy, allow_none=strategy == "none")
    with sim.use_stream(current):
        scratch = sim.empty((3, 16, 16), np.float32, name="scratch")  # the SDK's input0 has this size
        sim.fill(scratch, 0.25)
        del scratch
        gc.collect()  # back to the current stream's pool: safe, it was only used there
        data = data_of(7)
        out = c.run(_ForeignProducer(sim, foreign_stream, data))
        got = sim.copy(sim.from_dlpack(out.image, stream=consumer), consumer)
    sim.synchronize_stream(consumer)
    return sim.download(got), sr_expected(data)


@pytest.mark.parametrize("strategy", FENCED)
def test_the_emulated_sdk_allocates_outside_the_programs_pools(sim: ss.sim.SimBackend, strategy: str) -> None:
    """A real SDK's buffers are its own (cudaMalloc): no block the program freed on its current stream, with
    its work still pending, can become one. The emulated effects allocate so on the model too."""
    got, want = _first_run_after_freeing_scratch(sim, strategy)
    assert sim.races == []
    np.testing.assert_array_equal(got, want)


def test_the_emulated_sdk_allocates_outside_the_programs_pools_control(sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: with the SDK's buffers taken from the current stream's pool, the freed scratch's fill races
    the SDK's transfer under a fenced strategy (no fence can order the SDK's private buffer)."""
    from streamsafe.testing._engines import SimEngine

    monkeypatch.setattr(SimEngine, "empty", lambda self, shape, dtype, name: self.backend.empty(shape, dtype, device=self.device, name=name))
    _first_run_after_freeing_scratch(sim, "event")
    assert any(r.buffer == "VideoSuperRes input0" and "scratch" in r.first.op for r in sim.races)


def test_malloc_is_outside_the_caching_allocator(sim: ss.sim.SimBackend) -> None:
    s = sim.create_stream(non_blocking=True)
    with sim.use_stream(s):
        a = sim.empty((4,), np.float32)
        buffer = a.buffer
        del a
        b = sim.malloc((4,), np.float32, name="sdk")
        assert b.buffer is not buffer and b.buffer.name == "sdk"
        sim.free(b)
        c = sim.empty((4,), np.float32)
        assert c.buffer is not b.buffer  # freed, never pooled


class _Wrapper:
    """A DLPack producer that is neither a torch tensor nor a model array (a JAX array or a decoder's
    surface object): streamsafe keeps such inputs alive, it cannot record_stream them."""

    def __init__(self, arr: Any) -> None:
        self.arr = arr

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.arr.__dlpack_device__()  # type: ignore[no-any-return]

    def __dlpack__(self, **kw: Any) -> Any:
        return self.arr.__dlpack__(**kw)


def _decoder_frames_dropped_each_frame(strategy: str, scheduler: str, **run_kw: Any) -> ss.sim.SimBackend:
    """Inputs allocated and written on a decoder stream, wrapped, passed to a guarded run and dropped: the
    next frame's allocation on the decoder stream may get the same block once streamsafe lets it go."""
    sim = ss.sim.SimBackend(scheduler=scheduler)
    p, decoder = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), p, strategy=strategy, allow_none=strategy == "none")
    with sim.use_stream(p):
        for i in range(6):
            x = sim.empty((3, 16, 16), np.float32, name=f"in{i}", stream=decoder)
            sim.fill(x, float(i), decoder)
            sim.fence(p, decoder)
            out = c.run(_Wrapper(x), **run_kw)
            del x
            sim.copy(sim.from_dlpack(out.image, stream=p), p)
            sim.progress(100)
    sim.synchronize_device()
    return sim


@pytest.mark.parametrize("scheduler", ["in-order", "random", "adversarial"])
@pytest.mark.parametrize("strategy", FENCED)
def test_kept_alive_inputs_recycled_by_their_pool_are_not_reported(strategy: str, scheduler: str) -> None:
    """streamsafe keeps a wrapped input until the run stream's work is done; the pool may then recycle it.
    On the model the allocator knows that deferral (no race), whichever order the scheduler picked."""
    assert _decoder_frames_dropped_each_frame(strategy, scheduler).races == []


def test_kept_alive_inputs_control_without_streamsafe_the_recycled_block_races() -> None:
    """Control: unguarded and asynchronous (``non_blocking=True``), the recycled block's next fill races
    the SDK's read of the previous frame."""
    sim = _decoder_frames_dropped_each_frame("none", "in-order", non_blocking=True)
    assert any(r.buffer.startswith("in") and "transfer" in (r.first.op + r.second.op) for r in sim.races)


class _SynchronisingProducer(_Wrapper):
    """A producer that waits for the device before each export, and counts its exports."""

    def __init__(self, arr: Any) -> None:
        super().__init__(arr)
        self.exports = 0

    def __dlpack__(self, **kw: Any) -> Any:
        self.exports += 1
        self.arr.backend.synchronize_device()
        return self.arr.__dlpack__(**kw)


@pytest.mark.parametrize("strategy", ["auto", "async"])
def test_a_kept_alive_input_is_exported_once_so_its_producer_cannot_hide_a_race(strategy: str) -> None:
    """The model learns the kept-alive input's memory from the SDK's own import, not from a second export:
    a producer whose export waits for the device must run once, before the SDK's work, so the host's
    unwaited read of the output still races."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    p, decoder = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), p, strategy=strategy)
    with sim.use_stream(p):
        x = sim.empty((3, 16, 16), np.float32, stream=decoder)
        sim.fill(x, 0.5, decoder)
        sim.fence(p, decoder)
        producer = _SynchronisingProducer(x)
        out = c.run(producer, non_blocking=True)
        view = sim.from_dlpack(out.image, stream=p)
        sim.host_access("host reads the output without waiting", reads=[view])
    assert producer.exports == 1
    assert any(r.second.op == "host reads the output without waiting" for r in sim.races)
