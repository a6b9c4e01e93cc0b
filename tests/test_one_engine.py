"""One engine for every guarded call, and profiles as the public way to guard an SDK: the fixes that came with
them, each shown failing without the fix (a control) and passing with it.

* an input passed by keyword is an input (it went unfenced: 3 of 3 frames wrong);
* a profile's calls and releases may have any names (``process``, ``reset``), and an SDK may take no blocking
  keyword;
* ``register()`` checks what it is given, field by field;
* a Ctrl-C that lands as the turn is taken leaves it free (the next call from another thread waited 60 s and
  raised ``ConcurrentUseError``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import profile as P
from streamsafe.calls import raw_method
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K

STRATEGIES = ["auto", "event", "async", "stream"]


def _frame(i: int) -> np.ndarray:
    return np.random.default_rng(i).random((3, 16, 16), dtype=np.float32)


def _want(x: np.ndarray) -> np.ndarray:
    return K.to_rgb8(np, K.resize_bilinear(np, x, 32, 32)).astype(np.float32) / np.float32(255)


def _written(sim: SimBackend, data: np.ndarray, stream: ss.Stream) -> Any:
    """A fresh input whose contents a kernel on ``stream`` writes (the host does not wait for it)."""
    arr = sim.empty(data.shape, data.dtype, name="frame")
    sim.launch(stream, "producer.write", lambda: np.copyto(arr.buffer.data, data), writes=[arr])
    return arr


# -- an input by keyword ------------------------------------------------------------------------------------------


class KeywordSuperRes(VideoSuperRes):
    """An nvvfx-like effect of one's own whose ``run()`` takes its input by keyword only."""

    def run(self, *, image: Any, non_blocking: bool = False, stream_ptr: int = 0) -> Any:  # type: ignore[override]
        return super().run(image, non_blocking=non_blocking, stream_ptr=stream_ptr)


def _keyword_program(strategy: str, inputs: tuple[str, ...] | None) -> tuple[int, int]:
    """Three frames written on P, run by keyword under a contract with ``input_stream=P``, copied on the SDK stream:
    (wrong frames, races), with ``KeywordSuperRes``'s profile naming ``inputs``."""
    profile = P.register(P.EffectProfile(name="test.KeywordSuperRes", classes=(KeywordSuperRes,), calls=("run",),
                                         releases=("close",), closes=("close",), inputs=inputs,
                                         converts=lambda fx: True))
    try:
        sim = SimBackend(scheduler="adversarial")
        fx = KeywordSuperRes(backend=sim)
        fx.output_width = fx.output_height = 32
        fx.load()
        S, P_ = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        c = ss.StreamContract(fx, S, strategy=strategy, input_stream=P_)
        copies = []
        with sim.use_stream(S):
            for i in range(3):
                out = c.run(image=_written(sim, _frame(i), P_))
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=S), S), _want(_frame(i))))
        sim.synchronize_device(0)
        wrong = sum(not np.allclose(sim.download(y), w, atol=1.5 / 255) for y, w in copies)
        return wrong, len(sim.races)
    finally:
        P.unregister(profile)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_input_passed_by_keyword_is_fenced(strategy: str) -> None:
    assert _keyword_program(strategy, None) == (0, 0)  # (the profile names no inputs: every array argument is one)
    assert _keyword_program(strategy, ("image",)) == (0, 0)


def test_control_an_input_the_profile_does_not_name_is_refused_when_the_contract_is_made() -> None:
    # (what the contract knew before, nvvfx's names, left the keyword input unfenced: it raced; the SDK's signature
    # says run() takes no input_array, so the profile is refused before anything runs)
    with pytest.raises(ss.errors.ProfileError, match=r"inputs=\('input_array',\) names 'input_array', which no guarded call"):
        _keyword_program("event", ("input_array",))


# -- calls and releases of other names ---------------------------------------------------------------------------


class Sharpener(VideoSuperRes):
    """An SDK that is not nvvfx: ``process(*, image, stream)`` (no blocking keyword: it always waits for its stream)
    and ``reset()``, which releases its output buffer and leaves it usable. It has no ``run()`` of its own to call."""

    def process(self, *, image: Any, stream: int = 0) -> Any:
        return VideoSuperRes.run(self, image, non_blocking=False, stream_ptr=stream)

    def reset(self) -> None:
        self._release_output("reset")

    run = None  # type: ignore[assignment]  # (only process())


SHARPENER = P.EffectProfile(
    name="test.Sharpener", classes=(Sharpener,), calls=("process",), releases=("reset", "close"), closes=("close",),
    stream_keyword="stream", blocking_keyword=None, host_waits=True, settings=("output_width", "output_height"),
    releases_output=lambda fx, attr: True, converts=lambda fx: True, output="image",
)


@pytest.fixture
def sharpener_profile() -> Any:
    P.register(SHARPENER)
    yield SHARPENER
    P.unregister(SHARPENER)


def _sharpener(sim: SimBackend) -> Sharpener:
    fx = Sharpener(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    return fx


@pytest.mark.parametrize("way", ["contract", "block", "decorator"])
def test_a_profile_with_other_call_names_guards_every_way_in(sharpener_profile: Any, way: str) -> None:
    sim = SimBackend(scheduler="adversarial")
    fx = _sharpener(sim)
    S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    copies = []
    c = ss.StreamContract(fx, S, input_stream=S)
    step = ss.stream_safe(fx, S, input_stream=S)(lambda x: fx.process(image=x))
    with sim.use_stream(S):
        for i in range(4):
            x = _written(sim, _frame(i), S)
            if way == "contract":
                out = c.process(image=x)
            elif way == "block":
                with ss.stream_contract(fx, S, input_stream=S):
                    out = fx.process(image=x)
            else:
                out = step(x)
            assert isinstance(out, ss.SafeOutput)
            copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), _want(_frame(i))))
    sim.synchronize_device(0)
    assert [np.allclose(sim.download(y), w, atol=1.5 / 255) for y, w in copies] == [True] * 4
    assert sim.races == []
    assert "non_blocking" not in str(c.plan) or "non_blocking=False" in str(c.plan)  # (it always waits: no keyword to drop)


def test_control_the_same_program_unguarded_races(sharpener_profile: Any) -> None:
    sim = SimBackend(scheduler="adversarial")
    fx = _sharpener(sim)
    S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with sim.use_stream(S):
        for i in range(4):
            out = fx.process(image=_written(sim, _frame(i), S), stream=S.ptr)
            sim.copy(sim.from_dlpack(out.image, stream=C), C)
    sim.synchronize_device(0)
    assert sim.races != []


def test_a_release_of_another_name_outside_a_block_leaves_the_sdk_usable(sharpener_profile: Any) -> None:
    sim = SimBackend(scheduler="adversarial")
    fx = _sharpener(sim)
    S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with sim.use_stream(S):
        with ss.stream_contract(fx, S, input_stream=S, consumer_stream=C):
            first = fx.process(image=_written(sim, _frame(0), S))
            copy = sim.copy(sim.from_dlpack(first.image, stream=C), C)
            second = fx.process(image=_written(sim, _frame(1), S))
            view = sim.from_dlpack(second.image, stream=C)
        fx.reset()  # (a tracked release: the host waits for the readers on C first)
        with pytest.raises(ss.errors.StaleOutputError):
            ss.StreamContract(fx, S).ledger.output.check_current(second.image.generation)
        with ss.stream_contract(fx, S, input_stream=S) as c:  # (usable again: not closed forever)
            out = c.process(image=_written(sim, _frame(2), S))
            later = sim.copy(sim.from_dlpack(out.image, stream=S), S)
    del view
    sim.synchronize_device(0)
    assert np.allclose(sim.download(copy), _want(_frame(0)), atol=1.5 / 255)
    assert np.allclose(sim.download(later), _want(_frame(2)), atol=1.5 / 255)
    assert sim.races == []


def test_an_sdk_with_only_its_own_calls_is_an_effect_and_says_its_calls(sharpener_profile: Any) -> None:
    sim = SimBackend()
    c = ss.StreamContract(_sharpener(sim), sim.create_stream(non_blocking=True))
    assert callable(c.process) and callable(c.reset)
    with pytest.raises(ss.errors.ArgumentError, match="'run' is not a call of test.Sharpener: its guarded calls are process"):
        c.call("run")


class TwoCallSharpener(Sharpener):
    """A :class:`Sharpener` with a second call, ``sharpen()``, that only a later profile names."""

    def sharpen(self, *, image: Any, stream: int = 0) -> Any:
        # (the emulation's own run(), past the dispatcher nvvfx's profile put on VideoSuperRes: an SDK's C++ code)
        return raw_method(VideoSuperRes, "run")(self, image, non_blocking=False, stream_ptr=stream)


@contextlib.contextmanager
def _registered() -> Iterator[Callable[[Any], Any]]:
    """``register(profile)`` for a test: every profile registered through it is unregistered at the end, newest
    first."""
    made: list[Any] = []

    def register(profile: Any) -> Any:
        made.append(P.register(profile))
        return made[-1]

    try:
        yield register
    finally:
        for profile in reversed(made):
            P.unregister(profile)


def _two_call_program(later_names_sharpen: bool) -> tuple[Any, int, int]:
    """A profile naming ``process`` only is registered and guards a block (the class gets its dispatchers); then a
    profile naming ``sharpen`` too (or, the control, the first one again) replaces it, and a block calls
    ``fx.sharpen()`` four times, each output copied on another stream. (the last output, wrong frames, races)"""
    with _registered() as register:
        first = register(dataclasses.replace(SHARPENER, name="test.TwoCallSharpener", classes=(TwoCallSharpener,)))
        if later_names_sharpen:
            register(dataclasses.replace(first, calls=("process", "sharpen")))
        sim = SimBackend(scheduler="adversarial")
        fx = TwoCallSharpener(backend=sim)
        fx.output_width = fx.output_height = 32
        fx.load()
        S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        with sim.use_stream(S):
            with ss.stream_contract(fx, S, input_stream=S):  # (under the first profile: the dispatchers go on)
                fx.process(image=_written(sim, _frame(0), S))
            copies = []
            with ss.stream_contract(fx, S, input_stream=S):
                for i in range(4):
                    out = fx.sharpen(image=_written(sim, _frame(i), S), stream=S.ptr)
                    copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), _want(_frame(i))))
        sim.synchronize_device(0)
        wrong = sum(not np.allclose(sim.download(y), w, atol=1.5 / 255) for y, w in copies)
        return out, wrong, len(sim.races)


def test_a_call_a_later_profile_of_the_same_class_names_is_guarded() -> None:
    out, wrong, races = _two_call_program(later_names_sharpen=True)
    assert isinstance(out, ss.SafeOutput)
    assert (wrong, races) == (0, 0)


def test_control_a_call_no_profile_names_is_the_sdks_own_and_races() -> None:
    out, wrong, races = _two_call_program(later_names_sharpen=False)
    assert not isinstance(out, ss.SafeOutput)
    assert races > 0


def _two_call_setup() -> tuple[SimBackend, TwoCallSharpener, ss.Stream, ss.Stream]:
    sim = SimBackend(scheduler="adversarial")
    fx = TwoCallSharpener(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    return sim, fx, sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)


def test_an_open_block_keeps_its_contracts_profile_when_a_later_one_is_registered() -> None:
    """A block made under a profile naming ``process`` (and ``image_encoding`` among its settings); inside it a later
    profile of the class names only ``sharpen`` and no settings. The block still guards ``process()`` and a change
    of ``output_width`` (the host waits for the copy on C first). Before, the block's ``process()`` went unguarded
    (3 of 4 wrong)."""
    with _registered() as register:
        first = register(dataclasses.replace(SHARPENER, name="test.TwoCallSharpener", classes=(TwoCallSharpener,),
                                             settings=("output_width", "output_height", "image_encoding")))
        sim, fx, S, C = _two_call_setup()
        copies = []
        with sim.use_stream(S), ss.stream_contract(fx, S, input_stream=S):
            fx.process(image=_written(sim, _frame(0), S))
            register(dataclasses.replace(first, calls=("sharpen",), settings=()))
            for i in range(4):
                out = fx.process(image=_written(sim, _frame(i), S))
                assert isinstance(out, ss.SafeOutput)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), _want(_frame(i))))
            fx.image_encoding = fx.image_encoding  # (no change: nothing to release)
            copies.append((sim.copy(sim.from_dlpack(fx.process(image=_written(sim, _frame(5), S)).image, stream=C), C),
                           _want(_frame(5))))
            fx.output_width = 64  # (a reader on C: the host waits for it before the buffer may go)
        sim.synchronize_device(0)
        assert [np.allclose(sim.download(y), w, atol=1.5 / 255) for y, w in copies] == [True] * 5
        assert sim.races == []


def test_a_call_only_a_later_profile_names_calls_through_an_older_contracts_block() -> None:
    """Not the block's contract's call: the SDK's own, as before the later profile (it raised ``ArgumentError``)."""
    with _registered() as register:
        first = register(dataclasses.replace(SHARPENER, name="test.TwoCallSharpener", classes=(TwoCallSharpener,)))
        sim, fx, S, _ = _two_call_setup()
        with sim.use_stream(S), ss.stream_contract(fx, S, input_stream=S) as c:
            register(dataclasses.replace(first, calls=("process", "sharpen")))
            out = fx.sharpen(image=_written(sim, _frame(0), S), stream=S.ptr)
        assert not isinstance(out, ss.SafeOutput) and c.stats["runs"] == 0


def test_a_contract_made_under_a_profile_guards_its_calls_after_it_is_unregistered() -> None:
    with _registered() as register:
        first = register(dataclasses.replace(SHARPENER, name="test.TwoCallSharpener", classes=(TwoCallSharpener,)))
        both = register(dataclasses.replace(first, calls=("process", "sharpen")))
        sim, fx, S, C = _two_call_setup()
        copies = []
        with sim.use_stream(S), ss.stream_contract(fx, S, input_stream=S):
            P.unregister(both)
            for i in range(4):
                out = fx.sharpen(image=_written(sim, _frame(i), S), stream=S.ptr)
                assert isinstance(out, ss.SafeOutput)
                copies.append((sim.copy(sim.from_dlpack(out.image, stream=C), C), _want(_frame(i))))
        sim.synchronize_device(0)
        assert [np.allclose(sim.download(y), w, atol=1.5 / 255) for y, w in copies] == [True] * 4
        assert sim.races == []


def test_a_later_profile_with_constructor_keywords_records_them() -> None:
    from streamsafe.construction import made_with

    class Decoder:
        def __init__(self, cuda_stream: int = 0) -> None:
            pass

        def get(self) -> list[Any]:
            return []

    with _registered() as register:
        register(P.PoolProfile(name="test.Decoder", classes=(Decoder,), calls=("get",)))
        register(P.PoolProfile(name="test.Decoder", classes=(Decoder,), calls=("get",), constructor_keywords=("cuda_stream",)))
        assert made_with(Decoder(cuda_stream=7), "cuda_stream") == 7


# -- register() checks every field -------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "match"), [
    (lambda: P.register({"name": "x", "calls": ("run",)}), r"profile=\{.*\} is a dict, not an EffectProfile or a PoolProfile"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls="run"), r"calls='run' is a string, not a tuple of names. Write calls=\('run',\)"),
    (lambda: P.EffectProfile(name="x", classes="Sharpener", calls=("process",)), r"classes='Sharpener' is a single class"),
    (lambda: P.EffectProfile(name="x", classes=("Sharpener",), calls=("process",)), r"neither a class nor an exact qualified name"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=()), r"calls=\(\) is empty"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=("run",), inputs="image"), r"inputs='image' is a string"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=("run",), closes=("close",)), r"names 'close', which is not in releases"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=("run",), releases=("run",)), r"repeats the guarded call 'run'"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=("run",), stream_keyword="stream-ptr"), r"is not a keyword name"),
    (lambda: P.EffectProfile(name="x", classes=("m.X",), calls=("run",), converts=True), r"converts=True is not callable"),
    (lambda: P.EffectProfile(name="", classes=("m.X",), calls=("run",)), r"name='' is not a non-empty string"),
    (lambda: P.PoolProfile(name="x", classes=("m.X",), calls=("decode",), prefetches="yes"), r"prefetches='yes' is not True or False"),
])
def test_a_bad_profile_is_refused_naming_the_field_and_the_fix(make: Any, match: str) -> None:
    before = P.profiles()
    with pytest.raises(ss.errors.ProfileError, match=match) as e:
        make()
    assert isinstance(e.value, ss.StreamsafeError) and P.profiles() == before


def test_a_profile_names_classes_exactly_never_in_part() -> None:
    Sharpener2 = type("Sharpener", (), {"run": lambda self: None})
    harp = type("harp", (), {"run": lambda self: None})
    exact = P.EffectProfile(name="x", classes=(P.qualified_name(Sharpener2),), calls=("run",))
    by_class = P.EffectProfile(name="y", classes=(Sharpener2,), calls=("run",))
    assert exact.applies_to(Sharpener2) and by_class.applies_to(Sharpener2)
    assert not exact.applies_to(harp) and not by_class.applies_to(harp)
    assert exact.applies_to(type("Sub", (Sharpener2,), {}))  # (and its subclasses)


# -- an interrupt as the turn is taken ------------------------------------------------------------------------------


def _interrupt_as_acquire_returns() -> Any:
    """A profile function that raises ``KeyboardInterrupt`` right after the first ``RLock.acquire`` called from
    :meth:`Turns.take` returns True (where CPython runs a pending signal's handler: after a C call returns)."""
    from streamsafe import turns

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and getattr(arg, "__name__", "") == "acquire" and frame.f_code is turns.Turns.take.__code__:
            sys.setprofile(None)
            raise KeyboardInterrupt

    return profiler


@pytest.mark.parametrize("call", ["run", "import", "block-end"])
def test_a_ctrl_c_as_the_turn_is_taken_leaves_it_free(call: str) -> None:
    sim = SimBackend()
    fx = VideoSuperRes(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(fx, S, input_stream=S)
    with sim.use_stream(S):
        out = c.run(_written(sim, _frame(0), S))
        sys.setprofile(_interrupt_as_acquire_returns())
        try:
            with pytest.raises(KeyboardInterrupt):
                if call == "run":
                    c.run(_written(sim, _frame(1), S))
                elif call == "import":
                    out.image.__dlpack__()
                else:
                    c.synchronize()
        finally:
            sys.setprofile(None)
    assert c.ledger.turns.owner is None
    done: list[Any] = []

    def other_thread() -> None:
        started = time.monotonic()
        with sim.use_stream(S):
            done.append(c.run(_written(sim, _frame(2), S)))
        done.append(time.monotonic() - started)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert len(done) == 2 and done[1] < 5, "the turn was left held"


def test_control_a_turn_taken_without_its_release_makes_the_next_thread_wait_and_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above guards against: a lock left held, as a release an interrupt skipped would leave it."""
    from streamsafe import turns

    monkeypatch.setattr(turns.time, "monotonic", lambda: turns.time.perf_counter() * 1000)  # (the 60 s deadline, at once)
    sim = SimBackend()
    fx = VideoSuperRes(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    c = ss.StreamContract(fx, sim.create_stream(non_blocking=True))
    c.ledger.turns.lock.acquire()  # (held, and never given back)
    c.ledger.turns.owner = threading.get_ident()
    errors: list[Any] = []

    def other_thread() -> None:
        try:
            c.run(sim.empty((3, 16, 16), np.float32))
        except ss.errors.ConcurrentUseError as e:
            errors.append(e)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert len(errors) == 1
