"""Steady-state frames replayed from recipes (:mod:`streamsafe.steady`) against the same frames planned
from scratch (``steady.enabled = False``): the same outputs, races, counters and ledger states."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import steady
import tests.fuzzing as fuzz
from streamsafe.testing.effects import TrueHDR, VideoSuperRes

KINDS = ("replayed", "planned")


@contextlib.contextmanager
def frames_in(kind: str) -> Iterator[None]:
    """Steady-state frames replayed from recipes (the default) or every one planned, for the block."""
    saved = steady.enabled
    steady.enabled = kind == "replayed"
    try:
        yield
    finally:
        steady.enabled = saved


def _sr(sim: ss.sim.SimBackend, cls: type = VideoSuperRes) -> Any:
    sr = cls(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def _x(sim: ss.sim.SimBackend, i: int, stream: ss.Stream) -> Any:
    """A fresh 16x16 input written on ``stream`` (the host does not wait for it)."""
    arr = sim.empty((3, 16, 16), np.float32, name="frame")
    sim.launch(stream, "producer.write", lambda: arr.buffer.data.fill(i % 7 / 7), writes=[arr])
    return arr


def _counted(fn: Any) -> tuple[Any, int]:
    before = steady.replays
    out = fn()
    return out, steady.replays - before


@pytest.mark.parametrize("strategy", ["event", "auto", "async", "stream"])
def test_random_programs_give_the_same_results_either_way(strategy: str) -> None:
    """40 random pipelines (streams, guards, consumers, size changes, in-place inputs) per strategy, on
    the adversarial model: the same corrupt frames, races and errors with frames replayed or planned."""
    replayed = 0
    for program in fuzz.programs(40, seed=7, frames=12):
        results = {}
        for kind in KINDS:
            with frames_in(kind):
                result, n = _counted(functools.partial(fuzz.run_model, program, strategy))
            got = result.to_dict()
            got.pop("seconds")
            results[kind] = got
            if kind == "replayed":
                replayed += n
            else:
                assert n == 0
        assert results["replayed"] == results["planned"], program.describe()
    assert replayed > 100, "the programs must replay frames for this to compare anything"


def _frames(sim: Any, kind: str, strategy: str, frames: int, *, view: bool) -> tuple[Any, Any, list[Any], int]:
    """``frames`` guarded frames on ``sim`` with the frames in C or Python, each output imported on a reader
    stream (``view``) or on the SDK stream and copied there: the contract, the last output, the copies and
    how many frames replayed."""
    s = sim.create_stream(non_blocking=True)
    reader = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy=strategy, backend=sim)
    copies = []
    with frames_in(kind), sim.use_stream(s):
        before = steady.replays
        for i in range(frames):
            out = c.run(_x(sim, i, s))
            imported = sim.from_dlpack(out.image, stream=reader if view else s)
            copies.append(sim.copy(imported, reader if view else s))
        replays = steady.replays - before
    return c, out, copies, replays


def _pipeline(kind: str, strategy: str, frames: int, *, view: bool) -> dict[str, Any]:
    """A pipeline on the model with the frames in C or Python: what it leaves behind."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    c, out, copies, replays = _frames(sim, kind, strategy, frames, view=view)
    image = out.image
    ledger = c.ledger
    mine = {"_buffer": ledger.output, "_effect": c.effect, "_capsule": image._capsule}  # (this pipeline's objects)
    slots = {name: getattr(image, name) is mine[name] if name in mine else getattr(image, name)
             for name in type(image).__slots__}
    state = (ledger.generation, tuple(ledger.readers), ledger.escaped, ledger.previous_sdk, ledger.input_shapes,
             ledger.plan, ledger.turns.owner, ledger.turns.closing_wait)
    sim.synchronize_device(0)
    return {
        "stats": dict(c.stats), "out_stats": dict(ledger.output.stats), "state": state, "slots": slots,
        "replays": replays, "races": [str(r) for r in sim.races], "data": [y.numpy().tobytes() for y in copies],
    }


@pytest.mark.parametrize("strategy", ["event", "auto", "async", "device"])
@pytest.mark.parametrize("view", [False, True])
def test_a_pipeline_ends_in_the_same_state(strategy: str, view: bool) -> None:
    c_side = _pipeline("replayed", strategy, 9, view=view)
    py_side = _pipeline("planned", strategy, 9, view=view)
    assert c_side["replays"] >= 6 and py_side["replays"] == 0
    for key in ("stats", "out_stats", "races", "data"):
        assert c_side[key] == py_side[key], key
    # (the streams and plans are each pipeline's own objects: compare what they say)
    assert repr(c_side["state"]) == repr(py_side["state"])
    assert repr(c_side["slots"]) == repr(py_side["slots"])
    assert c_side["races"] == []


class _Refusing(VideoSuperRes):
    """Refuses its third and later frames (as the SDK refuses a dtype the facts do not hold)."""

    refuse = False

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if self.refuse:
            raise ValueError("refused")
        return super().run(*args, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_call_leaves_counters_ledger_and_lock_as_before(kind: str) -> None:
    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    other = sim.create_stream(non_blocking=True)
    sr = _sr(sim, _Refusing)
    c = ss.StreamContract(sr, s, strategy="event", backend=sim)
    with frames_in(kind), sim.use_stream(s):
        for i in range(3):
            out = c.run(_x(sim, i, s))
            sim.copy(sim.from_dlpack(out.image, stream=other), other)  # (a reader: the next run fences it)
        stats, generation, readers = dict(c.stats), c.ledger.generation, dict(c.ledger.readers)
        sr.refuse = True
        before = steady.replays
        with pytest.raises(ValueError, match="refused"):
            c.run(_x(sim, 9, s))
        assert steady.replays == before + (kind == "replayed"), "the refused call was a replay"
    assert dict(c.stats) == stats
    assert (c.ledger.generation, dict(c.ledger.readers)) == (generation, readers)
    assert c.ledger.turns.owner is None and c.ledger.turns.lock.acquire(False), "the effect's lock was let go"
    c.ledger.turns.lock.release()


def test_a_replay_while_another_thread_holds_the_effect_takes_the_general_path() -> None:
    """The replay does nothing when the lock is taken: the general path then raises."""
    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
    with sim.use_stream(s):
        for i in range(3):
            out = c.run(_x(sim, i, s))
            sim.copy(sim.from_dlpack(out.image, stream=s), s)
        generation, stats = c.ledger.generation, dict(c.stats)
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            c.ledger.turns.run("test", lambda: (holding.set(), release.wait(10)))

        t = threading.Thread(target=hold)
        t.start()
        holding.wait(10)
        try:
            x = _x(sim, 5, s)
            with pytest.raises(ss.errors.ConcurrentUseError):
                c.run(x)
        finally:
            release.set()
            t.join()
    assert (c.ledger.generation, dict(c.stats)) == (generation, stats)


class BoundSim(ss.sim.SimBackend):
    """The model with fence programs bound, as on a GPU (the model itself issues them one by one): the bound
    call issues the same fences through the model."""

    bound_calls = 0

    def bind_fences(self, pairs: list[tuple[ss.Stream, ss.Stream]], owner: Any) -> Any:
        def run() -> None:
            self.bound_calls += 1
            for waiter, signaller in pairs:
                self.fence(waiter, signaller)

        return run


def _bound_pipeline(kind: str, strategy: str, frames: int = 8, **settings: Any) -> dict[str, Any]:
    sim = BoundSim(scheduler="adversarial")
    for name, value in settings.items():
        setattr(sim, name, value)
    c, _, copies, replays = _frames(sim, kind, strategy, frames, view=True)
    sim.synchronize_device(0)
    return {"stats": dict(c.stats), "out_stats": dict(c.ledger.output.stats), "replays": replays, "bound_calls": sim.bound_calls,
            "races": [str(r) for r in sim.races], "data": [y.numpy().tobytes() for y in copies]}


@pytest.mark.parametrize("strategy", ["event", "auto", "async"])
def test_bound_programs_run_and_count_the_same(strategy: str) -> None:
    """Programs bound as on a GPU: a replay calls them and adds their counts as the planned path does."""
    c_side, py_side = _bound_pipeline("replayed", strategy), _bound_pipeline("planned", strategy)
    for key in ("stats", "out_stats", "races", "data"):
        assert c_side[key] == py_side[key], key
    assert c_side["replays"] >= 5 and c_side["bound_calls"] >= 5 and c_side["races"] == []


# -- corner cases: each gives the same result replayed and planned -------------------------------------------


def _both(fn: Any) -> dict[str, Any]:
    """``fn()``'s result (or the exception it raised, by type and text) with frames replayed and planned."""
    out = {}
    for kind in KINDS:
        with frames_in(kind):
            try:
                out[kind] = ("returned", fn())
            except Exception as e:  # noqa: BLE001 (the exception is the result compared)
                out[kind] = ("raised", type(e).__name__, str(e))
    return out


def _one_output(strategy: str = "event") -> tuple[ss.sim.SimBackend, ss.Stream, Any, Any]:
    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy=strategy, backend=sim)
    with sim.use_stream(s):
        out = c.run(_x(sim, 0, s))
    return sim, s, c, out


@pytest.mark.parametrize("handle", [2**63, 2**64 - 1, -(2**63) - 1, 2**70])
def test_a_stream_number_beyond_a_c_long_is_not_the_default_consumer(handle: int) -> None:
    def attempt() -> Any:
        _, _, c, out = _one_output()
        try:
            out.image.__dlpack__(stream=handle)
            return ("imported", out.image.consumed, len(c.ledger.readers))
        except Exception as e:  # noqa: BLE001
            return (type(e).__name__, out.image.consumed, len(c.ledger.readers))

    got = _both(attempt)
    assert got["replayed"] == got["planned"]
    assert got["replayed"][1][0] != "imported"  # (an invalid handle is refused, the output left as it was)


def test_an_image_with_a_slot_deleted_raises_attribute_error() -> None:
    def attempt() -> Any:
        _, _, _, out = _one_output()
        del out.image._generation
        out.image.__dlpack__()

    got = _both(attempt)
    assert got["replayed"] == got["planned"] and got["replayed"][1] == "AttributeError"


@pytest.mark.parametrize("strategy", ["async", "event"])
def test_an_observer_registered_while_the_effect_runs_hears_the_after_run_fences(strategy: str) -> None:
    from streamsafe import hooks

    class Registering(VideoSuperRes):
        observer: Any = None

        def run(self, *args: Any, **kwargs: Any) -> Any:
            out = super().run(*args, **kwargs)
            if type(self).observer is not None:
                hooks.register(type(self).observer)  # (as another thread may while the SDK runs)
            return out

    class Counting(hooks.Observer):
        fences = 0

        def on_fence(self, waiter: Any, signaller: Any) -> None:
            self.fences += 1

    def frame() -> Any:
        sim = BoundSim()
        s, reader = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim, Registering), s, strategy=strategy, backend=sim)
        observer = Counting()
        try:
            with sim.use_stream(s):
                for i in range(5):
                    sim.from_dlpack(c.run(_x(sim, i, s)).image, stream=reader)
                Registering.observer = observer
                c.run(_x(sim, 7, s))
                return (observer.fences, dict(c.stats))
        finally:
            Registering.observer = None
            hooks.unregister(observer)

    got = _both(frame)
    assert got["replayed"] == got["planned"]


def test_counters_go_to_the_contracts_stats_as_it_is_now() -> None:
    def frames() -> Any:
        sim = ss.sim.SimBackend()
        s = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
        with sim.use_stream(s):
            for i in range(4):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
            old, c.stats = c.stats, dict.fromkeys(c.stats, 0)
            for i in range(4):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
        return (dict(c.stats), dict(old), c.ledger.output.stats is c.stats)

    got = _both(frames)
    assert got["replayed"] == got["planned"] and got["replayed"][1][0]["runs"] == 4


def test_a_config_value_unequal_to_itself_never_replays() -> None:
    class Unequal:
        def __eq__(self, other: object) -> bool:
            return False

        __hash__ = object.__hash__

    token = Unequal()

    class Odd(TrueHDR):  # (its one config attribute is the config itself, not a tuple's item)
        @property
        def image_encoding(self) -> Any:  # (a value not equal to itself, as NaN)
            return token

    def frames() -> Any:
        sim = ss.sim.SimBackend()
        s = sim.create_stream(non_blocking=True)
        hdr = Odd(backend=sim)
        hdr.load()
        c = ss.StreamContract(hdr, s, strategy="event", backend=sim)
        with sim.use_stream(s):
            before = steady.replays
            for i in range(6):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
        return (steady.replays - before, dict(c.stats))

    got = _both(frames)
    assert got["replayed"] == got["planned"]


@pytest.mark.parametrize("extra", [tuple(range(40)), tuple(float(k) for k in range(300))], ids=["40 ints", "300 floats"])
def test_a_call_with_many_arguments_replays_as_planned(extra: tuple[Any, ...]) -> None:
    class Many(VideoSuperRes):
        def run(self, input_array: Any, *extra: Any, **kwargs: Any) -> Any:
            return super().run(input_array, **kwargs)

    def frames() -> Any:
        sim = ss.sim.SimBackend()
        s = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim, Many), s, strategy="event", backend=sim)
        with sim.use_stream(s):
            before = steady.replays
            for i in range(8):
                sim.from_dlpack(c.run(_x(sim, i, s), *extra).image)
        return (steady.replays - before, dict(c.stats))

    got = _both(frames)
    assert got["replayed"][1][1] == got["planned"][1][1] and got["replayed"][1][0] > 0


def test_an_image_slot_deleted_during_the_import_raises_attribute_error() -> None:
    def attempt() -> Any:
        _, _, _, out = _one_output()
        image, generation = out.image, out.image._generation

        class Deleting:
            """A generation whose comparison deletes the image's default consumer (code that runs mid-import)."""

            def __eq__(self, other: object) -> bool:
                with contextlib.suppress(AttributeError):
                    del image._default_consumer
                return other == generation

            def __ne__(self, other: object) -> bool:
                return not self.__eq__(other)

            __hash__ = None  # type: ignore[assignment]

        image._generation = Deleting()
        image.__dlpack__()

    got = _both(attempt)
    assert got["replayed"] == got["planned"] and got["replayed"][1] == "AttributeError"


def test_the_second_recipe_search_reads_the_recipes_the_contract_holds_then() -> None:
    class Hooked(VideoSuperRes):
        hook: Any = None

        @property
        def input_height(self) -> Any:  # (read under the effect's lock, with the config)
            if Hooked.hook is not None:
                Hooked.hook()
            return self._in[1]

        @input_height.setter
        def input_height(self, value: Any) -> None:
            self._set_in(1, "input_height", value)

    def frames() -> Any:
        sim = ss.sim.SimBackend()
        s, r1, r2 = (sim.create_stream(non_blocking=True) for _ in range(3))
        c = ss.StreamContract(_sr(sim, Hooked), s, strategy="event", backend=sim)
        log = []
        with sim.use_stream(s):
            for i in range(12):
                if i == 9:
                    Hooked.hook = lambda: setattr(c, "_recipes", [])  # (the contract's recipes dropped meanwhile)
                before = steady.replays
                out = c.run(_x(sim, i, s))
                Hooked.hook = None
                sim.from_dlpack(out.image, stream=(r1, r2)[i % 2])
                log.append(steady.replays - before)
        return (log, dict(c.stats))

    got = _both(frames)
    assert got["replayed"][1][1] == got["planned"][1][1] and sum(got["replayed"][1][0]) > 0


class _KeywordsLikeStreamsafes(VideoSuperRes):
    """An SDK whose run() takes keywords named like the parameters of streamsafe's own call helpers."""

    def run(self, input_array: Any, *, name: Any = None, effect: Any = None, args: Any = None, kwargs: Any = None,
            **rest: Any) -> Any:
        self.seen = (name, effect, args, kwargs)
        return super().run(input_array, **rest)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("keyword", ["name", "effect", "args", "kwargs"])
def test_an_sdk_keyword_named_like_a_helper_parameter_reaches_the_sdk(kind: str, keyword: str) -> None:
    """``c.run(x, name=1)``: the SDK's own keyword, not a clash with the helper that calls the SDK (before,
    ``TypeError: call_raw() got multiple values for argument 'name'``)."""
    sim = ss.sim.SimBackend()
    sr = _sr(sim, _KeywordsLikeStreamsafes)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    with frames_in(kind):
        for i in range(3):
            c.run(_x(sim, i, sim.legacy_stream()), **{keyword: i})
            assert sr.seen == tuple(i if k == keyword else None for k in ("name", "effect", "args", "kwargs"))
    assert c.stats["runs"] == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_class_guards_effect_collected_during_its_call_still_gives_the_output(kind: str,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A class guard holds its effects weakly. One that only a garbage cycle keeps, collected while its call
    runs (here: just after the SDK's run returned), stays alive until the call returns its output. Before,
    the run was recorded and its output lost (``EffectStateError: ... gone``)."""
    import gc
    import weakref

    from streamsafe.ledger import EffectLedger

    sim = ss.sim.SimBackend()
    guard = ss.guard(VideoSuperRes)
    try:
        fx = _sr(sim)
        with frames_in(kind):
            fx.run(_x(sim, 0, sim.legacy_stream()))
            fx.run(_x(sim, 1, sim.legacy_stream()))
            contract = guard.contracts[-1]
            fx.cycle = [fx]
            alive = weakref.ref(fx)
            del fx
            record_write = EffectLedger.record_write
            monkeypatch.setattr(EffectLedger, "record_write", lambda self, *a, **k: (gc.collect(), record_write(self, *a, **k))[1])
            out = contract.run(_x(sim, 2, sim.legacy_stream()))
        assert isinstance(out, ss.SafeOutput) and not contract.closed
        assert out.image.generation == contract.ledger.generation == 3
        monkeypatch.undo()
        del out
        gc.collect()
        assert alive() is None  # (then it goes, as a class guard's effect does)
    finally:
        guard.undo()


@pytest.mark.parametrize("kind", KINDS)
def test_an_input_of_another_model_is_refused_before_anything_is_issued(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame kept for two inputs of this model is not reused when the first input is another model's array: streamsafe
    refuses it, as the planner does, with no fence issued (not the SDK, after the fences)."""
    from streamsafe.testing.effects import VideoFrameGeneration

    monkeypatch.setattr(steady, "check_replay", False)  # (the planner would raise its own error and hide the reuse)
    sim, other = ss.sim.SimBackend(), ss.sim.SimBackend()

    def x(be: ss.sim.SimBackend) -> Any:
        a = be.empty((3, 16, 16), np.float32)
        be.launch(be.legacy_stream(), "w", lambda: a.buffer.data.fill(0.5), writes=[a])
        return a

    fx = VideoFrameGeneration(backend=sim)
    fx.input_width = fx.input_height = 16
    fx.load()
    c = ss.StreamContract(fx, sim.create_stream(non_blocking=True), strategy="event", backend=sim)
    with frames_in(kind):
        for _ in range(3):
            c.run_at_timestep(x(sim), x(sim), 0.5)
        fences = c.stats["fences"]
        with pytest.raises(ss.errors.InputArrayError, match="^input "):
            c.run_at_timestep(x(other), x(sim), 0.5)
    assert c.stats["fences"] == fences
