"""Issue 39's remaining items, each a test that failed before its fix: class-guarded objects are collected, a
decoder on GPU 1 without a ``device`` attribute, a method bound before its class was first guarded, decoders
in their own words, a decoder call returning ``(frames, timestamps)``, the fixture's model, a refused call
that keeps the frames, ``unguard``'s words, and the API names."""

from __future__ import annotations

import gc
import inspect
import os
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.errors import DeviceMismatchError
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes, sample_clip
from streamsafe.testing.fake_pynvvideocodec import decode_reference

pytest.importorskip("av")

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ["auto", "event", "async", "stream", "device"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSAFE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=_env(), timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def clip() -> str:
    return sample_clip(24, (32, 16))


@pytest.fixture
def nvc(fake_pynvvideocodec: Any) -> Any:
    return fake_pynvvideocodec


# -- item 1: objects made under a class guard are collected --------------------------------------------------------


def _make_and_drop(nvc: Any, sim: SimBackend, clip: str, n: int) -> list[weakref.ref[Any]]:
    refs: list[weakref.ref[Any]] = []
    C = sim.create_stream(non_blocking=True)
    for _ in range(n):
        dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
        for f in dec.get_batch_frames(4):
            sim.copy(sim.from_dlpack(f, stream=C), C)
        sr = VideoSuperRes()
        sr.output_width = sr.output_height = 32
        sr.load()
        sr.run(sim.array(np.ones((3, 16, 16), np.float32))).numpy()
        refs += [weakref.ref(dec), weakref.ref(sr)]
        del dec, sr, f
    sim.synchronize_device()
    gc.collect()
    return refs


def test_decoders_and_effects_made_under_a_class_guard_are_collected(nvc: Any, sim: SimBackend, clip: str) -> None:
    with ss.guard(nvc), ss.guard(ss.testing) as g:  # (the newest guard takes the decoders' classes too)
        refs = _make_and_drop(nvc, sim, clip, 20)
        assert sum(r() is not None for r in refs) == 0
        assert len(g.pool_contracts) == len(g.contracts) == 20  # (a contract for each, kept for reports)


def test_a_decoder_per_clip_under_streamsafe_run_keeps_no_decoder_alive() -> None:
    """``scripts/decoder_per_clip.py`` (5,000 frames by default; fewer here): the live decoders, counted after
    ``gc.collect()`` at intervals, stay at 0 once each is dropped; every frame right."""
    result = subprocess.run([sys.executable, "-m", "streamsafe", "run", "--fake-nvvfx", "scripts/decoder_per_clip.py",
                             "--frames", "400", "--every", "100"], capture_output=True, text=True, env=_env(), timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "400 frames, 40 decoders made, 0 wrong frames" in result.stdout
    assert "by frames decoded: 100: 0, 200: 0, 300: 0, 400: 0, 400: 0" in result.stdout
    assert "SimpleDecoder (cuda:0): 4 call(s)" in result.stderr


# -- item 2: a decoder on GPU 1 that has no device attribute (the real one keeps its gpu_id in C++) ---------------


def _gpu_id_only(nvc: Any) -> type:
    class GpuIdOnly(nvc.SimpleDecoder):  # type: ignore[name-defined,misc]
        @property
        def device(self) -> int:
            raise AttributeError("the SDK's decoder has no device attribute")

    return GpuIdOnly


@pytest.fixture
def two_gpus() -> Iterator[SimBackend]:
    sim = SimBackend(devices=2, scheduler="adversarial")
    with ss.use_backend(sim), sim.device(1):
        yield sim


@pytest.mark.parametrize("own_stream", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_decoder_on_gpu_1_without_a_device_attribute_is_fenced_on_gpu_1(
        nvc: Any, two_gpus: SimBackend, clip: str, strategy: str, own_stream: bool) -> None:
    """A fresh consumer stream per batch, each frame read there as a view and copied without a wait (the next
    decode must wait for it on device 1), for 12 batches; the decoder's device-1 stream declared to the block."""
    sim = two_gpus
    D = sim.create_stream(non_blocking=True, device=1)
    dec = _gpu_id_only(nvc)(clip, gpu_id=1, cuda_stream=D.handle if own_stream else 0,
                            output_color_type=nvc.OutputColorType.RGBP)
    with pytest.raises(AttributeError):
        dec.device  # noqa: B018
    reference = decode_reference(clip)
    copies = []
    with ss.stream_contract(dec, D.handle if own_stream else None, strategy=strategy) as c:
        for _ in range(12):
            frames = dec.get_batch_frames(2)
            C = sim.create_stream(non_blocking=True, device=1)  # (a fresh consumer stream per batch)
            with sim.use_stream(C):
                for f in frames:
                    copies.append((f.index, sim.copy(sim.from_dlpack(f), C)))
    assert c.device == 1 and c.pool.device == 1 and c.stream.device == 1
    sim.synchronize_device(1)
    assert sum(not np.array_equal(sim.download(copy), reference[i]) for i, copy in copies) == 0
    assert sim.races == []


def test_a_decoder_whose_gpu_is_unknown_is_refused_loudly_at_its_first_call(nvc: Any, two_gpus: SimBackend,
                                                                             clip: str) -> None:
    """Made before streamsafe could record its gpu_id (its own ``__init__``, as before ``import streamsafe``): the
    first frames show the guard took the wrong device, and it says so instead of fencing on device 0."""
    cls = _gpu_id_only(nvc)
    dec = cls.__new__(cls)
    inspect.unwrap(nvc.SimpleDecoder.__init__)(dec, clip, gpu_id=1, output_color_type=nvc.OutputColorType.RGBP)
    with pytest.raises(DeviceMismatchError) as e, ss.stream_contract(dec):
        dec.get_batch_frames(2)
    message = str(e.value)
    assert "GpuIdOnly's frames" in message and "is on CUDA device 1, but device 0 is required" in message
    assert "Make the decoder after `import streamsafe`, passing gpu_id=1 by keyword" in message


def test_a_c_constructor_records_the_gpu_id_passed_by_keyword() -> None:
    from types import SimpleNamespace

    from streamsafe.construction import made_with, recording_init

    class Native(SimpleNamespace):  # (its __init__ is C's: its signature says only *args, **kwargs)
        __hash__ = object.__hash__

    init = recording_init(SimpleNamespace.__init__, ("gpu_id", "cuda_stream"), "__streamsafe_dispatch__")
    n = Native()
    init(n, gpu_id=1)
    assert made_with(n, "gpu_id") == 1 and made_with(n, "cuda_stream") is None


# -- item 3: a method bound before its class was first guarded ------------------------------------------------------

_BOUND_BEFORE = """
    import sys
    import numpy as np
    import streamsafe as ss
    from streamsafe.sim import SimBackend
    from streamsafe.testing import VideoSuperRes, install_fake_pynvvideocodec, sample_clip
    from streamsafe.testing.fake_pynvvideocodec import decode_reference

    sim = SimBackend(scheduler="adversarial")
    held = ss.use_backend(sim)
    held.__enter__()
    which = sys.argv[1]
    if which == "effect":
        sr = VideoSuperRes(); sr.output_width = sr.output_height = 32; sr.load()
        run = sr.run  # bound before any contract of the class
        S = sim.create_stream(non_blocking=True)
        with ss.stream_contract(sr, S.handle):
            out = run(sim.array(np.ones((3, 16, 16), np.float32)))
        print(type(out).__name__)
    else:
        nvc = install_fake_pynvvideocodec()
        clip = sample_clip(16, (32, 16))
        dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
        get = dec.get_batch_frames if which == "batch" else dec.__getitem__  # bound before any contract
        C = sim.create_stream(non_blocking=True)
        copies, kinds = [], set()
        with ss.stream_contract(dec):
            for i in range(8):
                frames = get(2) if which == "batch" else [get(i)]
                for f in frames:
                    kinds.add(type(f).__name__)
                    with sim.use_stream(C):
                        copies.append((f.index, sim.copy(sim.from_dlpack(f), C)))
        sim.synchronize_device()
        reference = decode_reference(clip)
        wrong = sum(not np.array_equal(sim.download(c), reference[i]) for i, c in copies)
        print(",".join(sorted(kinds)), "wrong", wrong, "of", len(copies), "races", len(sim.races))
"""


@pytest.mark.parametrize("which", ["effect", "batch", "item"])
def test_a_method_bound_before_the_first_guard_is_guarded_in_a_block(which: str) -> None:
    result = _python(_BOUND_BEFORE, which)
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip()
    if which == "effect":
        assert out == "SafeOutput"
    else:
        assert out.startswith("SafeFrame wrong 0 of") and out.endswith("races 0"), out


def test_the_classes_a_profile_names_get_their_dispatchers_when_seen(tmp_path: Path) -> None:
    """Registered before its module is imported (the import hook), and registered after (``register``)."""
    (tmp_path / "later_sdk_x39.py").write_text(textwrap.dedent("""
        class Sharpener:
            def run(self, x, stream_ptr=0, non_blocking=False):
                return x
    """))
    result = _python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import streamsafe as ss
        from streamsafe.profile import EffectProfile, register
        from streamsafe.calls import MARK
        register(EffectProfile(name="later.Sharpener", classes=("later_sdk_x39.Sharpener",), calls=("run",), output=None))
        import later_sdk_x39
        print(getattr(later_sdk_x39.Sharpener.run, MARK, False))
        class Own:
            def run(self, x):
                return x
        register(EffectProfile(name="own.Own", classes=(Own,), calls=("run",), output=None))
        print(getattr(Own.run, MARK, False))
        print(type(later_sdk_x39.__loader__).__name__)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "SourceFileLoader"]


def test_the_docs_say_a_method_bound_before_import_streamsafe_is_not_guarded() -> None:
    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    assert "A method bound before `import streamsafe` is the SDK's own" in guide


# -- item 7: a decoded frame gone stale is reported in the decoder's words, wherever it is found ---------------------


def _assert_decoder_words(message: str) -> None:
    assert "the decoder" in message and "run()" not in message and "the effect" not in message, message
    assert "Copy each output" not in message and "frame" in message, message


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


def test_a_frame_gone_stale_while_another_thread_decodes_is_reported_in_the_decoders_words(
        nvc: Any, sim: SimBackend, clip: str) -> None:
    """The frame is current when its import starts; another thread's decode rewrites its buffer before the import
    records its reader (deterministic here: the other thread runs inside the SDK frame's ``__dlpack__``)."""
    import threading

    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    with ss.stream_contract(dec):
        frame = dec.get_batch_frames(2)[0]
    sdk_frame = frame.raw
    own = type(sdk_frame).__dlpack__

    class Racing(type(sdk_frame)):  # type: ignore[misc]
        def __dlpack__(self, stream: Any = 0, **kw: Any) -> Any:
            capsule = own(self, stream, **kw)
            other = threading.Thread(target=lambda: [dec.get_batch_frames(2) for _ in range(12)])
            other.start()
            other.join()
            return capsule

    sdk_frame.__class__ = Racing
    with pytest.raises(ss.errors.StaleOutputError) as e:
        sim.from_dlpack(frame)
    _assert_decoder_words(str(e.value))


def test_every_stale_frame_message_is_the_decoders(nvc: Any, sim: SimBackend, clip: str) -> None:
    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 128, 96
    sr.load()
    with ss.stream_contract(dec):
        frame = dec.get_batch_frames(1)[0]
        view = sim.from_dlpack(frame)
        dec.get_batch_frames(8)
        for attempt in (lambda: frame.record_stream(sim.create_stream()), lambda: sim.from_dlpack(frame),
                        lambda: ss.stream_contract(sr, input_stream=sim.legacy_stream()).run(view)):
            with pytest.raises(ss.errors.StaleOutputError) as e:
                attempt()
            _assert_decoder_words(str(e.value))


# -- item 8: a decoder subclass whose call returns (frames, timestamps) ---------------------------------------------


@pytest.mark.parametrize("guarded", [False, True])
def test_a_call_returning_frames_and_timestamps_is_guarded_and_fenced(nvc: Any, sim: SimBackend, clip: str,
                                                                      guarded: bool) -> None:
    import contextlib

    class WithTimes(nvc.SimpleDecoder):  # type: ignore[name-defined,misc]
        def get_batch_frames(self, n: int) -> Any:
            frames = super().get_batch_frames(n)
            return frames, [f.timestamp for f in frames]

    dec = WithTimes(clip, output_color_type=nvc.OutputColorType.RGBP)
    C = sim.create_stream(non_blocking=True)
    copies = []
    with ss.stream_contract(dec) if guarded else contextlib.nullcontext() as c:
        while True:
            frames, times = dec.get_batch_frames(4)
            if not frames:
                break
            assert times == [f.timestamp for f in frames]
            assert all(isinstance(f, ss.SafeFrame) for f in frames) == guarded
            for f in frames:
                with sim.use_stream(C):
                    copies.append((f.index, sim.copy(sim.from_dlpack(f), C)))
    sim.synchronize_device()
    reference = decode_reference(clip)
    wrong = sum(not np.array_equal(sim.download(copy), reference[i]) for i, copy in copies)
    if guarded:
        assert wrong == 0 and sim.races == [] and c.stats["D5"] > 0
    else:
        assert wrong > 0 and sim.races  # (the control: the race is there without the guard)


# -- item 9: a decoder's messages in its own words ---------------------------------------------------------------------


def test_a_decoder_passed_to_stream_contract_class_is_told_to_use_stream_contract(nvc: Any, sim: SimBackend,
                                                                                  clip: str) -> None:
    dec = nvc.SimpleDecoder(clip)
    with pytest.raises(ss.errors.NotAnEffectError) as e:
        ss.StreamContract(dec)
    message = str(e.value)
    assert "ss.stream_contract(simpledecoder, stream), which makes a PoolContract" in message
    assert "VideoSuperRes()" not in message


def test_concurrent_use_of_a_decoder_is_reported_in_its_words(nvc: Any, sim: SimBackend, clip: str) -> None:
    import pickle
    import threading

    dec = nvc.SimpleDecoder(clip)
    c = ss.stream_contract(dec)
    inside, release = threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: c.pool.turns.run("get_batch_frames", lambda: (inside.set(), release.wait(5))),
                         name="decode-thread")
    t.start()
    inside.wait(5)
    try:
        with pytest.raises(ss.errors.ConcurrentUseError) as e:
            c.get_batch_frames(2)
    finally:
        release.set()
        t.join()
    message = str(e.value)
    assert "inside a call on the same decoder" in message and "give each thread its own decoder" in message
    assert "effect" not in message and "run()" not in message
    assert str(pickle.loads(pickle.dumps(e.value))) == message


def test_a_frames_copy_helper_without_its_framework_names_frame_numpy() -> None:
    error = ss.errors.FrameworkUnavailableError("torch", "frame.torch()", "No module named 'torch'", "torch")
    assert "or take a host copy with frame.numpy(); the frame is untouched" in str(error) and "out." not in str(error)
    effect = ss.errors.FrameworkUnavailableError("torch", "out.torch()", "No module named 'torch'", "torch")
    assert "or take a host copy with out.numpy(); the output is untouched" in str(effect)


def test_the_package_docstring_and_run_help_name_the_decoders() -> None:
    from streamsafe.tools.cli import build_parser

    assert "PyNvVideoCodec" in (ss.__doc__ or "") and "PoolContract" in (ss.__doc__ or "")
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    assert "PyNvVideoCodec decoder" in run.description and "PyNvVideoCodec" in build_parser().description


# -- item 14: the fake_nvvfx fixture alone runs on an adversarial model ----------------------------------------------


def test_the_fake_nvvfx_fixture_alone_shows_a_race_as_wrong_frames(fake_nvvfx: Any) -> None:
    """Unguarded, non_blocking, the output copied on another stream with no fence: the in-order model ran it in
    program order and the frames came out right; the fixture's model shows the race."""
    backend = ss.current_backend()
    assert isinstance(backend, SimBackend) and type(backend.scheduler).__name__ == "AdversarialScheduler"
    sr = fake_nvvfx.VideoSuperRes()
    sr.output_width = sr.output_height = 32
    sr.load()
    S, C = backend.create_stream(non_blocking=True), backend.create_stream(non_blocking=True)
    out = sr.run(backend.array(np.full((3, 16, 16), 0.5, np.float32)), stream_ptr=S.handle, non_blocking=True)
    copy = backend.copy(backend.from_dlpack(out.image, stream=C), C)
    backend.synchronize_device()
    assert backend.races and not np.allclose(backend.download(copy), 0.5)


# -- item 15: a decoder's argument error before any write ----------------------------------------------------------


def test_a_threaded_decoders_batch_larger_than_its_buffer_is_documented_and_tested(nvc: Any, sim: SimBackend,
                                                                                   clip: str) -> None:
    dec = nvc.ThreadedDecoder(clip, 2, output_color_type=nvc.OutputColorType.RGBP)
    with ss.stream_contract(dec):
        frames = dec.get_batch_frames(2)
        with pytest.raises(nvc.PyNvVCException, match="batch_size cannot be greater than buffer_size"):
            dec.get_batch_frames(8)
        assert all(f.stale for f in frames)  # (as the guide says: the SDK's one exception class may follow writes)
        kept = dec.get_batch_frames(2)
        with pytest.raises(TypeError):
            dec.get_batch_frames("8")  # (any other exception is a refusal: the frames stay valid)
        assert not any(f.stale for f in kept)
    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    assert ("includes an argument the decoder refuses before it decodes anything, such as `get_batch_frames(n)` with "
            "`n` larger than a `ThreadedDecoder`'s `buffer_size`: streamsafe cannot tell the two apart") in guide


# -- item 19: unguard's words ------------------------------------------------------------------------------------------


def test_unguard_of_what_is_not_a_class_says_unguard() -> None:
    with pytest.raises(ss.errors.NotAnEffectError, match=r"^cannot unguard 42 \(type int\): pass an effect class"):
        ss.unguard(42)
    with pytest.raises(ss.errors.NotAnEffectError, match=r"^cannot unguard 42"):
        ss.unguard([42])


# -- item 22: API names ----------------------------------------------------------------------------------------------


def test_enter_and_leave_block_take_a_stack_frame_and_the_old_keyword_warns(sim: SimBackend) -> None:
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    c = ss.StreamContract(sr)
    assert list(inspect.signature(c.enter_block).parameters)[0] == "stack_frame"
    here = sys._getframe()
    with pytest.warns(DeprecationWarning, match=r"enter_block\(frame=\.\.\.\) is deprecated: pass stack_frame=") as w:
        c.enter_block(frame=here)
    assert w[0].filename == __file__  # (the warning points at the caller's line)
    assert isinstance(sr.run(sim.array(np.ones((3, 16, 16), np.float32))), ss.SafeOutput)
    with pytest.warns(DeprecationWarning, match=r"leave_block\(frame=\.\.\.\) is deprecated: pass stack_frame="):
        c.leave_block(frame=here, host_wait=True)
    assert not isinstance(sr.run(sim.array(np.ones((3, 16, 16), np.float32))), ss.SafeOutput)
    block = c.guarded()
    with block:
        assert block.stack_frame is here
        with pytest.warns(DeprecationWarning, match="use GuardBlock.stack_frame"):
            assert block.frame is here
    with pytest.raises(TypeError, match="unexpected keyword argument 'code'"):
        c.enter_block(code=here)


@pytest.mark.parametrize("name", ["Auto", "EVENT ", " async", "Stream\n"])
def test_strategy_names_are_read_in_any_case_and_stripped(name: str) -> None:
    assert ss.Strategy(name).value == name.strip().lower()
    with pytest.raises(ss.errors.StrategyError, match=r"in any case, spaces around it ignored"):
        ss.Strategy("fastest")


def test_stream_ptr_handle_and_dlpack_are_documented_and_differ_for_the_legacy_stream(sim: SimBackend) -> None:
    legacy, made = sim.legacy_stream(), sim.create_stream(non_blocking=True)
    assert (legacy.ptr, legacy.handle, legacy.dlpack) == (0, 1, 1)
    assert made.ptr == made.handle == made.dlpack
    doc = " ".join((ss.Stream.__doc__ or "").split())
    assert "Pass :attr:`ptr` to an SDK and :attr:`dlpack` to ``__dlpack__``" in doc


def test_the_models_blocking_default_is_said_where_users_meet_it() -> None:
    assert "*blocking* unless ``non_blocking``" in (SimBackend.create_stream.__doc__ or "")
    assert "create_stream() makes a blocking stream unless told" in (ROOT / "README.md").read_text()
    guide = " ".join((ROOT / "docs" / "guide.md").read_text().split())
    assert "The model's `sim.create_stream()` makes a *blocking* stream unless you pass `non_blocking=True`" in guide


def test_copying_a_frame_or_an_output_names_its_copy_method(nvc: Any, sim: SimBackend, clip: str) -> None:
    import copy

    dec = nvc.SimpleDecoder(clip, output_color_type=nvc.OutputColorType.RGBP)
    with ss.stream_contract(dec):
        frame = dec.get_batch_frames(1)[0]
        with pytest.raises(TypeError, match=r"frame\.copy\(\)"):
            copy.copy(frame)
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    out = ss.StreamContract(sr).run(sim.array(np.ones((3, 16, 16), np.float32)))
    with pytest.raises(TypeError, match=r"out\.copy\(\)"):
        copy.copy(out)
