"""NVIDIA's video decoder (PyNvVideoCodec), guarded: the emulated decoder on the adversarial model.

Each fence test shows the reuse race without the guard (wrong frames and a race the model reports) and
its absence with it, for batches and single frames, ``SimpleDecoder`` and ``ThreadedDecoder``, every
strategy and every way in; then staleness, releases, tracked raw calls, the whole decode -> convert ->
VideoSuperRes -> consumer pipeline, and the errors.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.errors import ArgumentError, StaleOutputError, StrategyError
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes, sample_clip
from streamsafe.testing.fake_pynvvideocodec import OutputColorType, PyNvVCException, decode_reference

pytest.importorskip("av")

FRAMES = 40
STRATEGIES = ["auto", "event", "async", "stream", "device"]


@pytest.fixture(scope="module")
def clip() -> str:
    return sample_clip(FRAMES, (64, 48))


@pytest.fixture
def nvc(fake_pynvvideocodec: Any) -> Any:
    import PyNvVideoCodec

    assert PyNvVideoCodec is fake_pynvvideocodec
    return PyNvVideoCodec


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


def _index(frame: Any) -> int:
    return (frame.raw if isinstance(frame, ss.SafeFrame) else frame).index  # type: ignore[no-any-return]


class Consumer:
    """Reads each frame on its own non-blocking stream and copies it there, without waiting: the program
    moves on to the next decode at once (what the measured race needs)."""

    def __init__(self, sim: SimBackend, clip: str) -> None:
        self.sim = sim
        self.stream = sim.create_stream(non_blocking=True)
        self.copies: list[tuple[int, Any]] = []
        self.reference = decode_reference(clip)

    def take(self, frame: Any) -> None:
        with self.sim.use_stream(self.stream):
            view = self.sim.from_dlpack(frame)
            self.copies.append((_index(frame), self.sim.copy(view, self.stream)))

    def wrong(self) -> int:
        self.sim.synchronize_device()
        return sum(not np.array_equal(self.sim.download(c), self.reference[i]) for i, c in self.copies)


def _decode_all(dec: Any, consumer: Consumer, mode: str) -> None:
    if mode == "batch":
        while frames := dec.get_batch_frames(8):
            for f in frames:
                consumer.take(f)
    elif mode == "single":
        for i in range(len(dec)):
            consumer.take(dec[i])
    else:  # threaded
        while frames := dec.get_batch_frames(4):
            for f in frames:
                consumer.take(f)


def _decoder(nvc: Any, clip: str, mode: str, **kw: Any) -> Any:
    if mode == "threaded":
        return nvc.ThreadedDecoder(clip, 4, output_color_type=nvc.OutputColorType.RGBP, **kw)
    return nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP, **kw)


# -- the race, and its fence -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["batch", "single", "threaded"])
@pytest.mark.parametrize("own_stream", [False, True])
def test_the_reuse_race_shows_unguarded(nvc: Any, sim: SimBackend, clip: str, mode: str, own_stream: bool) -> None:
    kw = {"cuda_stream": sim.create_stream(non_blocking=True).handle} if own_stream else {}
    consumer = Consumer(sim, clip)
    _decode_all(_decoder(nvc, clip, mode, **kw), consumer, mode)
    assert consumer.wrong() > 0
    assert sim.races


@pytest.mark.parametrize("mode", ["batch", "single", "threaded"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("own_stream", [False, True])
def test_a_guard_block_orders_every_frame(nvc: Any, sim: SimBackend, clip: str, mode: str, strategy: str, own_stream: bool) -> None:
    kw = {"cuda_stream": sim.create_stream(non_blocking=True).handle} if own_stream else {}
    dec = _decoder(nvc, clip, mode, **kw)
    consumer = Consumer(sim, clip)
    with ss.stream_contract(dec, strategy=strategy) as c:
        _decode_all(dec, consumer, mode)
        inside = dict(c.stats)  # (leaving the block waits for the last copies, as the vendor's recipe ends)
    assert consumer.wrong() == 0
    assert sim.races == []
    assert inside["runs"] >= FRAMES // 8
    if strategy in ("auto", "event", "async"):
        assert inside["host_waits"] == 0 and inside["device_syncs"] == 0
        assert inside["D5"] > 0  # the decoder's stream waited for the consumer on the device
    elif strategy == "stream":
        assert inside["host_waits"] > 0


def test_the_decorator_guards_a_generator_of_frames(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "batch")
    consumer = Consumer(sim, clip)

    @ss.stream_safe(dec)
    def frames() -> Iterator[Any]:
        while batch := dec.get_batch_frames(8):
            yield from batch

    for frame in frames():
        assert isinstance(frame, ss.SafeFrame)
        consumer.take(frame)
    assert consumer.wrong() == 0 and sim.races == []


def test_a_class_guard_on_the_module_guards_every_decoder(nvc: Any, sim: SimBackend, clip: str) -> None:
    with ss.guard(nvc) as cg:
        decoders = [_decoder(nvc, clip, "batch"), _decoder(nvc, clip, "threaded")]
        consumer = Consumer(sim, clip)
        for dec, mode in zip(decoders, ["batch", "threaded"]):
            _decode_all(dec, consumer, mode)
    assert consumer.wrong() == 0 and sim.races == []
    assert {type(c.effect).__name__ for c in cg.pool_contracts} == {"SimpleDecoder", "ThreadedDecoder"}


def test_a_contract_called_directly(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "single")
    c = ss.stream_contract(dec)
    consumer = Consumer(sim, clip)
    for i in range(len(dec)):
        consumer.take(c[i])
    for frame in c.get_batch_frames_by_index([3, 1, 2]):
        consumer.take(frame)
    assert consumer.wrong() == 0 and sim.races == []
    assert "D1" in str(c.plan) and "decoder" in c.plan.reason


def test_plain_calls_after_a_guard_still_wait_for_its_readers(nvc: Any, sim: SimBackend, clip: str) -> None:
    """A decorator leaves with no host wait: the next plain call (no guard) is a tracked raw call, and its
    decode still waits on the device for the frames the guard handed out."""
    dec = _decoder(nvc, clip, "batch")
    consumer = Consumer(sim, clip)
    ss.stream_safe(dec)(lambda: [consumer.take(f) for f in dec.get_batch_frames(8)])()
    raw = dec.get_batch_frames(8)  # a plain call: raw frames, but ordered after the guarded readers
    assert not isinstance(raw[0], ss.SafeFrame)
    assert consumer.wrong() == 0 and sim.races == []


def test_unguarded_strategy_none_shows_the_race(nvc: Any, sim: SimBackend, clip: str) -> None:
    with pytest.raises(StrategyError):
        ss.stream_contract(_decoder(nvc, clip, "batch"), strategy="none")
    dec = _decoder(nvc, clip, "batch")
    consumer = Consumer(sim, clip)
    with ss.stream_contract(dec, strategy="none", allow_none=True):
        _decode_all(dec, consumer, "batch")
    assert consumer.wrong() > 0 and sim.races


# -- staleness ------------------------------------------------------------------------------------------------


def test_a_frame_whose_buffer_was_rewritten_is_stale(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "batch")
    with ss.stream_contract(dec):
        first = dec.get_batch_frames(8)
        dec.get_batch_frames(8)  # the same 8 buffers
        assert all(f.stale for f in first)
        with pytest.raises(StaleOutputError, match="decoded frame"):
            sim.from_dlpack(first[0])
        with pytest.raises(StaleOutputError):
            first[1].numpy()


def test_one_frame_at_a_time_keeps_the_previous_frame_valid(nvc: Any, sim: SimBackend, clip: str) -> None:
    """``decoder[i]`` cycles two buffers: frame i stays valid after frame i + 1 (a program that reads two
    consecutive frames together is correct without streamsafe, and stays so), and is stale after i + 2."""
    dec = _decoder(nvc, clip, "single")
    reference = decode_reference(clip)
    with ss.stream_contract(dec):
        f0, f1 = dec[0], dec[1]
        assert np.array_equal(f0.numpy(), reference[0]) and np.array_equal(f1.numpy(), reference[1])
        dec[2]
        assert f0.stale and not f1.stale
        with pytest.raises(StaleOutputError):
            f0.numpy()


def test_a_threaded_decoders_old_batches_go_stale_at_the_next_call(nvc: Any, sim: SimBackend, clip: str) -> None:
    """Its thread decodes ahead into the buffers of earlier batches at any time after the next call."""
    dec = _decoder(nvc, clip, "threaded")
    with ss.stream_contract(dec):
        first = dec.get_batch_frames(4)
        assert not any(f.stale for f in first)
        second = dec.get_batch_frames(4)
        assert all(f.stale for f in first) and not any(f.stale for f in second)


def test_a_frame_imports_any_number_of_times_until_then(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "batch")
    reference = decode_reference(clip)
    with ss.stream_contract(dec):
        frame = dec.get_batch_frames(1)[0]
        assert np.array_equal(frame.numpy(), reference[0])
        assert np.array_equal(frame.numpy(), reference[0])
        assert frame.shape == (3, 48, 64) and frame.dtype == "|u1"


# -- releases ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("guarded", [False, True])
def test_a_new_source_waits_for_the_readers_first(nvc: Any, sim: SimBackend, clip: str, guarded: bool) -> None:
    """``reconfigure_decoder`` frees the buffers with no stream order: a copy still pending on another
    stream reads freed memory, unless the host waited for it first (D6)."""
    dec = _decoder(nvc, clip, "batch")
    consumer = Consumer(sim, clip)
    with ss.stream_contract(dec) if guarded else contextlib.nullcontext():
        for f in dec.get_batch_frames(8):
            consumer.take(f)
        dec.reconfigure_decoder(clip)
        after = dec.get_batch_frames(2)
    if guarded:
        assert consumer.wrong() == 0 and sim.races == []
        assert not after[0].stale
    else:
        assert consumer.wrong() > 0 and sim.races


def test_ending_a_threaded_decoder_waits_for_the_readers(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "threaded")
    consumer = Consumer(sim, clip)
    with ss.stream_contract(dec):
        batch = dec.get_batch_frames(4)
        for f in batch:
            consumer.take(f)
        dec.end()
        assert all(f.stale for f in batch)
    assert consumer.wrong() == 0 and sim.races == []


# -- across libraries: decode -> convert -> VideoSuperRes -> consumer ----------------------------------------------


def _to_float(sim: SimBackend, view: Any, stream: Any) -> Any:
    """The user's colour conversion on their own stream: uint8 RGB planes -> float32 in [0, 1]."""
    out = sim.empty(view.shape, np.float32, stream=stream)
    src, dst = view.buffer, out.buffer
    sim.launch(stream, "to float", lambda: np.divide(src.data, 255, out=dst.data, dtype=np.float32), reads=[view], writes=[out])
    return out


@pytest.mark.parametrize("guarded", [False, True])
def test_the_whole_pipeline_is_ordered_with_no_host_wait_of_ours(nvc: Any, sim: SimBackend, clip: str, guarded: bool) -> None:
    dec = _decoder(nvc, clip, "batch")
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 128, 96
    sr.load()
    user = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    reference = decode_reference(clip)
    expected_sr = VideoSuperRes(backend=SimBackend())
    results: list[tuple[int, Any]] = []
    guards = contextlib.ExitStack()
    if guarded:
        d = guards.enter_context(ss.stream_contract(dec))
        c = guards.enter_context(ss.stream_contract(sr, user, input_stream=user))
    with guards:
        while frames := dec.get_batch_frames(8):
            for frame in frames:
                with sim.use_stream(user):
                    x = _to_float(sim, sim.from_dlpack(frame), user)
                    out = sr.run(x)
                with sim.use_stream(consumer):
                    results.append((_index(frame), sim.copy(sim.from_dlpack(out.image), consumer)))
        inside = (dict(d.stats), dict(c.stats)) if guarded else ()
    sim.synchronize_device()
    wrong = 0
    expected_sr.output_width, expected_sr.output_height = 128, 96
    expected_sr.load()
    for i, copy in results:
        x = expected_sr.engine.backend.array(reference[i] / np.float32(255), dtype=np.float32)
        expected = expected_sr.run(x).image
        wrong += not np.allclose(sim.download(copy), expected_sr.engine.backend.download(expected_sr.engine.backend.from_dlpack(expected)))
    if guarded:
        assert wrong == 0 and sim.races == []
        assert all(stats["host_waits"] == 0 and stats["device_syncs"] == 0 for stats in inside)
    else:
        assert wrong > 0 and sim.races


def test_a_zero_copy_view_fed_to_a_guarded_effect_makes_its_run_a_reader(nvc: Any, sim: SimBackend, clip: str) -> None:
    """A frame's view passed to another guarded call as an input (here the effect refuses uint8, after it
    has seen the view): the views registry knows it as the decoder's buffer, and the next decode waits for
    the effect's stream. A view of a frame whose buffer was rewritten is refused there as stale."""
    dec = _decoder(nvc, clip, "batch")
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 128, 96
    sr.load()
    with ss.stream_contract(dec):
        view = sim.from_dlpack(dec.get_batch_frames(1)[0])
        dec.get_batch_frames(8)
        with pytest.raises(StaleOutputError):
            ss.stream_contract(sr, input_stream=sim.legacy_stream()).run(view)


# -- errors ----------------------------------------------------------------------------------------------------------


def test_a_stream_that_is_not_the_decoders_is_refused(nvc: Any, sim: SimBackend, clip: str) -> None:
    mine = sim.create_stream(non_blocking=True)
    dec = _decoder(nvc, clip, "batch", cuda_stream=mine.handle)
    with pytest.raises(ArgumentError, match="cuda_stream it was created with"):
        ss.stream_contract(dec, sim.legacy_stream())
    assert ss.stream_contract(dec, mine).stream == mine


@pytest.mark.parametrize("option", ["input_stream", "conversion_stream"])
def test_an_effects_stream_option_is_refused_for_a_decoder(nvc: Any, sim: SimBackend, clip: str, option: str) -> None:
    with pytest.raises(ArgumentError, match="takes no input"):
        ss.stream_contract(_decoder(nvc, clip, "batch"), **{option: sim.legacy_stream()})


def test_the_sdks_own_errors_pass_through_and_change_nothing(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "single")
    with ss.stream_contract(dec) as c:
        frame = dec[0]
        runs = c.stats["runs"]
        with pytest.raises(IndexError):
            dec[FRAMES]
        assert c.stats["runs"] == runs and not frame.stale
        with pytest.raises(AttributeError, match="no attribute 'bogus'"):
            c.bogus  # noqa: B018


def test_the_raw_frames_dlpack_follows_the_stream_rule(nvc: Any, sim: SimBackend, clip: str) -> None:
    raw = _decoder(nvc, clip, "batch").get_batch_frames(1)[0]
    with pytest.raises(PyNvVCException, match="not allowed"):
        raw.__dlpack__()
    with ss.stream_contract(_decoder(nvc, clip, "batch")):
        pass
    guarded = ss.stream_contract(_decoder(nvc, clip, "batch")).get_batch_frames(1)[0]
    guarded.__dlpack__()  # a guarded frame takes DLPack's default (None: the legacy stream)


def test_frames_and_contracts_cannot_be_copied_or_pickled(nvc: Any, sim: SimBackend, clip: str) -> None:
    import copy
    import pickle

    c = ss.stream_contract(_decoder(nvc, clip, "batch"))
    frame = c.get_batch_frames(1)[0]
    for obj in (c, frame):
        with pytest.raises(TypeError):
            copy.copy(obj)
        with pytest.raises(TypeError):
            pickle.dumps(obj)


def test_the_emulation_needs_the_model(nvc: Any, clip: str) -> None:
    class NotAModel(SimBackend):
        records_accesses = False  # type: ignore[assignment]

    with ss.use_backend(NotAModel()), pytest.raises(ss.errors.BackendUnavailableError, match="real decoder"):
        nvc.SimpleDecoder(clip)


def test_the_fixture_and_the_install_undo_what_they_did() -> None:
    from streamsafe.testing import install_fake_pynvvideocodec, is_fake_pynvvideocodec, uninstall_fake_pynvvideocodec

    before = sys.modules.get("PyNvVideoCodec")
    mod = install_fake_pynvvideocodec(force=True)
    assert is_fake_pynvvideocodec(sys.modules["PyNvVideoCodec"]) and mod.OutputColorType is OutputColorType
    uninstall_fake_pynvvideocodec()
    assert sys.modules.get("PyNvVideoCodec") is before





# -- copies: the event right after the copy --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["batch", "single", "threaded"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_copy_helper_orders_the_next_decode_after_the_copy_only(nvc: Any, sim: SimBackend, clip: str, mode: str, strategy: str) -> None:
    """``frame.copy(C)``: the decoder's next write waits for an event recorded right after the copy (the
    expert's fence), so C's later work (here: more work queued on C after each copy) is not waited for."""
    dec = _decoder(nvc, clip, mode)
    C = sim.create_stream(non_blocking=True)
    reference = decode_reference(clip)
    copies = []
    with ss.stream_contract(dec, strategy=strategy) as c:
        for _ in range(3):
            frames = dec.get_batch_frames(4) if mode != "single" else [dec[len(copies)]]
            for f in frames:
                copies.append((_index(f), f.copy(C)))
                sim.launch(C, "later work on C", lambda: None)
        inside = dict(c.stats)
    sim.synchronize_device()
    assert all(np.array_equal(sim.download(got), reference[i]) for i, got in copies)
    assert sim.races == []
    if strategy in ("auto", "event", "async"):
        assert inside["host_waits"] == 0 and inside["D5"] >= 2


# -- a review's findings: each program below broke before its fix --------------------------------------------------


def _check(sim: SimBackend, clip: str, copies: list[tuple[int, Any]]) -> int:
    sim.synchronize_device()
    reference = decode_reference(clip)
    return sum(not np.array_equal(sim.download(c), reference[i]) for i, c in copies)


def test_an_interrupted_plain_call_makes_every_frame_stale(nvc: Any, sim: SimBackend, clip: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in a plain (tracked) call after the decoder wrote: as in a guarded call, nothing older is importable."""
    dec = _decoder(nvc, clip, "batch")
    frames = ss.stream_safe(dec)(lambda: dec.get_batch_frames(8))()
    decode = dec._decode_and_wait

    def interrupted(indices: list[int]) -> Any:
        decode(indices)
        raise KeyboardInterrupt

    monkeypatch.setattr(dec, "_decode_and_wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dec.get_batch_frames(8)
    assert all(f.stale for f in frames)


def test_an_sdk_error_from_inside_a_call_makes_every_frame_stale(nvc: Any, sim: SimBackend, clip: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's own error (PyNvVCException) may come after some buffers were written; an IndexError comes before."""
    dec = _decoder(nvc, clip, "batch")
    with ss.stream_contract(dec):
        frames = dec.get_batch_frames(8)
        with pytest.raises(IndexError):
            dec[FRAMES + 5]
        assert not any(f.stale for f in frames)

        def fails_after_writing(indices: list[int]) -> Any:
            dec._write(indices[:4])
            raise PyNvVCException("decode error")

        monkeypatch.setattr(dec, "_decode_and_wait", fails_after_writing)
        with pytest.raises(PyNvVCException):
            dec.get_batch_frames(8)
        assert all(f.stale for f in frames)


def test_a_subclass_that_decodes_in_a_worker_thread_stays_guarded(nvc: Any, sim: SimBackend, clip: str) -> None:
    """A decode deadline: ``get_batch_frames`` hands ``super()``'s to a worker thread and waits with a timeout."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        class Deadline(nvc.SimpleDecoder):  # type: ignore[misc, name-defined]
            def get_batch_frames(self, n: int) -> Any:
                return pool.submit(super().get_batch_frames, n).result(timeout=30)

        dec = Deadline(clip, output_color_type=nvc.OutputColorType.RGBP)
        with ss.stream_contract(dec):
            frames = dec.get_batch_frames(4)
            assert [np.array_equal(f.numpy(), want) for f, want in zip(frames, decode_reference(clip))] == [True] * 4


@pytest.mark.parametrize("way", ["contract", "plain"])
def test_a_ctrl_c_between_the_decoders_return_and_the_pools_update_makes_every_frame_stale(
        nvc: Any, sim: SimBackend, clip: str, way: str) -> None:
    from streamsafe.ledger import PoolLedger

    dec = _decoder(nvc, clip, "batch")
    if way == "contract":
        decode = ss.PoolContract(dec).get_batch_frames
        frames = decode(8)
    else:
        frames = ss.stream_safe(dec)(lambda: dec.get_batch_frames(8))()
        decode = dec.get_batch_frames  # (a plain call: tracked)
    previous, code = sys.gettrace(), PoolLedger.record_write.__code__

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is code:  # (where a pending Ctrl-C's handler runs)
            sys.settrace(previous)
            raise KeyboardInterrupt
        return None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            decode(8)
    finally:
        sys.settrace(previous)
    assert all(f.stale for f in frames)


def test_an_interrupt_while_the_guard_queues_its_waits_loses_none(nvc: Any, sim: SimBackend, clip: str) -> None:
    D, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    dec = _decoder(nvc, clip, "batch", cuda_stream=D.handle)
    copies = []
    with ss.stream_contract(dec):
        for f in dec.get_batch_frames(8):
            copies.append((_index(f), f.copy(C)))
        original = sim.wait

        def interrupted(*args: Any, **kwargs: Any) -> None:
            sim.wait = original  # type: ignore[method-assign]
            raise KeyboardInterrupt

        sim.wait = interrupted  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            dec.get_batch_frames(8)
        dec.get_batch_frames(8)  # the program goes on
    assert _check(sim, clip, copies) == 0 and sim.races == []


def _hidden_stream(dec: Any) -> Any:
    del dec.cuda_stream  # (the real decoder keeps its stream in C++: streamsafe cannot read it)
    return dec


def test_a_decoder_whose_stream_is_unknown_is_fenced_by_host_waits(nvc: Any, sim: SimBackend, clip: str) -> None:
    """Made before its class was guarded, on a stream no one declares: a device wait could be on the wrong stream."""
    import inspect

    D, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    dec = nvc.SimpleDecoder.__new__(nvc.SimpleDecoder)  # made as before any guard: its own __init__, not a guard's
    inspect.unwrap(nvc.SimpleDecoder.__init__)(dec, clip, cuda_stream=D.handle, output_color_type=nvc.OutputColorType.RGBP)
    _hidden_stream(dec)
    copies = []
    with ss.stream_contract(dec) as c:
        while frames := dec.get_batch_frames(8):
            for f in frames:
                with sim.use_stream(C):
                    copies.append((_index(f), sim.copy(sim.from_dlpack(f), C)))
        inside = dict(c.stats)
    assert not c.stream_known and "not known" in c.plan.reason
    assert inside["host_waits"] > 0
    assert _check(sim, clip, copies) == 0 and sim.races == []


def test_a_decoder_made_under_a_class_guard_has_its_stream_recorded(nvc: Any, sim: SimBackend, clip: str) -> None:
    D, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with ss.guard(nvc):
        dec = _hidden_stream(_decoder(nvc, clip, "batch", cuda_stream=D.handle))
        copies = []
        while frames := dec.get_batch_frames(8):
            for f in frames:
                with sim.use_stream(C):
                    copies.append((_index(f), sim.copy(sim.from_dlpack(f), C)))
        contract = ss.stream_contract(dec)
    assert contract.stream == D and contract.stream_known and contract.plan.strategy is ss.Strategy.EVENT
    assert _check(sim, clip, copies) == 0 and sim.races == []
    with pytest.raises(ArgumentError, match="not SimpleDecoder's stream"):
        ss.stream_contract(dec, C)


def test_a_frame_import_during_another_threads_decode_is_refused(nvc: Any, sim: SimBackend, clip: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    C = sim.create_stream(non_blocking=True)
    dec = _decoder(nvc, clip, "batch", cuda_stream=sim.create_stream(non_blocking=True).handle)
    c = ss.stream_contract(dec)
    first = c.get_batch_frames(8)
    inside, done, result = threading.Event(), threading.Event(), {}
    launch = sim.launch

    def slow_launch(stream: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "decode frame 8":
            inside.set()
            done.wait(5)
        return launch(stream, name, *args, **kwargs)

    def reader() -> None:
        inside.wait(5)
        try:
            with ss.use_backend(sim), sim.use_stream(C):
                sim.copy(sim.from_dlpack(first[0]), C)
        except Exception as e:  # noqa: BLE001
            result["error"] = e
        done.set()

    monkeypatch.setattr(sim, "launch", slow_launch)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        c.get_batch_frames(8)
    finally:
        thread.join()
    assert isinstance(result.get("error"), ss.errors.ConcurrentUseError)


@pytest.mark.parametrize("target", ["object", "class", "effect"])
def test_a_pool_contract_refuses_what_is_not_a_decoder(nvc: Any, sim: SimBackend, clip: str, target: str) -> None:
    obj = {"object": object(), "class": nvc.SimpleDecoder, "effect": VideoSuperRes(backend=sim)}[target]
    with pytest.raises(ss.errors.NotAnEffectError, match="SimpleDecoder or ThreadedDecoder instance"):
        ss.PoolContract(obj)


def test_a_backend_other_than_the_decoders_is_refused(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = _decoder(nvc, clip, "batch")
    with pytest.raises(ArgumentError, match="decodes on"):
        ss.stream_contract(dec, backend=SimBackend())
    assert ss.stream_contract(dec).backend is sim


def test_an_unknown_option_is_refused(nvc: Any, sim: SimBackend, clip: str) -> None:
    with pytest.raises(ArgumentError, match="no option 'bogus'"):
        ss.stream_contract(_decoder(nvc, clip, "batch"), bogus=1)


def test_a_guarded_frame_takes_its_stream_positionally_as_the_sdks(nvc: Any, sim: SimBackend, clip: str) -> None:
    C = sim.create_stream(non_blocking=True)
    c = ss.stream_contract(_decoder(nvc, clip, "batch"))
    frame = c.get_batch_frames(1)[0]
    assert sim.from_dlpack(frame.__dlpack__(C.dlpack)).shape == (3, 48, 64)
    c.get_batch_frames(1)
    c.get_batch_frames(1)  # (one frame a call cycles two buffers)
    with pytest.raises(StaleOutputError, match="before the decoder's next call"):
        frame.__dlpack__(C.dlpack)


def test_streamsafe_run_guards_a_program_of_the_decoder_alone(tmp_path: Any, clip: str) -> None:
    import subprocess
    from pathlib import Path

    program = tmp_path / "decode_only.py"
    program.write_text(
        "import numpy as np, streamsafe as ss\n"
        "import PyNvVideoCodec as nvc\n"
        f"dec = nvc.SimpleDecoder({clip!r}, output_color_type=nvc.OutputColorType.RGBP)\n"
        "sim = ss.current_backend()\n"
        "C = sim.create_stream(non_blocking=True)\n"
        "copies = []\n"
        "while frames := dec.get_batch_frames(8):\n"
        "    for f in frames:\n"
        "        copies.append(sim.copy(sim.from_dlpack(f, stream=C), C))\n"
        "sim.synchronize_device()\n"
        "print('decoded', len(copies))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "--sanitize", str(program)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"decoded {FRAMES}" in result.stdout and "SimpleDecoder (cuda:0): 6 call(s)" in result.stderr
    assert "0 host waits" in result.stderr and "sanitize: no race found" in result.stderr
    assert "1 decoder(s) guarded" in result.stderr and "InputContainer" not in result.stderr  # (the emulation's own)


def test_the_emulations_own_pyav_containers_are_not_the_programs(nvc: Any, sim: SimBackend, tmp_path: Any) -> None:
    """The emulated decoders read their clips with PyAV: a class guard on ``av`` guards none of those containers."""
    import av

    from streamsafe.testing import make_test_clip
    from streamsafe.testing.fake_pyav import decode_nv12

    path = make_test_clip(str(tmp_path / "own.mp4"), 4, (64, 48))
    with ss.guard(av) as cg:
        dec = nvc.SimpleDecoder(path, output_color_type=nvc.OutputColorType.RGBP)
        assert len(dec.get_batch_frames(4)) == 4 and len(decode_nv12(path)) == 4
    assert cg.pool_contracts == []
